// Package session is the ramdisk agent's side of the protocol for one boot
// of a node: hello until welcomed, heartbeats with the agent token and the
// running step's progress, in-band steps run one at a time, results kept
// in an outbox until the coordinator acknowledges them. The real ramdisk
// and the edge agent's simulated nodes both run it, so it lives in lib/,
// the infrastructure the programs share: it must never touch a disk
// itself (steps are the Runner's business), nor import a package of
// coordinator/, agent/ or ramdisk/ (protocol/imports_test.go). Its time
// is Config.Clock's, so that its tests drive the hello, heartbeat and
// resend timers.
package session

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/bmedge/bmedge/lib/clock"
	"github.com/bmedge/bmedge/protocol"
)

// Transport publishes messages (over the node's own MQTT connection, or
// the edge agent's on behalf of a simulated node).
type Transport interface {
	Publish(ctx context.Context, topic string, payload []byte) error
}

// Runner knows and runs the in-band steps of this hardware.
type Runner interface {
	// Steps returns the clean and deploy steps this ramdisk offers.
	Steps() (clean, deploy []protocol.Step)
	// Run runs one step; progress reports 0..1 and a short detail.
	Run(ctx context.Context, step protocol.Step, progress func(p float64, detail string)) (map[string]any, error)
}

// ErrDied is returned by a Runner to make the agent stop dead mid-step,
// without a result (failure injection for simulated nodes).
var ErrDied = errors.New("the ramdisk agent died")

// Config configures a session.
type Config struct {
	Site, Node     string
	Heartbeat      time.Duration
	HelloInterval  time.Duration
	ResendInterval time.Duration
	Runner         Runner
	Transport      Transport
	Log            *slog.Logger
	// Clock is the session's time: its timers and the times it stamps
	// (nil: the system clock).
	Clock clock.Clock
	// Save, when set, is given the session's State after every change
	// of it (welcome, step start, result, ack), one call at a time and
	// in order, before the change shows outside: a result is saved
	// before it is published. A host that keeps the last State can go on
	// with Resume after it restarts (the edge agent's simulated nodes,
	// whose "hardware" dies with the agent; a real ramdisk needs neither).
	Save func(State)
	// RescueRefused, when set, counts what the node's rescue login
	// refused since it started, by kind (protocol.RescueRefusalKinds;
	// nil or empty while none runs or it refused nothing): each
	// heartbeat carries it to the coordinator's /metrics.
	RescueRefused func() map[string]int64
	// Resume, when set, goes on with a session a previous process ran:
	// its boot id, token, done-records and unacked results, and its
	// running step, started again with StartedAt telling when it began.
	Resume *State
}

// State is what a session has to keep to go on after its host restarts.
type State struct {
	BootID string `json:"boot_id"`
	Token  string `json:"token,omitempty"`
	// Running is the command of the step that runs, and Started when it
	// began.
	Running *protocol.Message `json:"running,omitempty"`
	Started time.Time         `json:"started,omitzero"`
	// Results are the done-records (command id → its result), Outbox
	// the results not acknowledged yet (result id → payload).
	Results map[string][]byte `json:"results,omitempty"`
	Outbox  map[string][]byte `json:"outbox,omitempty"`
}

type startedKey struct{}

// StartedAt tells a Runner, for a step a resumed session started again,
// when the step first began (ok false for a step started afresh).
func StartedAt(ctx context.Context) (time.Time, bool) {
	t, ok := ctx.Value(startedKey{}).(time.Time)
	return t, ok
}

// Session is one boot of a ramdisk agent.
type Session struct {
	cfg    Config
	bootID string
	inbox  chan *protocol.Message
	ctx    context.Context
	cancel context.CancelFunc
	stop   chan struct{}
	once   sync.Once
	// welcomed is closed by the first welcome of this boot.
	welcomed    chan struct{}
	welcomeOnce sync.Once

	mu         sync.Mutex
	tokenValue string
	running    string
	progress   float64
	detail     string
	steps      map[string]context.CancelFunc
	results    map[string][]byte // command id → its result, for duplicates
	outbox     map[string]outItem
	// runningCmd and started are the running step's command and start
	// (for State).
	runningCmd *protocol.Message
	started    time.Time
	// saveMu keeps Save's calls one at a time and in order.
	saveMu sync.Mutex
}

type outItem struct {
	payload []byte
	sent    time.Time
}

func newID() string {
	b := make([]byte, 12)
	_, _ = crand.Read(b)
	return hex.EncodeToString(b)
}

// New prepares a session with a fresh boot id.
func New(cfg Config) *Session {
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = 10 * time.Second
	}
	if cfg.HelloInterval == 0 {
		cfg.HelloInterval = 2 * time.Second
	}
	if cfg.ResendInterval == 0 {
		cfg.ResendInterval = 5 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	cfg.Clock = clock.Or(cfg.Clock)
	s := &Session{cfg: cfg, bootID: newID(), inbox: make(chan *protocol.Message, 256), stop: make(chan struct{}), welcomed: make(chan struct{}),
		steps: map[string]context.CancelFunc{}, results: map[string][]byte{}, outbox: map[string]outItem{}}
	if st := cfg.Resume; st != nil {
		s.bootID, s.tokenValue = st.BootID, st.Token
		for id, b := range st.Results {
			s.results[id] = b
		}
		for id, b := range st.Outbox {
			s.outbox[id] = outItem{payload: b} // resent at once
		}
		if s.tokenValue != "" {
			s.welcomeOnce.Do(func() { close(s.welcomed) })
		}
	}
	return s
}

// state is the session's State; s.mu held.
func (s *Session) stateLocked() State {
	st := State{BootID: s.bootID, Token: s.tokenValue, Running: s.runningCmd, Started: s.started}
	if len(s.results) > 0 {
		st.Results = make(map[string][]byte, len(s.results))
		for id, b := range s.results {
			st.Results[id] = b
		}
	}
	if len(s.outbox) > 0 {
		st.Outbox = make(map[string][]byte, len(s.outbox))
		for id, it := range s.outbox {
			st.Outbox[id] = it.payload
		}
	}
	return st
}

// change applies fn under the lock and hands the new State to Save.
func (s *Session) change(fn func()) {
	if s.cfg.Save == nil {
		s.mu.Lock()
		fn()
		s.mu.Unlock()
		return
	}
	s.saveMu.Lock()
	defer s.saveMu.Unlock()
	s.mu.Lock()
	fn()
	st := s.stateLocked()
	s.mu.Unlock()
	s.cfg.Save(st)
}

// BootID is this boot's id.
func (s *Session) BootID() string { return s.bootID }

// Deliver hands the session a message from the node's command topic. It
// never blocks; messages are handled in order.
func (s *Session) Deliver(m *protocol.Message) {
	select {
	case s.inbox <- m:
	default:
		s.cfg.Log.Warn("ramdisk inbox full; message dropped (the coordinator resends)", "node", s.cfg.Node)
	}
}

// Stop ends the session (power-off of the node), also before Run.
func (s *Session) Stop() { s.once.Do(func() { close(s.stop) }) }

// Stopped is closed by Stop.
func (s *Session) Stopped() <-chan struct{} { return s.stop }

func (s *Session) evt() string { return protocol.NodeEvtTopic(s.cfg.Site, s.cfg.Node) }

func (s *Session) publish(payload []byte) {
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	if err := s.cfg.Transport.Publish(ctx, s.evt(), payload); err != nil {
		s.cfg.Log.Debug("publish failed; will resend", "node", s.cfg.Node, "err", err)
	}
}

func (s *Session) sleep(d time.Duration) bool {
	t := s.cfg.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.ctx.Done():
		return false
	case <-t.C():
		return true
	}
}

// Run says hello until welcomed, then heartbeats and serves commands until
// ctx ends or the session is stopped.
func (s *Session) Run(ctx context.Context) {
	s.ctx, s.cancel = context.WithCancel(ctx)
	defer s.cancel()
	go func() {
		select {
		case <-s.stop:
			s.cancel()
		case <-s.ctx.Done():
		}
	}()
	go s.serve()
	go s.resendLoop()
	if st := s.cfg.Resume; st != nil && st.Running != nil && st.Running.Step != nil {
		s.begin(st.Running, st.Started)
	}
	clean, deploy := s.cfg.Runner.Steps()
	hello := &protocol.Message{Kind: protocol.KindHello, Site: s.cfg.Site, Node: s.cfg.Node, BootID: s.bootID,
		CleanSteps: clean, DeploySteps: deploy}
	select {
	case <-s.welcomed:
		// Resumed with its token: it was welcomed before; no hello.
		goto welcomed
	default:
	}
hello:
	for {
		hello.ID, hello.Sent = newID(), s.cfg.Clock.Now()
		if b, err := protocol.Encode(hello); err == nil {
			s.publish(b)
		}
		t := s.cfg.Clock.NewTimer(s.cfg.HelloInterval)
		select {
		case <-s.ctx.Done():
			t.Stop()
			return
		case <-s.welcomed:
			t.Stop()
			break hello
		case <-t.C():
		}
	}
welcomed:
	// The first heartbeat goes out as soon as the welcome is in, as Ironic's
	// agent heartbeats right after its lookup; jitter then spreads the
	// following ones of many nodes.
	s.heartbeat()
	if !s.sleep(time.Duration(rand.Int64N(int64(s.cfg.Heartbeat)))) {
		return
	}
	tk := s.cfg.Clock.NewTicker(s.cfg.Heartbeat)
	defer tk.Stop()
	for {
		s.heartbeat()
		select {
		case <-s.ctx.Done():
			return
		case <-tk.C():
		}
	}
}

func (s *Session) token() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tokenValue
}

func (s *Session) heartbeat() {
	s.mu.Lock()
	hb := &protocol.Message{Kind: protocol.KindHeartbeat, ID: newID(), Site: s.cfg.Site, Node: s.cfg.Node, Sent: s.cfg.Clock.Now(),
		Token: s.tokenValue, Running: s.running, Progress: s.progress, Detail: s.detail}
	s.mu.Unlock()
	if s.cfg.RescueRefused != nil {
		hb.RescueRefused = rescueRefused(s.cfg.RescueRefused())
	}
	if b, err := protocol.Encode(hb); err == nil {
		s.publish(b)
	}
}

// rescueRefused is the heartbeat's rescue_refused: the kinds with
// refusals, of those the contract names (another would make the
// heartbeat invalid).
func rescueRefused(counts map[string]int64) map[string]int64 {
	var out map[string]int64
	for _, k := range protocol.RescueRefusalKinds {
		if n := counts[k]; n > 0 {
			if out == nil {
				out = map[string]int64{}
			}
			out[k] = n
		}
	}
	return out
}

func (s *Session) serve() {
	for {
		select {
		case <-s.ctx.Done():
			return
		case m := <-s.inbox:
			s.handle(m)
		}
	}
}

func (s *Session) handle(m *protocol.Message) {
	switch m.Kind {
	case protocol.KindWelcome:
		if m.BootID != "" && m.BootID != s.bootID {
			return
		}
		s.change(func() { s.tokenValue = m.Token })
		if m.Token != "" {
			s.welcomeOnce.Do(func() { close(s.welcomed) })
		}
	case protocol.KindAck:
		s.change(func() {
			for _, id := range m.AckIDs {
				delete(s.outbox, id)
			}
		})
	case protocol.KindCommand:
		tok := s.token()
		if tok == "" || m.Token != tok {
			s.cfg.Log.Warn("ramdisk: command with a wrong token ignored", "node", s.cfg.Node, "command", m.ID)
			return
		}
		switch m.Action {
		case protocol.ActionInbandRun:
			s.start(m)
		case protocol.ActionAbort:
			id := protocol.AbortArgsOf(m.Args).CommandID
			s.mu.Lock()
			if c := s.steps[id]; c != nil {
				c()
			}
			s.mu.Unlock()
		}
	}
}

func (s *Session) start(m *protocol.Message) {
	s.mu.Lock()
	if res, ok := s.results[m.ID]; ok {
		// Done before: the result was lost or not yet acked; send it again.
		s.mu.Unlock()
		s.publish(res)
		return
	}
	busy := s.steps[m.ID] != nil || s.running != ""
	s.mu.Unlock()
	if !busy {
		s.begin(m, time.Time{})
	}
}

// begin runs the step of command m; resumed is when a previous process
// began it (zero: it begins now).
func (s *Session) begin(m *protocol.Message, resumed time.Time) {
	var ctx context.Context
	var cancel context.CancelFunc
	busy := false
	s.change(func() {
		if s.steps[m.ID] != nil || s.running != "" {
			busy = true
			return
		}
		ctx, cancel = context.WithCancel(s.ctx)
		if !resumed.IsZero() {
			ctx = context.WithValue(ctx, startedKey{}, resumed)
		}
		s.steps[m.ID] = cancel
		s.running, s.progress, s.detail = m.ID, 0, ""
		s.runningCmd, s.started = m, resumed
		if resumed.IsZero() {
			s.started = s.cfg.Clock.Now()
		}
	})
	if busy {
		return
	}
	// Tell the coordinator at once that the step runs (no more resends).
	s.heartbeat()
	go func() {
		defer cancel()
		data, err := s.cfg.Runner.Run(ctx, *m.Step, func(p float64, d string) {
			s.mu.Lock()
			s.progress, s.detail = min(max(p, 0), 1), d
			s.mu.Unlock()
		})
		if errors.Is(err, ErrDied) {
			s.cfg.Log.Warn("ramdisk agent dies mid-step (failure injection)", "node", s.cfg.Node, "step", m.Step.Step)
			s.cancel()
			return
		}
		if ctx.Err() != nil {
			// Aborted or powered off: the coordinator has moved on. (A
			// session whose host stops keeps the step as running in its
			// saved State: s.ctx ended.)
			s.mu.Lock()
			delete(s.steps, m.ID)
			s.running, s.progress, s.detail = "", 0, ""
			s.mu.Unlock()
			if s.ctx.Err() == nil {
				s.change(func() { s.runningCmd, s.started = nil, time.Time{} })
			}
			return
		}
		s.mu.Lock()
		tok := s.tokenValue
		s.mu.Unlock()
		res := &protocol.Message{Kind: protocol.KindResult, ID: newID(), Site: s.cfg.Site, Node: s.cfg.Node, Sent: s.cfg.Clock.Now(),
			Token: tok, CommandID: m.ID, OK: err == nil, Data: data}
		if err != nil {
			res.Error = err.Error()
		}
		b, encErr := protocol.Encode(res)
		if encErr != nil {
			s.cfg.Log.Error("result cannot be encoded", "node", s.cfg.Node, "err", encErr)
			s.change(func() {
				delete(s.steps, m.ID)
				s.running, s.progress, s.detail = "", 0, ""
				s.runningCmd, s.started = nil, time.Time{}
			})
			return
		}
		// Kept (and saved) before it is published.
		s.change(func() {
			delete(s.steps, m.ID)
			s.running, s.progress, s.detail = "", 0, ""
			s.runningCmd, s.started = nil, time.Time{}
			s.results[m.ID] = b
			s.outbox[res.ID] = outItem{payload: b, sent: s.cfg.Clock.Now()}
		})
		s.publish(b)
	}()
}

func (s *Session) resendLoop() {
	tk := s.cfg.Clock.NewTicker(s.cfg.ResendInterval / 2)
	defer tk.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-tk.C():
		}
		now := s.cfg.Clock.Now()
		var due [][]byte
		s.mu.Lock()
		for id, it := range s.outbox {
			if now.Sub(it.sent) >= s.cfg.ResendInterval {
				it.sent = now
				s.outbox[id] = it
				due = append(due, it.payload)
			}
		}
		s.mu.Unlock()
		for _, b := range due {
			s.publish(b)
		}
	}
}

// Outbox returns how many results wait for an ack.
func (s *Session) Outbox() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.outbox)
}
