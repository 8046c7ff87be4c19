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
	msg := &protocol.Message{V: protocol.Version, Kind: protocol.KindCommand, ID: m.cfg.NewID(), Site: n.Site, Node: n.UUID,
		Sent: now, Deadline: now.Add(m.cfg.CommandTimeout), Action: protocol.ActionForget}
	return Output{Send: []Outgoing{{Topic: protocol.BMCCmdTopic(n.Site), Msg: msg}}}
}
