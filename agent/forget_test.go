package agent

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/bmedge/bmedge/protocol"
)

// TestForgetDropsNodeState checks that forget leaves nothing of a deleted
// node behind: its command count (gen) and its network boot MACs and
// fresh-boot flag, besides what it always dropped.
func TestForgetDropsNodeState(t *testing.T) {
	a := New(Config{Site: "s1", Log: slog.New(slog.DiscardHandler)})
	a.ctx = context.Background()
	a.bmcs.SetGen("n1", 3)
	a.boot.NoteArgs("n1", map[string]any{protocol.ArgBootMACs: []any{"52:54:00:00:00:01"}})
	a.forget("n1")
	_, gen := a.bmcs.Gen("n1")
	macs, fresh := a.boot.NetbootNoted("n1")
	if gen || macs || fresh {
		t.Errorf("after forget: gen kept %v, netboot MACs kept %v, fresh flag kept %v", gen, macs, fresh)
	}
}

// TestForgetDropsNodeOutbox checks that forget drops a deleted node's
// messages from the outbox and its done-records, in memory and in the
// state folder: a relayed result (on the node's own topic) and a BMC
// command's result (on the site's bmc/evt topic) of the node would
// otherwise be resent for ever. Another node's result stays.
func TestForgetDropsNodeOutbox(t *testing.T) {
	dir := t.TempDir()
	a := storedAgent(t, dir, 0, nil)
	p, err := protocol.Encode(&protocol.Message{Kind: protocol.KindResult, ID: "relayed", Site: "s1", Node: "n1", Sent: time.Now(), Token: "t", CommandID: "c-inband", OK: true})
	if err != nil {
		t.Fatal(err)
	}
	a.relay.FromRamdisk(protocol.NodeEvtTopic("s1", "n1"), p)
	result(a, "n1", "c-bmc", "bmc-result", time.Now().Add(time.Hour))
	result(a, "n2", "c-other", "other-result", time.Now().Add(time.Hour))
	if n := a.Outbox(); n != 3 {
		t.Fatalf("outbox before forget: %d, want 3", n)
	}
	a.forget("n1")
	check := func(a *Agent, when string) {
		t.Helper()
		items := a.items()
		for _, id := range []string{"relayed", "bmc-result"} {
			if it, ok := items[id]; ok {
				t.Errorf("%s: the deleted node's %s is still in the outbox (topic %s)", when, id, it.Topic)
			}
		}
		if _, ok := a.hasDone("c-bmc"); ok {
			t.Errorf("%s: the deleted node's done-record is kept", when)
		}
		if _, ok := items["other-result"]; !ok {
			t.Errorf("%s: another node's result left the outbox", when)
		}
		if _, ok := a.hasDone("c-other"); !ok {
			t.Errorf("%s: another node's done-record was dropped", when)
		}
	}
	check(a, "after forget")
	a.closeStore(t)
	b := storedAgent(t, dir, 0, nil)
	defer b.closeStore(t)
	check(b, "after a restart")
}
