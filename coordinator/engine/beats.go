package engine

import (
	"fmt"

	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/protocol"
)

// handleBeats takes an edge agent's heartbeat summary: each heartbeat in
// it is handled as if the node's ramdisk had sent it, and the summary is
// acknowledged (it sits in the agent's outbox until then). A heartbeat of
// a node that is not the site's is dropped with a warning; the others
// still count.
func (e *Engine) handleBeats(site string, msg *protocol.Message) {
	_ = e.submit(func(t *tx) error {
		e.noteSiteSummary(t, site, msg)
		for i := range msg.Beats {
			b := &msg.Beats[i]
			n, ok := e.reg.nodes[b.Node]
			if !ok || n.Site != site {
				e.cfg.Log.Warn("heartbeat in summary rejected", "site", site, "reason", fmt.Sprintf("node %q is not a node of site %q", b.Node, site))
				continue
			}
			e.noteRescueRefused(n, b)
			t.run(n, func() fsm.Output { return e.m.Heartbeat(n, b, t.now) })
		}
		ack := protocol.BMCCmdTopic(site)
		t.acks[ack] = append(t.acks[ack], msg.ID)
		return nil
	}, false)
}
