// Package plan is the edge agent's plan runner: a node's run_plan
// command (protocol.ActionPlanRun) hands the site the rest of a clean,
// deploy or service phase, and the runner starts its steps one after the
// other without waiting for the coordinator, whose link may be down. The
// coordinator stays the authority: each step is exactly the command it
// would send alone (same id, same Seq), its result goes to the
// coordinator as if it had been, and the coordinator may send any of
// those commands itself; the site answers each once (the ramdisk's
// session keeps its results by command id, the outbox's runner its
// done-records).
//
// The runner only learns each step's outcome (Result, from the relay
// and the BMC runner) to decide what comes next: ok, the next step;
// failed, the plan ends. Progress is kept in the agent's state folder
// (Store) before a step starts, so that a restarted agent goes on where
// it was. It holds its own state under its own lock, and reaches the
// rest of the agent only through the functions of its Config.
package plan

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/bmedge/bmedge/lib/clock"
	"github.com/bmedge/bmedge/lib/ratelog"
	"github.com/bmedge/bmedge/protocol"
)

// Store keeps the plans (the agent's encrypted state folder).
type Store interface {
	// PutPlan writes a node's plan (nil removes it), at once or with the
	// store's next commit: progress lost to a crash only hands a finished
	// step out again, which is answered without running it again.
	PutPlan(node string, b []byte)
	LoadPlans() (map[string][]byte, error)
}

// Outcome is what became of an out-of-band step handed to RunOOB.
type Outcome int

const (
	// OOBDone: it ran, or its kept result answered it; either way its
	// result was reported through Result (none when the agent stops).
	OOBDone Outcome = iota
	// OOBRunning: a copy of it (the coordinator's) runs; its result
	// comes through Result.
	OOBRunning
	// OOBStale: a newer command of the node has started; the
	// coordinator has moved on, and the plan ends.
	OOBStale
	// OOBRetry: not run now (the outbox is full); tried again at the
	// next tick.
	OOBRetry
)

// Kept is what the agent holds of a step's result.
type Kept int

const (
	// KeptNone: no result is kept.
	KeptNone Kept = iota
	KeptOK
	KeptFailed
	// KeptUnread: a result is kept but its outcome cannot be read (the
	// coordinator acknowledged it and its payload is gone); the plan
	// ends and the coordinator, which has the result, goes on.
	KeptUnread
)

// Config configures the runner.
type Config struct {
	Site string
	Log  *slog.Logger
	// Clock is the clock (default clock.Real): step deadlines, the
	// silence bound and the ticker.
	Clock clock.Clock
	// Store keeps the plans; nil keeps them in memory only.
	Store Store
	// Deliver hands a command to the node's ramdisk as the relay hands
	// the coordinator's (run_step, abort_step).
	Deliver func(node string, m *protocol.Message)
	// RunOOB runs an oob_step command through the agent's exactly-once
	// runner and says what became of it; it blocks while the step runs.
	RunOOB func(m *protocol.Message) Outcome
	// Kept tells what the agent holds of the result of a command (an
	// out-of-band step's done-record), read when a plan resumes.
	Kept func(cmd string) Kept
	// Heard is when the agent last heard from the coordinator (now when
	// its link is up).
	Heard func() time.Time
	// SilenceBound: once the coordinator has not been heard for longer,
	// no plan starts its next step until it is heard again (0: never
	// stop).
	SilenceBound time.Duration
	// Resend is the interval of the caller's Tick: an in-band step not
	// yet seen running is handed to the ramdisk again that often, and a
	// step is given that long past its deadline.
	Resend time.Duration
	// Max bounds the plans held at once (one per node).
	Max int
	// Started counts a step a plan started ("inband" or "oob"); may be
	// nil.
	Started func(where string)
	// NewID makes a message id (abort_step commands).
	NewID func() string
	// Refused, when set, is told of each run_plan refused as no longer
	// standing: RefusedEnded (the plan ended: a late or replayed copy)
	// or RefusedExpired (past its deadline).
	Refused func(kind string, m *protocol.Message)
}

// ClockGrace is how far past its deadline (the coordinator's clock) a
// run_plan is still taken (the agent's clock may be a little off).
const ClockGrace = time.Minute

// Kinds of refused run_plan (Config.Refused).
const (
	RefusedEnded   = "plan-ended"
	RefusedExpired = "plan-past-deadline"
)

// DefaultMax is the default of Config.Max.
const DefaultMax = 10000

// endedPerNode is how many ended plans' ids each node remembers, so
// that a late copy of a run_plan does not start them again. They are
// kept in the state folder with the node's plan record, each until its
// plan's deadline has passed (a copy then is refused as past its
// deadline anyway).
const endedPerNode = 4

// Ended is a plan that ended, as remembered.
type Ended struct {
	ID       string    `json:"id"`
	Deadline time.Time `json:"deadline,omitzero"`
}

// Record is a plan as the store keeps it. A record with no ID holds only
// the node's ended plans.
type Record struct {
	ID   string `json:"id,omitempty"`
	Node string `json:"node"`
	// Deadline is the run_plan's own (the coordinator's: when it would
	// be done if every step took its span).
	Deadline time.Time `json:"deadline,omitzero"`
	// Steps are the commands of the plan's steps; a started one has its
	// Deadline set to its start plus its span.
	Steps []*protocol.Message `json:"steps"`
	// Index is the running step, or the next to start when Started is
	// false.
	Index   int  `json:"index"`
	Started bool `json:"started,omitempty"`
	// Ended are the node's ended plans (the store's copy of
	// Runner.ended).
	Ended []Ended `json:"ended,omitempty"`
}

// run is one node's plan; mu orders what happens to it (a decision, its
// write to the store and the delivery that follows) against the hooks.
type run struct {
	mu  sync.Mutex
	rec Record
	// seen: the ramdisk said it runs the current in-band step; retry:
	// the current out-of-band step was not run and is tried again;
	// paused: the next step waits for the coordinator (silence bound).
	seen, retry, paused bool
	// running is the out-of-band step in RunOOB now (nil: none).
	running *protocol.Message
	// sign is when the running step last gave a sign of life: its start
	// (or the plan's resumption), or a heartbeat naming it.
	sign time.Time
	gone bool // dropped: the hooks leave it alone
}

// Runner runs the site's plans.
type Runner struct {
	cfg  Config
	log  *slog.Logger
	warn *ratelog.Limiter

	mu    sync.Mutex
	plans map[string]*run
	ended map[string][]Ended
}

// New returns a runner holding no plan (Restore loads the kept ones).
func New(cfg Config) *Runner {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.Resend <= 0 {
		cfg.Resend = 5 * time.Second
	}
	if cfg.Max <= 0 {
		cfg.Max = DefaultMax
	}
	if cfg.Deliver == nil {
		cfg.Deliver = func(string, *protocol.Message) {}
	}
	if cfg.RunOOB == nil {
		cfg.RunOOB = func(*protocol.Message) Outcome { return OOBRetry }
	}
	if cfg.Kept == nil {
		cfg.Kept = func(string) Kept { return KeptNone }
	}
	if cfg.Heard == nil {
		cfg.Heard = cfg.Clock.Now
	}
	if cfg.Started == nil {
		cfg.Started = func(string) {}
	}
	if cfg.Refused == nil {
		cfg.Refused = func(string, *protocol.Message) {}
	}
	if cfg.NewID == nil {
		cfg.NewID = func() string { return fmt.Sprintf("abort-%d", time.Now().UnixNano()) }
	}
	return &Runner{cfg: cfg, log: cfg.Log, warn: ratelog.New(cfg.Log, time.Minute), plans: map[string]*run{}, ended: map[string][]Ended{}}
}

// Len is how many plans are held (running or paused).
func (p *Runner) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.plans)
}

// Get is a copy of node's plan as kept (ok false without one).
func (p *Runner) Get(node string) (Record, bool) {
	p.mu.Lock()
	r := p.plans[node]
	p.mu.Unlock()
	if r == nil {
		return Record{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := r.rec
	rec.Steps = append([]*protocol.Message(nil), r.rec.Steps...)
	return rec, !r.gone
}

// Run takes a run_plan command that came on node's cmd topic.
func (p *Runner) Run(node string, m *protocol.Message) {
	if m.Node != node {
		p.warn.Warn("plan refused", "run_plan refused: it names another node than its topic's", "node", node, "plan", m.ID)
		return
	}
	now := p.cfg.Clock.Now()
	p.mu.Lock()
	old := p.plans[node]
	if old != nil && old.rec.ID == m.ID {
		p.mu.Unlock()
		p.log.Debug("run_plan already known: duplicate ignored", "node", node, "plan", m.ID)
		return
	}
	if p.endedLocked(node, m.ID, now) {
		p.mu.Unlock()
		p.cfg.Refused(RefusedEnded, m)
		p.log.Debug("run_plan of a plan that ended: not run again", "node", node, "plan", m.ID)
		return
	}
	if !m.Deadline.IsZero() && now.After(m.Deadline.Add(ClockGrace)) {
		p.mu.Unlock()
		p.cfg.Refused(RefusedExpired, m)
		p.warn.Warn("plan expired", "run_plan refused: it is past its deadline (a late or replayed copy); the coordinator sends the steps itself",
			"node", node, "plan", m.ID, "deadline", m.Deadline)
		return
	}
	if old == nil && len(p.plans) >= p.cfg.Max {
		p.mu.Unlock()
		p.warn.Warn("plans full", "run_plan refused: the agent holds as many plans as it may; the coordinator sends the steps itself", "node", node, "plan", m.ID, "max", p.cfg.Max)
		return
	}
	r := &run{rec: Record{ID: m.ID, Node: node, Deadline: m.Deadline, Steps: make([]*protocol.Message, len(m.Plan))}}
	for i, s := range m.Plan {
		c := *s
		r.rec.Steps[i] = &c
	}
	r.mu.Lock()
	p.plans[node] = r
	p.mu.Unlock()
	defer r.mu.Unlock()
	if old != nil {
		// One plan per node: the new one replaces it, which lets its
		// running step finish.
		p.log.Info("a new plan replaces the node's plan; its running step finishes", "node", node, "plan", old.rec.ID, "new_plan", m.ID)
		old.mu.Lock()
		p.dropLocked(old, false)
		old.mu.Unlock()
	}
	p.log.Info("plan received: the site runs its steps in order", "node", node, "plan", m.ID, "steps", len(r.rec.Steps))
	p.startLocked(r)
}

// Stop takes a stop_plan command that came on node's cmd topic: the
// plan starts no further step; "abort" aborts its running in-band step
// when it is abortable (any other finishes first).
func (p *Runner) Stop(node string, m *protocol.Message) {
	stop := protocol.PlanStopArgsOf(m.Args)
	id, mode := stop.PlanID, stop.Mode
	if m.Node != node {
		p.warn.Warn("plan refused", "stop_plan refused: it names another node than its topic's", "node", node, "plan", id)
		return
	}
	p.mu.Lock()
	r := p.plans[node]
	p.mu.Unlock()
	if r == nil {
		p.log.Debug("stop_plan for a node without a plan: nothing to stop", "node", node, "plan", id)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gone || r.rec.ID != id {
		p.log.Debug("stop_plan for another plan than the node's: ignored", "node", node, "plan", id, "node_plan", r.rec.ID)
		return
	}
	cur := r.current()
	aborted := false
	if mode == protocol.PlanStopAbort && r.rec.Started && cur != nil && cur.Action == protocol.ActionInbandRun && cur.Step != nil && cur.Step.Abortable {
		now := p.cfg.Clock.Now()
		p.cfg.Deliver(node, &protocol.Message{V: protocol.Version, Kind: protocol.KindCommand, ID: p.cfg.NewID(), Site: cur.Site, Node: node,
			Sent: now, Action: protocol.ActionAbort, Token: cur.Token, Deadline: now.Add(span(cur)),
			Args: protocol.AbortArgs{CommandID: cur.ID}.Args()})
		aborted = true
	}
	p.log.Info("plan stopped by the coordinator", "node", node, "plan", id, "mode", mode, "running_step_aborted", aborted)
	p.dropLocked(r, true)
}

// Forget drops a deleted node's plan and what the runner remembers of it.
func (p *Runner) Forget(node string) {
	p.mu.Lock()
	r := p.plans[node]
	p.mu.Unlock()
	if r != nil {
		r.mu.Lock()
		p.dropLocked(r, true)
		r.mu.Unlock()
	}
	p.mu.Lock()
	delete(p.ended, node)
	p.mu.Unlock()
	if p.cfg.Store != nil {
		p.cfg.Store.PutPlan(node, nil)
	}
}

// Result tells the runner that the result of node's command cmd is kept
// (in the outbox) and whether it succeeded: ok, the plan that ran it
// starts its next step; failed, the plan ends.
func (p *Runner) Result(node, cmd string, ok bool) {
	p.result(node, cmd, func() Kept {
		if ok {
			return KeptOK
		}
		return KeptFailed
	}())
}

// Unread tells the runner that a result of node's command cmd is kept
// but its outcome cannot be read: a plan that ran it ends.
func (p *Runner) Unread(node, cmd string) { p.result(node, cmd, KeptUnread) }

func (p *Runner) result(node, cmd string, k Kept) {
	p.mu.Lock()
	r := p.plans[node]
	p.mu.Unlock()
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gone {
		return
	}
	for j := r.rec.Index; j < len(r.rec.Steps); j++ {
		if r.rec.Steps[j].ID == cmd {
			p.learnLocked(r, j, k)
			return
		}
	}
}

// learnLocked acts on the outcome k of step j; r.mu held.
func (p *Runner) learnLocked(r *run, j int, k Kept) {
	s := r.rec.Steps[j]
	switch k {
	case KeptOK:
		r.rec.Index, r.rec.Started, r.seen, r.retry = j+1, false, false, false
		p.startLocked(r)
	case KeptFailed:
		p.log.Info("plan ended: a step failed (the coordinator fails the node when it gets the result)", "node", r.rec.Node, "plan", r.rec.ID, "step", stepName(s), "command", s.ID)
		p.dropLocked(r, true)
	case KeptUnread:
		p.log.Info("plan ended: a step's result was already acknowledged by the coordinator, which goes on from it", "node", r.rec.Node, "plan", r.rec.ID, "step", stepName(s), "command", s.ID)
		p.dropLocked(r, true)
	}
}

// Running tells the runner that node's ramdisk runs command cmd (its
// heartbeat says so): an in-band step is no longer handed to it again.
func (p *Runner) Running(node, cmd string) {
	p.mu.Lock()
	r := p.plans[node]
	p.mu.Unlock()
	if r == nil {
		return
	}
	r.mu.Lock()
	if c := r.current(); c != nil && r.rec.Started && c.ID == cmd {
		r.seen, r.sign = true, p.cfg.Clock.Now()
	}
	r.mu.Unlock()
}

// current is the running or next step (nil past the end); r.mu held.
func (r *run) current() *protocol.Message {
	if r.rec.Index < len(r.rec.Steps) {
		return r.rec.Steps[r.rec.Index]
	}
	return nil
}

// silent tells whether the coordinator has not been heard for longer
// than the silence bound.
func (p *Runner) silent(now time.Time) bool {
	return p.cfg.SilenceBound > 0 && now.Sub(p.cfg.Heard()) > p.cfg.SilenceBound
}

// startLocked starts r's next step (r.rec.Index), or ends the plan past
// its last one, or pauses it while the coordinator is silent; r.mu held.
func (p *Runner) startLocked(r *run) {
	s := r.current()
	if s == nil {
		p.log.Info("plan done: every step ran", "node", r.rec.Node, "plan", r.rec.ID, "steps", len(r.rec.Steps))
		p.dropLocked(r, true)
		return
	}
	now := p.cfg.Clock.Now()
	if p.silent(now) {
		if !r.paused {
			r.paused = true
			p.save(r)
			p.log.Warn("plan paused: the coordinator has not been heard for longer than --plan-silence-bound; the next step starts once it is heard again",
				"node", r.rec.Node, "plan", r.rec.ID, "next_step", stepName(s), "bound", p.cfg.SilenceBound, "last_heard", p.cfg.Heard())
		}
		return
	}
	if r.paused {
		r.paused = false
		p.log.Info("plan goes on: the coordinator is heard again", "node", r.rec.Node, "plan", r.rec.ID, "next_step", stepName(s))
	}
	s.Deadline = now.Add(span(s))
	r.rec.Started, r.seen, r.retry, r.sign = true, false, false, now
	// On disk before the step starts: a restarted agent goes on with it.
	p.save(r)
	p.log.Debug("plan step started", "node", r.rec.Node, "plan", r.rec.ID, "index", r.rec.Index, "step", stepName(s), "command", s.ID)
	p.issueLocked(r, s)
}

// issueLocked hands the started step s to the ramdisk or the BMC
// runner; r.mu held.
func (p *Runner) issueLocked(r *run, s *protocol.Message) {
	if s.Action == protocol.ActionInbandRun {
		p.cfg.Started("inband")
		p.cfg.Deliver(r.rec.Node, s)
		return
	}
	p.cfg.Started("oob")
	p.runOOBLocked(r, s)
}

// runOOBLocked runs the out-of-band step s in its own goroutine; r.mu
// held.
func (p *Runner) runOOBLocked(r *run, s *protocol.Message) {
	if r.running == s {
		return
	}
	r.running, r.retry = s, false
	go func() {
		out := p.cfg.RunOOB(s)
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.running == s {
			r.running = nil
		}
		if r.gone || r.current() != s {
			return
		}
		switch out {
		case OOBStale:
			p.log.Info("plan ended: a newer command of the node has started; the coordinator has moved on", "node", r.rec.Node, "plan", r.rec.ID, "step", stepName(s))
			p.dropLocked(r, true)
		case OOBRetry:
			r.retry = true
		}
	}()
}

// dropLocked ends r: it starts nothing more, and (forget) its kept state
// is deleted and its id remembered; r.mu held.
func (p *Runner) dropLocked(r *run, remove bool) {
	if r.gone {
		return
	}
	r.gone = true
	node := r.rec.Node
	p.mu.Lock()
	if p.plans[node] == r {
		delete(p.plans, node)
	}
	ids := append(p.liveEndedLocked(node, p.cfg.Clock.Now()), Ended{ID: r.rec.ID, Deadline: r.rec.Deadline})
	if len(ids) > endedPerNode {
		ids = ids[len(ids)-endedPerNode:]
	}
	p.ended[node] = ids
	if len(p.ended) > 2*p.cfg.Max {
		// Bounded: the oldest memories go first (roughly: all of them).
		p.ended = map[string][]Ended{node: ids}
	}
	_, replaced := p.plans[node]
	p.mu.Unlock()
	if remove && !replaced && p.cfg.Store != nil {
		// The record stays, holding the ended plans only.
		p.saveRecord(Record{Node: node, Ended: ids})
	}
}

// liveEndedLocked is node's ended plans whose deadline has not passed
// (or that have none); p.mu held.
func (p *Runner) liveEndedLocked(node string, now time.Time) []Ended {
	var out []Ended
	for _, e := range p.ended[node] {
		if e.Deadline.IsZero() || !now.After(e.Deadline) {
			out = append(out, e)
		}
	}
	return out
}

func (p *Runner) endedLocked(node, id string, now time.Time) bool {
	for _, x := range p.liveEndedLocked(node, now) {
		if x.ID == id {
			return true
		}
	}
	return false
}

// save writes r to the store, with its node's ended plans; r.mu held.
func (p *Runner) save(r *run) {
	if p.cfg.Store == nil {
		return
	}
	rec := r.rec
	p.mu.Lock()
	rec.Ended = p.liveEndedLocked(rec.Node, p.cfg.Clock.Now())
	p.mu.Unlock()
	p.saveRecord(rec)
}

// saveRecord writes rec to the store (with no plan and no ended plan:
// removes the node's record).
func (p *Runner) saveRecord(rec Record) {
	if rec.ID == "" && len(rec.Ended) == 0 {
		p.cfg.Store.PutPlan(rec.Node, nil)
		return
	}
	b, err := json.Marshal(rec)
	if err != nil {
		p.log.Error("plan cannot be encoded; not kept", "node", rec.Node, "plan", rec.ID, "err", err)
		return
	}
	p.cfg.Store.PutPlan(rec.Node, b)
}

// Tick looks at every plan: an in-band step the ramdisk has not been
// seen running is handed to it again, an out-of-band step that could
// not run is tried again, a paused plan goes on once the coordinator is
// heard, and a step that seems lost ends its plan (the coordinator
// decides what becomes of it): an out-of-band step without a result one
// resend interval past its deadline, an in-band step without a result
// or a heartbeat naming it for its span and a resend interval (as the
// coordinator's WAIT timeout, which heartbeats renew: an in-band step
// may run for hours).
func (p *Runner) Tick() {
	p.mu.Lock()
	runs := make([]*run, 0, len(p.plans))
	for _, r := range p.plans {
		runs = append(runs, r)
	}
	p.mu.Unlock()
	now := p.cfg.Clock.Now()
	for _, r := range runs {
		r.mu.Lock()
		p.tickLocked(r, now)
		r.mu.Unlock()
	}
}

func (p *Runner) tickLocked(r *run, now time.Time) {
	if r.gone {
		return
	}
	s := r.current()
	switch {
	case s == nil || !r.rec.Started:
		p.startLocked(r)
	case p.lostLocked(r, s, now):
		p.log.Warn("plan ended: its running step gave no sign within its span (no result, no heartbeat naming it); the coordinator decides what becomes of it",
			"node", r.rec.Node, "plan", r.rec.ID, "step", stepName(s), "command", s.ID, "deadline", s.Deadline, "last_sign", r.sign)
		p.dropLocked(r, true)
	case s.Action == protocol.ActionInbandRun && !r.seen:
		p.cfg.Deliver(r.rec.Node, s)
	case s.Action == protocol.ActionOOBStep && r.retry:
		p.runOOBLocked(r, s)
	}
}

// lostLocked tells whether r's running step s seems lost by now; r.mu
// held.
func (p *Runner) lostLocked(r *run, s *protocol.Message, now time.Time) bool {
	if s.Action == protocol.ActionInbandRun {
		return now.After(r.sign.Add(span(s) + p.cfg.Resend))
	}
	return now.After(s.Deadline.Add(p.cfg.Resend))
}

// span is the time step s has once started.
func span(s *protocol.Message) time.Duration { return time.Duration(s.SpanSeconds) * time.Second }

// Refuse logs, at a bounded rate, that a run_plan was refused and why.
func (p *Runner) Refuse(node, plan, why string) {
	p.warn.Warn("plan refused", "run_plan refused: "+why, "node", node, "plan", plan)
}

// Restore loads the kept plans and goes on with each: a step whose
// result is kept already is not run again (the plan moves past it, or
// ends if it failed); the running step is handed to the ramdisk again
// (which still runs it or holds its result) or run again through the
// exactly-once runner (as a resend of it would be). Call it once, when
// the ramdisks and the BMC runner can be reached.
func (p *Runner) Restore() error {
	if p.cfg.Store == nil {
		return nil
	}
	kept, err := p.cfg.Store.LoadPlans()
	if err != nil {
		return fmt.Errorf("read the plans in the state folder: %w", err)
	}
	nodes := make([]string, 0, len(kept))
	for node := range kept {
		nodes = append(nodes, node)
	}
	sort.Strings(nodes)
	now := p.cfg.Clock.Now()
	for _, node := range nodes {
		var rec Record
		if err := json.Unmarshal(kept[node], &rec); err != nil || rec.Node != node || (rec.ID == "" && len(rec.Ended) == 0) || rec.Index < 0 || rec.Index > len(rec.Steps) {
			p.log.Warn("kept plan unreadable: dropped (the coordinator sends the steps itself)", "node", node, "err", err)
			p.cfg.Store.PutPlan(node, nil)
			continue
		}
		// The link is up before Restore runs: a plan the coordinator sent
		// (or the broker delivered again) may have come in since the
		// start. It is the newer: it replaces the kept one, as a new
		// plan replaces a node's plan, and the ended plans add up.
		p.mu.Lock()
		p.ended[node] = append(rec.Ended, p.ended[node]...)
		received := p.plans[node]
		p.mu.Unlock()
		rec.Ended = nil
		if rec.ID == "" {
			continue // ended plans only
		}
		if received != nil {
			if received.rec.ID != rec.ID {
				p.log.Info("a plan received since the start replaces the kept plan; the kept one is not resumed", "node", node, "plan", rec.ID, "new_plan", received.rec.ID)
			}
			continue
		}
		r := &run{rec: rec, sign: now}
		r.mu.Lock()
		if !rec.Deadline.IsZero() && now.After(rec.Deadline.Add(p.cfg.Resend)) {
			// The agent was down past the plan's end: the coordinator has
			// timed its steps out or sent them itself.
			p.log.Warn("kept plan past its deadline: ended, not resumed (the coordinator decides what becomes of its steps)",
				"node", node, "plan", rec.ID, "deadline", rec.Deadline)
			p.dropLocked(r, true)
			r.mu.Unlock()
			continue
		}
		p.mu.Lock()
		p.plans[node] = r
		p.mu.Unlock()
		p.resumeLocked(r)
		r.mu.Unlock()
	}
	if len(nodes) > 0 {
		p.log.Info("plans loaded from the state folder: each goes on where it was", "plans", len(nodes))
	}
	return nil
}

// resumeLocked goes on with a plan a previous process ran; r.mu held.
func (p *Runner) resumeLocked(r *run) {
	s := r.current()
	if s == nil || !r.rec.Started {
		p.startLocked(r)
		return
	}
	if s.Action == protocol.ActionOOBStep {
		if k := p.cfg.Kept(s.ID); k != KeptNone {
			p.learnLocked(r, r.rec.Index, k)
			return
		}
	}
	p.log.Info("plan resumed: its running step is handed out again", "node", r.rec.Node, "plan", r.rec.ID, "step", stepName(s), "command", s.ID)
	if s.Action == protocol.ActionInbandRun {
		p.cfg.Deliver(r.rec.Node, s)
		return
	}
	// It runs again from its start (a BMC command the agent's stop cut
	// short leaves no result): with its whole span, as when it started.
	s.Deadline = p.cfg.Clock.Now().Add(span(s))
	p.save(r)
	p.runOOBLocked(r, s)
}

// stepName is a step command's interface.step.
func stepName(m *protocol.Message) string {
	if m.Step == nil {
		return m.Action
	}
	return m.Step.Interface + "." + m.Step.Step
}
