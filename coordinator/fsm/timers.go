package fsm

import (
	"fmt"
	"time"

	"github.com/bmedge/bmedge/protocol"
)

// This file holds what the clock and the operator's pauses drive: resends
// and timeouts, a site's return, maintenance, and recovery at start.

// Tick resends unanswered commands and fails what has timed out. A node
// in maintenance is paused in a WAIT state (elsewhere its out-of-band
// work goes on); a site that is offline does not time out its nodes for
// silence the coordinator cannot hear.
func (m *Machine) Tick(n *Node, now time.Time, siteOnline bool) Output {
	var out Output
	if n.Op == nil {
		return m.fastTrackExpire(n, now, siteOnline)
	}
	if n.Maintenance && IsWait(n.ProvisionState) {
		return out
	}
	a := m.current(n)
	expired := !n.Deadline.IsZero() && now.After(n.Deadline) && siteOnline &&
		(IsWait(n.ProvisionState) || (n.Pending != nil && a != nil))
	// A command is not sent again by the tick that fails its node: the
	// site would run it for an operation that has ended.
	if p := n.Pending; p != nil && !p.Accepted && now.Sub(p.LastSent) >= m.cfg.ResendInterval && siteOnline && !expired {
		p.LastSent = now
		p.Attempts++
		m.resendPlan(n, now, &out)
		out.Send = append(out.Send, Outgoing{Topic: p.Topic, Msg: p.Msg})
		out.Changed = true
	}
	if !expired {
		return out
	}
	switch {
	case IsWait(n.ProvisionState) && a != nil && a.Kind == ActStep:
		m.fail(n, now, &out, fmt.Sprintf("Timeout reached while waiting for the ramdisk of node %s in state %q: no heartbeat for %s during %s",
			n.Ident(), n.ProvisionState, m.cfg.WaitTimeout, describe(n, a)))
	case IsWait(n.ProvisionState):
		m.fail(n, now, &out, fmt.Sprintf("Timeout reached while waiting for the ramdisk of node %s to boot in state %q (%s); check that it network-boots",
			n.Ident(), n.ProvisionState, m.cfg.WaitTimeout))
	case n.Pending != nil && a != nil:
		m.fail(n, now, &out, fmt.Sprintf("%s on node %s got no result from the edge agent of site %s within %s",
			describe(n, a), n.Ident(), n.Site, m.commandSpan(n)))
	}
	return out
}

// SetMaintenance pauses or resumes a node.
func (m *Machine) SetMaintenance(n *Node, on bool, reason string, now time.Time) Output {
	var out Output
	out.Changed = true
	n.UpdatedAt = now
	if on {
		n.Maintenance, n.MaintenanceReason = true, reason
		out.History = append(out.History, HistoryEntry{Time: now, Severity: "INFO", EventType: "maintenance", Event: "maintenance set: " + reason})
		// As Ironic ignores heartbeats in maintenance, no next step
		// starts: the site lets the running one finish and stops. The
		// plan stays, so that the results of steps the site ran before it
		// heard are still applied in order.
		if IsWait(n.ProvisionState) {
			m.stopSitePlan(n, n.Op, protocol.PlanStopFinish, now, &out)
		}
		return out
	}
	n.Maintenance, n.MaintenanceReason, n.Fault = false, "", ""
	out.History = append(out.History, HistoryEntry{Time: now, Severity: "INFO", EventType: "maintenance", Event: "maintenance unset"})
	if n.Op == nil {
		return out
	}
	if IsWait(n.ProvisionState) {
		n.Deadline = now.Add(m.cfg.WaitTimeout)
	}
	if n.Pending != nil && !n.Pending.Accepted {
		n.Pending.LastSent = time.Time{}
	}
	if h := n.Held; h != nil {
		n.Held = nil
		m.applyResult(n, h, now, &out)
		return out
	}
	if a := m.current(n); a != nil && a.Kind == ActAwaitAgent && n.AgentToken != "" {
		n.Op.Index++
		m.advance(n, now, &out)
	}
	return out
}

// Recover is run once per node when the coordinator starts: outstanding
// commands are sent again at once (steps are idempotent; receivers
// deduplicate by id), WAIT states keep their stored deadlines, and a node
// caught in an -ING state with nothing outstanding fails with a reason.
func (m *Machine) Recover(n *Node, now time.Time) Output {
	var out Output
	if n.Op == nil {
		if n.Reservation != "" {
			n.Reservation = ""
			out.Changed = true
		}
		return out
	}
	if n.Pending != nil {
		n.Pending.LastSent = time.Time{}
		if !IsWait(n.ProvisionState) {
			n.Reservation = m.cfg.Holder
		}
		out.Changed = true
		out.History = append(out.History, HistoryEntry{Time: now, Severity: "INFO", EventType: "recovery",
			Event: fmt.Sprintf("coordinator restarted; re-sending %s", describe(n, m.current(n)))})
		return out
	}
	if IsWait(n.ProvisionState) || IsHold(n.ProvisionState) {
		// A held node waits for the operator, restart or not.
		return out
	}
	m.fail(n, now, &out, fmt.Sprintf("coordinator restarted while node %s was in state %q with nothing outstanding; retry the operation", n.Ident(), n.ProvisionState))
	return out
}
