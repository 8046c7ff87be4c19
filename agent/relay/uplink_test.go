package relay

import (
	"context"
	"strconv"
	"testing"
	"time"
)

// TestInFlightOrdersByNode checks the uplink's admission rule: a bundle
// waits while one of its nodes is in flight, and bundles of other nodes
// go alongside, up to uplinkInFlight.
func TestInFlightOrdersByNode(t *testing.T) {
	f := newInFlight()
	ctx := context.Background()
	if !f.acquire(ctx, []string{"a", "b"}) {
		t.Fatal("first bundle refused")
	}
	if !f.acquire(ctx, []string{"c"}) {
		t.Fatal("a bundle of another node waits")
	}
	got := make(chan struct{})
	go func() { f.acquire(ctx, []string{"c", "b"}); close(got) }()
	time.Sleep(50 * time.Millisecond)
	select {
	case <-got:
		t.Fatal("a bundle went while a bundle of its nodes was in flight")
	default:
	}
	f.release([]string{"a", "b"})
	select {
	case <-got:
		t.Fatal("a bundle went while a bundle of one of its nodes was still in flight")
	case <-time.After(50 * time.Millisecond):
	}
	f.release([]string{"c"})
	<-got
	f.release([]string{"c", "b"})
	for i := range uplinkInFlight {
		f.acquire(ctx, []string{strconv.Itoa(i)})
	}
	cctx, cancel := context.WithCancel(ctx)
	refused := make(chan bool)
	go func() { refused <- !f.acquire(cctx, []string{"other"}) }()
	time.Sleep(50 * time.Millisecond)
	cancel()
	f.wake()
	if !<-refused {
		t.Fatal("a bundle went beyond uplinkInFlight")
	}
}
