package fsm

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/protocol"
)

// TestInspectionRulesHook: the inspection hook (the inspection rules)
// runs on an out-of-band inspection's inventory once it is applied: its
// changes to the node stay, its history is recorded, its plugin data
// is stored; an error fails the inspection with its message.
func TestInspectionRulesHook(t *testing.T) {
	t0 := time.Unix(9000, 0)
	var fail error
	var saw map[string]any
	m := testMachine(t)
	m.cfg.InspectionRules = func(n *Node, inv, pd map[string]any, _ []string, now time.Time) ([]HistoryEntry, map[string]any, []PortChange, error) {
		saw = inv
		if n.Properties["memory_mb"] != 487424.0 {
			t.Errorf("the hook ran before the properties were applied: %v", n.Properties)
		}
		n.Traits = []string{"CUSTOM_RULED"}
		return []HistoryEntry{{Time: now, Severity: "INFO", EventType: "inspection", Event: "rule r1 matched"}}, map[string]any{"from": "rules"},
			[]PortChange{{Address: "52:54:00:00:00:01", Fields: []string{"physical_network"}, PhysicalNetwork: "physnet1"}}, fail
	}
	inspect := func() (*Node, Output) {
		n := &Node{UUID: "u1", Name: "n1", Driver: "redfish", Site: "s1", ProvisionState: Manageable, PowerState: protocol.PowerOff,
			InspectInterface: "redfish", DriverInfo: map[string]any{"redfish_address": "http://127.0.0.1:1"}}
		out, r := m.Verb(n, VerbRequest{Verb: Inspect}, t0)
		if r != nil || len(out.Send) != 1 {
			t.Fatalf("inspect: %v", r)
		}
		res := &protocol.Message{Kind: protocol.KindResult, ID: "r1", CommandID: out.Send[0].Msg.ID, OK: true, Sent: t0.Add(time.Second), Data: map[string]any{
			"inventory":  map[string]any{"cpu": map[string]any{"count": 4.0}},
			"properties": map[string]any{"memory_mb": 487424.0}}}
		return n, m.Result(n, res, t0.Add(time.Second))
	}
	n, out := inspect()
	if n.ProvisionState != Manageable || len(n.Traits) != 1 || out.PluginData["from"] != "rules" || saw["cpu"] == nil {
		t.Fatalf("after the hook: %s, traits %v, plugin data %v", n.ProvisionState, n.Traits, out.PluginData)
	}
	if len(out.PortChanges) != 1 || out.PortChanges[0].PhysicalNetwork != "physnet1" {
		t.Fatalf("the hook's port changes are not in the output: %+v", out.PortChanges)
	}
	var events []string
	for _, h := range out.History {
		events = append(events, h.Event)
	}
	if !strings.Contains(strings.Join(events, "\n"), "rule r1 matched") {
		t.Fatalf("history %v", events)
	}
	fail = errors.New("Failed to inspect hardware. Reason: too small")
	n, out = inspect()
	if len(out.PortChanges) != 0 {
		t.Fatalf("a failed inspection's port changes are in the output: %+v", out.PortChanges)
	}
	if n.ProvisionState != InspectFailed || n.LastError != "Failed to inspect hardware. Reason: too small" || n.Op != nil || n.Locked() {
		t.Fatalf("failed by a rule: %s, %q, op %v, locked %v", n.ProvisionState, n.LastError, n.Op, n.Locked())
	}
}

// TestInspectionRulesHookInBand: the hook runs on an in-band inspection
// (the ramdisk's inspect_hardware), once, and not during cleaning.
func TestInspectionRulesHookInBand(t *testing.T) {
	w := newWorld(t)
	calls := 0
	w.m.cfg.InspectionRules = func(n *Node, inv, pd map[string]any, _ []string, now time.Time) ([]HistoryEntry, map[string]any, []PortChange, error) {
		calls++
		n.Traits = []string{"CUSTOM_IN_BAND"}
		return nil, pd, nil, nil
	}
	w.verb(Manage, VerbRequest{})
	w.want(Manageable)
	w.verb(Inspect, VerbRequest{})
	w.want(Manageable)
	if calls != 1 || len(w.n.Traits) != 1 {
		t.Fatalf("after an in-band inspection: %d calls, traits %v", calls, w.n.Traits)
	}
	// Cleaning (automated, by provide) runs no inspection rule.
	w.verb(Provide, VerbRequest{})
	w.want(Available)
	if calls != 1 {
		t.Fatalf("the hook ran during cleaning (%d calls)", calls)
	}
}
