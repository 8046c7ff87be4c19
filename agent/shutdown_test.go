package agent

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bmedge/bmedge/lib/waitfor"
)

// lockedBMC is a BMC whose operations hold its lock, as qemuvm's do, and
// whose Close waits for that lock (the running operation).
type lockedBMC struct {
	recordingBMC
	mu sync.Mutex
	// closing is set when Close is called, before it waits.
	closing atomic.Bool
}

func (b *lockedBMC) Close() {
	b.closing.Store(true)
	b.mu.Lock()
	defer b.mu.Unlock()
}

// TestCloseBMCsWithPowerOnRunning checks that the agent's shutdown does
// not deadlock with a qemu-dev power-on under way: the power-on holds
// its BMC's lock and asks the agent for the ramdisk's command line
// (a.mu), while Close waits for the BMC's lock; closeBMCs must not hold
// a.mu while it closes.
func TestCloseBMCsWithPowerOnRunning(t *testing.T) {
	a := New(Config{Site: "s1", Log: slog.New(slog.DiscardHandler)})
	a.ctx = context.Background()
	b := &lockedBMC{}
	a.bmcs.Put("n1", "test", b)
	b.mu.Lock() // the power-on starts
	closed := make(chan struct{})
	go func() { a.bmcs.CloseAll(); close(closed) }() // Run's shutdown
	// Wait until closeBMCs reached b.Close (without the fix, with a.mu
	// held).
	if !waitfor.Until(10*time.Second, b.closing.Load) {
		t.Fatal("closing the BMCs never reached the BMC's Close")
	}
	powered := make(chan struct{})
	go func() {
		_ = a.boot.RamdiskCmdline("n1") // qemuvm's Config.Cmdline, under the BMC's lock
		b.mu.Unlock()
		close(powered)
	}()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("closeBMCs deadlocked with a power-on that needs the agent's lock")
	}
	<-powered
}
