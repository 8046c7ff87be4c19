package outbox

import (
	"log/slog"
	"testing"
	"time"

	"github.com/bmedge/bmedge/lib/clock"
	"github.com/bmedge/bmedge/protocol"
)

// TestIntentNeverRunsTwice (issue 30, point 5): a command marked Intent
// (a reboot) is kept as started on disk before it runs; when the agent
// dies while it runs (no result kept), a copy after the restart is
// answered by Resumed, never by Run again; its result then drops the
// intent, and a later copy is answered from the result (Redone). An
// intent whose command's deadline has passed is dropped at load, and a
// command without Intent runs again as before (the control).
func TestIntentNeverRunsTwice(t *testing.T) {
	dir := t.TempDir()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	open := func() (*Outbox, *Store) {
		o := New(Config{Site: "s1", Log: slog.New(slog.DiscardHandler), Clock: clk, Publish: func(string, []byte) {}})
		s, err := OpenStore(dir, o.log)
		if err != nil {
			t.Fatal(err)
		}
		if err := o.Load(s); err != nil {
			t.Fatal(err)
		}
		return o, s
	}
	runs, resumed := map[string]int{}, map[string]int{}
	cmd := func(id string, intent, die bool, deadline time.Duration) Command {
		m := &protocol.Message{Kind: protocol.KindCommand, ID: id, Site: "s1", Node: "n1", Seq: 1, Action: protocol.ActionPower,
			Deadline: clk.Now().Add(deadline)}
		res := func() *protocol.Message {
			return &protocol.Message{Kind: protocol.KindResult, ID: "r-" + id + "-" + clk.Now().String(), Site: "s1", Node: "n1", Sent: clk.Now(),
				CommandID: id, Seq: 1, OK: true}
		}
		return Command{Msg: m, Intent: intent,
			Run: func() *protocol.Message {
				runs[id]++
				if die {
					return nil // killed before its result was kept
				}
				return res()
			},
			Resumed: func() *protocol.Message { resumed[id]++; return res() }}
	}
	o, s := open()
	o.Once(cmd("reboot", true, true, time.Hour))
	o.Once(cmd("expired", true, true, time.Minute))
	o.Once(cmd("plain", false, true, time.Hour))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Minute)
	o, s = open()
	defer s.Close()
	for _, id := range []string{"reboot", "expired", "plain"} {
		c := cmd(id, id != "plain", false, time.Hour)
		if got := o.Once(c); got != Ran {
			t.Fatalf("copy of %s after the restart: %v", id, got)
		}
	}
	if runs["reboot"] != 1 || resumed["reboot"] != 1 {
		t.Fatalf("reboot: run %d times, resumed %d; want run once (before the kill), resumed once", runs["reboot"], resumed["reboot"])
	}
	if runs["expired"] != 2 || resumed["expired"] != 0 {
		t.Fatalf("a command whose intent expired: run %d, resumed %d; want run again (its intent dropped at load)", runs["expired"], resumed["expired"])
	}
	if runs["plain"] != 2 {
		t.Fatalf("a command without Intent: run %d times, want 2", runs["plain"])
	}
	if got := o.Once(cmd("reboot", true, false, time.Hour)); got != Redone || runs["reboot"] != 1 || resumed["reboot"] != 1 {
		t.Fatalf("a third copy of the reboot: %v (runs %d, resumed %d); want Redone from its result", got, runs["reboot"], resumed["reboot"])
	}
	// A waited write after the queued removals: they are on disk then.
	if err := s.PutIntent("barrier", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if kept, err := s.LoadIntents(); err != nil || len(kept) != 1 || kept["barrier"] == nil {
		t.Fatalf("intents kept after the results: %v %v; want only the barrier", kept, err)
	}
}
