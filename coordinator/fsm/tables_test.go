package fsm

import (
	"strings"
	"testing"
)

// TestStateTableRows checks the state table against the states' meaning,
// row by row: the stable states are those with no operation; failed ones
// keep their target; WAIT and hold states are what their names say.
func TestStateTableRows(t *testing.T) {
	rows := States()
	if len(rows) != len(AllStates()) {
		t.Fatalf("States() has %d rows, AllStates %d", len(rows), len(AllStates()))
	}
	seen := map[State]bool{}
	for _, r := range rows {
		if seen[r.State] {
			t.Errorf("state %q has two rows", r.State)
		}
		seen[r.State] = true
		name := string(r.State)
		if r.KeepsTarget != (r.Stable && strings.HasSuffix(name, " failed")) {
			t.Errorf("%s: KeepsTarget %v, but it is the failed states that keep their target", name, r.KeepsTarget)
		}
		if r.Wait != (strings.HasSuffix(name, " wait") || r.State == DeployWait) {
			t.Errorf("%s: Wait %v", name, r.Wait)
		}
		if r.Hold != strings.HasSuffix(name, " hold") {
			t.Errorf("%s: Hold %v", name, r.Hold)
		}
		if r.DeleteAllowed && !r.Stable {
			t.Errorf("%s: a transient state allows DELETE", name)
		}
		if !r.Stable && !r.Wait && !r.Hold {
			// A locked state: PATCH only where Ironic's
			// UPDATE_ALLOWED_STATES say (verifying, inspecting).
			if want := r.State == Verifying || r.State == Inspecting; r.UpdateAllowed != want {
				t.Errorf("%s: UpdateAllowed %v, want %v", name, r.UpdateAllowed, want)
			}
		}
		if Stable(r.State) != r.Stable || KeepsTarget(r.State) != r.KeepsTarget || UpdateAllowed(r.State) != r.UpdateAllowed ||
			DeleteAllowed(r.State) != r.DeleteAllowed || IsWait(r.State) != r.Wait || IsHold(r.State) != r.Hold {
			t.Errorf("%s: the functions do not read the row", name)
		}
	}
	if !UpdateAllowed(InspectWait) || !UpdateAllowed(ServiceHold) || UpdateAllowed(CleanHold) || UpdateAllowed(ServiceWait) {
		t.Error("PATCH rules of the wait and hold states differ from Ironic's UPDATE_ALLOWED_STATES")
	}
}

// TestVerbRows checks that every verb has a row with a start, that every
// verb of the transition table has a row, and that each verb's phase is
// one of the phase table's.
func TestVerbRows(t *testing.T) {
	for _, tr := range Table() {
		if strings.Contains("done fail wait resume hold", string(tr.Event)) {
			continue
		}
		if _, ok := VerbInfo(tr.Event); !ok {
			t.Errorf("event %q of the table has no verb row", tr.Event)
		}
	}
	for _, v := range VerbSpecs() {
		if v.Start == nil || v.CLI == "" || v.Short == "" || v.Ramdisk == nil {
			t.Errorf("verb %s: row incomplete", v.Verb)
		}
		if v.Phase != "" {
			if _, ok := phaseRows()[v.Phase]; !ok {
				t.Errorf("verb %s: phase %q has no row", v.Verb, v.Phase)
			}
		}
		if v.From() == "" {
			t.Errorf("verb %s starts from no state", v.Verb)
		}
	}
	if got := VerbTargets(); got != "manage, inspect, clean, provide, active, rebuild, rescue, unrescue, deleted, abort, service, unhold" {
		t.Errorf("valid targets %q", got)
	}
}

// TestCapacity: Ironic's concurrent action limits, from the rows:
// cleaning counts clean and delete, deploying counts deploy, provide is
// never limited.
func TestCapacity(t *testing.T) {
	counts := map[Phase]int{PhaseClean: 2, PhaseDelete: 1, PhaseDeploy: 3, PhaseInspect: 50}
	count := func(p Phase) int { return counts[p] }
	l := Limits{MaxConcurrentClean: 3, MaxConcurrentDeploy: 4}
	if _, ok := Capacity(Deploy, count, l); !ok {
		t.Error("deploy refused with 3 of 4 deploying")
	}
	msg, ok := Capacity(Clean, count, l)
	if ok || !strings.Contains(msg, "limit for cleaning has been reached") || !strings.Contains(msg, "(3 nodes are cleaning: max_concurrent_clean)") {
		t.Errorf("clean with 3 of 3 cleaning: %v %q", ok, msg)
	}
	if msg, ok := Capacity(Undeploy, count, l); ok || !strings.Contains(msg, "limit for unprovisioning") {
		t.Errorf("undeploy: %v %q", ok, msg)
	}
	if _, ok := Capacity(Provide, count, l); !ok {
		t.Error("provide is limited")
	}
	counts[PhaseDeploy] = 4
	if msg, ok := Capacity(Rebuild, count, l); ok || !strings.Contains(msg, "limit for provisioning") || !strings.Contains(msg, "4 nodes are deploying: max_concurrent_deploy") {
		t.Errorf("rebuild: %v %q", ok, msg)
	}
}
