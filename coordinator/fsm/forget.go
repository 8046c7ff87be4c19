package fsm

import (
	"time"

	"github.com/bmedge/bmedge/protocol"
)

// Deleted is what a node's deletion tells its site: a forget command, so
// that the edge agent closes the node's BMC session, stops polling its
// power, drops its boot credential and gives a simulated node's slot
// back. It is sent once and answered by no result (a lost one costs only
// what the agent's next restart clears); n is not changed.
func (m *Machine) Deleted(n *Node, now time.Time) Output {
	var out Output
	m.notice(n, protocol.BMCCmdTopic(n.Site), &protocol.Message{Action: protocol.ActionForget}, now, &out)
	return out
}

// endBoot tells n's site that its current ramdisk boot is over although
// no power command says so (a failed or aborted operation leaves the node
// powered on): the edge agent drops the boot's credential from its site
// broker, its parameters image and its network boot. Sent once, answered
// by no result (QoS 1 and the agent's persistent session carry it across
// an outage); n.Pending is not touched.
func (m *Machine) endBoot(n *Node, now time.Time, out *Output) {
	m.notice(n, protocol.BMCCmdTopic(n.Site), &protocol.Message{Action: protocol.ActionEndBoot}, now, out)
}
