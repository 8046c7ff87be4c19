package fsm

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/bmedge/bmedge/protocol"
)

// HealthReport applies an edge agent's health report (kind "health"):
// the node's health becomes the BMC's, as Ironic's node_cache_health
// does at each power sync, and a change enters the node's history with
// Ironic's words (event type "monitoring"). A report read before the
// last one applied (a resend) changes nothing. Health is taken in every
// state and under operations: it is a reading, not a power change.
// With the quarantine policy (Config.QuarantineOn) an available node
// whose report is as bad as the policy's health goes into maintenance.
func (m *Machine) HealthReport(n *Node, msg *protocol.Message, now time.Time) Output {
	var out Output
	r := msg.HealthReport
	if r == nil || !protocol.ValidHealth(r.Health) || !msg.Sent.After(n.HealthReadAt) {
		return out
	}
	n.HealthReadAt = msg.Sent
	out.Changed = true
	if r.Health != n.Health {
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
	}
	m.quarantine(n, r, now, &out)
	return out
}

// healthRank orders health values: none and OK 0, Warning 1, Critical 2.
func healthRank(h string) int {
	switch h {
	case protocol.HealthWarning:
		return 1
	case protocol.HealthCritical:
		return 2
	}
	return 0
}

// maxQuarantineSensors bounds the sensors a quarantine's reason names.
const maxQuarantineSensors = 3

// quarantine applies the quarantine policy to n after report r (newer
// than the last applied): an available node not in maintenance whose
// health is the policy's or worse goes into maintenance, its reason
// naming the sensors at that status (the worst first, at most 3) or the
// BMC's own health when no sensor says it. The node is quarantined once
// per episode: a report better than the policy's health ends it, so an
// operator's unset of maintenance holds until the trouble comes back.
func (m *Machine) quarantine(n *Node, r *protocol.HealthReport, now time.Time, out *Output) {
	if m.cfg.QuarantineOn == "" {
		return
	}
	limit := healthRank(m.cfg.QuarantineOn)
	if healthRank(r.Health) < limit {
		n.HealthQuarantined = false
		return
	}
	if n.HealthQuarantined || n.Maintenance || n.ProvisionState != Available || n.Op != nil {
		return
	}
	var named []string
	for rank := 2; rank >= limit && len(named) < maxQuarantineSensors; rank-- {
		for _, s := range r.Sensors {
			if healthRank(s.Status) != rank || len(named) >= maxQuarantineSensors {
				continue
			}
			d := fmt.Sprintf("%s %q %s", strings.ReplaceAll(s.Kind, "_", " "), s.Name, s.Status)
			if s.Reading != nil {
				d += fmt.Sprintf(" (reading %s%s)", strconv.FormatFloat(*s.Reading, 'f', -1, 64), unitText(s.Units))
			}
			named = append(named, d)
		}
	}
	what := "no sensor is past a threshold; the BMC's own health (a component, its event log) says so"
	if len(named) > 0 {
		what = strings.Join(named, ", ")
		if more := countAtLeast(r.Sensors, limit) - len(named); more > 0 {
			what += fmt.Sprintf(" and %d more", more)
		}
	}
	reason := BoundText(fmt.Sprintf("quarantined: health %s at the site's reading of %s: %s; see GET /v1/nodes/%s/sensors and /events, "+
		"then unset maintenance to hand the node out again (serve --quarantine-on %s)",
		r.Health, n.HealthReadAt.UTC().Format(time.RFC3339), what, n.UUID, strings.ToLower(m.cfg.QuarantineOn)), 0)
	n.Maintenance, n.MaintenanceReason, n.HealthQuarantined = true, reason, true
	n.UpdatedAt = now
	out.Changed = true
	out.History = append(out.History, HistoryEntry{Time: now, Severity: "ERROR", EventType: "maintenance", Event: "maintenance set: " + reason})
}

func countAtLeast(sensors []protocol.Sensor, rank int) int {
	c := 0
	for _, s := range sensors {
		if healthRank(s.Status) >= rank {
			c++
		}
	}
	return c
}

func unitText(u string) string {
	switch u {
	case "":
		return ""
	case "%", "Percent":
		return "%"
	}
	return " " + u
}
