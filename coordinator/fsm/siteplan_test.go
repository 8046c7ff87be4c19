package fsm

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/protocol"
)

// planWorld is a world whose site runs plans.
func planWorld(t *testing.T) *world {
	w := newWorld(t)
	w.m.cfg.SitePlans = func(site string) bool { return site == "s1" }
	w.m.cfg.ResendInterval = 10 * time.Second
	w.m.cfg.WaitTimeout, w.m.cfg.CommandTimeout = time.Hour, time.Hour
	return w
}

// sentActions counts the commands of each action the machine sent.
func (w *world) sentActions() map[string]int {
	out := map[string]int{}
	for _, o := range w.sent {
		out[o.Msg.Action]++
	}
	return out
}

func (w *world) historyOf(out ...Output) []string {
	var h []string
	for _, o := range out {
		for _, e := range o.History {
			h = append(h, e.Event)
		}
	}
	return h
}

// TestSitePlanCleanAndDeploy: with a site that runs plans, cleaning's
// in-band steps and deploy's steps (write_image in band, then the three
// out-of-band boot steps) each go to the site as one run_plan; no step is
// sent on its own; the steps' results, applied in order, end the
// operations as they would have (the same steps, in the same order, the
// same states).
func TestSitePlanCleanAndDeploy(t *testing.T) {
	w := planWorld(t)
	w.n.ProvisionState = Manageable
	w.verb(Provide, VerbRequest{})
	w.want(Available)
	if got := strings.Join(w.log, ","); got != "boot pxe,power rebooted,deploy.erase_devices_metadata,deploy.erase_devices,power power off" {
		t.Fatalf("provide ran %s", got)
	}
	if len(w.plans) != 1 || len(w.plans[0].Plan) != 2 {
		t.Fatalf("plans sent: %d, want one of the two clean steps", len(w.plans))
	}
	for _, c := range w.plans[0].Plan {
		if c.Action != protocol.ActionInbandRun || c.Token != "tok3" && c.Token == "" || c.SpanSeconds != 3600 || c.Seq == 0 {
			t.Fatalf("planned command %+v: want run_step with the boot's token, a span of the wait timeout and a Seq", c)
		}
	}
	if n := w.sentActions()[protocol.ActionInbandRun]; n != 0 {
		t.Fatalf("%d run_step commands sent on their own; the plan holds them", n)
	}

	w.n.InstanceInfo = map[string]any{"image_source": "http://x/img"}
	w.log, w.sent, w.plans = nil, nil, nil
	w.verb(Deploy, VerbRequest{})
	w.want(Active)
	if got := strings.Join(w.log, ","); got != "boot pxe,power rebooted,deploy.write_image,deploy.prepare_instance_boot,deploy.tear_down_agent,deploy.boot_instance" {
		t.Fatalf("deploy ran %s", got)
	}
	if len(w.plans) != 1 || len(w.plans[0].Plan) != 4 || w.plans[0].Plan[1].Action != protocol.ActionOOBStep || w.plans[0].Plan[1].Driver != "fake" {
		t.Fatalf("deploy plan: %+v", w.plans)
	}
	if n := w.sentActions()[protocol.ActionOOBStep]; n != 0 {
		t.Fatalf("%d oob_step commands sent on their own; the plan holds them", n)
	}
	// Seqs grow along the plan and beyond it.
	var seqs []uint64
	for _, c := range w.plans[0].Plan {
		seqs = append(seqs, c.Seq)
	}
	if !slices.IsSorted(seqs) || seqs[0] == seqs[3] || w.n.CmdSeq < seqs[3] {
		t.Fatalf("plan Seqs %v, node CmdSeq %d: want increasing, the node's at least the last", seqs, w.n.CmdSeq)
	}
}

// TestSitePlanResultsAheadOfTheMachine: the site ran every step before
// the machine heard of any (its link was down); the results come in any
// order, some twice: each is applied once, in the plan's order, with one
// history entry per step; a result with a wrong token is refused.
func TestSitePlanResultsAheadOfTheMachine(t *testing.T) {
	w := planWorld(t)
	w.n.ProvisionState = Manageable
	w.holdPlan = true
	w.verb(Provide, VerbRequest{})
	w.want(CleanWait)
	if len(w.plans) != 1 {
		t.Fatalf("%d plans", len(w.plans))
	}
	plan := w.plans[0].Plan
	tok := plan[0].Token
	res := func(c *protocol.Message, token string) *protocol.Message {
		return &protocol.Message{CommandID: c.ID, OK: true, Token: token, Data: map[string]any{"summary": "did " + c.Step.Step}}
	}
	var outs []Output
	if o := w.m.Result(w.n, res(plan[1], "stolen"), w.now); o.Reject == "" {
		t.Fatal("a planned step's result with a wrong token was not refused")
	}
	outs = append(outs, w.m.Result(w.n, res(plan[1], tok), w.now))
	outs = append(outs, w.m.Result(w.n, res(plan[1], tok), w.now)) // again
	w.want(CleanWait)
	if a := w.m.current(w.n); a.Step.Step != "erase_devices_metadata" {
		t.Fatalf("a later step's result moved the machine to %s", a.Step.Name())
	}
	first := w.m.Result(w.n, res(plan[0], tok), w.now)
	outs = append(outs, first)
	w.run(Output{Send: first.Send}) // the closing power-off
	w.want(Available)
	h := strings.Join(w.historyOf(outs...), "\n")
	for _, s := range []string{"deploy.erase_devices_metadata", "deploy.erase_devices"} {
		if n := strings.Count(h, "clean step "+s+" done: did"); n != 1 {
			t.Fatalf("%s done %d times in history, want once:\n%s", s, n, h)
		}
	}
	if strings.Index(h, "erase_devices_metadata done") > strings.Index(h, "erase_devices done") {
		t.Fatalf("steps applied out of order:\n%s", h)
	}
}

// TestSitePlanFailureAbortAndMaintenance: a failed step fails the
// operation as it would alone (clean failed, maintenance) and the site is
// told to stop; an abort during a step that cannot be aborted tells the
// site at once (it lets the step finish and starts no other) and fails
// the operation when the step's result comes; maintenance tells the site
// to finish the running step, holds its result, and when it ends the
// next step's command — held by the plan, not sent — goes to the site on
// the next resend, the same command.
func TestSitePlanFailureAbortAndMaintenance(t *testing.T) {
	w := planWorld(t)
	w.n.ProvisionState = Manageable
	w.failOn = "erase_devices_metadata"
	w.verb(Provide, VerbRequest{})
	w.want(CleanFailed)
	if !w.n.Maintenance || !strings.Contains(w.n.LastError, "deploy.erase_devices_metadata failed") {
		t.Fatalf("failure: maintenance %v, last_error %q", w.n.Maintenance, w.n.LastError)
	}
	if w.sentActions()[protocol.ActionPlanStop] != 1 {
		t.Fatalf("no stop_plan after the failure: %v", w.sentActions())
	}

	// Abort during write_image (not abortable).
	w = planWorld(t)
	w.n.ProvisionState = Available
	w.n.InstanceInfo = map[string]any{"image_source": "http://i"}
	w.holdPlan = true
	w.verb(Deploy, VerbRequest{})
	w.want(DeployWait)
	out, r := w.m.Verb(w.n, VerbRequest{Verb: Abort}, w.now)
	if r != nil {
		t.Fatal(r.Msg)
	}
	if len(out.Send) != 1 || out.Send[0].Msg.Action != protocol.ActionPlanStop || out.Send[0].Msg.Args["mode"] != protocol.PlanStopAbort ||
		out.Send[0].Msg.Args["plan_id"] != w.plans[0].ID {
		t.Fatalf("abort during a non-abortable planned step sent %+v; want stop_plan abort of the plan", out.Send)
	}
	w.want(DeployWait)
	plan := w.plans[0].Plan
	o := w.m.Result(w.n, &protocol.Message{CommandID: plan[0].ID, OK: true, Token: plan[0].Token}, w.now)
	w.want(DeployFailed)
	if !strings.Contains(w.n.LastError, "after step deploy.write_image") {
		t.Fatalf("abort-after: %q", w.n.LastError)
	}
	// The next step's result (the site had not heard yet) changes nothing.
	if o2 := w.m.Result(w.n, &protocol.Message{CommandID: plan[1].ID, OK: true}, w.now); o2.Changed {
		t.Fatal("a result after the abort changed the node")
	}
	_ = o

	// Maintenance mid-plan.
	w = planWorld(t)
	w.n.ProvisionState = Manageable
	w.holdPlan = true
	w.verb(Provide, VerbRequest{})
	plan = w.plans[0].Plan
	mo := w.m.SetMaintenance(w.n, true, "look", w.now)
	if len(mo.Send) != 1 || mo.Send[0].Msg.Action != protocol.ActionPlanStop || mo.Send[0].Msg.Args["mode"] != protocol.PlanStopFinish {
		t.Fatalf("maintenance sent %+v; want stop_plan finish", mo.Send)
	}
	w.m.Result(w.n, &protocol.Message{CommandID: plan[0].ID, OK: true, Token: plan[0].Token}, w.now)
	if w.n.Held == nil {
		t.Fatal("the running step's result was not held during maintenance")
	}
	off := w.m.SetMaintenance(w.n, false, "", w.now)
	if w.n.Pending == nil || w.n.Pending.ID != plan[1].ID || len(off.Send) != 0 {
		t.Fatalf("after maintenance: pending %+v, sent %d; want the plan's next command pending, not sent", w.n.Pending, len(off.Send))
	}
	tk := w.m.Tick(w.n, w.now.Add(11*time.Second), true)
	if len(tk.Send) != 1 || tk.Send[0].Msg.ID != plan[1].ID || tk.Send[0].Msg.Action != protocol.ActionInbandRun {
		t.Fatalf("the resend after maintenance sent %+v; want the plan's next command itself", tk.Send)
	}
	w.m.Result(w.n, &protocol.Message{CommandID: plan[1].ID, OK: true, Token: plan[1].Token}, w.now)
	w.run(Output{Send: []Outgoing{}})
	if a := w.m.current(w.n); a == nil || a.Kind == ActStep {
		t.Fatalf("after the last planned step the machine is at %+v", a)
	}
}

// TestSitePlanOnlyWhereTheSiteRunsThem: a site whose agent does not run
// plans gets each step alone, as before.
func TestSitePlanOnlyWhereTheSiteRunsThem(t *testing.T) {
	w := planWorld(t)
	w.n.Site = "s2"
	w.n.ProvisionState = Manageable
	w.verb(Provide, VerbRequest{})
	w.want(Available)
	if len(w.plans) != 0 || w.sentActions()[protocol.ActionInbandRun] != 2 {
		t.Fatalf("plans %d, run_step %d: want none and 2", len(w.plans), w.sentActions()[protocol.ActionInbandRun])
	}
	_ = fmt.Sprint()
}

// TestSitePlanStopSentAgainWhenTheSiteReturns: a stop_plan sent while
// the site may not hear (an abort during an outage) goes again each time
// the site returns, until the node's next plan.
func TestSitePlanStopSentAgainWhenTheSiteReturns(t *testing.T) {
	w := planWorld(t)
	w.n.ProvisionState = Manageable
	w.holdPlan = true
	w.verb(Provide, VerbRequest{})
	plan := w.plans[0]
	if _, r := w.m.Verb(w.n, VerbRequest{Verb: Abort}, w.now); r != nil {
		t.Fatal(r.Msg)
	}
	w.want(CleanFailed)
	stops := func(o Output) int {
		n := 0
		for _, s := range o.Send {
			if s.Msg.Action == protocol.ActionPlanStop && s.Msg.Args["plan_id"] == plan.ID && s.Msg.Args["mode"] == protocol.PlanStopAbort {
				n++
			}
		}
		return n
	}
	for i := range 2 {
		if n := stops(w.m.SiteReturned(w.n, w.now.Add(-time.Minute), w.now)); n != 1 {
			t.Fatalf("site return %d: %d stop_plan sent, want 1", i+1, n)
		}
	}
	// The next plan ends it.
	w.holdPlan = false
	w.n.Maintenance = false
	w.verb(Manage, VerbRequest{})
	w.verb(Provide, VerbRequest{})
	w.want(Available)
	if n := stops(w.m.SiteReturned(w.n, w.now.Add(-time.Minute), w.now)); n != 0 {
		t.Fatalf("after the next plan the old stop_plan is still sent (%d)", n)
	}
}

// TestSitePlanSentAgainWithItsStep: a run_plan can be lost on its way
// (an edge agent killed before it kept it); the resend of its current
// step, at the resend interval or when the site returns, carries a copy
// of the plan from that step on, with the plan's id and each step's id
// and Seq, so the site runs the rest of it instead of each later step
// waiting for a resend of its own. A plan told to stop is not sent
// again.
func TestSitePlanSentAgainWithItsStep(t *testing.T) {
	w := planWorld(t)
	w.n.ProvisionState = Available
	w.n.InstanceInfo = map[string]any{"image_source": "http://i"}
	w.holdPlan = true
	w.verb(Deploy, VerbRequest{})
	w.want(DeployWait)
	plan := w.plans[0]
	if len(plan.Plan) != 4 {
		t.Fatalf("deploy plan of %d steps, want 4", len(plan.Plan))
	}
	check := func(what string, o Output, from int) {
		t.Helper()
		var copies, steps int
		for _, s := range o.Send {
			switch {
			case s.Msg.Action == protocol.ActionPlanRun:
				copies++
				if s.Msg.ID != plan.ID || len(s.Msg.Plan) != len(plan.Plan)-from {
					t.Fatalf("%s: run_plan %s of %d steps, want the plan %s from step %d (%d steps)", what, s.Msg.ID, len(s.Msg.Plan), plan.ID, from, len(plan.Plan)-from)
				}
				for i, c := range s.Msg.Plan {
					want := plan.Plan[from+i]
					if c.ID != want.ID || c.Seq != want.Seq || c.Action != want.Action || c.Step.Step != want.Step.Step {
						t.Fatalf("%s: step %d of the copy is %s/%d %s, want %s/%d %s", what, i, c.ID, c.Seq, c.Step.Step, want.ID, want.Seq, want.Step.Step)
					}
				}
				if err := s.Msg.Validate(); err != nil {
					t.Fatalf("%s: the copy does not validate: %v", what, err)
				}
			case s.Msg.ID == plan.Plan[from].ID:
				steps++
			}
		}
		if copies != 1 || steps != 1 {
			t.Fatalf("%s sent %d copies of the plan and %d of its step %d; want 1 and 1", what, copies, steps, from)
		}
	}
	check("the resend of write_image", w.m.Tick(w.n, w.now.Add(11*time.Second), true), 0)

	// write_image done: the plan's out-of-band prepare_instance_boot is
	// pending, not sent; the site came back from an outage.
	w.m.Result(w.n, &protocol.Message{CommandID: plan.Plan[0].ID, OK: true, Token: plan.Plan[0].Token}, w.now)
	if w.n.Pending == nil || w.n.Pending.ID != plan.Plan[1].ID {
		t.Fatalf("pending %+v, want the plan's second step", w.n.Pending)
	}
	w.m.SiteReturned(w.n, w.now.Add(-time.Minute), w.now)
	check("the resend after the site returned", w.m.Tick(w.n, w.now.Add(time.Second), true), 1)

	// Told to stop (maintenance in deploy wait): its step goes alone.
	w = planWorld(t)
	w.n.ProvisionState = Available
	w.n.InstanceInfo = map[string]any{"image_source": "http://i"}
	w.holdPlan = true
	w.verb(Deploy, VerbRequest{})
	w.want(DeployWait)
	plan = w.plans[0]
	w.m.SetMaintenance(w.n, true, "look", w.now)
	w.m.SetMaintenance(w.n, false, "", w.now)
	tk := w.m.Tick(w.n, w.now.Add(time.Second), true)
	if len(tk.Send) != 1 || tk.Send[0].Msg.ID != plan.Plan[0].ID {
		t.Fatalf("the resend of a stopped plan's step sent %d messages (first %s); want the step %s alone", len(tk.Send), tk.Send[0].Msg.Action, plan.Plan[0].ID)
	}
}

// TestBootAgainBeforeAnyStep: the power action that boots the ramdisk
// ran twice (an edge agent restarted before it kept the action's result,
// and runs it again when the coordinator resends it): a second boot says
// hello before any step ran in the first. It replaces the first boot
// (new token, the old one refused) instead of failing the operation,
// which then goes on in the new boot.
func TestBootAgainBeforeAnyStep(t *testing.T) {
	w := newWorld(t)
	w.n.ProvisionState = Manageable
	out, r := w.m.Verb(w.n, VerbRequest{Verb: Provide}, w.now)
	if r != nil {
		t.Fatal(r.Msg)
	}
	// The boot's power command is outstanding; its result is not back.
	if w.n.Pending == nil || w.n.Pending.Msg.Action != protocol.ActionPower || len(out.Send) == 0 {
		t.Fatalf("want the boot's power command outstanding, got %+v", w.n.Pending)
	}
	power := w.n.Pending
	w.m.Hello(w.n, &protocol.Message{BootID: "b1", CleanSteps: []protocol.Step{{Interface: "deploy", Step: "erase_devices_metadata", Priority: 99}, {Interface: "deploy", Step: "erase_devices", Priority: 10}}}, w.now)
	t1 := w.n.AgentToken
	h := w.m.Hello(w.n, &protocol.Message{BootID: "b2", CleanSteps: []protocol.Step{{Interface: "deploy", Step: "erase_devices_metadata", Priority: 99}, {Interface: "deploy", Step: "erase_devices", Priority: 10}}}, w.now)
	if w.n.ProvisionState == CleanFailed || w.n.BootID != "b2" || w.n.AgentToken == t1 || w.n.AgentToken == "" || len(h.Send) != 1 || h.Send[0].Msg.Token != w.n.AgentToken {
		t.Fatalf("second boot before any step: state %q boot %q token changed %v, sent %d; want it to replace the first", w.n.ProvisionState, w.n.BootID, w.n.AgentToken != t1, len(h.Send))
	}
	if o := w.m.Heartbeat(w.n, &protocol.Message{Token: t1}, w.now); o.Reject == "" {
		t.Fatal("the replaced boot's token still works")
	}
	w.run(Output{Send: []Outgoing{}})
	res := w.m.Result(w.n, &protocol.Message{CommandID: power.ID, OK: true}, w.now)
	w.run(res)
	w.want(Available)
	if strings.Contains(w.n.LastError, "restarted") {
		t.Fatalf("last_error %q", w.n.LastError)
	}
}
