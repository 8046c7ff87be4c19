package api

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/coordinator/engine"
)

// nopPublisher drops what the engine sends: the rules below need no site.
type nopPublisher struct{}

func (nopPublisher) Publish(context.Context, string, []byte, bool) error { return nil }

// TestRetryRequestAfter: while a node's in-band steps are unknown (its
// ramdisk never booted), GET /v1/nodes/{id}/cleaning/steps answers 202
// with a Retry-Request-After header (seconds, -1 if unknown) and a message
// saying why, as the manual-cleaning seed describes.
func TestRetryRequestAfter(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := engine.New(engine.Config{DataDir: t.TempDir(), Log: log, TickInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(nopPublisher{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	if _, _, err := e.AddSite("s1"); err != nil {
		t.Fatal(err)
	}
	s := New(e, log, "mqtt://127.0.0.1:1883")
	do := func(method, path, body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		s.ServeHTTP(w, req)
		return w
	}
	if w := do("POST", "/v1/nodes", `{"name": "n1", "driver": "fake", "conductor_group": "s1"}`); w.Code != 201 {
		t.Fatalf("create: %d %s", w.Code, w.Body)
	}
	w := do("GET", "/v1/nodes/n1/cleaning/steps", "")
	if w.Code != 202 {
		t.Fatalf("steps of a node whose ramdisk never booted: %d %s, want 202", w.Code, w.Body)
	}
	h := w.Header().Get("Retry-Request-After")
	if n, err := strconv.Atoi(h); err != nil || n < -1 {
		t.Fatalf("Retry-Request-After %q, want seconds or -1", h)
	}
	var body struct {
		Message string `json:"message"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || !strings.Contains(body.Message, "not known yet") {
		t.Fatalf("202 body %s: want a message saying the steps are not known yet", w.Body)
	}
}
