package imagecache

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bmedge/bmedge/lib/clock"
)

// TestFailureMemoryOnTheClock: a node asking again for an image whose
// download failed gets the failure at once, without a new download,
// until FailureMemory passed on the cache's clock; then the cache tries
// the origin again.
func TestFailureMemoryOnTheClock(t *testing.T) {
	var hits atomic.Int64
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Error(w, "no such image", http.StatusNotFound)
	}))
	t.Cleanup(origin.Close)
	fk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c, err := Open(Options{Dir: t.TempDir(), MaxBytes: 1 << 20, StallTimeout: 5 * time.Second, Clock: fk, Log: slog.New(slog.DiscardHandler), Rule: loopbackRule})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	token, err := c.Register(origin.URL+"/image.raw", badSum())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	open := func() error {
		t.Helper()
		r, err := c.OpenToken(ctx, token)
		if err == nil {
			r.Close()
			t.Fatal("an image the origin refuses opened")
		}
		return err
	}
	// The first ask downloads; the failure is recorded once the
	// download ended (a Fetch waits for that).
	open()
	if _, err := c.Fetch(ctx, origin.URL+"/image.raw", badSum()); err == nil {
		t.Fatal("a fetch of an image the origin refuses succeeded")
	}
	n := hits.Load()
	fk.Advance(FailureMemory - time.Second)
	open()
	if hits.Load() != n {
		t.Fatalf("asked again within FailureMemory on the clock: %d more downloads, want the failure from memory", hits.Load()-n)
	}
	fk.Advance(time.Second)
	open()
	if hits.Load() != n+1 {
		t.Fatalf("asked again after FailureMemory on the clock: %d more downloads, want 1", hits.Load()-n)
	}
}
