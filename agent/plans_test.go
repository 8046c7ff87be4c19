package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent/outbox"
	"github.com/bmedge/bmedge/agent/plan"
	"github.com/bmedge/bmedge/lib/clock"
	"github.com/bmedge/bmedge/lib/mqttbroker"
	"github.com/bmedge/bmedge/lib/waitfor"
	"github.com/bmedge/bmedge/protocol"
	dto "github.com/prometheus/client_model/go"
)

// planSite is an agent of site s1 with simulated nodes, its outbox in a
// state folder, linked to a broker of its own on 127.0.0.1 that records
// what reaches bmc/evt (the coordinator's side; nothing acknowledges).
// The test hands the agent the coordinator's commands through its
// handler, as its link does.
type planSite struct {
	t   *testing.T
	a   *Agent
	b   *mqttbroker.Broker
	rec *evtRecorder
	// cut closes the broker (once); stop stops the agent (once).
	cut, stop func() error
}

func newPlanSite(t *testing.T, sim SimOptions) *planSite {
	t.Helper()
	return newPlanSiteIn(t, sim, t.TempDir(), nil)
}

// newPlanSiteIn is newPlanSite with the state folder dir and the clock
// clk (nil: the system's).
func newPlanSiteIn(t *testing.T, sim SimOptions, dir string, clk clock.Clock) *planSite {
	t.Helper()
	rec := &evtRecorder{}
	b, err := mqttbroker.Start(mqttbroker.Config{Addr: "127.0.0.1:0"}, openCreds{}, slog.New(slog.DiscardHandler),
		map[string]mqttbroker.Handler{protocol.BMCEvtTopic("s1"): rec.handle})
	if err != nil {
		t.Fatal(err)
	}
	a := New(Config{Site: "s1", BrokerURL: "mqtt://" + b.Addr, Username: "site:s1", Password: "x", Log: slog.New(slog.DiscardHandler),
		HeartbeatSummary: time.Hour, StateDir: dir, ResendInterval: time.Second, PlanSilenceBound: DefaultPlanSilenceBound, Sim: sim, Clock: clk})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = a.Run(ctx); close(done) }()
	var once sync.Once
	var cerr error
	cut := func() error { once.Do(func() { cerr = b.Close() }); return cerr }
	stop := func() error { cancel(); <-done; return nil }
	t.Cleanup(func() {
		_ = stop()
		_ = cut()
	})
	actx, acancel := context.WithTimeout(ctx, 10*time.Second)
	defer acancel()
	if err := a.AwaitUp(actx); err != nil {
		t.Fatal(err)
	}
	return &planSite{t: t, a: a, b: b, rec: rec, cut: cut, stop: stop}
}

// send hands the agent a message of the coordinator on topic.
func (s *planSite) send(topic string, m *protocol.Message) {
	s.t.Helper()
	m.V, m.Site, m.Sent = protocol.Version, "s1", time.Now()
	if m.Kind == protocol.KindCommand && m.Deadline.IsZero() {
		m.Deadline = time.Now().Add(time.Minute)
	}
	b, err := protocol.Encode(m)
	if err != nil {
		s.t.Fatal(err)
	}
	s.a.handle(topic, b)
}

// await waits until cond holds (polling), or fails saying what.
func await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !waitfor.Until(20*time.Second, cond) {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// sawFrom tells whether the coordinator's broker got a message of kind
// from node (a result: of command cmd).
func (s *planSite) sawFrom(kind, node, cmd string) bool {
	s.rec.mu.Lock()
	defer s.rec.mu.Unlock()
	for _, m := range s.rec.msgs {
		if m.Kind == kind && m.Node == node && (cmd == "" || m.CommandID == cmd) {
			return true
		}
	}
	return false
}

// boot powers node on from the network and welcomes its simulated
// ramdisk with token tok.
func (s *planSite) boot(node string, seq uint64) {
	s.t.Helper()
	s.send(protocol.BMCCmdTopic("s1"), &protocol.Message{Kind: protocol.KindCommand, ID: "power-" + node, Node: node, Seq: seq, Action: protocol.ActionPower,
		Driver: "fake", Args: map[string]any{"state": protocol.PowerOn, protocol.ArgBootDevice: protocol.BootPXE}})
	await(s.t, "the simulated ramdisk's hello", func() bool { return s.sawFrom(protocol.KindHello, node, "") })
	s.send(protocol.NodeCmdTopic("s1", node), &protocol.Message{Kind: protocol.KindWelcome, ID: "welcome-" + node, Node: node, Token: "tok"})
}

func inband(node, id string, seq uint64) *protocol.Message {
	return &protocol.Message{V: protocol.Version, Kind: protocol.KindCommand, ID: id, Site: "s1", Node: node, Seq: seq, Sent: time.Now(),
		Deadline: time.Now().Add(time.Minute), Action: protocol.ActionInbandRun, Token: "tok", SpanSeconds: 600,
		Step: &protocol.Step{Interface: "deploy", Step: "erase_devices_metadata"}}
}

// results are the command ids of the results in the outbox, in its order.
func (s *planSite) results(node string) []string {
	var out []string
	for _, it := range s.a.ob.Ordered() {
		m, err := protocol.Decode(it.Payload)
		if err == nil && m.Kind == protocol.KindResult && m.Node == node {
			out = append(out, m.CommandID)
		}
	}
	return out
}

// TestPlanRunsWithoutCoordinator: a run_plan of three in-band steps for
// a simulated node runs all three, in order, although the link to the
// coordinator is cut after the first result (and nothing ever
// acknowledges one): each result is in the outbox once, in order. A
// copy of a step's command the coordinator sends itself afterwards is
// answered once (its kept result, not a second run), and the metrics
// count the plan's steps.
func TestPlanRunsWithoutCoordinator(t *testing.T) {
	s := newPlanSite(t, SimOptions{Nodes: 1, StepDuration: 200 * time.Millisecond, Heartbeat: 50 * time.Millisecond})
	s.boot("n1", 1)
	s.send(protocol.NodeCmdTopic("s1", "n1"), &protocol.Message{Kind: protocol.KindCommand, ID: "plan-1", Node: "n1", Action: protocol.ActionPlanRun,
		Plan: []*protocol.Message{inband("n1", "c1", 2), inband("n1", "c2", 3), inband("n1", "c3", 4)}})
	await(t, "the first step's result at the coordinator", func() bool { return s.sawFrom(protocol.KindResult, "n1", "c1") })
	if err := s.cut(); err != nil {
		t.Fatal(err)
	}
	await(t, "the link going down", func() bool { return !s.a.link.Up() })
	await(t, "the plan's end", func() bool { return s.a.plans.Len() == 0 })
	if got := fmt.Sprint(s.results("n1")); got != "[power-n1 c1 c2 c3]" {
		t.Fatalf("results in the outbox: %s, want [c1 c2 c3], each once, in order", got)
	}
	if s.sawFrom(protocol.KindResult, "n1", "c2") {
		t.Fatal("the second step's result reached the coordinator over a cut link")
	}

	// The coordinator's own copy of c2 (its resend): the ramdisk answers
	// with its kept result, which the outbox holds already.
	before := s.a.ob.Len()
	s.send(protocol.NodeCmdTopic("s1", "n1"), inband("n1", "c2", 3))
	var idC2 string
	for _, it := range s.a.ob.Ordered() {
		if m, _ := protocol.Decode(it.Payload); m != nil && m.CommandID == "c2" {
			idC2 = m.ID
		}
	}
	// Longer than a step: a second run would have ended, and its result
	// shown.
	waitfor.Until(300*time.Millisecond, func() bool { return s.a.ob.Len() != before })
	if got := fmt.Sprint(s.results("n1")); got != "[power-n1 c1 c2 c3]" || s.a.ob.Len() != before {
		t.Fatalf("after the coordinator's copy of c2: results %s, outbox %d (was %d); want it answered once", got, s.a.ob.Len(), before)
	}
	for _, it := range s.a.ob.Ordered() {
		if m, _ := protocol.Decode(it.Payload); m != nil && m.CommandID == "c2" && m.ID != idC2 {
			t.Fatal("the coordinator's copy of c2 ran again: a new result")
		}
	}
	var steps dto.Metric
	if err := s.a.metrics.planSteps.WithLabelValues("inband").Write(&steps); err != nil {
		t.Fatal(err)
	}
	if got := steps.GetCounter().GetValue(); got != 3 {
		t.Errorf("plan_steps_total{where=inband} = %v, want 3", got)
	}
}

// TestPlanOOBStepOnce: a plan's out-of-band step runs through the
// exactly-once BMC runner: the coordinator's own copy of it, sent while
// it runs and after, does not run it again (one done-record, one
// result), and the plan goes on to its next step.
func TestPlanOOBStepOnce(t *testing.T) {
	var ons atomic.Int64
	s := newPlanSite(t, SimOptions{Nodes: 1, StepDuration: 50 * time.Millisecond, Heartbeat: 50 * time.Millisecond,
		PowerWatch: func(node, state, _ string) {
			if state != protocol.PowerOff {
				ons.Add(1)
			}
		}})
	s.boot("n1", 1)
	oob := &protocol.Message{V: protocol.Version, Kind: protocol.KindCommand, ID: "o2", Site: "s1", Node: "n1", Seq: 3, Sent: time.Now(),
		Deadline: time.Now().Add(time.Minute), Action: protocol.ActionOOBStep, Driver: "fake", SpanSeconds: 60,
		Step: &protocol.Step{Interface: "management", Step: "fake_reset_bmc", Args: map[string]any{"delay": 0.3}}}
	s.send(protocol.NodeCmdTopic("s1", "n1"), &protocol.Message{Kind: protocol.KindCommand, ID: "plan-1", Node: "n1", Action: protocol.ActionPlanRun,
		Plan: []*protocol.Message{inband("n1", "i1", 2), oob, inband("n1", "i3", 4)}})
	await(t, "the out-of-band step running", func() bool {
		running := false
		s.a.ob.Inspect(func(st *outbox.State) { running = st.Running["o2"] })
		return running
	})
	copyOf := *oob
	copyOf.Step = &protocol.Step{Interface: "management", Step: "fake_reset_bmc", Args: map[string]any{"delay": 0.3}}
	s.send(protocol.BMCCmdTopic("s1"), &copyOf) // while it runs
	await(t, "the plan's end", func() bool { return s.a.plans.Len() == 0 })
	s.send(protocol.BMCCmdTopic("s1"), &copyOf) // after
	// A second run (0.3 s) would show as another result.
	waitfor.Until(500*time.Millisecond, func() bool { return fmt.Sprint(s.results("n1")) != "[power-n1 i1 o2 i3]" })
	if got := fmt.Sprint(s.results("n1")); got != "[power-n1 i1 o2 i3]" {
		t.Fatalf("results in the outbox: %s, want [power-n1 i1 o2 i3]", got)
	}
	if ons.Load() != 1 {
		t.Fatalf("%d power-ons, want 1", ons.Load())
	}
}

// TestPlanSurvivesRestart: an agent stopped while its plan's second step
// runs goes on after it starts again on its state folder: the simulated
// ramdisk finishes the step it was running, and the plan starts the
// third; no step runs twice and each result is in the outbox once, in
// order.
func TestPlanSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	sim := SimOptions{Nodes: 1, StepDuration: 400 * time.Millisecond, Heartbeat: 50 * time.Millisecond}
	s := newPlanSiteIn(t, sim, dir, nil)
	s.boot("n1", 1)
	s.send(protocol.NodeCmdTopic("s1", "n1"), &protocol.Message{Kind: protocol.KindCommand, ID: "plan-1", Node: "n1", Action: protocol.ActionPlanRun,
		Plan: []*protocol.Message{inband("n1", "c1", 2), inband("n1", "c2", 3), inband("n1", "c3", 4)}})
	await(t, "the second step running", func() bool {
		rec, ok := s.a.plans.Get("n1")
		return ok && rec.Index == 1 && rec.Started && s.sawFrom(protocol.KindHeartbeat, "n1", "")
	})
	rw := httptest.NewRecorder()
	s.a.MetricsHandler().ServeHTTP(rw, httptest.NewRequest("GET", "/metrics", nil))
	if !strings.Contains(rw.Body.String(), "\nbmedge_agent_plans_running 1\n") {
		t.Errorf("metrics during the plan lack bmedge_agent_plans_running 1")
	}
	var c1 string
	for _, it := range s.a.ob.Ordered() {
		if m, _ := protocol.Decode(it.Payload); m != nil && m.CommandID == "c1" {
			c1 = m.ID
		}
	}
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	_ = s.cut()

	s2 := newPlanSiteIn(t, sim, dir, nil)
	await(t, "the plan's end after the restart", func() bool { return s2.a.plans.Len() == 0 })
	if got := fmt.Sprint(s2.results("n1")); got != "[power-n1 c1 c2 c3]" {
		t.Fatalf("results in the outbox after the restart: %s, want [power-n1 c1 c2 c3]", got)
	}
	for _, it := range s2.a.ob.Ordered() {
		if m, _ := protocol.Decode(it.Payload); m != nil && m.CommandID == "c1" && m.ID != c1 {
			t.Fatal("the first step ran again after the restart")
		}
	}
	// What stays in the state folder is the plan's id and deadline among
	// the node's ended plans (so that a replayed copy is refused), not a
	// plan to resume.
	// The plan's end is queued for the store's next group commit after
	// the plan leaves the runner (PutPlan does not wait), so the test
	// waits for it to be on disk.
	var last string
	ok := waitfor.Until(10*time.Second, func() bool {
		if err := s2.a.ob.Store().Sync(); err != nil {
			last = err.Error()
			return false
		}
		plans, err := s2.a.ob.Store().LoadPlans()
		if err != nil || len(plans) > 1 {
			last = fmt.Sprintf("state folder's plans: %d (%v)", len(plans), err)
			return false
		}
		for node, b := range plans {
			var rec plan.Record
			if err := json.Unmarshal(b, &rec); err != nil || rec.ID != "" || len(rec.Ended) != 1 {
				last = fmt.Sprintf("node %s: %s (%v)", node, b, err)
				return false
			}
		}
		return true
	})
	if !ok {
		t.Fatalf("a finished plan is still in the state folder as running: %s", last)
	}
}

// TestPlanSilenceBoundAtTheAgent: the agent hears the coordinator while
// its link is up; once the link has been down for longer than
// --plan-silence-bound a plan starts no next step, and it goes on once
// the link is back.
func TestPlanSilenceBoundAtTheAgent(t *testing.T) {
	clk := clock.NewFake(time.Now())
	s := newPlanSiteIn(t, SimOptions{}, t.TempDir(), clk)
	addr := s.b.Addr
	clk.Advance(48 * time.Hour)
	if got := s.a.heardFrom(); !got.Equal(clk.Now()) {
		t.Fatalf("link up: last heard %v, want now %v", got, clk.Now())
	}
	cutAt := clk.Now()
	c1, c2 := inband("n1", "c1", 2), inband("n1", "c2", 3)
	c1.SpanSeconds = 3 * 86400 // longer than the outage: not lost meanwhile
	s.send(protocol.NodeCmdTopic("s1", "n1"), &protocol.Message{Kind: protocol.KindCommand, ID: "plan-1", Node: "n1", Action: protocol.ActionPlanRun,
		Deadline: clk.Now().Add(4 * 24 * time.Hour), Plan: []*protocol.Message{c1, c2}})
	if err := s.cut(); err != nil {
		t.Fatal(err)
	}
	await(t, "the link going down", func() bool { return !s.a.link.Up() })
	clk.Advance(DefaultPlanSilenceBound + time.Minute)
	if got := s.a.heardFrom(); !got.Equal(cutAt) {
		t.Fatalf("link down: last heard %v, want %v (before the cut)", got, cutAt)
	}
	// The ramdisk's result of c1 (as the relay reports it): c2 waits.
	s.a.plans.Result("n1", "c1", true)
	if rec, _ := s.a.plans.Get("n1"); rec.Index != 1 || rec.Started {
		t.Fatalf("silent for longer than the bound, the plan started its next step: index %d started %v", rec.Index, rec.Started)
	}
	// The coordinator's broker is back: the link comes up, the next tick
	// starts c2.
	b, err := mqttbroker.Start(mqttbroker.Config{Addr: addr}, openCreds{}, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	await(t, "the link coming back", func() bool { return s.a.link.Up() })
	await(t, "the plan going on", func() bool {
		clk.Advance(time.Second)
		rec, _ := s.a.plans.Get("n1")
		return rec.Index == 1 && rec.Started
	})
}

// TestPlanOnDiskBeforeAck: a run_plan is in the state folder when the
// agent's handler returns, that is before the MQTT link acknowledges it
// to the broker: from then on the coordinator takes the plan as
// delivered, and an agent killed right after must find it when it starts
// again. The same for a bundle of plans.
func TestPlanOnDiskBeforeAck(t *testing.T) {
	s := newPlanSite(t, SimOptions{Nodes: 3, StepDuration: time.Hour, Heartbeat: 50 * time.Millisecond})
	kept := func(node, id string) bool {
		plans, err := s.a.ob.Store().LoadPlans()
		if err != nil {
			t.Fatal(err)
		}
		var rec plan.Record
		return json.Unmarshal(plans[node], &rec) == nil && rec.ID == id
	}
	s.boot("n1", 1)
	s.send(protocol.NodeCmdTopic("s1", "n1"), &protocol.Message{Kind: protocol.KindCommand, ID: "plan-1", Node: "n1", Action: protocol.ActionPlanRun,
		Plan: []*protocol.Message{inband("n1", "c1", 2), inband("n1", "c2", 3)}})
	if !kept("n1", "plan-1") {
		t.Fatal("the plan was not in the state folder when its message's handler returned (before the acknowledgement)")
	}

	var recs []protocol.BundleRecord
	for i, node := range []string{"n2", "n3"} {
		m := &protocol.Message{V: protocol.Version, Kind: protocol.KindCommand, ID: "plan-" + node, Site: "s1", Node: node, Action: protocol.ActionPlanRun,
			Sent: time.Now(), Deadline: time.Now().Add(time.Minute), Plan: []*protocol.Message{inband(node, "d"+node, uint64(2+i))}}
		b, err := protocol.Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, protocol.BundleRecord{Topic: protocol.NodeCmdTopic("s1", node), Payload: b})
	}
	b, err := protocol.EncodeBundle("s1", recs, 1)
	if err != nil {
		t.Fatal(err)
	}
	s.a.handle(protocol.BMCCmdTopic("s1"), b)
	for _, node := range []string{"n2", "n3"} {
		if !kept(node, "plan-"+node) {
			t.Fatalf("%s's plan of the bundle was not in the state folder when the handler returned", node)
		}
	}
}
