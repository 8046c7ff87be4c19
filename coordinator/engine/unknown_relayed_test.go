package engine

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/bmedge/bmedge/protocol"
)

// topicRecorder is a Publisher that keeps the acks the engine sends,
// with their topics.
type topicRecorder struct {
	mu    sync.Mutex
	acked map[string]string // message id → the topic its ack came on
}

func (r *topicRecorder) Publish(_ context.Context, topic string, payload []byte, _ bool) error {
	m, err := protocol.Decode(payload)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if m.Kind == protocol.KindAck {
		for _, id := range m.AckIDs {
			r.acked[id] = topic
		}
	}
	return nil
}

// TestUnknownNodeRelayedResultAcked checks that a ramdisk's result about
// a node the coordinator does not have (deleted meanwhile), relayed by
// the edge agent on the node's own evt topic, is acknowledged on the
// node's cmd topic: without the ack the agent's durable outbox resends
// it for ever.
func TestUnknownNodeRelayedResultAcked(t *testing.T) {
	cfg := Config{DataDir: t.TempDir(), TickInterval: 50 * time.Millisecond}
	cfg.Machine.AutomatedClean = true
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rec := &topicRecorder{acked: map[string]string{}}
	if err := e.Start(rec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	if _, _, err := e.AddSite("s1"); err != nil {
		t.Fatal(err)
	}
	e.HandleMessage(protocol.SitePresenceTopic("s1"), mustJSON(&protocol.Message{Kind: protocol.KindPresence, Site: "s1", Online: true}))
	const gone = "00000000-0000-0000-0000-00000000dead"
	e.HandleMessage(protocol.NodeEvtTopic("s1", gone), mustJSON(&protocol.Message{Kind: protocol.KindResult, ID: "r-relayed", Site: "s1", Node: gone, Token: "t", CommandID: "c1", OK: true}))
	want := protocol.NodeCmdTopic("s1", gone)
	deadline := time.Now().Add(5 * time.Second)
	for {
		rec.mu.Lock()
		topic, ok := rec.acked["r-relayed"]
		rec.mu.Unlock()
		if ok {
			if topic != want {
				t.Fatalf("the relayed result was acked on %s, want %s", topic, want)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the relayed result about an unknown node was never acked")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
