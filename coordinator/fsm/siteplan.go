package fsm

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/bmedge/bmedge/protocol"
)

// This file holds plans at the edge: the rest of a clean, deploy or
// service phase handed to the site's edge agent as one run_plan command,
// so that the site goes from step to step without waiting for the
// coordinator (its link may be down, and each step would cost a round
// trip). The machine stays the authority and nothing else changes: the
// plan holds each step's command exactly as it would be sent alone (its
// id and Seq fixed in advance); when the plan reaches a step the command
// becomes pending without being sent, its result is applied as it would
// have been, in order, with the same history, clean_step/deploy_step,
// last_error and failure rules; resends of a pending command are the same
// command, which the site answers once. A result that arrives before its
// step is pending (the site ran ahead) waits in the plan until it is.
// Failure, abort and maintenance tell the site to stop (stop_plan).

// SitePlan is the plan handed to the site, on the operation.
type SitePlan struct {
	ID string `json:"id"`
	// First is the index in Operation.Plan of the plan's first step; the
	// steps follow it, one command each.
	First int          `json:"first"`
	Cmds  []PlannedCmd `json:"cmds"`
	// Early are results of the plan's steps that arrived before their
	// command was pending, by command id (at most one per step).
	Early map[string]*protocol.Message `json:"early,omitempty"`
}

// PlannedCmd is the id and Seq of a step's command in a site plan.
type PlannedCmd struct {
	ID  string `json:"id"`
	Seq uint64 `json:"seq"`
}

// index is the Operation.Plan index of the plan's command id, -1 if none.
func (sp *SitePlan) index(id string) int {
	if sp == nil {
		return -1
	}
	for j, c := range sp.Cmds {
		if c.ID == id {
			return sp.First + j
		}
	}
	return -1
}

// Holds tells whether command id is one of the plan's steps.
func (sp *SitePlan) Holds(id string) bool { return sp.index(id) >= 0 }

// sendSitePlan hands the site the steps from the current action on, up
// to the first action that is not a step (a power action, the ramdisk's
// boot) or a hold step, as one run_plan command, when the site's edge
// agent runs plans, the node's ramdisk is up and the run has at least
// two steps, one of them in band. It tells whether it sent one.
func (m *Machine) sendSitePlan(n *Node, now time.Time, out *Output) bool {
	op := n.Op
	if m.cfg.SitePlans == nil || op == nil || !op.Phase.Info().SitePlan || n.AgentToken == "" || n.Maintenance || op.AbortAfter ||
		!m.cfg.SitePlans(n.Site) {
		return false
	}
	plan, seq, inband := m.planMessage(n, op.Index, nil, now)
	cmds := plan.Plan
	if len(cmds) < 2 || !inband {
		return false
	}
	if err := plan.Validate(); err != nil {
		return false
	}
	if b, err := json.Marshal(plan); err != nil || len(b) > protocol.MaxMessageBytes*3/4 {
		return false // too large to go in one message: step by step
	}
	n.CmdSeq = seq
	sp := &SitePlan{ID: plan.ID, First: op.Index}
	for _, c := range cmds {
		sp.Cmds = append(sp.Cmds, PlannedCmd{ID: c.ID, Seq: c.Seq})
	}
	op.SitePlan = sp
	n.PlanStop = nil
	out.Send = append(out.Send, Outgoing{Topic: protocol.NodeCmdTopic(n.Site, n.UUID), Msg: plan}) // stamped above, before it was measured
	out.Changed = true
	out.History = append(out.History, HistoryEntry{Time: now, Severity: "INFO", EventType: eventType(op),
		Event: fmt.Sprintf("the next %d %s steps handed to the edge agent of site %s as one plan: the site runs them in turn, their results are applied here in order",
			len(cmds), op.Phase, n.Site)})
	return true
}

// planMessage is the run_plan of the steps from op.Plan[first] on, up
// to the first action that is not a step or a hold step, stamped as each
// step will be when it is reached (pendPlanned). With fixed nil each
// step gets a new id and Seq (a new plan, its id new too); else the
// steps are those of fixed, in order, with their ids and Seqs, and the
// plan keeps the site plan's id (a copy, resendPlan). It returns the
// last Seq used and whether a step runs in band.
func (m *Machine) planMessage(n *Node, first int, fixed []PlannedCmd, now time.Time) (plan *protocol.Message, seq uint64, inband bool) {
	op := n.Op
	var cmds []*protocol.Message
	seq = n.CmdSeq
	var total time.Duration
	for i := first; i < len(op.Plan) && len(cmds) < protocol.MaxPlanSteps; i++ {
		if fixed != nil && len(cmds) == len(fixed) {
			break
		}
		a := &op.Plan[i]
		if a.Kind != ActStep || a.Step == nil || a.Step.Step == HoldStep {
			break
		}
		c, err := m.stepCommand(n, a.Step)
		if err != nil {
			break // it fails when it is reached, as it would alone
		}
		msg, span := c.msg, m.span(c.inBand, c.steps)
		id := ""
		if fixed != nil {
			id, seq = fixed[len(cmds)].ID, fixed[len(cmds)].Seq
		} else {
			id, seq = m.cfg.NewID(), nextSeq(seq, now)
		}
		stamp(n, msg, id, seq, span, now)
		msg.SpanSeconds = int64((span + time.Second - 1) / time.Second)
		total += span
		inband = inband || a.Step.InBand
		cmds = append(cmds, msg)
	}
	id := m.cfg.NewID()
	if fixed != nil {
		id = op.SitePlan.ID
	}
	plan = &protocol.Message{Action: protocol.ActionPlanRun, Plan: cmds}
	stamp(n, plan, id, 0, total, now)
	return plan, seq, inband
}

// resendPlan sends the site plan again, from the node's current step
// on, when that step's command is resent (no result came within the
// resend interval, or the site came back): a run_plan lost on its way
// (an edge agent killed before it kept it) would otherwise leave every
// later step of the plan to wait for a resend interval of its own. The
// copy has the plan's id and its steps their ids and Seqs, so an agent
// that holds the plan, or ended it, ignores the copy, and one that lost
// it runs the rest of it, its current step answered once.
func (m *Machine) resendPlan(n *Node, now time.Time, out *Output) {
	op := n.Op
	if op == nil || op.SitePlan == nil || n.Pending == nil || !op.SitePlan.Holds(n.Pending.ID) ||
		(n.PlanStop != nil && n.PlanStop.ID == op.SitePlan.ID) {
		return // no plan, or one told to stop: the step goes alone
	}
	sp := op.SitePlan
	j := op.Index - sp.First
	if j < 0 || j >= len(sp.Cmds) || sp.Cmds[j].ID != n.Pending.ID {
		return
	}
	plan, _, _ := m.planMessage(n, op.Index, sp.Cmds[j:], now)
	if len(plan.Plan) == 0 || plan.Validate() != nil {
		return
	}
	out.Send = append(out.Send, Outgoing{Topic: protocol.NodeCmdTopic(n.Site, n.UUID), Msg: plan})
}

// pendPlanned makes the current step's command pending, without sending
// it, when the site plan holds it; a result that came early is applied at
// once. It tells whether the step was the plan's.
func (m *Machine) pendPlanned(n *Node, s *StepRun, now time.Time, out *Output) bool {
	sp := n.Op.SitePlan
	if sp == nil {
		return false
	}
	j := n.Op.Index - sp.First
	if j < 0 || j >= len(sp.Cmds) {
		return false
	}
	c, err := m.stepCommand(n, s)
	if err != nil {
		return false // sent alone, it fails as it would have
	}
	c.planned = &sp.Cmds[j]
	out.Changed = true
	if !s.InBand {
		m.ensureWorking(n, now, out)
	}
	msg := m.issue(n, c, now, out)
	if s.InBand {
		m.enterWait(n, now, out)
	}
	if e := sp.Early[msg.ID]; e != nil {
		delete(sp.Early, msg.ID)
		m.takeResult(n, e, now, out)
	}
	return true
}

// keepEarly keeps the result of a later step of the site plan, which the
// site ran before the machine got there; true if it was one.
func (m *Machine) keepEarly(n *Node, msg *protocol.Message, out *Output) bool {
	if n.Op == nil {
		return false
	}
	sp := n.Op.SitePlan
	i := sp.index(msg.CommandID)
	if i <= n.Op.Index {
		return false
	}
	if a := n.Op.Plan[i]; a.Kind == ActStep && a.Step.InBand && (n.AgentToken == "" || msg.Token != n.AgentToken) {
		out.Reject = fmt.Sprintf("node %s: result of planned step %s with a wrong or stale agent token refused", n.Ident(), msg.CommandID)
		return true
	}
	if sp.Early == nil {
		sp.Early = map[string]*protocol.Message{}
	}
	if _, dup := sp.Early[msg.CommandID]; !dup {
		sp.Early[msg.CommandID] = msg
		out.Changed = true
	}
	return true
}

// PlanStop is a stop_plan the node's site must get.
type PlanStop struct {
	ID   string `json:"id"`
	Mode string `json:"mode"`
}

// stopSitePlan tells the site to stop the operation's plan, if it has one:
// mode protocol.PlanStopAbort or PlanStopFinish. The stop is kept on the
// node and sent again when the site returns from being unreachable.
func (m *Machine) stopSitePlan(n *Node, op *Operation, mode string, now time.Time, out *Output) {
	if op == nil || op.SitePlan == nil {
		return
	}
	n.PlanStop = &PlanStop{ID: op.SitePlan.ID, Mode: mode}
	out.Changed = true
	m.sendPlanStop(n, now, out)
}

func (m *Machine) sendPlanStop(n *Node, now time.Time, out *Output) {
	m.notice(n, protocol.NodeCmdTopic(n.Site, n.UUID), &protocol.Message{Action: protocol.ActionPlanStop,
		Args: protocol.PlanStopArgs{PlanID: n.PlanStop.ID, Mode: n.PlanStop.Mode}.Args()}, now, out)
}
