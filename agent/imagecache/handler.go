package imagecache

import (
	"errors"
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
	if errors.Is(err, ErrUnknownImage) {
		http.Error(w, "no such image in the site cache", http.StatusNotFound)
		return
	}
	if err != nil {
		if r.Context().Err() != nil {
			return
		}
		http.Error(w, "site image cache: "+err.Error(), http.StatusBadGateway)
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
			http.Error(w, "site image cache: "+err.Error(), http.StatusBadGateway)
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
		// No clean end: the client must not take this for the image.
		panic(http.ErrAbortHandler)
	}
}
