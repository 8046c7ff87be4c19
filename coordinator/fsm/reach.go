package fsm

import "time"

// SiteReturned moves the deadline of a node whose site was unreachable
// from since until now, so that its timeout counts only the time the site
// was reachable: the silence of an unreachable site is not the node's.
//
// The deadline was last set to "then + timeout" (timeout is WaitTimeout
// in a WAIT state, CommandTimeout otherwise). Of that budget, the time
// from then until since was spent while the site was reachable; the rest
// is left from now on. So the deadline moves by the outage (now - since),
// but never past now + timeout: a deadline set during the outage gets a
// whole timeout from the site's return, not more. A deadline that had
// already passed before the outage began stays passed.
//
// A since of zero (the outage's start is not known: a site never seen,
// a database from before reachability was recorded) gives every node a
// whole timeout from now.
//
// An outstanding command that the receiver has not taken yet is sent
// again at once, and its message's deadline moves with the node's: the
// edge agent runs a BMC command only until the deadline the message
// carries, which the outage would otherwise have used up. The message is
// replaced, not changed in place, since a publisher may be encoding it.
//
// A stop_plan sent for the node (PlanStop) is sent again: one sent while
// the site could not hear may have been lost.
func (m *Machine) SiteReturned(n *Node, since, now time.Time) Output {
	var out Output
	if n.PlanStop != nil {
		m.sendPlanStop(n, now, &out)
	}
	if n.Op == nil {
		return out
	}
	if p := n.Pending; p != nil && !p.Accepted && !p.LastSent.IsZero() {
		p.LastSent = time.Time{}
		out.Changed = true
	}
	if n.Deadline.IsZero() {
		return out
	}
	timeout := m.commandSpan(n)
	if IsWait(n.ProvisionState) {
		timeout = m.cfg.WaitTimeout
	}
	whole := now.Add(timeout)
	var d time.Time
	switch {
	case since.IsZero():
		d = n.Deadline
		if d.Before(whole) {
			d = whole
		}
	case !now.After(since):
		return out
	default:
		d = n.Deadline.Add(now.Sub(since))
		if d.After(whole) {
			d = whole
		}
	}
	shift := d.Sub(n.Deadline)
	if shift <= 0 {
		return out
	}
	n.Deadline = d
	out.Changed = true
	if p := n.Pending; p != nil && !p.Accepted && p.Msg != nil && !p.Msg.Deadline.IsZero() {
		c := *p.Msg
		c.Deadline = c.Deadline.Add(shift)
		p.Msg = &c
	}
	return out
}

// ReachGrace bounds how long before a site's offline presence its outage
// is taken to have begun when nothing more recent was heard from it: an
// MQTT broker notices a dead connection within 1.5 keepalives (30 s for
// the edge agent's 20 s) and only then sends the site's last will.
const ReachGrace = time.Minute

// OutageStart is when a site became unreachable, given the last time
// anything was heard from it and when its offline presence arrived: the
// last message, but no earlier than ReachGrace before the presence (an
// idle site may have been reachable, and silent, long before its link
// went down).
func OutageStart(lastHeard, offlineAt time.Time) time.Time {
	earliest := offlineAt.Add(-ReachGrace)
	if lastHeard.After(offlineAt) {
		return offlineAt
	}
	if lastHeard.Before(earliest) {
		return earliest
	}
	return lastHeard
}
