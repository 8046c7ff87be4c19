package agent

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bmedge/bmedge/lib/mqttbroker"
	"github.com/bmedge/bmedge/lib/waitfor"
	"github.com/bmedge/bmedge/protocol"
)

// openCreds lets every client of a test broker in, to every topic.
type openCreds struct{}

func (openCreds) Authenticate(user, password, clientID string) error { return nil }
func (openCreds) Prefix(user string) (string, bool)                  { return "", true }

// evtRecorder keeps, in arrival order, the messages a broker got on
// site s1's bmc/evt topic (bundles unpacked).
type evtRecorder struct {
	mu   sync.Mutex
	msgs []*protocol.Message
}

func (r *evtRecorder) handle(topic string, payload []byte) {
	var got []*protocol.Message
	if protocol.IsBundle(payload) {
		recs, err := protocol.DecodeBundle("s1", payload)
		if err != nil {
			return
		}
		for _, rec := range recs {
			if m, err := protocol.Decode(rec.Payload); err == nil {
				got = append(got, m)
			}
		}
	} else if m, err := protocol.Decode(payload); err == nil {
		got = append(got, m)
	}
	r.mu.Lock()
	r.msgs = append(r.msgs, got...)
	r.mu.Unlock()
}

func (r *evtRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.msgs)
}

// linkedAgent runs an agent of site s1 connected to a broker of its own
// on 127.0.0.1 that records what reaches bmc/evt; both stop at the
// test's end.
func linkedAgent(t *testing.T, logs *syncBuffer) (*Agent, *evtRecorder) {
	t.Helper()
	rec := &evtRecorder{}
	b, err := mqttbroker.Start(mqttbroker.Config{Addr: "127.0.0.1:0"}, openCreds{}, slog.New(slog.DiscardHandler),
		map[string]mqttbroker.Handler{protocol.BMCEvtTopic("s1"): rec.handle})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	if logs != nil {
		log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	a := New(Config{Site: "s1", BrokerURL: "mqtt://" + b.Addr, Username: "site:s1", Password: "x", Log: log,
		HeartbeatSummary: time.Hour, StateDir: t.TempDir()})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = a.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
		_ = b.Close()
	})
	actx, acancel := context.WithTimeout(ctx, 10*time.Second)
	defer acancel()
	if err := a.AwaitUp(actx); err != nil {
		t.Fatal(err)
	}
	return a, rec
}

// TestUplinkKeepsNodeOrder checks that a node's messages reach the
// broker in the order the agent queued them, although the uplink keeps
// several bundles in flight: messages large enough that each bundle
// holds a few make many bundles of the same node.
func TestUplinkKeepsNodeOrder(t *testing.T) {
	a, rec := linkedAgent(t, nil)
	pad := strings.Repeat("p", 120<<10)
	const n = 400
	for i := range n {
		// Two nodes interleaved: each must stay in its order.
		node := []string{"n1", "n2"}[i%2]
		p, err := protocol.Encode(&protocol.Message{Kind: protocol.KindPower, ID: fmt.Sprintf("seq-%04d", i), Site: "s1", Node: node, Sent: time.Now(), Error: pad})
		if err != nil {
			t.Fatal(err)
		}
		a.publish(protocol.BMCEvtTopic("s1"), p)
	}
	waitfor.Until(60*time.Second, func() bool { return rec.count() >= n })
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.msgs) != n {
		t.Fatalf("%d of %d messages arrived", len(rec.msgs), n)
	}
	last := map[string]int{"n1": -1, "n2": -1}
	for _, m := range rec.msgs {
		k, _ := strconv.Atoi(strings.TrimPrefix(m.ID, "seq-"))
		if k < last[m.Node] {
			t.Fatalf("node %s: seq-%04d arrived after seq-%04d", m.Node, k, last[m.Node])
		}
		last[m.Node] = k
	}
}
