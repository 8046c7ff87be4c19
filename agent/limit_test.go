package agent

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bmedge/bmedge/lib/waitfor"
	"github.com/bmedge/bmedge/protocol"
)

// countingBMC records how many of its operations run at once.
type countingBMC struct {
	running, peak atomic.Int32
	release       chan struct{}
}

func (b *countingBMC) op(ctx context.Context) error {
	n := b.running.Add(1)
	defer b.running.Add(-1)
	for {
		p := b.peak.Load()
		if n <= p || b.peak.CompareAndSwap(p, n) {
			break
		}
	}
	select {
	case <-b.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
func (b *countingBMC) Validate(ctx context.Context) error                            { return b.op(ctx) }
func (b *countingBMC) SetPower(ctx context.Context, _ string) error                  { return b.op(ctx) }
func (b *countingBMC) PowerState(ctx context.Context) (string, error)                { return "", b.op(ctx) }
func (b *countingBMC) SetBootDevice(ctx context.Context, _ string) error             { return b.op(ctx) }
func (b *countingBMC) RunStep(context.Context, string, string, map[string]any) error { return nil }

// BMC commands across a site's BMCs run at most BMCConcurrency at once;
// the others wait their turn, and one whose deadline passes while waiting
// fails saying why.
func TestBMCConcurrencyBound(t *testing.T) {
	a := New(Config{Site: "s1", BMCConcurrency: 2, Log: slog.New(slog.DiscardHandler)})
	b := &countingBMC{release: make(chan struct{})}
	for _, n := range []string{"n1", "n2", "n3", "n4", "n5"} {
		a.bmcs.Put(n, "test", b)
	}
	cmd := func(node string) *protocol.Message {
		return &protocol.Message{Node: node, Driver: "test", Action: protocol.ActionValidate}
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i, n := range []string{"n1", "n2", "n3", "n4"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			errs[i] = a.execLimited(ctx, cmd(n))
		}()
	}
	if !waitfor.Until(30*time.Second, func() bool { return b.running.Load() >= 2 }) {
		t.Fatalf("%d BMC commands run; want 2", b.running.Load())
	}
	// Two run, two wait: one more, with a deadline already passed, fails.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	err := a.execLimited(ctx, cmd("n5"))
	cancel()
	if err == nil || !strings.Contains(err.Error(), "--bmc-concurrency") {
		t.Fatalf("a command that could not get a slot before its deadline: %v", err)
	}
	close(b.release)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("command %d: %v", i+1, err)
		}
	}
	if p := b.peak.Load(); p != 2 {
		t.Fatalf("%d BMC operations ran at once, want at most (and here exactly) 2", p)
	}
}
