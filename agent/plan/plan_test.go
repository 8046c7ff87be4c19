package plan

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bmedge/bmedge/lib/clock"
	"github.com/bmedge/bmedge/lib/waitfor"
	"github.com/bmedge/bmedge/protocol"
)

// memStore is an in-memory Store.
type memStore struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (s *memStore) PutPlan(node string, b []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b == nil {
		delete(s.m, node)
		return
	}
	s.m[node] = append([]byte(nil), b...)
}

func (s *memStore) LoadPlans() (map[string][]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string][]byte{}
	for k, v := range s.m {
		out[k] = v
	}
	return out, nil
}

func (s *memStore) record(t *testing.T, node string) (Record, bool) {
	t.Helper()
	s.mu.Lock()
	b, ok := s.m[node]
	s.mu.Unlock()
	var r Record
	if ok {
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
	}
	return r, ok
}

// active is the node's kept plan, if it holds one (a record may hold
// only the node's ended plans).
func (s *memStore) active(t *testing.T, node string) (Record, bool) {
	t.Helper()
	r, ok := s.record(t, node)
	return r, ok && r.ID != ""
}

// site is a fake agent around a Runner: what the ramdisk and the BMC
// runner were handed, in order.
type site struct {
	t     *testing.T
	clk   *clock.Fake
	store *memStore
	logs  *syncBuf

	mu    sync.Mutex
	sent  []string // "deliver:ID", "oob:ID", "abort:COMMAND_ID"
	heard time.Time
	kept  map[string]Kept
	oob   func(m *protocol.Message) Outcome
	// oobDone is closed-over by tests that wait for RunOOB calls.
	oobCalls chan string
	p        *Runner
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuf) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func newSite(t *testing.T, store *memStore, bound time.Duration) *site {
	t.Helper()
	s := &site{t: t, clk: clock.NewFake(testEpoch), store: store, logs: &syncBuf{},
		kept: map[string]Kept{}, oobCalls: make(chan string, 100)}
	s.heard = s.clk.Now()
	s.p = s.runner(bound)
	return s
}

// runner is a Runner on s's fakes (a restarted agent makes another).
func (s *site) runner(bound time.Duration) *Runner {
	n := 0
	return New(Config{Site: "s1", Log: slog.New(slog.NewTextHandler(s.logs, &slog.HandlerOptions{Level: slog.LevelDebug})), Clock: s.clk, Store: s.store,
		Resend: 5 * time.Second, SilenceBound: bound, Max: 3,
		Deliver: func(node string, m *protocol.Message) {
			s.mu.Lock()
			defer s.mu.Unlock()
			if m.Action == protocol.ActionAbort {
				if m.Token != "tok" || m.Kind != protocol.KindCommand || m.Validate() != nil {
					s.t.Errorf("abort_step without the node's token or invalid: %+v (%v)", m, m.Validate())
				}
				s.sent = append(s.sent, fmt.Sprintf("abort:%v", m.Args["command_id"]))
				return
			}
			s.sent = append(s.sent, "deliver:"+m.ID)
		},
		RunOOB: func(m *protocol.Message) Outcome {
			s.mu.Lock()
			s.sent = append(s.sent, "oob:"+m.ID)
			f := s.oob
			s.mu.Unlock()
			out := OOBDone
			if f != nil {
				out = f(m)
			}
			s.oobCalls <- m.ID
			return out
		},
		Kept: func(cmd string) Kept {
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.kept[cmd]
		},
		Heard: func() time.Time {
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.heard
		},
		NewID: func() string { n++; return fmt.Sprintf("abort-%d", n) }})
}

func (s *site) got() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.sent, " ")
}

func (s *site) waitOOB(id string) {
	s.t.Helper()
	select {
	case got := <-s.oobCalls:
		if got != id {
			s.t.Fatalf("RunOOB ran %s, want %s", got, id)
		}
	case <-time.After(10 * time.Second):
		s.t.Fatalf("RunOOB never ran %s", id)
	}
}

// step is a plan step: "i" in-band, "a" in-band abortable, "o" out of band.
func step(id, kind string, seq uint64) *protocol.Message {
	m := &protocol.Message{V: protocol.Version, Kind: protocol.KindCommand, ID: id, Site: "s1", Node: "n1", Seq: seq, Sent: time.Now(),
		Deadline: time.Date(2029, 1, 1, 0, 0, 0, 0, time.UTC), SpanSeconds: 60,
		Step: &protocol.Step{Interface: "deploy", Step: "s-" + id}}
	switch kind {
	case "o":
		m.Action, m.Driver = protocol.ActionOOBStep, "fake"
	default:
		m.Action, m.Token = protocol.ActionInbandRun, "tok"
		m.Step.Abortable = kind == "a"
	}
	return m
}

// testEpoch is the fake clock's start.
var testEpoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func planMsg(id string, steps ...*protocol.Message) *protocol.Message {
	m := &protocol.Message{V: protocol.Version, Kind: protocol.KindCommand, ID: id, Site: "s1", Node: "n1", Sent: testEpoch,
		Deadline: testEpoch.Add(30 * 24 * time.Hour), Action: protocol.ActionPlanRun, Plan: steps}
	return m
}

func stopMsg(id, mode string) *protocol.Message {
	return &protocol.Message{V: protocol.Version, Kind: protocol.KindCommand, ID: "stop-" + id, Site: "s1", Node: "n1", Sent: time.Now(),
		Deadline: time.Now().Add(time.Hour), Action: protocol.ActionPlanStop, Args: map[string]any{"plan_id": id, "mode": mode}}
}

func (s *site) want(want string) {
	s.t.Helper()
	if got := s.got(); got != want {
		s.t.Fatalf("handed out %q, want %q", got, want)
	}
}

// The steps run in order, each once its predecessor's result is in, the
// in-band ones handed to the ramdisk with their deadline set to the
// start plus their span, the out-of-band ones to the BMC runner; the
// progress is kept before each step starts, and the plan is gone (and
// its kept state) after the last.
func TestStepsInOrder(t *testing.T) {
	st := &memStore{m: map[string][]byte{}}
	s := newSite(t, st, 0)
	m := planMsg("p1", step("c1", "i", 1), step("c2", "o", 2), step("c3", "i", 3))
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	s.p.Run("n1", m)
	s.want("deliver:c1")
	rec, ok := st.record(t, "n1")
	if !ok || rec.Index != 0 || !rec.Started || !rec.Steps[0].Deadline.Equal(s.clk.Now().Add(time.Minute)) {
		t.Fatalf("kept before step 1: %+v (kept %v); want index 0 started, deadline now+60s", rec, ok)
	}
	// A result of another command, and a heartbeat, change nothing.
	s.p.Result("n1", "other", true)
	s.p.Running("n1", "c1")
	s.want("deliver:c1")
	s.clk.Advance(10 * time.Second)
	s.p.Result("n1", "c1", true)
	s.waitOOB("c2")
	s.want("deliver:c1 oob:c2")
	if rec, _ := st.record(t, "n1"); rec.Index != 1 || !rec.Started || !rec.Steps[1].Deadline.Equal(s.clk.Now().Add(time.Minute)) {
		t.Fatalf("kept before step 2: index %d started %v deadline %v", rec.Index, rec.Started, rec.Steps[1].Deadline)
	}
	s.p.Result("n1", "c2", true)
	s.want("deliver:c1 oob:c2 deliver:c3")
	// A duplicate result of a step before changes nothing.
	s.p.Result("n1", "c1", true)
	s.want("deliver:c1 oob:c2 deliver:c3")
	if s.p.Len() != 1 {
		t.Fatalf("%d plans before the last result", s.p.Len())
	}
	s.p.Result("n1", "c3", true)
	if s.p.Len() != 0 {
		t.Fatal("the plan is still held after its last step")
	}
	if _, ok := st.active(t, "n1"); ok {
		t.Fatal("the plan's kept state outlived it")
	}
}

// A failed step ends the plan: nothing further starts.
func TestFailureEndsPlan(t *testing.T) {
	st := &memStore{m: map[string][]byte{}}
	s := newSite(t, st, 0)
	s.p.Run("n1", planMsg("p1", step("c1", "i", 1), step("c2", "i", 2)))
	s.p.Result("n1", "c1", false)
	s.clk.Advance(time.Minute)
	s.p.Tick()
	s.want("deliver:c1")
	if _, ok := st.active(t, "n1"); ok || s.p.Len() != 0 {
		t.Fatal("a failed plan is still kept")
	}
	// A late copy of the same run_plan does not start it again.
	s.p.Run("n1", planMsg("p1", step("c1", "i", 1), step("c2", "i", 2)))
	s.want("deliver:c1")
}

// An in-band step is handed to the ramdisk again every resend interval
// until its heartbeat says it runs; heartbeats naming it keep it alive
// past its span (a long erase), but without a result or a heartbeat for
// its span (and a resend interval) the plan ends. An out-of-band step
// without a result a resend interval past its deadline ends it too.
func TestRedeliverUntilRunningAndLost(t *testing.T) {
	st := &memStore{m: map[string][]byte{}}
	s := newSite(t, st, 0)
	s.p.Run("n1", planMsg("p1", step("c1", "i", 1), step("c2", "i", 2)))
	s.clk.Advance(5 * time.Second)
	s.p.Tick()
	s.want("deliver:c1 deliver:c1")
	s.p.Running("n1", "c1")
	for range 6 { // three minutes of heartbeats: thrice the span
		s.clk.Advance(30 * time.Second)
		s.p.Running("n1", "c1")
		s.p.Tick()
	}
	s.want("deliver:c1 deliver:c1")
	if s.p.Len() != 1 {
		t.Fatal("a step whose heartbeats name it ended its plan")
	}
	s.clk.Advance(65 * time.Second) // the span and a resend interval since the last beat
	s.p.Tick()
	if s.p.Len() != 1 {
		t.Fatal("the plan ended within a resend interval of its step's span")
	}
	s.clk.Advance(time.Second)
	s.p.Tick()
	if s.p.Len() != 0 {
		t.Fatal("a step silent for longer than its span kept its plan")
	}
	s.p.Result("n1", "c1", true)
	s.want("deliver:c1 deliver:c1")

	s2 := newSite(t, &memStore{m: map[string][]byte{}}, 0)
	s2.p.Run("n1", planMsg("p1", step("c1", "o", 1), step("c2", "i", 2)))
	s2.waitOOB("c1")
	s2.clk.Advance(65 * time.Second)
	s2.p.Tick()
	if s2.p.Len() != 1 {
		t.Fatal("an out-of-band step's plan ended within a resend interval of its deadline")
	}
	s2.clk.Advance(time.Second)
	s2.p.Tick()
	if s2.p.Len() != 0 {
		t.Fatal("an out-of-band step without a result past its deadline kept its plan")
	}
}

// stop_plan abort aborts an abortable in-band step (abort_step with the
// node's token, naming the step's command) and starts nothing more; a
// step that is not abortable finishes first, and so does any with
// "finish". A stop for another plan id changes nothing.
func TestStop(t *testing.T) {
	for _, c := range []struct {
		name, kind, mode, want string
	}{
		{"abort abortable", "a", protocol.PlanStopAbort, "deliver:c1 abort:c1"},
		{"abort not abortable", "i", protocol.PlanStopAbort, "deliver:c1"},
		{"abort out of band", "o", protocol.PlanStopAbort, "oob:c1"},
		{"finish abortable", "a", protocol.PlanStopFinish, "deliver:c1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := &memStore{m: map[string][]byte{}}
			s := newSite(t, st, 0)
			s.p.Run("n1", planMsg("p1", step("c1", c.kind, 1), step("c2", "i", 2)))
			if c.kind == "o" {
				s.waitOOB("c1")
			}
			s.p.Stop("n1", stopMsg("other", c.mode))
			if s.p.Len() != 1 {
				t.Fatal("a stop naming another plan stopped it")
			}
			s.p.Stop("n1", stopMsg("p1", c.mode))
			s.p.Result("n1", "c1", true)
			s.clk.Advance(time.Minute)
			s.p.Tick()
			s.want(c.want)
			if _, ok := st.active(t, "n1"); ok || s.p.Len() != 0 {
				t.Fatal("a stopped plan is still kept")
			}
		})
	}
}

// A run_plan already known is ignored; a new one for the node replaces
// the old one, whose running step finishes (not aborted) and whose next
// step never starts.
func TestDuplicateAndReplace(t *testing.T) {
	st := &memStore{m: map[string][]byte{}}
	s := newSite(t, st, 0)
	s.p.Run("n1", planMsg("p1", step("c1", "a", 1), step("c2", "i", 2)))
	s.p.Run("n1", planMsg("p1", step("c1", "a", 1), step("c2", "i", 2)))
	s.want("deliver:c1")
	s.p.Run("n1", planMsg("p2", step("c1", "a", 1), step("c5", "i", 5)))
	s.want("deliver:c1 deliver:c1")
	s.p.Result("n1", "c1", true)
	s.want("deliver:c1 deliver:c1 deliver:c5")
	if rec, _ := st.record(t, "n1"); rec.ID != "p2" || rec.Index != 1 {
		t.Fatalf("kept %s at %d, want p2 at 1", rec.ID, rec.Index)
	}
	// The replaced plan's id is known: a late copy does not come back.
	s.p.Run("n1", planMsg("p1", step("c1", "a", 1), step("c2", "i", 2)))
	if rec, _ := s.p.Get("n1"); rec.ID != "p2" {
		t.Fatalf("a late copy of the replaced plan replaced %s", rec.ID)
	}
	// A run_plan whose topic names another node is refused.
	other := planMsg("p9", step("c9", "i", 9))
	s.p.Run("n2", other)
	if _, ok := s.p.Get("n2"); ok {
		t.Fatal("a plan of node n1 was taken on node n2's topic")
	}
}

// Plans are bounded (Config.Max): one more is refused, a replacement is
// not.
func TestPlansBounded(t *testing.T) {
	s := newSite(t, &memStore{m: map[string][]byte{}}, 0)
	for i := range 3 {
		node := fmt.Sprintf("n%d", i)
		m := planMsg("p"+node, step("c"+node, "i", 1))
		m.Node, m.Plan[0].Node = node, node
		s.p.Run(node, m)
	}
	m := planMsg("pn9", step("cn9", "i", 1))
	m.Node, m.Plan[0].Node = "n9", "n9"
	s.p.Run("n9", m)
	if s.p.Len() != 3 {
		t.Fatalf("%d plans held, want the bound 3", s.p.Len())
	}
	m = planMsg("pn0b", step("cn0b", "i", 1))
	m.Node, m.Plan[0].Node = "n0", "n0"
	s.p.Run("n0", m)
	if rec, _ := s.p.Get("n0"); rec.ID != "pn0b" {
		t.Fatal("at the bound, a node's new plan did not replace its old one")
	}
}

// After a restart each kept plan goes on: an out-of-band step whose
// result is kept is not run again (ok: the next step starts; failed: the
// plan ends; unread: it ends), an in-band step is handed to the ramdisk
// again, a paused plan starts its next step.
func TestRestartResumes(t *testing.T) {
	t.Run("oob kept ok", func(t *testing.T) {
		st := &memStore{m: map[string][]byte{}}
		s := newSite(t, st, 0)
		s.p.Run("n1", planMsg("p1", step("c1", "o", 1), step("c2", "i", 2)))
		s.waitOOB("c1")
		// kill -9: the result is in the outbox, the plan not told.
		s.kept["c1"] = KeptOK
		s.p = s.runner(0)
		if err := s.p.Restore(); err != nil {
			t.Fatal(err)
		}
		s.want("oob:c1 deliver:c2")
		if rec, _ := st.record(t, "n1"); rec.Index != 1 || !rec.Started {
			t.Fatalf("after the restart kept at %d started %v", rec.Index, rec.Started)
		}
	})
	for _, k := range []Kept{KeptFailed, KeptUnread} {
		t.Run(fmt.Sprintf("oob kept %d", k), func(t *testing.T) {
			st := &memStore{m: map[string][]byte{}}
			s := newSite(t, st, 0)
			s.p.Run("n1", planMsg("p1", step("c1", "o", 1), step("c2", "i", 2)))
			s.waitOOB("c1")
			s.kept["c1"] = k
			s.p = s.runner(0)
			if err := s.p.Restore(); err != nil {
				t.Fatal(err)
			}
			s.want("oob:c1")
			if _, ok := st.active(t, "n1"); ok || s.p.Len() != 0 {
				t.Fatal("the plan went on after its step's kept result said it ended")
			}
		})
	}
	t.Run("oob not kept runs again", func(t *testing.T) {
		st := &memStore{m: map[string][]byte{}}
		s := newSite(t, st, 0)
		s.p.Run("n1", planMsg("p1", step("c1", "o", 1)))
		s.waitOOB("c1")
		// Down for longer than the step's span: it runs again with its
		// whole span from the restart, not an expired deadline.
		s.clk.Advance(time.Hour)
		s.p = s.runner(0)
		if err := s.p.Restore(); err != nil {
			t.Fatal(err)
		}
		s.waitOOB("c1")
		s.want("oob:c1 oob:c1")
		if got := s.p.cfgDeadline(t, "n1"); !got.Equal(s.clk.Now().Add(time.Minute)) {
			t.Fatalf("the step run again after the restart has deadline %v, want the restart plus its span %v", got, s.clk.Now().Add(time.Minute))
		}
		if rec, _ := st.record(t, "n1"); !rec.Steps[0].Deadline.Equal(s.clk.Now().Add(time.Minute)) {
			t.Fatalf("the new deadline was not kept: %v", rec.Steps[0].Deadline)
		}
	})
	t.Run("inband", func(t *testing.T) {
		st := &memStore{m: map[string][]byte{}}
		s := newSite(t, st, 0)
		s.p.Run("n1", planMsg("p1", step("c1", "i", 1), step("c2", "i", 2), step("c3", "i", 3)))
		s.p.Result("n1", "c1", true)
		dl := s.p.cfgDeadline(t, "n1")
		s.clk.Advance(20 * time.Second)
		s.p = s.runner(0)
		if err := s.p.Restore(); err != nil {
			t.Fatal(err)
		}
		s.want("deliver:c1 deliver:c2 deliver:c2")
		if got := s.p.cfgDeadline(t, "n1"); !got.Equal(dl) {
			t.Fatalf("the resumed step's deadline moved from %v to %v", dl, got)
		}
		s.p.Result("n1", "c2", true)
		s.want("deliver:c1 deliver:c2 deliver:c2 deliver:c3")
	})
}

// TestPlanReceivedBeforeRestore: the link is up before the kept plans
// are restored, so a plan can arrive first (the coordinator's newer plan,
// or the broker delivering one again). Restore keeps it: the kept plan
// of the node is not resumed over it, and the ended plans kept stay
// known.
func TestPlanReceivedBeforeRestore(t *testing.T) {
	st := &memStore{m: map[string][]byte{}}
	s := newSite(t, st, 0)
	s.p.Run("n1", planMsg("p1", step("c1", "i", 1), step("c2", "i", 2)))
	s.p.Result("n1", "c1", true)
	forN2 := func() *protocol.Message {
		m := planMsg("q1", step("d1", "i", 1))
		m.Node, m.Plan[0].Node = "n2", "n2"
		return m
	}
	s.p.Run("n2", forN2())
	s.p.Result("n2", "d1", true) // q1 ended: kept among n2's ended plans
	// kill -9, then the restarted agent hears p2 before Restore.
	s.p = s.runner(0)
	s.p.Run("n1", planMsg("p2", step("c7", "i", 7), step("c8", "i", 8)))
	if err := s.p.Restore(); err != nil {
		t.Fatal(err)
	}
	s.want("deliver:c1 deliver:c2 deliver:d1 deliver:c7")
	if rec, ok := s.p.Get("n1"); !ok || rec.ID != "p2" || rec.Index != 0 {
		t.Fatalf("after Restore node n1 runs plan %q at step %d, want the received p2 at 0", rec.ID, rec.Index)
	}
	s.p.Run("n2", forN2())
	s.want("deliver:c1 deliver:c2 deliver:d1 deliver:c7")
	if _, ok := s.p.Get("n2"); ok {
		t.Fatal("a replayed copy of n2's ended plan ran again after the restart")
	}
}

// cfgDeadline is the deadline of node's running step.
func (p *Runner) cfgDeadline(t *testing.T, node string) time.Time {
	t.Helper()
	rec, ok := p.Get(node)
	if !ok || !rec.Started {
		t.Fatalf("node %s has no running step", node)
	}
	return rec.Steps[rec.Index].Deadline
}

// Once the coordinator has not been heard for longer than the silence
// bound, a plan starts no next step (its running one finishes) and says
// so once; it goes on when the coordinator is heard again, after a
// restart too. A bound of 0 never stops.
func TestSilenceBound(t *testing.T) {
	st := &memStore{m: map[string][]byte{}}
	s := newSite(t, st, time.Hour)
	s.p.Run("n1", planMsg("p1", step("c1", "i", 1), step("c2", "i", 2)))
	s.clk.Advance(2 * time.Hour) // silent since the start
	s.p.Running("n1", "c1")
	s.p.Result("n1", "c1", true)
	for range 3 {
		s.clk.Advance(5 * time.Second)
		s.p.Tick()
	}
	s.want("deliver:c1")
	if n := strings.Count(s.logs.String(), "plan paused"); n != 1 {
		t.Fatalf("the pause was logged %d times, want once:\n%s", n, s.logs.String())
	}
	if rec, _ := st.record(t, "n1"); rec.Index != 1 || rec.Started {
		t.Fatalf("paused plan kept at %d started %v, want 1 not started", rec.Index, rec.Started)
	}
	// Restarted while paused: still paused.
	s.p = s.runner(time.Hour)
	if err := s.p.Restore(); err != nil {
		t.Fatal(err)
	}
	s.want("deliver:c1")
	s.mu.Lock()
	s.heard = s.clk.Now()
	s.mu.Unlock()
	s.p.Tick()
	s.want("deliver:c1 deliver:c2")
	if !strings.Contains(s.logs.String(), "plan goes on") {
		t.Fatal("the resumption was not logged")
	}

	// Bound 0: never pauses.
	s2 := newSite(t, &memStore{m: map[string][]byte{}}, 0)
	s2.p.Run("n1", planMsg("p1", step("c1", "i", 1), step("c2", "i", 2)))
	s2.clk.Advance(1000 * time.Hour)
	s2.p.Result("n1", "c1", true)
	s2.want("deliver:c1 deliver:c2")
}

// An out-of-band step the runner could not run (outbox full) is tried
// again at the next tick; a stale one (the node moved on) ends the plan.
func TestOOBRetryAndStale(t *testing.T) {
	s := newSite(t, &memStore{m: map[string][]byte{}}, 0)
	s.oob = func(*protocol.Message) Outcome { return OOBRetry }
	s.p.Run("n1", planMsg("p1", step("c1", "o", 1), step("c2", "o", 2)))
	s.waitOOB("c1")
	s.mu.Lock()
	s.oob = func(m *protocol.Message) Outcome {
		go s.p.Result("n1", m.ID, true) // as runBMC reports it
		return OOBDone
	}
	s.mu.Unlock()
	s.p.Tick()
	s.waitOOB("c1")
	s.waitOOB("c2") // the next step starts from within the first's report
	s.want("oob:c1 oob:c1 oob:c2")

	s2 := newSite(t, &memStore{m: map[string][]byte{}}, 0)
	s2.oob = func(*protocol.Message) Outcome { return OOBStale }
	s2.p.Run("n1", planMsg("p1", step("c1", "o", 1), step("c2", "o", 2)))
	s2.waitOOB("c1")
	if !waitfor.Until(10*time.Second, func() bool { return s2.p.Len() == 0 }) {
		t.Fatal("a stale step kept its plan")
	}
}

// A deleted node's plan is dropped with its kept state.
func TestForget(t *testing.T) {
	st := &memStore{m: map[string][]byte{}}
	s := newSite(t, st, 0)
	s.p.Run("n1", planMsg("p1", step("c1", "i", 1), step("c2", "i", 2)))
	s.p.Forget("n1")
	s.p.Result("n1", "c1", true)
	s.clk.Advance(5 * time.Second)
	s.p.Tick()
	s.want("deliver:c1")
	if _, ok := st.record(t, "n1"); ok || s.p.Len() != 0 {
		t.Fatal("a forgotten node's plan is still kept")
	}
}

// TestEndedPlanRefusedAfterRestart (issue 30, point 4): a plan that ended
// is remembered in the state folder with its deadline: a copy of its
// run_plan replayed to a restarted agent is refused (and counted), as
// is, once that deadline has passed, any copy; a run_plan already past
// its deadline is refused on receipt; a kept plan the agent was down
// past the deadline of is ended at restart, not resumed.
func TestEndedPlanRefusedAfterRestart(t *testing.T) {
	st := &memStore{m: map[string][]byte{}}
	s := newSite(t, st, 0)
	var refused []string
	count := func(r *Runner) {
		r.cfg.Refused = func(kind string, m *protocol.Message) {
			s.mu.Lock()
			refused = append(refused, kind+":"+m.ID)
			s.mu.Unlock()
		}
	}
	count(s.p)
	p1 := planMsg("p1", step("c1", "i", 1), step("c2", "i", 2))
	p1.Deadline = testEpoch.Add(time.Hour)
	s.p.Run("n1", p1)
	s.p.Result("n1", "c1", true)
	s.p.Result("n1", "c2", true)
	s.want("deliver:c1 deliver:c2")
	if rec, ok := st.record(t, "n1"); !ok || rec.ID != "" || len(rec.Ended) != 1 || rec.Ended[0].ID != "p1" || !rec.Ended[0].Deadline.Equal(p1.Deadline) {
		t.Fatalf("kept after the plan ended: %+v (kept %v); want its id and deadline among the ended", rec, ok)
	}
	// A restarted agent: the replayed run_plan is refused.
	s.p = s.runner(0)
	count(s.p)
	if err := s.p.Restore(); err != nil {
		t.Fatal(err)
	}
	s.p.Run("n1", planMsg("p1", step("c1", "i", 1), step("c2", "i", 2)))
	s.want("deliver:c1 deliver:c2")
	if s.p.Len() != 0 {
		t.Fatal("a replayed ended plan is held after a restart")
	}
	// Past its deadline, every copy is refused as such, ended or not.
	s.clk.Advance(2 * time.Hour)
	late := planMsg("p1", step("c1", "i", 1))
	late.Deadline = p1.Deadline
	s.p.Run("n1", late)
	fresh := planMsg("p9", step("c9", "i", 9))
	fresh.Deadline = s.clk.Now().Add(-ClockGrace - time.Second)
	s.p.Run("n1", fresh)
	s.want("deliver:c1 deliver:c2")
	s.mu.Lock()
	got := strings.Join(refused, " ")
	s.mu.Unlock()
	if got != "plan-ended:p1 plan-past-deadline:p1 plan-past-deadline:p9" {
		t.Fatalf("refusals %q", got)
	}
	// A kept plan whose deadline passed while the agent was down.
	p3 := planMsg("p3", step("c5", "i", 5), step("c6", "i", 6))
	p3.Deadline = s.clk.Now().Add(time.Minute)
	s.p.Run("n1", p3)
	s.want("deliver:c1 deliver:c2 deliver:c5")
	s.clk.Advance(time.Hour)
	s.p = s.runner(0)
	if err := s.p.Restore(); err != nil {
		t.Fatal(err)
	}
	s.p.Tick()
	if s.p.Len() != 0 {
		t.Fatal("a kept plan past its deadline was resumed after a restart")
	}
	s.want("deliver:c1 deliver:c2 deliver:c5")
	if rec, ok := st.active(t, "n1"); ok {
		t.Fatalf("a plan past its deadline is still kept as running: %+v", rec)
	}
}
