package fsm

import (
	"fmt"
	"time"

	"github.com/bmedge/bmedge/protocol"
)

// HealthReport applies an edge agent's health report (kind "health"):
// the node's health becomes the BMC's, as Ironic's node_cache_health
// does at each power sync, and a change enters the node's history with
// Ironic's words (event type "monitoring"). A report read before the
// last one applied (a resend) changes nothing. Health is taken in every
// state and under operations: it is a reading, not a power change.
func (m *Machine) HealthReport(n *Node, msg *protocol.Message, now time.Time) Output {
	var out Output
	r := msg.HealthReport
	if r == nil || !protocol.ValidHealth(r.Health) || !msg.Sent.After(n.HealthReadAt) {
		return out
	}
	n.HealthReadAt = msg.Sent
	out.Changed = true
	if r.Health == n.Health {
		return out
	}
	none := func(h string) string {
		if h == "" {
			return "None"
		}
		return h
	}
	old := n.Health
	n.Health = r.Health
	n.UpdatedAt = now
	out.History = append(out.History, HistoryEntry{Time: now, Severity: "INFO", EventType: "monitoring",
		Event: fmt.Sprintf("Node health status changed: health='%s' (previously '%s')", none(r.Health), none(old))})
	return out
}
