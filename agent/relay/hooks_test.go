package relay

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/protocol"
)

// keepNothing is an outbox whose store is closing: nothing is kept.
type keepNothing struct{ fakeOutbox }

func (keepNothing) Keep(string, *protocol.Message, []byte) bool { return false }

// TestPlanHooks: the relay tells OnResult of each ramdisk result once it
// is kept (with its command and outcome; not when the outbox could not
// keep it) and OnRunning of each heartbeat naming a command, every one
// of them (not only the first of a step, which alone goes up at once).
func TestPlanHooks(t *testing.T) {
	var got []string
	hooks := func(ob Outbox) *Relay {
		return New(Config{Site: "s1", Log: slog.New(slog.DiscardHandler), Outbox: ob, Up: func(string, []byte) {},
			Local:     func(string, *protocol.Message) bool { return true },
			OnResult:  func(node, cmd string, ok bool) { got = append(got, fmt.Sprintf("result:%s:%s:%v", node, cmd, ok)) },
			OnRunning: func(node, cmd string) { got = append(got, fmt.Sprintf("running:%s:%s", node, cmd)) }})
	}
	from := func(r *Relay, m *protocol.Message) {
		t.Helper()
		m.Site, m.Node, m.Sent, m.Token = "s1", "n1", time.Now(), "t"
		p, err := protocol.Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		r.FromRamdisk(protocol.NodeEvtTopic("s1", "n1"), p)
	}
	r := hooks(&fakeOutbox{items: map[string][]byte{}, pub: func(string, []byte) {}})
	from(r, &protocol.Message{Kind: protocol.KindHeartbeat, ID: "h1", Running: "c1"})
	from(r, &protocol.Message{Kind: protocol.KindHeartbeat, ID: "h2", Running: "c1"})
	from(r, &protocol.Message{Kind: protocol.KindHeartbeat, ID: "h3"})
	from(r, &protocol.Message{Kind: protocol.KindResult, ID: "r1", CommandID: "c1", OK: true})
	from(r, &protocol.Message{Kind: protocol.KindResult, ID: "r2", CommandID: "c2", Error: "boom"})
	if s := strings.Join(got, " "); s != "running:n1:c1 running:n1:c1 result:n1:c1:true result:n1:c2:false" {
		t.Fatalf("hooks told %q", s)
	}
	got = nil
	r = hooks(&keepNothing{fakeOutbox{items: map[string][]byte{}, pub: func(string, []byte) {}}})
	from(r, &protocol.Message{Kind: protocol.KindResult, ID: "r3", CommandID: "c3", OK: true})
	if len(got) != 0 {
		t.Fatalf("a result the outbox did not keep was told: %v", got)
	}
}
