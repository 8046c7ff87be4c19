package agent

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"
)

// lockedBMC is a BMC whose operations hold its lock, as qemuvm's do, and
// whose Close waits for that lock (the running operation).
type lockedBMC struct {
	recordingBMC
	mu sync.Mutex
}

func (b *lockedBMC) Close() {
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
	// Give closeBMCs time to reach b.Close (without the fix, with a.mu
	// held); too short a wait can only make the test pass wrongly.
	time.Sleep(50 * time.Millisecond)
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
