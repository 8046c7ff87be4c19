package server

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestConfirmingWriter: a refusal is answered only once leadership is
// confirmed, else 503 with Retry-After and none of the refusal's text or
// headers; a success never asks.
func TestConfirmingWriter(t *testing.T) {
	refuse := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-From-Handler", "yes")
		w.WriteHeader(http.StatusConflict)
		_, _ = w.Write([]byte(`{"error_message": "node locked"}`))
	}
	accept := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-From-Handler", "yes")
		w.Header().Set("Trailer", "X-Count")
		_, _ = w.Write([]byte(`{}`))
		w.Header().Set("X-Count", "20") // a trailer, as a backup's
		if err := http.NewResponseController(w).SetWriteDeadline(time.Now().Add(time.Minute)); err != nil && !errors.Is(err, http.ErrNotSupported) {
			t.Errorf("write deadline: %v", err)
		}
	}
	for _, c := range []struct {
		name      string
		handler   http.HandlerFunc
		verifyErr error
		wantCode  int
		wantAsked int
		wantBody  string
	}{
		{"refusal while leading", refuse, nil, http.StatusConflict, 1, "node locked"},
		{"refusal after losing the lead", refuse, errors.New("not the leader"), http.StatusServiceUnavailable, 1, "no longer sure it leads"},
		{"success", accept, errors.New("not asked"), http.StatusOK, 0, "{}"},
	} {
		t.Run(c.name, func(t *testing.T) {
			asked := 0
			rec := httptest.NewRecorder()
			cw := newConfirmingWriter(rec, func() error { asked++; return c.verifyErr })
			c.handler(cw, httptest.NewRequest("PUT", "/v1/nodes/n1/states/provision", nil))
			if rec.Code != c.wantCode || asked != c.wantAsked || !strings.Contains(rec.Body.String(), c.wantBody) {
				t.Fatalf("code %d, asked %d, body %q; want %d, %d, %q", rec.Code, asked, rec.Body, c.wantCode, c.wantAsked, c.wantBody)
			}
			if c.wantCode == http.StatusServiceUnavailable {
				if rec.Header().Get("Retry-After") == "" || rec.Header().Get("X-From-Handler") != "" || strings.Contains(rec.Body.String(), "locked") {
					t.Fatalf("503 headers %v body %q: want Retry-After and nothing of the refusal", rec.Header(), rec.Body)
				}
			} else if rec.Header().Get("X-From-Handler") != "yes" {
				t.Fatalf("the handler's header was lost: %v", rec.Header())
			}
			if c.wantCode == http.StatusOK && rec.Result().Trailer.Get("X-Count") != "20" {
				t.Fatalf("the trailer set after the body was lost: %v", rec.Result().Trailer)
			}
		})
	}
}
