package imagecache

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// PathPrefix is where the handler serves images: PathPrefix + TOKEN.
const PathPrefix = "/images/"

// Handler serves the registered images to the site's nodes: GET (and
// HEAD) PathPrefix + TOKEN. A cached image is served from disk (with
// ranges); one not cached yet is downloaded, and streamed while it
// downloads. If the download fails after the answer began, the connection
// is aborted, so that the client sees a failed transfer, never a complete
// one.
func (c *Cache) Handler() http.Handler {
	return http.HandlerFunc(c.serve)
}

func (c *Cache) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "only GET and HEAD", http.StatusMethodNotAllowed)
		return
	}
	token, ok := strings.CutPrefix(r.URL.Path, PathPrefix)
	if !ok || len(token) != 32 || strings.Contains(token, "/") {
		http.NotFound(w, r)
		return
	}
	rd, err := c.OpenToken(r.Context(), token)
	if err != nil {
		if r.Context().Err() == nil {
			c.refuse(w, err)
		}
		return
	}
	defer rd.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Cache-Control", "no-store")
	if rd.file != nil {
		http.ServeContent(w, r, "", time.Time{}, rd.file)
		return
	}
	if rd.Size() >= 0 {
		w.Header().Set("Content-Length", strconv.FormatInt(rd.Size(), 10))
	}
	if r.Method == http.MethodHead {
		w.WriteHeader(http.StatusOK)
		return
	}
	// The first bytes before the answer: a download that fails now is
	// answered with its reason, not with a 200 cut short.
	first := make([]byte, 32<<10)
	n, err := rd.Read(first)
	if err != nil && err != io.EOF {
		if r.Context().Err() == nil {
			w.Header().Del("Content-Length")
			c.refuse(w, err)
		}
		return
	}
	w.WriteHeader(http.StatusOK)
	if _, werr := w.Write(first[:n]); werr != nil {
		return
	}
	if _, err := io.Copy(w, rd); err != nil {
		if r.Context().Err() == nil {
			c.log.Warn("image cache: a node's transfer was cut because the download failed", "client", r.RemoteAddr, "err", err)
		}
		// No clean end: the client must not take this for the image. The
		// reason cannot follow the bytes already sent (a trailer would
		// need a clean end, which a client ignoring trailers would take
		// for the image); a node that asks again within FailureMemory
		// gets it in the body of an error answer.
		panic(http.ErrAbortHandler)
	}
}

// refuse answers a request that gets no image with the reason, as one
// line of plain text: a node's last_error can then say why (checksum
// mismatch, origin refused or unreachable, no room) instead of just the
// status.
func (c *Cache) refuse(w http.ResponseWriter, err error) {
	status, reason := answer(err)
	h := w.Header()
	h.Del("Content-Length")
	h.Set("Cache-Control", "no-store")
	if status == http.StatusServiceUnavailable {
		h.Set("Retry-After", "30")
	}
	http.Error(w, reason, status)
}
