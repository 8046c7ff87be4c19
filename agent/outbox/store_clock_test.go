package outbox

import (
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/bmedge/bmedge/lib/clock"
	"github.com/bmedge/bmedge/lib/kvstore"
	"github.com/bmedge/bmedge/lib/waitfor"
)

// TestOutboxGCTimersOnTheClock: the store's garbage collection runs by
// the clock it is given. Once enough was deleted, it flushes when that
// clock passes outboxQuietFor without a write; after a failed flush it
// does not retry at the next quiet moment but at its periodic
// collection, when the clock passes outboxGCInterval.
func TestOutboxGCTimersOnTheClock(t *testing.T) {
	fk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var mu sync.Mutex
	writes := 0
	failWrite := true
	faults := kvstore.FaultsFunc(func(op string) error {
		if op != "write" {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		writes++
		if failWrite {
			return errors.New("injected: no space left on device")
		}
		return nil
	})
	flushWrites := func() int { mu.Lock(); defer mu.Unlock(); return writes }
	s, err := OpenStoreClock(t.TempDir(), slog.New(slog.DiscardHandler), fk, kvstore.WithFaults(faults))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if !fk.WaitTimers(1, 10*time.Second) {
		t.Fatal("the store armed no timer on its clock (its periodic collection)")
	}
	for _, seq := range fillOutbox(t, s, 1, 3000) {
		s.Later(seq, nil)
	}
	// A synchronous write after the deletions: they are committed.
	if err := s.Put(100_000, &Record{ID: "last", Topic: "t", Payload: []byte("{}"), At: fk.Now()}); err != nil {
		t.Fatal(err)
	}
	if !fk.WaitTimers(2, 10*time.Second) {
		t.Fatal("after the deletions the store armed no quiet-moment timer on its clock")
	}
	if n := flushWrites(); n != 0 || s.flushes.Load() != 0 {
		t.Fatalf("before the clock moved: %d flush writes, %d flushes, want none", n, s.flushes.Load())
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		if !waitfor.Until(30*time.Second, ok) {
			t.Fatalf("no %s within 30 s", what)
		}
	}

	// 1. The quiet moment passes on the clock: a flush, which fails.
	fk.Advance(outboxQuietFor)
	waitFor("flush attempt after the quiet moment", func() bool { return flushWrites() == 1 })
	if !fk.WaitTimers(1, 10*time.Second) || fk.Timers() != 1 {
		t.Fatalf("after the failed flush %d timers are armed, want only the periodic collection's", fk.Timers())
	}
	mu.Lock()
	failWrite = false
	mu.Unlock()

	// 2. Until the periodic collection, no retry; at it, the flush.
	fk.Advance(outboxGCInterval - outboxQuietFor - time.Millisecond)
	if n := flushWrites(); n != 1 || s.flushes.Load() != 0 {
		t.Fatalf("before the periodic collection: %d flush writes, %d flushes, want the one failed", n, s.flushes.Load())
	}
	fk.Advance(time.Millisecond)
	waitFor("flush at the periodic collection", func() bool { return s.flushes.Load() == 1 })
	if n := flushWrites(); n != 2 {
		t.Fatalf("%d flush writes, want 2", n)
	}
}
