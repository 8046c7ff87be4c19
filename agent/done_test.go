package agent

import (
	"log/slog"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent/outbox"
	"github.com/bmedge/bmedge/protocol"
)

// A command's result is remembered for outbox.DoneRetention after the
// coordinator's ack and past the command's deadline, then forgotten; a
// result never acked is kept as long as it is in the outbox.
func TestDoneResultsForgottenAfterAck(t *testing.T) {
	a := New(Config{Site: "s1", Log: slog.New(slog.DiscardHandler)})
	t0 := time.Now()
	remember := func(cmd, res string, deadline time.Time) {
		a.ob.Inspect(func(s *outbox.State) {
			s.Items[res] = outbox.Item{Topic: protocol.BMCEvtTopic("s1"), Payload: []byte("{}"), Sent: t0, Cmd: cmd}
			s.Done[cmd] = outbox.Done{Topic: protocol.BMCEvtTopic("s1"), ID: res, Payload: []byte("{}"), At: t0, Deadline: deadline}
		})
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
	if a.doneRec("c-short").Acked.IsZero() || a.doneRec("c-long").Acked.IsZero() || !a.doneRec("c-unacked").Acked.IsZero() {
		t.Fatal("the ack did not mark the acked results (and only them)")
	}
	// An acknowledged result is the coordinator's now: its done-record
	// keeps no payload, and a duplicate of its command neither runs nor
	// sends the result again.
	if a.doneRec("c-short").Payload != nil || a.doneRec("c-long").Payload != nil {
		t.Fatal("an acked done-record kept its payload")
	}
	if a.doneRec("c-unacked").Payload == nil {
		t.Fatal("the unacked done-record lost its payload")
	}
	d, ok := a.ob.Redo("c-short")
	_, back := a.items()["r-short"]
	if !ok || d.Payload != nil || back {
		t.Fatalf("a duplicate of an acked command: found %v, payload %q, back in the outbox %v; want found, no payload, not in the outbox", ok, d.Payload, back)
	}
	has := func(cmds ...string) string {
		s := ""
		for _, c := range cmds {
			if _, ok := a.hasDone(c); ok {
				s += c + " "
			}
		}
		return s
	}
	a.ob.Trim(acked.Add(outbox.DoneRetention - time.Second))
	if got := has("c-short", "c-long", "c-unacked"); got != "c-short c-long c-unacked " {
		t.Fatalf("before the retention ends: remembered %q", got)
	}
	a.ob.Trim(acked.Add(outbox.DoneRetention + time.Second))
	if got := has("c-short", "c-long", "c-unacked"); got != "c-long c-unacked " {
		t.Fatalf("after the retention: remembered %q, want the one whose deadline is still ahead and the unacked one", got)
	}
	a.ob.Trim(t0.Add(31 * time.Minute))
	if got := has("c-short", "c-long", "c-unacked"); got != "c-unacked " {
		t.Fatalf("after the long deadline: remembered %q", got)
	}
	// A result the coordinator has not acknowledged (a long WAN outage)
	// keeps its done-record while it is in the outbox, however old: a
	// duplicate of its command must not run again.
	a.ob.Trim(t0.Add(48 * time.Hour))
	if got := has("c-short", "c-long", "c-unacked"); got != "c-unacked " {
		t.Fatalf("after two days unacknowledged: remembered %q, want the unacked one", got)
	}
	a.ob.Inspect(func(s *outbox.State) { delete(s.Items, "r-unacked") })
	a.ob.Trim(t0.Add(48 * time.Hour))
	if done := a.doneRecs(); len(done) != 0 {
		t.Fatalf("an unacked result no longer in the outbox is still remembered: %v", done)
	}
}
