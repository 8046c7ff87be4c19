package sim

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/bmedge/bmedge/lib/clock"
	"github.com/bmedge/bmedge/lib/waitfor"
	"github.com/bmedge/bmedge/protocol"
)

// TestSimulatedStepOnTheClock: a simulated step takes StepDuration of the
// sim's clock, reporting a tenth of its progress each tenth of it, and
// a rescue shell's uptime is counted on the same clock.
func TestSimulatedStepOnTheClock(t *testing.T) {
	fk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := New(Config{Site: "s1", Log: slog.New(slog.DiscardHandler), Clock: fk})
	r := s.Runner("n1", Options{StepDuration: 10 * time.Second})
	var mu sync.Mutex
	var seen []float64
	progress := func(f float64, _ string) { mu.Lock(); seen = append(seen, f); mu.Unlock() }
	reported := func() int { mu.Lock(); defer mu.Unlock(); return len(seen) }
	done := make(chan error, 1)
	go func() {
		_, err := r.Run(context.Background(), protocol.Step{Interface: "deploy", Step: "erase_devices_metadata"}, progress)
		done <- err
	}()
	for i := 1; i <= 10; i++ {
		if !fk.WaitTimers(1, 10*time.Second) {
			t.Fatalf("tick %d: the step armed no timer on the sim's clock", i)
		}
		if n := reported(); n != i-1 {
			t.Fatalf("before tick %d: %d progress reports, want %d", i, n, i-1)
		}
		fk.Advance(time.Second)
		waitfor.Until(10*time.Second, func() bool { return reported() >= i })
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the step did not end once StepDuration passed on the sim's clock")
	}
	if n := reported(); n != 10 {
		t.Fatalf("%d progress reports, want 10", n)
	}

	sh := r.(*simRunner).rescueShell()
	fk.Advance(90 * time.Second)
	if up, _ := sh.file("/proc/uptime"); up != "90.00 90.00\n" {
		t.Fatalf("rescue shell uptime after 90 s on the sim's clock: %q", up)
	}
}
