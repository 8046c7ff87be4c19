package relay

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/bmedge/bmedge/lib/clock"
	"github.com/bmedge/bmedge/lib/waitfor"
	"github.com/bmedge/bmedge/protocol"
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
	// waited waits until acquire began to wait n times in all.
	waited := func(n int) {
		t.Helper()
		if !waitfor.Until(10*time.Second, func() bool { f.mu.Lock(); defer f.mu.Unlock(); return f.waits >= n }) {
			t.Fatalf("acquire waited %d times, want %d", f.waits, n)
		}
	}
	got := make(chan struct{})
	go func() { f.acquire(ctx, []string{"c", "b"}); close(got) }()
	waited(1)
	select {
	case <-got:
		t.Fatal("a bundle went while a bundle of its nodes was in flight")
	default:
	}
	f.release([]string{"a", "b"})
	waited(2) // woken, it looked again and waits for c
	select {
	case <-got:
		t.Fatal("a bundle went while a bundle of one of its nodes was still in flight")
	default:
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
	waited(3)
	cancel()
	f.wake()
	if !<-refused {
		t.Fatal("a bundle went beyond uplinkInFlight")
	}
}

// TestUplinkGathersOnTheClock: the uplink gathers what is queued after a
// first message until its clock passes uplinkGather, then publishes it
// all as one bundle; nothing goes before.
func TestUplinkGathersOnTheClock(t *testing.T) {
	fk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var mu sync.Mutex
	var pubs [][]byte
	got := make(chan struct{}, 8)
	u := NewUplink(UplinkConfig{Site: "s1", Log: slog.New(slog.DiscardHandler), Clock: fk,
		Publish: func(_ context.Context, topic string, payload []byte) error {
			mu.Lock()
			pubs = append(pubs, payload)
			mu.Unlock()
			got <- struct{}{}
			return nil
		}})
	ctx := runUplink(t, u)
	msg := func(node string) {
		u.Publish(ctx, protocol.BMCEvtTopic("s1"), powerReport(t, node, fk.Now()))
	}
	msg("n1")
	if !fk.WaitTimers(1, 10*time.Second) {
		t.Fatal("the uplink armed no gather timer on its clock after a first message")
	}
	msg("n2")
	msg("n3")
	// Taken by the gathering loop (in the bundle) before the clock moves.
	waitfor.Until(10*time.Second, func() bool { return len(u.Queue()) == 0 })
	fk.Advance(uplinkGather - time.Millisecond)
	select {
	case <-got:
		t.Fatal("a bundle went before uplinkGather passed on the clock")
	default:
	}
	fk.Advance(time.Millisecond)
	select {
	case <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("no bundle within 10 s after uplinkGather passed on the clock")
	}
	mu.Lock()
	defer mu.Unlock()
	recs, err := protocol.DecodeBundle("s1", pubs[0])
	if err != nil {
		t.Fatalf("the publish is not a bundle: %v", err)
	}
	if len(pubs) != 1 || len(recs) != 3 {
		t.Fatalf("%d publishes, the first a bundle of %d messages; want one bundle of the 3", len(pubs), len(recs))
	}
}

// TestUplinkObservesWaitAndAck: a publish is told to Observe with its
// wait (queued to published: here the gathering, on the uplink's clock)
// and its ack time (published to acked); a failed publish is not told.
func TestUplinkObservesWaitAndAck(t *testing.T) {
	fk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	type obs struct{ waiting, acked time.Duration }
	seen := make(chan obs, 4)
	published := make(chan struct{}, 4)
	calls := 0
	u := NewUplink(UplinkConfig{Site: "s1", Log: slog.New(slog.DiscardHandler), Clock: fk,
		Publish: func(context.Context, string, []byte) error {
			calls++
			defer func() { published <- struct{}{} }()
			if calls == 1 {
				fk.Advance(300 * time.Millisecond) // the broker's ack takes 300 ms
				return nil
			}
			return context.DeadlineExceeded
		},
		Observe: func(w, a time.Duration) { seen <- obs{w, a} }})
	ctx := runUplink(t, u)
	send := func(node string) {
		u.Publish(ctx, protocol.BMCEvtTopic("s1"), powerReport(t, node, fk.Now()))
		if !fk.WaitTimers(1, 10*time.Second) {
			t.Fatal("no gather timer")
		}
		fk.Advance(uplinkGather)
		select {
		case <-published:
		case <-time.After(10 * time.Second):
			t.Fatal("nothing published")
		}
	}
	send("n1")
	select {
	case o := <-seen:
		if o.waiting != uplinkGather || o.acked != 300*time.Millisecond {
			t.Fatalf("observed waiting %s, acknowledged %s; want %s and 300ms", o.waiting, o.acked, uplinkGather)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the acknowledged publish was not observed")
	}
	send("n2")
	select {
	case o := <-seen:
		t.Fatalf("a failed publish was observed: %+v", o)
	case <-time.After(200 * time.Millisecond):
	}
}

// runUplink runs u until the test ends; the context is Run's.
func runUplink(t *testing.T, u *Uplink) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { u.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return ctx
}

// powerReport is a node's power report, as the agent sends one up.
func powerReport(t *testing.T, node string, sent time.Time) []byte {
	t.Helper()
	p, err := protocol.Encode(&protocol.Message{Kind: protocol.KindPower, ID: "p-" + node, Site: "s1", Node: node,
		PowerState: protocol.PowerOn, Sent: sent})
	if err != nil {
		t.Fatal(err)
	}
	return p
}
