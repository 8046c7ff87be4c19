package server

import (
	"maps"
	"net/http"

	"github.com/bmedge/bmedge/coordinator/cluster"
)

// confirmingWriter holds back a refusal (a status of 400 or more, but
// 503) until verify confirms that this member still leads: a leader cut
// off from the others, not knowing it yet, refuses a write from what it
// last knew (a node locked, a name taken, a state it has left since), and
// that answer may be wrong by now. Unconfirmed, the answer becomes 503
// with Retry-After, as when no member leads. The engine's own refusals
// wait for the same check (store.LeaderVerifier); this covers the ones
// the API makes before the engine sees the request. Successes pass
// untouched: a write succeeds only through a majority.
type confirmingWriter struct {
	w      http.ResponseWriter
	verify func() error
	header http.Header
	// decided is set once the status is written through; swallow when
	// the handler's answer was replaced.
	decided, swallow bool
}

func newConfirmingWriter(w http.ResponseWriter, verify func() error) *confirmingWriter {
	return &confirmingWriter{w: w, verify: verify, header: http.Header{}}
}

// Header is the handler's own until the status is decided, then the
// answer's (trailers are set there after the body).
func (c *confirmingWriter) Header() http.Header {
	if c.decided && !c.swallow {
		return c.w.Header()
	}
	return c.header
}

// Unwrap gives http.ResponseController the answer's writer (write
// deadlines of a streamed answer, such as a backup's).
func (c *confirmingWriter) Unwrap() http.ResponseWriter { return c.w }

func (c *confirmingWriter) WriteHeader(code int) {
	if c.decided {
		return
	}
	c.decided = true
	if code >= 400 && code != http.StatusServiceUnavailable {
		if err := c.verify(); err != nil {
			c.swallow = true
			cluster.Unavailable(c.w, "this member is no longer sure it leads the cluster (it cannot reach a majority), so it does not refuse the request on what it last knew; try again, or ask another member")
			return
		}
	}
	maps.Copy(c.w.Header(), c.header)
	c.w.WriteHeader(code)
}

func (c *confirmingWriter) Write(b []byte) (int, error) {
	if !c.decided {
		c.WriteHeader(http.StatusOK)
	}
	if c.swallow {
		return len(b), nil
	}
	return c.w.Write(b)
}

// Flush passes a streamed answer's flush on.
func (c *confirmingWriter) Flush() {
	if f, ok := c.w.(http.Flusher); ok && !c.swallow {
		f.Flush()
	}
}
