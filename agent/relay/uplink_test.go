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
// go alongside, up to uplinkInFlight, also those made after a bundle that
// waits; a later bundle that shares a node with a waiting one waits
// behind it.
func TestInFlightOrdersByNode(t *testing.T) {
	f := newInFlight()
	ctx := context.Background()
	// bundle submits a bundle of keys; its send signals started and
	// returns (giving its place back) once finish is closed.
	type bundle struct{ started, finish chan struct{} }
	submit := func(ctx context.Context, keys ...string) (bundle, bool) {
		b := bundle{make(chan struct{}), make(chan struct{})}
		ok := f.submit(ctx, keys, func() { close(b.started); <-b.finish })
		return b, ok
	}
	went := func(b bundle) bool {
		select {
		case <-b.started:
			return true
		case <-time.After(100 * time.Millisecond):
			return false
		}
	}
	mustGo := func(b bundle, what string) {
		t.Helper()
		select {
		case <-b.started:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not go within 10 s", what)
		}
	}
	waits := func() int { f.mu.Lock(); defer f.mu.Unlock(); return f.waits }
	ab, _ := submit(ctx, "a", "b")
	mustGo(ab, "the first bundle")
	c, _ := submit(ctx, "c")
	mustGo(c, "a bundle of another node")
	cb, _ := submit(ctx, "c", "b")
	if went(cb) || waits() != 1 {
		t.Fatalf("a bundle went while a bundle of its nodes was in flight (waits %d)", waits())
	}
	d, _ := submit(ctx, "d")
	mustGo(d, "a bundle of another node made after a waiting one")
	b2, _ := submit(ctx, "b")
	if went(b2) || waits() != 2 {
		t.Fatal("a bundle passed an earlier waiting bundle of one of its nodes")
	}
	close(ab.finish)
	if went(cb) {
		t.Fatal("a bundle went while a bundle of one of its nodes was still in flight")
	}
	if went(b2) {
		t.Fatal("a bundle passed an earlier waiting bundle of one of its nodes once that one's node was free")
	}
	close(c.finish)
	mustGo(cb, "the waiting bundle, once its nodes were free")
	if went(b2) {
		t.Fatal("a bundle went while the bundle of its node before it was in flight")
	}
	close(cb.finish)
	mustGo(b2, "the last bundle of b")
	close(b2.finish)
	close(d.finish)
	// Slots: at most uplinkInFlight in flight.
	var fill []bundle
	for i := range uplinkInFlight {
		b, _ := submit(ctx, strconv.Itoa(i))
		mustGo(b, "a bundle below uplinkInFlight")
		fill = append(fill, b)
	}
	other, _ := submit(ctx, "other")
	if went(other) {
		t.Fatal("a bundle went beyond uplinkInFlight")
	}
	close(fill[0].finish)
	mustGo(other, "a bundle once a slot was free")
	// The pending bound: submit waits while uplinkPending wait, and
	// gives up once its context ends.
	for range uplinkPending {
		if _, ok := submit(ctx, "other"); !ok {
			t.Fatal("a bundle refused below uplinkPending")
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	refused := make(chan bool)
	go func() { _, ok := submit(cctx, "x"); refused <- !ok }()
	select {
	case <-refused:
		t.Fatal("submit did not wait with uplinkPending bundles waiting")
	case <-time.After(100 * time.Millisecond):
	}
	cancel()
	f.close()
	if !<-refused {
		t.Fatal("a bundle was taken beyond uplinkPending after its context ended")
	}
	for _, b := range fill[1:] {
		close(b.finish)
	}
	close(other.finish)
}

// TestUplinkSlowAckHoldsOnlyItsNode: while a bundle of node n1 awaits
// the broker's ack, the uplink's next bundle of n1 waits, and a bundle of
// n2 made after it is published at once; n1's second bundle goes once
// the first is acked.
func TestUplinkSlowAckHoldsOnlyItsNode(t *testing.T) {
	fk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	published := make(chan string, 8)
	ack := make(chan struct{})
	first := true
	u := NewUplink(UplinkConfig{Site: "s1", Log: slog.New(slog.DiscardHandler), Clock: fk,
		Publish: func(_ context.Context, _ string, payload []byte) error {
			recs, err := protocol.DecodeBundle("s1", payload)
			if err != nil || len(recs) != 1 {
				t.Errorf("publish is not a bundle of one message: %v", err)
				return err
			}
			m, err := protocol.Decode(recs[0].Payload)
			if err != nil {
				t.Error(err)
				return err
			}
			published <- m.Node
			if m.Node == "n1" && first {
				first = false
				<-ack
			}
			return nil
		}})
	ctx := runUplink(t, u)
	send := func(node string) {
		t.Helper()
		u.Publish(ctx, protocol.BMCEvtTopic("s1"), powerReport(t, node, fk.Now()))
		if !fk.WaitTimers(1, 10*time.Second) {
			t.Fatal("no gather timer")
		}
		fk.Advance(uplinkGather)
	}
	next := func() string {
		t.Helper()
		select {
		case n := <-published:
			return n
		case <-time.After(10 * time.Second):
			t.Fatal("nothing published within 10 s")
			return ""
		}
	}
	send("n1")
	if n := next(); n != "n1" {
		t.Fatalf("published %s first, want n1", n)
	}
	send("n1")
	send("n2")
	if n := next(); n != "n2" {
		t.Fatalf("published %s while n1's first bundle awaits its ack, want n2's bundle", n)
	}
	select {
	case n := <-published:
		t.Fatalf("published %s's bundle while n1's first awaits its ack", n)
	case <-time.After(100 * time.Millisecond):
	}
	close(ack)
	if n := next(); n != "n1" {
		t.Fatalf("published %s after n1's ack, want n1's second bundle", n)
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
