package engine

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/protocol"
)

type lockedBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Refused messages are logged at a bounded rate: 300 heartbeats with a
// stale token and 300 results on another node's topic make a line or two
// each, not 600, and the node does not move.
func TestRejectedMessagesLoggedAtABoundedRate(t *testing.T) {
	var logs lockedBuf
	e, rec := newEngine(t, Config{Log: slog.New(slog.NewTextHandler(&logs, nil))})
	a, _ := e.CreateNode(NodeSpec{Name: "a", Driver: "fake"})
	if err := e.Verb("a", fsm.VerbRequest{Verb: fsm.Manage}); err != nil {
		t.Fatal(err)
	}
	cmd, _ := rec.next(t, a.UUID, 0)
	for i := range 300 {
		e.HandleMessage(protocol.NodeEvtTopic("s1", a.UUID), mustJSON(&protocol.Message{Kind: protocol.KindHeartbeat, ID: fmt.Sprintf("hb%d", i), Site: "s1", Node: a.UUID, Token: "stale"}))
		e.HandleMessage(protocol.NodeEvtTopic("s1", "other"), mustJSON(&protocol.Message{Kind: protocol.KindResult, ID: fmt.Sprintf("r%d", i), Node: a.UUID, CommandID: cmd.ID, OK: true, Token: "t"}))
	}
	drain(t, e) // all 600 handled
	if s := state(t, e, a.UUID); s != fsm.Verifying {
		t.Fatalf("refused messages moved the node to %q", s)
	}
	lines := strings.Count(logs.String(), `msg="message rejected"`)
	if lines == 0 || lines > 4 {
		t.Fatalf("%d \"message rejected\" lines for 600 refused messages; want 1 to 4 (one per interval, with a count)\n%s", lines, logs.String())
	}
	// A late heartbeat (its boot's token withdrawn) is ignored, at INFO,
	// also at a bounded rate.
	if lines := strings.Count(logs.String(), `msg="message ignored"`); lines > 4 {
		t.Fatalf("%d \"message ignored\" lines for 300 late heartbeats; want at most 4", lines)
	}
}
