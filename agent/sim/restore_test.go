package sim

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/bmedge/bmedge/lib/waitfor"
	"github.com/bmedge/bmedge/protocol"
)

// memStore is a Store in memory.
type memStore struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (s *memStore) PutSim(node string, b []byte, _ bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b == nil {
		delete(s.m, node)
		return
	}
	s.m[node] = append([]byte(nil), b...)
}

func (s *memStore) LoadSims() (map[string][]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string][]byte{}
	for k, v := range s.m {
		out[k] = v
	}
	return out, nil
}

// recorder keeps what the simulated ramdisks publish.
type recorder struct {
	mu   sync.Mutex
	msgs []*protocol.Message
}

func (r *recorder) Publish(_ context.Context, _ string, payload []byte) error {
	m, err := protocol.Decode(payload)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.msgs = append(r.msgs, m)
	r.mu.Unlock()
	return nil
}

func (r *recorder) count(match func(*protocol.Message) bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, m := range r.msgs {
		if match(m) {
			n++
		}
	}
	return n
}

func (r *recorder) await(t *testing.T, what string, match func(*protocol.Message) bool) *protocol.Message {
	t.Helper()
	var found *protocol.Message
	if !waitfor.Until(20*time.Second, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, m := range r.msgs {
			if match(m) {
				found = m
				return true
			}
		}
		return false
	}) {
		t.Fatalf("no %s", what)
	}
	return found
}

// TestSimulatedRamdiskSurvivesRestart: a simulated node's BMC state and
// its ramdisk go on across an edge agent restart, as a real node's do
// (the agent was killed: its context ended, nothing else ran). The
// restarted simulator's ramdisk says no new hello, heartbeats with the
// same token and the step still running, and ends that step with one
// result; restarted again before acknowledging that result, it sends
// the same result again without running the step again; the BMC comes
// back powered on, booting from the network; a deleted node's state
// goes.
func TestSimulatedRamdiskSurvivesRestart(t *testing.T) {
	store := &memStore{m: map[string][]byte{}}
	start := func() (*Sim, *recorder, context.CancelFunc) {
		tr := &recorder{}
		ctx, cancel := context.WithCancel(context.Background())
		s := New(Config{Site: "s1", Log: slog.New(slog.DiscardHandler), Opts: Options{Nodes: 2, Heartbeat: 50 * time.Millisecond, StepDuration: time.Second},
			ResendInterval: 200 * time.Millisecond, Transport: tr, Context: func() context.Context { return ctx }})
		if err := s.Restore(store); err != nil {
			t.Fatal(err)
		}
		return s, tr, cancel
	}
	s1, tr1, kill1 := start()
	s1.OnPower("n1", protocol.PowerOn, protocol.BootPXE)
	hello := tr1.await(t, "hello", func(m *protocol.Message) bool { return m.Kind == protocol.KindHello })
	s1.Deliver("n1", &protocol.Message{Kind: protocol.KindWelcome, Node: "n1", BootID: hello.BootID, Token: "tok-1"})
	step := &protocol.Step{Interface: "deploy", Step: "erase_devices_metadata"}
	s1.Deliver("n1", &protocol.Message{Kind: protocol.KindCommand, ID: "cmd-1", Node: "n1", Token: "tok-1", Action: protocol.ActionInbandRun, Step: step})
	tr1.await(t, "heartbeat with the step running", func(m *protocol.Message) bool {
		return m.Kind == protocol.KindHeartbeat && m.Running == "cmd-1"
	})
	kill1()

	s2, tr2, kill2 := start()
	defer kill2()
	res := tr2.await(t, "the step's result after the restart", func(m *protocol.Message) bool {
		return m.Kind == protocol.KindResult && m.CommandID == "cmd-1"
	})
	if !res.OK || res.Token != "tok-1" {
		t.Fatalf("result after the restart: ok %v token %q, want ok with the boot's token", res.OK, res.Token)
	}
	if n := tr2.count(func(m *protocol.Message) bool { return m.Kind == protocol.KindHello }); n != 0 {
		t.Fatalf("the resumed ramdisk said hello %d times: it is the same boot, welcomed before", n)
	}
	if tr2.count(func(m *protocol.Message) bool {
		return m.Kind == protocol.KindHeartbeat && m.Running == "cmd-1" && m.Token == "tok-1"
	}) == 0 {
		t.Fatal("the resumed ramdisk did not heartbeat with the step running and the boot's token")
	}
	if n := tr1.count(func(m *protocol.Message) bool { return m.Kind == protocol.KindResult }); n != 0 {
		t.Fatalf("the first agent's ramdisk sent %d results; the step was cut by the kill", n)
	}
	bmc, err := s2.NewBMC("n1", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := bmc.PowerState(context.Background()); err != nil || p != protocol.PowerOn {
		t.Fatalf("the BMC after the restart: power %q (%v), want on", p, err)
	}
	// Not acknowledged, and the agent dies again: the third sends the
	// same result, running nothing.
	kill2()
	_, tr3, kill3 := start()
	defer kill3()
	again := tr3.await(t, "the unacknowledged result sent again", func(m *protocol.Message) bool {
		return m.Kind == protocol.KindResult && m.CommandID == "cmd-1"
	})
	if again.ID != res.ID {
		t.Fatalf("the result sent again has id %s, want the same result %s", again.ID, res.ID)
	}
	// A step run again would say so in a heartbeat at once.
	waitfor.Until(300*time.Millisecond, func() bool {
		return tr3.count(func(m *protocol.Message) bool { return m.Kind == protocol.KindHeartbeat && m.Running != "" }) != 0
	})
	if n := tr3.count(func(m *protocol.Message) bool { return m.Kind == protocol.KindHeartbeat && m.Running != "" }); n != 0 {
		t.Fatalf("the finished step ran again after the second restart (%d heartbeats with a running step)", n)
	}
	s3, _ := store.LoadSims()
	if len(s3["n1"]) == 0 {
		t.Fatal("no state kept for n1")
	}
}

// TestSimulatedNodeForgotten: a deleted node's kept state goes, and a
// powered-off node's ramdisk does not come back after a restart.
func TestSimulatedNodeForgotten(t *testing.T) {
	store := &memStore{m: map[string][]byte{}}
	tr := &recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := New(Config{Site: "s1", Log: slog.New(slog.DiscardHandler), Opts: Options{Nodes: 2, Heartbeat: time.Hour},
		ResendInterval: time.Hour, Transport: tr, Context: func() context.Context { return ctx }})
	if err := s.Restore(store); err != nil {
		t.Fatal(err)
	}
	s.OnPower("n1", protocol.PowerOn, protocol.BootPXE)
	s.OnPower("n2", protocol.PowerOn, protocol.BootPXE)
	s.OnPower("n2", protocol.PowerOff, "")
	s.Forget("n1")
	kept, _ := store.LoadSims()
	if _, ok := kept["n1"]; ok {
		t.Fatal("a deleted node's state is still kept")
	}
	cancel()
	s2 := New(Config{Site: "s1", Log: slog.New(slog.DiscardHandler), Opts: Options{Nodes: 2}, Transport: tr,
		Context: func() context.Context { return context.Background() }})
	if err := s2.Restore(store); err != nil {
		t.Fatal(err)
	}
	if s2.Deliver("n2", &protocol.Message{Kind: protocol.KindAck}) {
		t.Fatal("a powered-off node's ramdisk came back after the restart")
	}
}
