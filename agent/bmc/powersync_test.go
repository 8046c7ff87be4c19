package bmc

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/lib/clock"
	"github.com/bmedge/bmedge/protocol"
)

// stubBMC answers PowerState with what the test sets.
type stubBMC struct {
	mu    sync.Mutex
	state string
	err   error
}

func (b *stubBMC) set(state string, err error) {
	b.mu.Lock()
	b.state, b.err = state, err
	b.mu.Unlock()
}
func (b *stubBMC) PowerState(context.Context) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state, b.err
}
func (b *stubBMC) Validate(context.Context) error                                { return nil }
func (b *stubBMC) SetPower(context.Context, string) error                        { return nil }
func (b *stubBMC) SetBootDevice(context.Context, string) error                   { return nil }
func (b *stubBMC) RunStep(context.Context, string, string, map[string]any) error { return nil }

// TestPowerSyncReportsChanges: power sync polls only the nodes whose
// real BMC ran a command, reports a reading only when it is a change or
// a failure, takes a power command's outcome as the last reading, reads
// no BMC while a command runs on it, and takes no reading while paused
// (the outbox is full). No MQTT: reports are collected.
func TestPowerSyncReportsChanges(t *testing.T) {
	var reports []string
	paused := false
	stub := &stubBMC{state: protocol.PowerOff}
	sim := &stubBMC{state: protocol.PowerOff}
	s := New(Config{Site: "s1", Log: slog.New(slog.DiscardHandler), PowerSyncInterval: time.Second,
		Clock: clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
		Builders: map[string]Builder{
			"ipmi": {New: func(string, map[string]any, int) (drivers.BMC, error) { return stub, nil }},
			"fake": {NoPowerSync: true, New: func(string, map[string]any, int) (drivers.BMC, error) { return sim, nil }},
		},
		Report: func(m *protocol.Message) {
			r := m.Node + ":" + m.PowerState
			if m.Error != "" {
				r += "!" + m.Error
			}
			reports = append(reports, r)
		},
		Paused: func() bool { return paused }})
	ctx := context.Background()
	power := func(node, driver, state string) *protocol.Message {
		return &protocol.Message{Node: node, Driver: driver, Action: protocol.ActionPower, Args: map[string]any{"state": state}}
	}
	round := func() string {
		reports = nil
		s.PowerSyncRound(ctx)
		return joined(reports)
	}
	if got := round(); got != "" {
		t.Fatalf("before any command: %q, want no reading", got)
	}
	for _, n := range []struct{ node, driver string }{{"n1", "ipmi"}, {"n2", "fake"}} {
		if _, err := s.Get(n.node, n.driver, map[string]any{}); err != nil {
			t.Fatal(err)
		}
		s.CommandDone(power(n.node, n.driver, protocol.PowerOff))
	}
	if got := round(); got != "n1:power off" {
		t.Fatalf("first round: %q, want n1's reading only (n2 is simulated)", got)
	}
	if got := round(); got != "" {
		t.Fatalf("unchanged: %q, want nothing", got)
	}
	// A power command's outcome is the last reading: no report of it.
	stub.set(protocol.PowerOn, nil)
	s.CommandDone(power("n1", "ipmi", protocol.PowerReboot))
	if got := round(); got != "" {
		t.Fatalf("after a reboot command: %q, want nothing", got)
	}
	// A change made outside the agent is reported; a failure too.
	stub.set(protocol.PowerOff, nil)
	if got := round(); got != "n1:power off" {
		t.Fatalf("changed outside: %q", got)
	}
	stub.set("", context.DeadlineExceeded)
	if got := round(); got != "n1:!context deadline exceeded" {
		t.Fatalf("failing BMC: %q", got)
	}
	// While a command runs on the node, or the outbox is full: no read.
	stub.set(protocol.PowerOn, nil)
	s.Begin("n1")
	if got := round(); got != "" {
		t.Fatalf("with a command running: %q", got)
	}
	s.End("n1")
	paused = true
	if got := round(); got != "" {
		t.Fatalf("paused: %q", got)
	}
	paused = false
	if got := round(); got != "n1:power on" {
		t.Fatalf("after the command and the pause: %q", got)
	}
	// A forgotten node is not polled.
	s.Forget("n1")
	stub.set(protocol.PowerOff, nil)
	if got := round(); got != "" {
		t.Fatalf("after Forget: %q", got)
	}
}

func joined(r []string) string {
	out := ""
	for i, x := range r {
		if i > 0 {
			out += " "
		}
		out += x
	}
	return out
}

// TestPowerSyncLoopOnTheClock: PowerSyncLoop reads the polled BMCs each
// time its clock passes PowerSyncInterval, and not before; the report
// carries the clock's time.
func TestPowerSyncLoopOnTheClock(t *testing.T) {
	fk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	reports := make(chan *protocol.Message, 4)
	stub := &stubBMC{state: protocol.PowerOff}
	s := New(Config{Site: "s1", Log: slog.New(slog.DiscardHandler), PowerSyncInterval: time.Minute, Clock: fk,
		Builders: map[string]Builder{"ipmi": {New: func(string, map[string]any, int) (drivers.BMC, error) { return stub, nil }}},
		Report:   func(m *protocol.Message) { reports <- m }})
	if _, err := s.Get("n1", "ipmi", map[string]any{}); err != nil {
		t.Fatal(err)
	}
	s.CommandDone(&protocol.Message{Node: "n1", Driver: "ipmi", Action: protocol.ActionPower, Args: map[string]any{"state": protocol.PowerOn}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.PowerSyncLoop(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	if !fk.WaitTimers(1, 10*time.Second) {
		t.Fatal("PowerSyncLoop armed no ticker on the set's clock")
	}
	fk.Advance(time.Minute - time.Second)
	select {
	case m := <-reports:
		t.Fatalf("a reading before the interval passed on the clock: %+v", m)
	default:
	}
	fk.Advance(time.Second)
	select {
	case m := <-reports:
		if m.PowerState != protocol.PowerOff || !m.Sent.Equal(fk.Now()) {
			t.Fatalf("report %q sent %v, want power off at the clock's %v", m.PowerState, m.Sent, fk.Now())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no reading within 10 s after the clock passed the interval")
	}
}
