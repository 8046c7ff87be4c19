package agent

import (
	"context"
	"sync"
	"time"

	"github.com/bmedge/bmedge/agent/outbox"
	"github.com/bmedge/bmedge/agent/plan"
	"github.com/bmedge/bmedge/protocol"
)

// The plan runner (agent/plan) wired to the agent's parts: in-band steps
// go to the ramdisk through the relay, as the coordinator's commands do;
// out-of-band steps through the one exactly-once BMC runner (runOnce);
// the relay and the BMC runner tell it each result they keep.

// DefaultPlanSilenceBound is the agent command's default of
// Config.PlanSilenceBound.
const DefaultPlanSilenceBound = 24 * time.Hour

// heardAt is when the agent last heard from the coordinator.
type heardAt struct {
	mu sync.Mutex
	at time.Time
}

// newPlans builds the plan runner; Run restores its plans.
func (a *Agent) newPlans() *plan.Runner {
	a.heard.at = a.cfg.Clock.Now()
	return plan.New(plan.Config{Site: a.cfg.Site, Log: a.log, Clock: a.cfg.Clock, Store: planStore{a.ob},
		Resend: a.cfg.ResendInterval, SilenceBound: a.cfg.PlanSilenceBound, Max: max(plan.DefaultMax, a.cfg.Sim.Nodes),
		Deliver: a.relay.FromCoordinator,
		RunOOB:  a.runPlanOOB,
		Kept:    a.keptResult,
		Heard:   a.heardFrom,
		Started: func(where string) { a.metrics.planSteps.WithLabelValues(where).Inc() },
		Refused: a.refuseCommand,
		NewID:   outbox.NewID})
}

// planStore is the outbox's store once Load gave it one.
type planStore struct{ ob *outbox.Outbox }

func (s planStore) PutPlan(node string, b []byte) { s.ob.Store().PutPlan(node, b) }

func (s planStore) LoadPlans() (map[string][]byte, error) {
	st := s.ob.Store()
	if st == nil {
		return nil, nil
	}
	return st.LoadPlans()
}

// startPlans goes on with the plans kept in the state folder and runs
// the runner's ticks until ctx ends.
func (a *Agent) startPlans(ctx context.Context) error {
	if err := a.plans.Restore(); err != nil {
		return err
	}
	go func() {
		tk := a.cfg.Clock.NewTicker(a.cfg.ResendInterval)
		defer tk.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tk.C():
			}
			a.heardFrom()
			a.plans.Tick()
		}
	}()
	return nil
}

// planCommand takes a run_plan or stop_plan on node's cmd topic.
func (a *Agent) planCommand(node string, m *protocol.Message) {
	if m.Action == protocol.ActionPlanStop {
		a.plans.Stop(node, m)
		return
	}
	if !a.relays() {
		a.plans.Refuse(node, m.ID, "this edge agent does not relay its site's ramdisks (no site broker), so it cannot hand them steps; the coordinator sends each step itself")
		return
	}
	a.plans.Run(node, m)
}

// heardFrom is when the agent last heard from the coordinator: now
// while its link is up.
func (a *Agent) heardFrom() time.Time {
	now := a.cfg.Clock.Now()
	up := false
	select {
	case <-a.ready:
		up = a.link.Up()
	default:
	}
	a.heard.mu.Lock()
	defer a.heard.mu.Unlock()
	if up {
		a.heard.at = now
	}
	return a.heard.at
}

// markHeard notes a message from the coordinator.
func (a *Agent) markHeard() {
	now := a.cfg.Clock.Now()
	a.heard.mu.Lock()
	a.heard.at = now
	a.heard.mu.Unlock()
}

// runPlanOOB runs a plan's out-of-band step as the coordinator's copy
// of it would run.
func (a *Agent) runPlanOOB(m *protocol.Message) plan.Outcome {
	switch a.runOnce(m) {
	case outbox.Running:
		return plan.OOBRunning
	case outbox.Stale, outbox.Unsequenced:
		return plan.OOBStale
	case outbox.Full:
		return plan.OOBRetry
	}
	return plan.OOBDone
}

// tellPlan tells the plan runner what the outbox keeps of the result of
// node's out-of-band command cmd.
func (a *Agent) tellPlan(node, cmd string) {
	switch a.keptResult(cmd) {
	case plan.KeptOK:
		a.plans.Result(node, cmd, true)
	case plan.KeptFailed:
		a.plans.Result(node, cmd, false)
	case plan.KeptUnread:
		a.plans.Unread(node, cmd)
	}
}

// keptResult is what the outbox's done-record of command cmd says.
func (a *Agent) keptResult(cmd string) plan.Kept {
	var payload []byte
	found := false
	a.ob.Inspect(func(s *outbox.State) {
		var d outbox.Done
		if d, found = s.Done[cmd]; found {
			payload = d.Payload
		}
	})
	switch {
	case !found:
		return plan.KeptNone
	case payload == nil:
		return plan.KeptUnread
	}
	res, err := protocol.Decode(payload)
	switch {
	case err != nil:
		return plan.KeptUnread
	case res.OK:
		return plan.KeptOK
	}
	return plan.KeptFailed
}
