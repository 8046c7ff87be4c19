package fsm

import (
	"testing"

	"github.com/bmedge/bmedge/protocol"
)

// Every command the machine makes for a node carries a Seq higher than
// the node's previous command's (protocol.Message.Seq): the edge agent
// refuses a copy of an older command by it. A resend keeps its Seq.
func TestCommandSeqIncreases(t *testing.T) {
	w := newWorld(t)
	w.verb(Manage, VerbRequest{})
	w.verb(Inspect, VerbRequest{})
	w.verb(Provide, VerbRequest{})
	w.n.InstanceInfo = map[string]any{"image_source": "http://x/img"}
	w.verb(Deploy, VerbRequest{})
	w.want(Active)
	var last uint64
	actions := map[string]bool{}
	for _, o := range w.sent {
		m := o.Msg
		if m.Kind != protocol.KindCommand || m.Node == "" || m.Action == protocol.ActionForget || m.Action == protocol.ActionEndBoot {
			continue
		}
		actions[m.Action] = true
		if m.Seq <= last {
			t.Fatalf("command %s (%s) has Seq %d, not above the previous command's %d", m.ID, m.Action, m.Seq, last)
		}
		last = m.Seq
	}
	for _, a := range []string{protocol.ActionValidate, protocol.ActionPower, protocol.ActionOOBStep, protocol.ActionInbandRun} {
		if !actions[a] {
			t.Errorf("no %s command was sent: the check did not cover it", a)
		}
	}
	if w.n.CmdSeq != last {
		t.Errorf("node's CmdSeq %d, want the last command's Seq %d", w.n.CmdSeq, last)
	}
}
