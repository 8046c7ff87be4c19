package relay

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

// fakeOutbox is an outbox in a map; what it publishes goes to pub.
type fakeOutbox struct {
	items map[string][]byte
	pub   func(topic string, payload []byte)
}

func (o *fakeOutbox) Keep(topic string, m *protocol.Message, payload []byte) bool {
	o.items[m.ID] = payload
	return true
}
func (o *fakeOutbox) Ack(ids []string) {
	for _, id := range ids {
		delete(o.items, id)
	}
}
func (o *fakeOutbox) Withdraw(id string) bool {
	_, ok := o.items[id]
	delete(o.items, id)
	return ok
}
func (o *fakeOutbox) PutMemOnly(id, topic string, payload []byte) {
	o.items[id] = payload
	o.pub(topic, payload)
}
func (o *fakeOutbox) Len() int { return len(o.items) }

// TestRelayWithoutMQTT: a ramdisk's result is kept in the outbox,
// acknowledged to the ramdisk and sent up; its first heartbeat of a step
// goes up at once, the next only in a summary; a node whose beats bring
// no news is in a summary again once BeatRefresh passed on the relay's
// own clock; a deleted node's beats are forgotten.
func TestRelayWithoutMQTT(t *testing.T) {
	fk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	ob := &fakeOutbox{items: map[string][]byte{}}
	var up []string
	publish := func(topic string, payload []byte) {
		m, _ := protocol.Decode(payload)
		up = append(up, m.Kind)
	}
	ob.pub = publish
	var local []*protocol.Message
	r := New(Config{Site: "s1", Log: slog.New(slog.DiscardHandler), Clock: fk, Outbox: ob,
		Up:    publish,
		Local: func(node string, m *protocol.Message) bool { local = append(local, m); return true },
		NewID: func() string { return "sum-" + fk.Now().Format("150405") }})
	from := func(m *protocol.Message) {
		t.Helper()
		m.Site, m.Node, m.Sent = "s1", "n1", fk.Now()
		p, err := protocol.Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		r.FromRamdisk(protocol.NodeEvtTopic("s1", "n1"), p)
	}
	from(&protocol.Message{Kind: protocol.KindResult, ID: "res1", Token: "t", CommandID: "c1", OK: true})
	if _, kept := ob.items["res1"]; !kept || len(local) != 1 || local[0].Kind != protocol.KindAck || len(up) != 1 {
		t.Fatalf("a relayed result: kept %v, to the ramdisk %v, up %v; want kept, acked to the ramdisk, sent up", kept, local, up)
	}
	beat := func(progress float64) {
		from(&protocol.Message{Kind: protocol.KindHeartbeat, ID: "hb", Token: "t", Running: "c2", Progress: progress})
	}
	beat(0.1)
	beat(0.12)
	if len(up) != 2 {
		t.Fatalf("heartbeats sent up at once: %d, want the first of the step only", len(up)-1)
	}
	r.Summarize()
	if len(up) != 3 || up[2] != protocol.KindBeats {
		t.Fatalf("summary: %v", up)
	}
	ob.Ack([]string{"sum-000000"})
	beat(0.13) // no news
	r.Summarize()
	if len(up) != 3 {
		t.Fatalf("a beat with no news was summarized: %v", up)
	}
	fk.Advance(BeatRefresh)
	r.Summarize()
	if len(up) != 4 {
		t.Fatalf("after BeatRefresh on the relay's clock the held beat did not go: %v", up)
	}
	r.Forget("n1")
	r.Inspect(func(s *State) {
		if len(s.Beats)+len(s.Seen)+len(s.Sent)+len(s.Held) != 0 {
			t.Fatalf("after Forget: %+v", s)
		}
	})
}

// TestSummaryLoopOnTheClock: SummaryLoop sends the held heartbeats in a
// summary each time the relay's clock passes Summary, not before.
func TestSummaryLoopOnTheClock(t *testing.T) {
	fk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var mu sync.Mutex
	var up []string
	publish := func(topic string, payload []byte) {
		m, _ := protocol.Decode(payload)
		mu.Lock()
		up = append(up, m.Kind)
		mu.Unlock()
	}
	sent := func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), up...) }
	ob := &fakeOutbox{items: map[string][]byte{}, pub: publish}
	r := New(Config{Site: "s1", Log: slog.New(slog.DiscardHandler), Clock: fk, Outbox: ob, Summary: 10 * time.Second,
		Up: publish, Local: func(string, *protocol.Message) bool { return true }, NewID: func() string { return "sum" }})
	for _, progress := range []float64{0.1, 0.2} {
		p, err := protocol.Encode(&protocol.Message{Kind: protocol.KindHeartbeat, ID: "hb", Site: "s1", Node: "n1", Sent: fk.Now(),
			Token: "t", Running: "c2", Progress: progress})
		if err != nil {
			t.Fatal(err)
		}
		r.FromRamdisk(protocol.NodeEvtTopic("s1", "n1"), p)
	}
	if got := sent(); len(got) != 1 {
		t.Fatalf("sent up %v, want the step's first heartbeat only", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.SummaryLoop(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	if !fk.WaitTimers(1, 10*time.Second) {
		t.Fatal("SummaryLoop armed no ticker on the relay's clock")
	}
	fk.Advance(10*time.Second - time.Millisecond)
	if got := sent(); len(got) != 1 {
		t.Fatalf("before Summary passed on the clock: sent up %v", got)
	}
	fk.Advance(time.Millisecond)
	waitfor.Until(10*time.Second, func() bool { return len(sent()) != 1 })
	if got := sent(); len(got) != 2 || got[1] != protocol.KindBeats {
		t.Fatalf("after Summary passed on the clock: sent up %v, want a summary", got)
	}
}
