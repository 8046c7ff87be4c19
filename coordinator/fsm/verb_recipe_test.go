package fsm

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/protocol"
)

// Reverify is a verb only this test has, added by the recipe "Adding a
// verb" of docs/architecture.md: its row (with its moves) is all it
// takes. It checks a manageable node's BMC credentials again, as manage
// does from enroll.
const Reverify Event = "reverify"

func reverifyRow() VerbSpec {
	return VerbSpec{Verb: Reverify, Since: 90, CLI: "reverify", Short: "Check a manageable node's BMC credentials again",
		To: "manageable (enroll when the BMC refuses them)", Phase: PhaseVerify, Ramdisk: never, Maintenance: "reverifying",
		Moves: []Transition{{Manageable, Reverify, Verifying}},
		Check: func(m *Machine, n *Node, req VerbRequest) *Refusal {
			if len(n.DriverInfo) == 0 {
				return refuse(Invalid, "Cannot reverify node %s: it has no driver_info", n.Ident())
			}
			return nil
		},
		Start: func(m *Machine, n *Node, req VerbRequest, now time.Time, out *Output) {
			m.start(n, req.Verb, Manageable, PhaseVerify, []Action{{Kind: ActOOB, Action: protocol.ActionValidate}}, now, out)
		}}
}

// TestAddingAVerb follows the recipe once: a test-only verb registered
// as a row drives a node from manageable through verifying back to
// manageable, and everything that reads the rows knows it (the valid
// targets, the verbs allowed in a state, the CLI's from column, the
// maintenance rule, its own check, the capacity check, the refusals of
// other states); removed, it is gone.
func TestAddingAVerb(t *testing.T) {
	w := newWorld(t)
	w.n.DriverInfo = map[string]any{"ipmi_address": "10.0.0.1"}
	w.verb(Manage, VerbRequest{})
	w.want(Manageable)
	if IsVerb(Reverify) {
		t.Fatal("reverify is a verb before it was added")
	}

	undo := registerVerb(reverifyRow())
	defer undo()
	if !IsVerb(Reverify) || !strings.HasSuffix(VerbTargets(), ", unhold, reverify") {
		t.Fatalf("valid targets %q", VerbTargets())
	}
	if !slices.Contains(Allowed(Manageable), Reverify) || slices.Contains(Allowed(Available), Reverify) {
		t.Fatalf("allowed in manageable: %v, in available: %v", Allowed(Manageable), Allowed(Available))
	}
	if row, ok := VerbByName("reverify"); !ok || row.From() != "manageable" {
		t.Fatalf("row %+v, from %q", row, row.From())
	}
	if _, ok := Capacity(Reverify, func(Phase) int { return 1 << 20 }, Limits{}); !ok {
		t.Fatal("reverify has no cap, but Capacity refused it")
	}

	// Its own check, and the common ones (maintenance, state).
	w.n.Maintenance, w.n.MaintenanceReason = true, "disk"
	if r := w.m.CheckVerb(w.n, VerbRequest{Verb: Reverify}); r == nil || !strings.Contains(r.Msg, "The reverifying operation can't be performed") {
		t.Fatalf("in maintenance: %+v", r)
	}
	w.n.Maintenance, w.n.MaintenanceReason = false, ""
	di := w.n.DriverInfo
	w.n.DriverInfo = nil
	if r := w.m.CheckVerb(w.n, VerbRequest{Verb: Reverify}); r == nil || !strings.Contains(r.Msg, "has no driver_info") {
		t.Fatalf("no driver_info: %+v", r)
	}
	w.n.DriverInfo = di

	// The node goes through it.
	w.path, w.log = nil, nil
	w.verb(Reverify, VerbRequest{})
	w.want(Manageable)
	if got := strings.Join(stateNames(w.path), ","); got != "verifying,manageable" {
		t.Fatalf("path %s", got)
	}
	if got := strings.Join(w.log, ","); got != protocol.ActionValidate {
		t.Fatalf("commands %s", got)
	}

	// From another state it is refused, naming the verbs allowed there.
	w.n.ProvisionState = Available
	if r := w.m.CheckVerb(w.n, VerbRequest{Verb: Reverify}); r == nil || !strings.Contains(r.Msg, `The requested action "reverify" can not be performed`) {
		t.Fatalf("from available: %+v", r)
	}

	undo()
	if IsVerb(Reverify) || slices.Contains(Allowed(Manageable), Reverify) {
		t.Fatal("reverify still a verb after its row was removed")
	}
}

func stateNames(p []State) []string {
	out := make([]string, len(p))
	for i, s := range p {
		out[i] = string(s)
	}
	return out
}
