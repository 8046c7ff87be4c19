package engine

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/protocol"
)

// recorder is a Publisher that keeps what the engine sends.
type recorder struct {
	mu   sync.Mutex
	msgs []*protocol.Message
}

func (r *recorder) Publish(_ context.Context, topic string, payload []byte, _ bool) error {
	m, err := protocol.Decode(payload)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.msgs = append(r.msgs, m)
	r.mu.Unlock()
	return nil
}

// next waits for the next command for node.
func (r *recorder) next(t *testing.T, node string, seen int) (*protocol.Message, int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		r.mu.Lock()
		for i := seen; i < len(r.msgs); i++ {
			if r.msgs[i].Node == node && r.msgs[i].Kind == protocol.KindCommand {
				m := r.msgs[i]
				r.mu.Unlock()
				return m, i + 1
			}
		}
		r.mu.Unlock()
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no command for %s", node)
	return nil, 0
}

func newEngine(t *testing.T, cfg Config) (*Engine, *recorder) {
	t.Helper()
	cfg.DataDir = t.TempDir()
	cfg.Machine.AutomatedClean = true
	cfg.TickInterval = 50 * time.Millisecond
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	if err := e.Start(rec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	if _, _, err := e.AddSite("s1"); err != nil {
		t.Fatal(err)
	}
	e.HandleMessage(protocol.SitePresenceTopic("s1"), mustJSON(&protocol.Message{V: 1, Kind: protocol.KindPresence, Site: "s1", Online: true}))
	return e, rec
}

func mustJSON(m *protocol.Message) []byte {
	m.V = protocol.Version
	if m.Sent.IsZero() {
		m.Sent = time.Now()
	}
	b, _ := json.Marshal(m)
	return b
}

func state(t *testing.T, e *Engine, id string) fsm.State {
	var s fsm.State
	if err := e.View(id, func(n *fsm.Node, _ bool) error { s = n.ProvisionState; return nil }); err != nil {
		t.Fatal(err)
	}
	return s
}

func waitState(t *testing.T, e *Engine, id string, want fsm.State) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for state(t, e, id) != want {
		if time.Now().After(deadline) {
			t.Fatalf("node %s in %q, want %q", id, state(t, e, id), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// manage brings a node to manageable by answering its validate command.
func manage(t *testing.T, e *Engine, rec *recorder, id string) {
	t.Helper()
	if err := e.Verb(id, fsm.VerbRequest{Verb: fsm.Manage}); err != nil {
		t.Fatal(err)
	}
	cmd, _ := rec.next(t, id, 0)
	e.HandleMessage(protocol.BMCEvtTopic("s1"), mustJSON(&protocol.Message{Kind: protocol.KindResult, ID: "r-" + cmd.ID, Node: id, CommandID: cmd.ID, OK: true}))
	waitState(t, e, id, fsm.Manageable)
}

func TestConcurrencyLimit(t *testing.T) {
	e, rec := newEngine(t, Config{MaxConcurrentClean: 1})
	a, _ := e.CreateNode(NodeSpec{Name: "a", Driver: "fake"})
	b, _ := e.CreateNode(NodeSpec{Name: "b", Driver: "fake"})
	manage(t, e, rec, a.UUID)
	manage(t, e, rec, b.UUID)
	if err := e.Verb("a", fsm.VerbRequest{Verb: fsm.Provide}); err != nil {
		t.Fatal(err)
	}
	// Ironic ("limits | 500 … provide is not limited"): a manual clean
	// over the cap is a 500; a provide is not capped.
	steps := []map[string]any{{"interface": "management", "step": "fake_reset_bmc"}}
	err := e.Verb("b", fsm.VerbRequest{Verb: fsm.Clean, CleanSteps: steps})
	var ee *Error
	if err == nil || !strings.Contains(err.Error(), "concurrent action limit for cleaning has been reached") {
		t.Fatalf("manual clean over the cap: %v", err)
	}
	if ok := asError(err, &ee); !ok || ee.Kind != Internal {
		t.Fatalf("code: %v", err)
	}
	if state(t, e, b.UUID) != fsm.Manageable {
		t.Fatal("refused verb changed the node")
	}
	if err := e.Verb("b", fsm.VerbRequest{Verb: fsm.Provide}); err != nil {
		t.Fatalf("provide over the cap: %v; Ironic does not cap provide", err)
	}
}

func asError(err error, target **Error) bool {
	e, ok := err.(*Error)
	*target = e
	return ok
}

// TestBadMessagesChangeNothing: malformed, foreign and spoofed messages
// are dropped; the node does not move.
func TestBadMessagesChangeNothing(t *testing.T) {
	e, rec := newEngine(t, Config{})
	a, _ := e.CreateNode(NodeSpec{Name: "a", Driver: "fake"})
	if err := e.Verb("a", fsm.VerbRequest{Verb: fsm.Manage}); err != nil {
		t.Fatal(err)
	}
	cmd, _ := rec.next(t, a.UUID, 0)
	bad := map[string][]byte{
		protocol.BMCEvtTopic("s1"):           []byte("{not json"),
		protocol.BMCEvtTopic("s2"):           mustJSON(&protocol.Message{Kind: protocol.KindResult, ID: "x", Node: a.UUID, CommandID: cmd.ID, OK: true}),
		"elsewhere/topic":                    mustJSON(&protocol.Message{Kind: protocol.KindResult, ID: "y", Node: a.UUID, CommandID: cmd.ID, OK: true}),
		protocol.NodeEvtTopic("s1", "other"): mustJSON(&protocol.Message{Kind: protocol.KindResult, ID: "z", Node: a.UUID, CommandID: cmd.ID, OK: true, Token: "t"}),
	}
	for topic, payload := range bad {
		e.HandleMessage(topic, payload)
	}
	// A result for an unknown command id is acked and ignored.
	e.HandleMessage(protocol.BMCEvtTopic("s1"), mustJSON(&protocol.Message{Kind: protocol.KindResult, ID: "w", Node: a.UUID, CommandID: "nope", OK: true}))
	drain(t, e) // every message above handled
	if s := state(t, e, a.UUID); s != fsm.Verifying {
		t.Fatalf("bad messages moved the node to %q", s)
	}
	e.HandleMessage(protocol.BMCEvtTopic("s1"), mustJSON(&protocol.Message{Kind: protocol.KindResult, ID: "ok", Node: a.UUID, CommandID: cmd.ID, OK: true}))
	waitState(t, e, a.UUID, fsm.Manageable)
}

// TestResendUntilResult: an unanswered command is sent again with the same id.
func TestResendUntilResult(t *testing.T) {
	e, rec := newEngine(t, Config{Machine: fsm.Config{ResendInterval: 100 * time.Millisecond}})
	a, _ := e.CreateNode(NodeSpec{Name: "a", Driver: "fake"})
	if err := e.Verb("a", fsm.VerbRequest{Verb: fsm.Manage}); err != nil {
		t.Fatal(err)
	}
	first, seen := rec.next(t, a.UUID, 0)
	again, _ := rec.next(t, a.UUID, seen)
	if again.ID != first.ID {
		t.Fatalf("resent command has id %s, want %s", again.ID, first.ID)
	}
}

// TestRestartKeepsNodes: what was acknowledged is on disk after a restart.
func TestRestartKeepsNodes(t *testing.T) {
	dir := t.TempDir()
	e, err := New(Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(&recorder{}); err != nil {
		t.Fatal(err)
	}
	e.AddSite("s1")
	n, err := e.CreateNode(NodeSpec{Name: "keep", Driver: "fake", DriverInfo: map[string]any{"fake_password": "pw"}})
	if err != nil {
		t.Fatal(err)
	}
	e.Close()
	e2, err := New(Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer e2.Close()
	if err := e2.View("keep", func(m *fsm.Node, _ bool) error {
		if m.UUID != n.UUID || m.DriverInfo["fake_password"] != "pw" {
			t.Errorf("reloaded node differs: %+v", m)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// A result or power report from a site's edge agent about a node the
// coordinator does not have (deleted meanwhile) is acknowledged: the
// agent's durable outbox would otherwise resend it forever.
func TestUnknownNodeMessagesAcked(t *testing.T) {
	eng, rec2 := newEngine(t, Config{})
	for _, m := range []*protocol.Message{
		{Kind: protocol.KindResult, ID: "r-gone", Site: "s1", Node: "00000000-0000-0000-0000-00000000dead", CommandID: "c1", OK: true},
		{Kind: protocol.KindPower, ID: "p-gone", Site: "s1", Node: "00000000-0000-0000-0000-00000000dead", PowerState: protocol.PowerOn},
	} {
		eng.HandleMessage(protocol.BMCEvtTopic("s1"), mustJSON(m))
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		acked := map[string]bool{}
		rec2.mu.Lock()
		for _, m := range rec2.msgs {
			if m.Kind == protocol.KindAck {
				for _, id := range m.AckIDs {
					acked[id] = true
				}
			}
		}
		rec2.mu.Unlock()
		if acked["r-gone"] && acked["p-gone"] {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("acked %v; want the result and the power report about the unknown node", acked)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
