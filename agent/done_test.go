package agent

import (
	"log/slog"
	"testing"
	"time"

	"github.com/bmedge/bmedge/protocol"
)

// A command's result is remembered for doneRetention after the
// coordinator's ack and past the command's deadline, then forgotten; a
// result never acked is kept as long as it is in the outbox.
func TestDoneResultsForgottenAfterAck(t *testing.T) {
	a := New(Config{Site: "s1", Log: slog.New(slog.DiscardHandler)})
	t0 := time.Now()
	remember := func(cmd, res string, deadline time.Time) {
		a.outbox[res] = outItem{topic: protocol.BMCEvtTopic("s1"), payload: []byte("{}"), sent: t0, cmd: cmd}
		a.done[cmd] = doneItem{topic: protocol.BMCEvtTopic("s1"), id: res, payload: []byte("{}"), at: t0, deadline: deadline}
	}
	remember("c-short", "r-short", t0.Add(time.Minute))     // deadline before the retention ends
	remember("c-long", "r-long", t0.Add(30*time.Minute))    // deadline after it
	remember("c-unacked", "r-unacked", t0.Add(time.Minute)) // the coordinator never acks

	ack, err := protocol.Encode(&protocol.Message{V: protocol.Version, Kind: protocol.KindAck, ID: "ack", Sent: time.Now(), AckIDs: []string{"r-short", "r-long"}})
	if err != nil {
		t.Fatal(err)
	}
	a.handle(protocol.BMCCmdTopic("s1"), ack)
	acked := time.Now()
	if a.Outbox() != 1 {
		t.Fatalf("outbox after the ack: %d results, want 1 (the unacked one)", a.Outbox())
	}
	if a.done["c-short"].acked.IsZero() || a.done["c-long"].acked.IsZero() || !a.done["c-unacked"].acked.IsZero() {
		t.Fatal("the ack did not mark the acked results (and only them)")
	}
	// An acknowledged result is the coordinator's now: its done-record
	// keeps no payload, and a duplicate of its command neither runs nor
	// sends the result again.
	if a.done["c-short"].payload != nil || a.done["c-long"].payload != nil {
		t.Fatal("an acked done-record kept its payload")
	}
	if a.done["c-unacked"].payload == nil {
		t.Fatal("the unacked done-record lost its payload")
	}
	a.mu.Lock()
	d, ok := a.redoLocked("c-short")
	_, back := a.outbox["r-short"]
	a.mu.Unlock()
	if !ok || d.payload != nil || back {
		t.Fatalf("a duplicate of an acked command: found %v, payload %q, back in the outbox %v; want found, no payload, not in the outbox", ok, d.payload, back)
	}
	has := func(cmds ...string) string {
		s := ""
		for _, c := range cmds {
			if _, ok := a.done[c]; ok {
				s += c + " "
			}
		}
		return s
	}
	a.trimDone(acked.Add(doneRetention - time.Second))
	if got := has("c-short", "c-long", "c-unacked"); got != "c-short c-long c-unacked " {
		t.Fatalf("before the retention ends: remembered %q", got)
	}
	a.trimDone(acked.Add(doneRetention + time.Second))
	if got := has("c-short", "c-long", "c-unacked"); got != "c-long c-unacked " {
		t.Fatalf("after the retention: remembered %q, want the one whose deadline is still ahead and the unacked one", got)
	}
	a.trimDone(t0.Add(31 * time.Minute))
	if got := has("c-short", "c-long", "c-unacked"); got != "c-unacked " {
		t.Fatalf("after the long deadline: remembered %q", got)
	}
	// A result the coordinator has not acknowledged (a long WAN outage)
	// keeps its done-record while it is in the outbox, however old: a
	// duplicate of its command must not run again.
	a.trimDone(t0.Add(48 * time.Hour))
	if got := has("c-short", "c-long", "c-unacked"); got != "c-unacked " {
		t.Fatalf("after two days unacknowledged: remembered %q, want the unacked one", got)
	}
	delete(a.outbox, "r-unacked")
	a.trimDone(t0.Add(48 * time.Hour))
	if len(a.done) != 0 {
		t.Fatalf("an unacked result no longer in the outbox is still remembered: %v", a.done)
	}
}
