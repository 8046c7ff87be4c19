package bmc

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/lib/clock"
	"github.com/bmedge/bmedge/protocol"
)

// memPolled is a PolledStore in memory.
type memPolled struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (p *memPolled) PutPolled(node string, rec []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if rec == nil {
		delete(p.m, node)
		return
	}
	p.m[node] = rec
}

func (p *memPolled) LoadPolled() (map[string][]byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string][]byte{}
	for k, v := range p.m {
		out[k] = v
	}
	return out, nil
}

// TestPowerSyncResumesAfterRestart: the nodes power sync polls are kept
// (driver and driver_info) when their first command succeeds and when
// their driver_info changes; a new set (a restarted agent) that keeps
// the same store polls all of them from its first round, with the
// driver_info kept, and reports each one's reading, so that a change
// made while the agent was down is seen within one interval. A
// simulated BMC is never kept; a forgotten node is dropped.
func TestPowerSyncResumesAfterRestart(t *testing.T) {
	st := &memPolled{m: map[string][]byte{}}
	bmcs := map[string]*stubBMC{"n1": {state: protocol.PowerOff}, "n2": {state: protocol.PowerOn}}
	var builtWith sync.Map
	// The round reads the BMCs in parallel, and reports from each.
	var reportsMu sync.Mutex
	newSet := func(reports *[]string) *Set {
		s := New(Config{Site: "s1", Log: slog.New(slog.DiscardHandler), PowerSyncInterval: time.Second,
			Clock: clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
			Builders: map[string]Builder{
				"ipmi": {New: func(node string, info map[string]any, _ int) (drivers.BMC, error) {
					builtWith.Store(node, info["ipmi_password"])
					return bmcs[node], nil
				}},
				"fake": {NoPowerSync: true, New: func(string, map[string]any, int) (drivers.BMC, error) { return &stubBMC{}, nil }},
			},
			Report: func(m *protocol.Message) {
				reportsMu.Lock()
				defer reportsMu.Unlock()
				*reports = append(*reports, m.Node+":"+m.PowerState)
			}})
		if err := s.Keep(st); err != nil {
			t.Fatal(err)
		}
		return s
	}
	var r1 []string
	s1 := newSet(&r1)
	cmd := func(node, driver, pw string) *protocol.Message {
		return &protocol.Message{Node: node, Driver: driver, Action: protocol.ActionValidate,
			DriverInfo: map[string]any{"ipmi_address": "127.0.0.1", "ipmi_password": pw}}
	}
	for _, m := range []*protocol.Message{cmd("n1", "ipmi", "a"), cmd("n2", "ipmi", "a"), cmd("sim1", "fake", "")} {
		if _, err := s1.Get(m.Node, m.Driver, m.DriverInfo); err != nil {
			t.Fatal(err)
		}
		s1.CommandDone(m)
	}
	// n2's password is changed by the operator; its next command keeps it.
	m := cmd("n2", "ipmi", "b")
	if _, err := s1.Get(m.Node, m.Driver, m.DriverInfo); err != nil {
		t.Fatal(err)
	}
	s1.CommandDone(m)
	kept, _ := st.LoadPolled()
	if len(kept) != 2 || kept["sim1"] != nil || !strings.Contains(string(kept["n2"]), `"ipmi_password":"b"`) {
		t.Fatalf("kept %q; want n1 and n2 (n2 with its new driver_info), not the simulated node", kept)
	}

	// The agent restarts; both BMCs changed power meanwhile.
	bmcs["n1"].set(protocol.PowerOn, nil)
	bmcs["n2"].set(protocol.PowerOff, nil)
	builtWith.Clear()
	var r2 []string
	s2 := newSet(&r2)
	if pw, _ := builtWith.Load("n2"); pw != "b" {
		t.Fatalf("n2's BMC was rebuilt with password %v; want the kept driver_info's", pw)
	}
	s2.PowerSyncRound(context.Background())
	if got := strings.Join(r2, " "); !strings.Contains(got, "n1:power on") || !strings.Contains(got, "n2:power off") || len(r2) != 2 {
		t.Fatalf("first round after the restart reported %q; want both nodes' readings", got)
	}
	s2.Forget("n1")
	if kept, _ := st.LoadPolled(); kept["n1"] != nil || kept["n2"] == nil {
		t.Fatalf("after forgetting n1 the store keeps %q", kept)
	}
}
