package session

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/bmedge/bmedge/lib/waitfor"
	"github.com/bmedge/bmedge/protocol"
)

// wire records what the session publishes.
type wire struct {
	mu   sync.Mutex
	msgs []*protocol.Message
	seen chan struct{}
}

func (w *wire) Publish(_ context.Context, topic string, payload []byte) error {
	m, err := protocol.Decode(payload)
	if err != nil {
		return err
	}
	w.mu.Lock()
	w.msgs = append(w.msgs, m)
	w.mu.Unlock()
	select {
	case w.seen <- struct{}{}:
	default:
	}
	return nil
}

// await returns the first message that matches, or fails after d.
func (w *wire) await(t *testing.T, d time.Duration, what string, match func(*protocol.Message) bool) *protocol.Message {
	t.Helper()
	deadline := time.After(d)
	for {
		w.mu.Lock()
		msgs := append([]*protocol.Message(nil), w.msgs...)
		w.mu.Unlock()
		for _, m := range msgs {
			if match(m) {
				return m
			}
		}
		select {
		case <-w.seen:
		case <-time.After(10 * time.Millisecond):
		case <-deadline:
			t.Fatalf("no %s within %s", what, d)
		}
	}
}

func (w *wire) count(match func(*protocol.Message) bool) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, m := range w.msgs {
		if match(m) {
			n++
		}
	}
	return n
}

type stepRunner struct {
	ran   chan string
	fail  error
	block chan struct{}
}

func (r *stepRunner) Steps() (clean, deploy []protocol.Step) {
	return []protocol.Step{{Interface: "deploy", Step: "erase_devices", Priority: 10}}, nil
}

func (r *stepRunner) Run(ctx context.Context, st protocol.Step, progress func(float64, string)) (map[string]any, error) {
	r.ran <- st.Step
	progress(0.5, "half")
	if r.block != nil {
		select {
		case <-r.block:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return map[string]any{"done": st.Step}, r.fail
}

func start(t *testing.T, r Runner, cfg Config) (*Session, *wire) {
	t.Helper()
	w := &wire{seen: make(chan struct{}, 1)}
	cfg.Site, cfg.Node, cfg.Runner, cfg.Transport = "s1", "n1", r, w
	cfg.Log = slog.New(slog.DiscardHandler)
	s := New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return s, w
}

func kind(k string) func(*protocol.Message) bool {
	return func(m *protocol.Message) bool { return m.Kind == k }
}

// A welcome ends the hellos at once and the first heartbeat follows
// without waiting for the hello interval or the heartbeat jitter.
func TestWelcomeThenFirstHeartbeatAtOnce(t *testing.T) {
	s, w := start(t, &stepRunner{ran: make(chan string, 1)}, Config{Heartbeat: time.Hour, HelloInterval: time.Hour, ResendInterval: time.Hour})
	hello := w.await(t, 5*time.Second, "hello", kind(protocol.KindHello))
	if hello.BootID != s.BootID() || len(hello.CleanSteps) != 1 || hello.CleanSteps[0].Step != "erase_devices" {
		t.Fatalf("hello %+v: want this boot's id and the runner's steps", hello)
	}
	// A welcome for another boot is not ours.
	s.Deliver(&protocol.Message{Kind: protocol.KindWelcome, Node: "n1", BootID: "other", Token: "tok-old"})
	s.Deliver(&protocol.Message{Kind: protocol.KindWelcome, Node: "n1", BootID: s.BootID(), Token: "tok"})
	hb := w.await(t, 5*time.Second, "heartbeat", kind(protocol.KindHeartbeat))
	if hb.Token != "tok" {
		t.Fatalf("heartbeat token %q, want tok", hb.Token)
	}
	if n := w.count(kind(protocol.KindHello)); n != 1 {
		t.Fatalf("%d hellos, want 1 (the welcome came before the next)", n)
	}
}

// TestHeartbeatCarriesRescueRefusals: a heartbeat carries the rescue
// login's refusals of the kinds the contract names, the zero counts and
// any other kind left out; none at all while nothing was refused.
func TestHeartbeatCarriesRescueRefusals(t *testing.T) {
	var mu sync.Mutex
	counts := map[string]int64{}
	s, w := start(t, &stepRunner{ran: make(chan string, 1)}, Config{Heartbeat: 20 * time.Millisecond, HelloInterval: time.Hour, ResendInterval: time.Hour,
		RescueRefused: func() map[string]int64 { mu.Lock(); defer mu.Unlock(); return maps.Clone(counts) }})
	w.await(t, 5*time.Second, "hello", kind(protocol.KindHello))
	s.Deliver(&protocol.Message{Kind: protocol.KindWelcome, Node: "n1", BootID: s.BootID(), Token: "tok"})
	if hb := w.await(t, 5*time.Second, "heartbeat", kind(protocol.KindHeartbeat)); hb.RescueRefused != nil {
		t.Fatalf("heartbeat with nothing refused carries %v", hb.RescueRefused)
	}
	mu.Lock()
	counts["login-failed"], counts["pending-per-source"], counts["sessions"], counts["gossip"] = 9, 6, 0, 4
	mu.Unlock()
	hb := w.await(t, 5*time.Second, "heartbeat with refusals", func(m *protocol.Message) bool {
		return m.Kind == protocol.KindHeartbeat && m.RescueRefused != nil
	})
	if want := map[string]int64{"login-failed": 9, "pending-per-source": 6}; !maps.Equal(hb.RescueRefused, want) {
		t.Fatalf("heartbeat carries %v, want %v", hb.RescueRefused, want)
	}
}

func TestStepsNeedTheTokenAndResultsWaitForTheAck(t *testing.T) {
	r := &stepRunner{ran: make(chan string, 4), fail: errors.New("disk on fire")}
	s, w := start(t, r, Config{Heartbeat: time.Hour, HelloInterval: 20 * time.Millisecond, ResendInterval: 100 * time.Millisecond})
	w.await(t, 5*time.Second, "hello", kind(protocol.KindHello))
	s.Deliver(&protocol.Message{Kind: protocol.KindWelcome, Node: "n1", BootID: s.BootID(), Token: "tok"})
	w.await(t, 5*time.Second, "heartbeat", kind(protocol.KindHeartbeat))

	step := &protocol.Step{Interface: "deploy", Step: "erase_devices"}
	s.Deliver(&protocol.Message{Kind: protocol.KindCommand, ID: "c0", Action: protocol.ActionInbandRun, Token: "wrong", Step: step})
	s.Deliver(&protocol.Message{Kind: protocol.KindCommand, ID: "c1", Action: protocol.ActionInbandRun, Token: "tok", Step: step})
	if got := <-r.ran; got != "erase_devices" {
		t.Fatalf("ran %q", got)
	}
	isResult := func(m *protocol.Message) bool { return m.Kind == protocol.KindResult && m.CommandID == "c1" }
	res := w.await(t, 5*time.Second, "result", isResult)
	if res.OK || res.Error != "disk on fire" || res.Token != "tok" {
		t.Fatalf("result %+v: want a failure with the runner's error and the token", res)
	}
	// Unacknowledged, the result is sent again.
	w.await(t, 5*time.Second, "resent result", func(m *protocol.Message) bool { return isResult(m) && w.count(isResult) >= 2 })
	// A duplicate command gets the stored result, without running again.
	s.Deliver(&protocol.Message{Kind: protocol.KindCommand, ID: "c1", Action: protocol.ActionInbandRun, Token: "tok", Step: step})
	s.Deliver(&protocol.Message{Kind: protocol.KindAck, AckIDs: []string{res.ID}})
	if !waitfor.Until(5*time.Second, func() bool { return s.Outbox() == 0 }) {
		t.Fatal("the ack did not empty the outbox")
	}
	select {
	case again := <-r.ran:
		t.Fatalf("the duplicate command ran the step again (%s)", again)
	case <-time.After(200 * time.Millisecond):
	}
	if n := w.count(func(m *protocol.Message) bool { return m.Kind == protocol.KindResult && m.CommandID == "c0" }); n != 0 {
		t.Fatal("a command with a wrong token was run")
	}
}

func TestAbortCancelsTheRunningStep(t *testing.T) {
	r := &stepRunner{ran: make(chan string, 1), block: make(chan struct{})}
	s, w := start(t, r, Config{Heartbeat: time.Hour, HelloInterval: 20 * time.Millisecond, ResendInterval: time.Hour})
	w.await(t, 5*time.Second, "hello", kind(protocol.KindHello))
	s.Deliver(&protocol.Message{Kind: protocol.KindWelcome, Node: "n1", BootID: s.BootID(), Token: "tok"})
	s.Deliver(&protocol.Message{Kind: protocol.KindCommand, ID: "c1", Action: protocol.ActionInbandRun, Token: "tok",
		Step: &protocol.Step{Interface: "deploy", Step: "erase_devices"}})
	<-r.ran
	// The heartbeat sent when the step starts names it.
	w.await(t, 5*time.Second, "heartbeat naming the running step", func(m *protocol.Message) bool {
		return m.Kind == protocol.KindHeartbeat && m.Running == "c1"
	})
	s.Deliver(&protocol.Message{Kind: protocol.KindCommand, ID: "a1", Action: protocol.ActionAbort, Token: "tok", Args: map[string]any{"command_id": "c1"}})
	if !waitfor.Until(5*time.Second, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.running == ""
	}) {
		t.Fatal("the aborted step still runs")
	}
	if n := w.count(kind(protocol.KindResult)); n != 0 {
		t.Fatalf("an aborted step sent %d result(s); the coordinator has moved on", n)
	}
}

// startedRunner records whether its step was resumed (StartedAt).
type startedRunner struct {
	stepRunner
	resumed chan time.Time
}

func (r *startedRunner) Run(ctx context.Context, st protocol.Step, progress func(float64, string)) (map[string]any, error) {
	if t, ok := StartedAt(ctx); ok {
		r.resumed <- t
	}
	return r.stepRunner.Run(ctx, st, progress)
}

// TestResumeGoesOnWithTheSavedState: Save sees every change in order (the
// result before it is published); a session resumed from the last State
// (its host was stopped mid-step) says no hello, heartbeats with the
// token, starts the running step again telling the runner when it first
// began, and its result answers the same command; resumed from a State
// with an unacknowledged result, it sends that result again and runs
// nothing.
func TestResumeGoesOnWithTheSavedState(t *testing.T) {
	var mu sync.Mutex
	var states []State
	save := func(st State) { mu.Lock(); states = append(states, st); mu.Unlock() }
	last := func() State { mu.Lock(); defer mu.Unlock(); return states[len(states)-1] }

	r1 := &startedRunner{stepRunner: stepRunner{ran: make(chan string, 1), block: make(chan struct{})}, resumed: make(chan time.Time, 1)}
	w1 := &wire{seen: make(chan struct{}, 1)}
	s1 := New(Config{Site: "s1", Node: "n1", Runner: r1, Transport: w1, Log: slog.New(slog.DiscardHandler), Save: save,
		Heartbeat: time.Hour, HelloInterval: 20 * time.Millisecond, ResendInterval: time.Hour})
	ctx1, kill1 := context.WithCancel(context.Background())
	done1 := make(chan struct{})
	go func() { s1.Run(ctx1); close(done1) }()
	w1.await(t, 5*time.Second, "hello", kind(protocol.KindHello))
	s1.Deliver(&protocol.Message{Kind: protocol.KindWelcome, Node: "n1", BootID: s1.BootID(), Token: "tok"})
	step := &protocol.Step{Interface: "deploy", Step: "erase_devices"}
	s1.Deliver(&protocol.Message{Kind: protocol.KindCommand, ID: "c1", Action: protocol.ActionInbandRun, Token: "tok", Step: step})
	<-r1.ran
	kill1()
	<-done1
	st := last()
	if st.BootID != s1.BootID() || st.Token != "tok" || st.Running == nil || st.Running.ID != "c1" || st.Started.IsZero() {
		t.Fatalf("saved state mid-step: %+v, want the boot, token and running command c1 with its start", st)
	}

	r2 := &startedRunner{stepRunner: stepRunner{ran: make(chan string, 1)}, resumed: make(chan time.Time, 1)}
	var s2 *Session
	s2, w2 := start(t, r2, Config{Save: save, Resume: &st, Heartbeat: time.Hour, HelloInterval: 20 * time.Millisecond, ResendInterval: time.Hour})
	if s2.BootID() != s1.BootID() {
		t.Fatal("the resumed session has another boot id")
	}
	select {
	case began := <-r2.resumed:
		if !began.Equal(st.Started) {
			t.Fatalf("StartedAt %v, want the saved start %v", began, st.Started)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the resumed session did not start the running step again with StartedAt")
	}
	res := w2.await(t, 5*time.Second, "result", func(m *protocol.Message) bool { return m.Kind == protocol.KindResult && m.CommandID == "c1" })
	if !res.OK || res.Token != "tok" {
		t.Fatalf("result %+v", res)
	}
	w2.await(t, 5*time.Second, "heartbeat", func(m *protocol.Message) bool { return m.Kind == protocol.KindHeartbeat && m.Token == "tok" })
	if n := w2.count(kind(protocol.KindHello)); n != 0 {
		t.Fatalf("the resumed session said hello %d times", n)
	}
	// The result was saved before it went out.
	var saved State
	waitfor.Until(5*time.Second, func() bool { saved = last(); return saved.Outbox[res.ID] != nil })
	if saved.Outbox[res.ID] == nil || saved.Results["c1"] == nil || saved.Running != nil {
		t.Fatalf("state after the result: %+v, want it unacknowledged and done, nothing running", saved)
	}

	r3 := &startedRunner{stepRunner: stepRunner{ran: make(chan string, 1)}, resumed: make(chan time.Time, 1)}
	_, w3 := start(t, r3, Config{Resume: &saved, Heartbeat: time.Hour, ResendInterval: 100 * time.Millisecond})
	again := w3.await(t, 5*time.Second, "the unacknowledged result again", func(m *protocol.Message) bool { return m.Kind == protocol.KindResult })
	if again.ID != res.ID {
		t.Fatalf("resent result %s, want %s", again.ID, res.ID)
	}
	select {
	case <-r3.ran:
		t.Fatal("the finished step ran again")
	case <-time.After(200 * time.Millisecond):
	}
}
