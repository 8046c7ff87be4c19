package fsm

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/protocol"
)

// The tests of this file check the machine against Ironic 21.4's measured
// answers (ironic-behaviour.md of the project's shared notes; each case
// cites its row) or against the seed (DESIGN.md) where the two disagree;
// docs/ironic-compat.md lists the differences and why.

// compatCase is one behaviour: a node in a state, an operator request,
// the refusal code (0: accepted), the states the node goes through, and
// where it rests: state, target_provision_state and last_error (a part of
// it; "" means none).
type compatCase struct {
	name  string
	cites string
	setup func(w *world)
	do    func(w *world) *Refusal
	code  int
	path  []State
	state State
	// target is the target_provision_state at the end.
	target    State
	lastError string
}

func (c compatCase) run(t *testing.T) {
	t.Run(c.name, func(t *testing.T) {
		w := newWorld(t)
		w.n.InstanceInfo = map[string]any{"image_source": "http://i"}
		if c.setup != nil {
			c.setup(w)
		}
		w.path = nil
		before := *w.n
		r := c.do(w)
		switch {
		case c.code == 0 && r != nil:
			t.Fatalf("refused %d %q, want accepted (cites %s)", r.httpCode(), r.Msg, c.cites)
		case c.code != 0 && (r == nil || r.httpCode() != c.code):
			t.Fatalf("got %+v, want refusal %d (cites %s)", r, c.code, c.cites)
		case c.code != 0 && (w.n.ProvisionState != before.ProvisionState || w.n.LastError != before.LastError):
			t.Fatalf("a refusal changed the node: %q → %q, last_error %q", before.ProvisionState, w.n.ProvisionState, w.n.LastError)
		}
		if c.path != nil && !slices.Equal(w.path, c.path) {
			t.Errorf("state path %v, want %v (cites %s)", w.path, c.path, c.cites)
		}
		if w.n.ProvisionState != c.state || w.n.TargetProvisionState != c.target {
			t.Errorf("ends in %q → %q, want %q → %q (last_error %q; cites %s)", w.n.ProvisionState, w.n.TargetProvisionState, c.state, c.target, w.n.LastError, c.cites)
		}
		if (c.lastError == "") != (w.n.LastError == "") || !strings.Contains(w.n.LastError, c.lastError) {
			t.Errorf("last_error %q, want %q (cites %s)", w.n.LastError, c.lastError, c.cites)
		}
	})
}

// verbDo runs a verb and answers its commands as a healthy site.
func verbDo(v Event, req VerbRequest) func(w *world) *Refusal {
	return func(w *world) *Refusal {
		req.Verb = v
		out, r := w.m.Verb(w.n, req, w.now)
		if r == nil {
			w.run(out)
		}
		return r
	}
}

func inState(s State) func(w *world) {
	return func(w *world) { w.n.ProvisionState = s }
}

func inMaintenance(s State) func(w *world) {
	return func(w *world) { w.n.ProvisionState, w.n.Maintenance, w.n.MaintenanceReason = s, true, "look" }
}

// TestCompatMaintenance: Ironic accepts manage, inspect, clean, provide,
// undeploy and abort in maintenance and refuses deploy, rebuild, rescue
// and unrescue (400); the work goes on out of band and pauses only at
// WAIT states (the ramdisk's heartbeats are ignored in maintenance).
func TestCompatMaintenance(t *testing.T) {
	const row = `"active | available + maintenance | 400" (provide/manage/clean/undeploy do not check maintenance)`
	cleanList := []map[string]any{{"interface": "management", "step": "fake_reset_bmc"}}
	for _, c := range []compatCase{
		{name: "manage from enroll completes", cites: row, setup: inMaintenance(Enroll), do: verbDo(Manage, VerbRequest{}),
			path: []State{Verifying, Manageable}, state: Manageable},
		{name: "manage from available", cites: `"manage | available / clean failed / inspect failed | 202"`, setup: inMaintenance(Available),
			do: verbDo(Manage, VerbRequest{}), path: []State{Manageable}, state: Manageable},
		{name: "out-of-band manual clean completes", cites: row, setup: inMaintenance(Manageable),
			do: verbDo(Clean, VerbRequest{CleanSteps: cleanList}), path: []State{Cleaning, Manageable}, state: Manageable},
		{name: "provide pauses in clean wait", cites: row, setup: inMaintenance(Manageable), do: verbDo(Provide, VerbRequest{}),
			path: []State{Cleaning, CleanWait}, state: CleanWait, target: Available},
		{name: "inspect pauses in inspect wait", cites: row, setup: inMaintenance(Manageable), do: verbDo(Inspect, VerbRequest{}),
			path: []State{Inspecting, InspectWait}, state: InspectWait, target: Manageable},
		{name: "undeploy pauses in clean wait", cites: row, setup: inMaintenance(Active), do: verbDo(Undeploy, VerbRequest{}),
			path: []State{Deleting, Cleaning, CleanWait}, state: CleanWait, target: Available},
		{name: "deploy refused", cites: row, setup: inMaintenance(Available), do: verbDo(Deploy, VerbRequest{}), code: 400, state: Available},
		{name: "rebuild refused", cites: row, setup: inMaintenance(Active), do: verbDo(Rebuild, VerbRequest{}), code: 400, state: Active},
		{name: "rescue refused", cites: row, setup: inMaintenance(Active), do: verbDo(RescueV, VerbRequest{HashedRescuePassword: "$6$saltstring$xwVXmdoFwkuFfkvrCnFqepsb1G.0z7.VoLCq69.god.O.zXvYSQsLM/oDMuI05ufmibO/tzUYEh4IPt9kZAc0."}), code: 400, state: Active},
		{name: "unrescue refused", cites: row, setup: inMaintenance(Rescue), do: verbDo(Unrescue, VerbRequest{}), code: 400, state: Rescue},
		{name: "power change completes", cites: `"PUT /states/power {…} | any | 202"`, setup: inMaintenance(Manageable),
			do: func(w *world) *Refusal {
				out, r := w.m.PowerRequest(w.n, "power off", w.now)
				w.run(out)
				if r == nil && (w.n.Locked() || w.n.PowerState != protocol.PowerOff || w.n.TargetPowerState != "") {
					t.Errorf("power off in maintenance: locked %v, power %q → %q", w.n.Locked(), w.n.PowerState, w.n.TargetPowerState)
				}
				return r
			}, state: Manageable},
	} {
		c.run(t)
	}

	// Paused in clean wait: the ramdisk's hello is recorded, nothing
	// advances, no timeout fires; unset, the cleaning goes on to its end.
	w := newWorld(t)
	inMaintenance(Manageable)(w)
	w.verb(Provide, VerbRequest{})
	w.want(CleanWait)
	if w.n.AgentToken == "" || w.n.Pending != nil {
		t.Fatalf("paused node: token %q, pending %+v; want the hello recorded and nothing sent", w.n.AgentToken, w.n.Pending)
	}
	w.m.Tick(w.n, w.now.Add(24*time.Hour), true)
	w.want(CleanWait)
	w.run(w.m.SetMaintenance(w.n, false, "", w.now))
	w.want(Available)
}

// TestCompatFailedStatesKeepTarget: a failed state shows the target of
// the operation that failed; manage from it keeps last_error and clears
// the target. Manual clean from clean failed is the seed's, not Ironic's.
func TestCompatFailedStatesKeepTarget(t *testing.T) {
	cleanList := []map[string]any{{"interface": "management", "step": "fake_reset_bmc"}}
	failIn := func(s State, step string) func(w *world) {
		return func(w *world) { w.n.ProvisionState, w.failOn = s, step }
	}
	cleanFailed := func(w *world) {
		w.n.ProvisionState, w.n.LastError = CleanFailed, "By request, the clean operation was aborted"
		w.n.TargetProvisionState = Available
	}
	for _, c := range []compatCase{
		{name: "automated clean fails: target available", cites: `"abort | clean wait (automated) | 202 | → clean failed (target stays available)"`,
			setup: failIn(Manageable, "erase_devices"), do: verbDo(Provide, VerbRequest{}),
			path: []State{Cleaning, CleanWait, CleanFailed}, state: CleanFailed, target: Available, lastError: "deploy.erase_devices"},
		{name: "manual clean fails: target manageable", cites: `"clean, missing required arg | manageable | 202 | cleaning → clean failed (target stays manageable)"`,
			setup: inState(Manageable), do: verbDo(Clean, VerbRequest{CleanSteps: []map[string]any{{"interface": "deploy", "step": "melt"}}}),
			path: []State{Cleaning, CleanWait, CleanFailed}, state: CleanFailed, target: Manageable, lastError: "melt"},
		{name: "deploy fails: target active", cites: `"target_provision_state is shown … after a * failed state"`,
			setup: failIn(Available, "write_image"), do: verbDo(Deploy, VerbRequest{}),
			path: []State{Deploying, DeployWait, DeployFailed}, state: DeployFailed, target: Active, lastError: "write_image"},
		{name: "manage from clean failed keeps last_error", cites: `"manage | … clean failed … | 202 | → manageable | last_error is kept"`,
			setup: cleanFailed, do: verbDo(Manage, VerbRequest{}), path: []State{Manageable}, state: Manageable, lastError: "aborted"},
		{name: "manual clean from clean failed (seed)", cites: "DESIGN.md via the brief: from clean failed keep provide and add manual clean (Ironic 400)",
			setup: cleanFailed, do: verbDo(Clean, VerbRequest{CleanSteps: cleanList}), path: []State{Cleaning, Manageable}, state: Manageable},
		{name: "provide from clean failed (seed)", cites: "DESIGN.md: provide | manageable, clean failed (Ironic 400)",
			setup: cleanFailed, do: verbDo(Provide, VerbRequest{}), state: Available},
	} {
		c.run(t)
	}

	// Abort in clean wait: clean failed, target where the cleaning went.
	for _, manual := range []bool{false, true} {
		w := newWorld(t)
		w.n.ProvisionState = Manageable
		w.holdInband = true
		if manual {
			w.n.CachedCleanSteps, w.n.StepsCachedAt = wireSteps(standardCleanSteps), w.now
			w.verb(Clean, VerbRequest{CleanSteps: []map[string]any{{"interface": "deploy", "step": "erase_devices"}}})
		} else {
			w.verb(Provide, VerbRequest{})
		}
		w.want(CleanWait)
		w.verb(Abort, VerbRequest{})
		want := Available
		if manual {
			want = Manageable
		}
		if w.n.ProvisionState != CleanFailed || w.n.TargetProvisionState != want || !strings.Contains(w.n.LastError, "aborted") {
			t.Errorf("abort (manual %v): %q → %q, last_error %q; want clean failed → %q (cites \"abort | clean wait (automated|manual) | 202\")",
				manual, w.n.ProvisionState, w.n.TargetProvisionState, w.n.LastError, want)
		}
	}
}

// TestCompatStepLists: clean_steps and deploy_steps of the wrong shape
// are refused with 400 before anything starts, as Ironic's API schema
// does; deploy steps the node has are checked for arguments and the core
// step; unknown deploy steps are skipped.
func TestCompatStepLists(t *testing.T) {
	const schemaRow = `"clean, schema errors | manageable | 400 | … Invalid clean_steps"`
	const deployRow = `"active + deploy_steps | available | 400 / 202"`
	clean := func(list ...map[string]any) func(w *world) *Refusal {
		return verbDo(Clean, VerbRequest{CleanSteps: list})
	}
	deploy := func(list ...map[string]any) func(w *world) *Refusal {
		return verbDo(Deploy, VerbRequest{DeploySteps: list})
	}
	for _, c := range []compatCase{
		{name: "clean: no interface", cites: schemaRow, setup: inState(Manageable), do: clean(map[string]any{"step": "erase_devices"}), code: 400, state: Manageable},
		{name: "clean: unknown interface", cites: schemaRow, setup: inState(Manageable), do: clean(map[string]any{"interface": "disk", "step": "x"}), code: 400, state: Manageable},
		{name: "clean: no step", cites: schemaRow, setup: inState(Manageable), do: clean(map[string]any{"interface": "deploy"}), code: 400, state: Manageable},
		{name: "clean: extra key", cites: schemaRow, setup: inState(Manageable), do: clean(map[string]any{"interface": "deploy", "step": "erase_devices", "priority": 5.0}), code: 400, state: Manageable},
		{name: "clean: args not an object", cites: schemaRow, setup: inState(Manageable), do: clean(map[string]any{"interface": "management", "step": "fake_reset_bmc", "args": 3.0}), code: 400, state: Manageable},
		{name: "clean: unknown argument fails the cleaning", cites: `"clean, unknown step / unknown arg | manageable | 202 | cleaning → clean failed"`,
			setup: inState(Manageable), do: clean(map[string]any{"interface": "management", "step": "fake_reset_bmc", "args": map[string]any{"bogus": 1.0}}),
			path: []State{Cleaning, CleanFailed}, state: CleanFailed, target: Manageable, lastError: "bogus"},
		{name: "deploy: core step re-prioritised", cites: deployRow, setup: inState(Available),
			do: deploy(map[string]any{"interface": "deploy", "step": "write_image", "priority": 90.0, "args": map[string]any{}}), code: 400, state: Available},
		{name: "deploy: core step disabled (deliberate)", cites: "docs/ironic-compat.md: priority 0 of the core step is refused",
			do: deploy(map[string]any{"interface": "deploy", "step": "write_image", "priority": 0.0, "args": map[string]any{}}), setup: inState(Available), code: 400, state: Available},
		{name: "deploy: unknown argument", cites: deployRow, setup: inState(Available),
			do: deploy(map[string]any{"interface": "deploy", "step": "boot_instance", "priority": 20.0, "args": map[string]any{"bogus": 1.0}}), code: 400, state: Available},
		{name: "deploy: missing priority", cites: deployRow, setup: inState(Available),
			do: deploy(map[string]any{"interface": "deploy", "step": "boot_instance", "args": map[string]any{}}), code: 400, state: Available},
		{name: "deploy: negative priority", cites: deployRow, setup: inState(Available),
			do: deploy(map[string]any{"interface": "deploy", "step": "boot_instance", "priority": -1.0, "args": map[string]any{}}), code: 400, state: Available},
		{name: "deploy: unknown step skipped", cites: `"Unknown step → 202, silently skipped"`, setup: inState(Available),
			do:   deploy(map[string]any{"interface": "deploy", "step": "deploy", "priority": "0", "args": map[string]any{}}),
			path: []State{Deploying, DeployWait, Deploying, Active}, state: Active},
		{name: "deploy: a step disabled", cites: deployRow, setup: inState(Available),
			do: func(w *world) *Refusal {
				r := deploy(map[string]any{"interface": "deploy", "step": "prepare_instance_boot", "priority": 0.0, "args": map[string]any{}})(w)
				if slices.Contains(w.log, "deploy.prepare_instance_boot") || !slices.Contains(w.log, "deploy.write_image") {
					t.Errorf("deploy with prepare_instance_boot disabled ran %v", w.log)
				}
				return r
			}, state: Active},
	} {
		c.run(t)
	}
}

// TestCompatActiveFromDeployFailed: the seed's table has deploy from
// available only; Ironic also takes it from deploy failed (202). The seed
// wins: 400, naming rebuild, which does the same.
func TestCompatActiveFromDeployFailed(t *testing.T) {
	compatCase{name: "active from deploy failed", cites: `DESIGN.md over "active | deploy failed | 202"`,
		setup: inState(DeployFailed), do: verbDo(Deploy, VerbRequest{}), code: 400, state: DeployFailed}.run(t)
	w := newWorld(t)
	w.n.ProvisionState = DeployFailed
	if _, r := w.m.Verb(w.n, VerbRequest{Verb: Deploy}, w.now); r == nil || !strings.Contains(r.Msg, "rebuild") {
		t.Errorf("refusal %v does not name rebuild", r)
	}
}

// TestCompatUpdate: PATCH rules of Ironic's API and conductor.
func TestCompatUpdate(t *testing.T) {
	for _, c := range []struct {
		name   string
		cites  string
		state  State
		change func(n *Node)
		old    func(n *Node)
		code   int
		reason string
	}{
		{"transient: cleaning", `"PATCH any field | transient state | 409"`, Cleaning, func(n *Node) { n.Extra = map[string]any{"a": 1} }, nil, 409, ""},
		{"transient: clean wait", `"PATCH any field | transient state | 409"`, CleanWait, func(n *Node) { n.Extra = map[string]any{"a": 1} }, nil, 409, ""},
		{"transient: wait call-back", `"PATCH any field | transient state | 409"`, DeployWait, func(n *Node) { n.Extra = map[string]any{"a": 1} }, nil, 409, ""},
		{"transient: deploying", `"PATCH any field | transient state | 409"`, Deploying, func(n *Node) { n.Extra = map[string]any{"a": 1} }, nil, 409, ""},
		{"inspect wait is allowed", "Ironic's UPDATE_ALLOWED_STATES", InspectWait, func(n *Node) { n.Extra = map[string]any{"a": 1} }, nil, 0, ""},
		{"clean failed is allowed", "Ironic's UPDATE_ALLOWED_STATES", CleanFailed, func(n *Node) { n.Extra = map[string]any{"a": 1} }, nil, 0, ""},
		{"retired in manageable", `"PATCH /retired=true | enroll, manageable, active | 200"`, Manageable, func(n *Node) { n.Retired, n.RetiredReason = true, "old" }, nil, 0, "old"},
		{"retired in available", `"PATCH /retired=true | available | 409"`, Available, func(n *Node) { n.Retired = true }, nil, 409, ""},
		{"retired_reason alone", `"PATCH /retired_reason only | not retired | 400"`, Manageable, func(n *Node) { n.RetiredReason = "why" }, nil, 400, ""},
		{"retired false clears the reason", `"PATCH /retired=false | retired | 200"`, Manageable, func(n *Node) { n.Retired = false },
			func(n *Node) { n.Retired, n.RetiredReason = true, "old" }, 0, ""},
		{"retired removed clears the reason", `"PATCH remove /retired | retired | 200"`, Manageable, func(n *Node) { n.Retired, n.RetiredUnset = false, true },
			func(n *Node) { n.Retired, n.RetiredReason = true, "old" }, 0, ""},
		{"unretire in available", `"PATCH /retired=false | retired | 200"`, Available, func(n *Node) { n.Retired = false },
			func(n *Node) { n.Retired, n.RetiredReason = true, "old" }, 0, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			old := &Node{UUID: "u", Name: "n", ProvisionState: c.state}
			if c.old != nil {
				c.old(old)
			}
			upd := *old
			c.change(&upd)
			r := CheckUpdate(old, &upd)
			switch {
			case c.code == 0 && r != nil:
				t.Fatalf("refused %d %q (cites %s)", r.httpCode(), r.Msg, c.cites)
			case c.code != 0 && (r == nil || r.httpCode() != c.code):
				t.Fatalf("got %+v, want %d (cites %s)", r, c.code, c.cites)
			case c.code == 0 && upd.RetiredReason != c.reason:
				t.Fatalf("retired_reason %q, want %q", upd.RetiredReason, c.reason)
			}
		})
	}
}

// TestCompatDelete: Ironic deletes in enroll, manageable and available,
// or in any state in maintenance; never a locked node.
func TestCompatDelete(t *testing.T) {
	const row = `"DELETE /v1/nodes/{id} | available, manageable, enroll, adopt failed | 204"`
	for _, s := range AllStates() {
		for _, maint := range []bool{false, true} {
			n := &Node{UUID: "u", Name: "n", ProvisionState: s, Maintenance: maint}
			want := 0
			if !maint && s != Enroll && s != Manageable && s != Available {
				want = 409
			}
			r := CheckDelete(n)
			if (want == 0) != (r == nil) || (r != nil && r.httpCode() != want) {
				t.Errorf("delete in %q (maintenance %v): %+v, want %d (cites %s)", s, maint, r, want, row)
			}
			n.Reservation = "coordinator"
			if r := CheckDelete(n); r == nil || r.httpCode() != 409 || !strings.Contains(r.Msg, "locked") {
				t.Errorf("delete of a locked node in %q: %+v, want 409 locked", s, r)
			}
		}
	}
}

// TestCompatPowerTargets: Ironic's power targets; a reboot's
// target_power_state is "power on".
func TestCompatPowerTargets(t *testing.T) {
	const row = `"PUT /states/power {target: power off, power on (+timeout), rebooting, soft power off} | any | 202 | bogus → 400"`
	for _, c := range []struct {
		target, sent, shown string
		code                int
	}{
		{"power on", protocol.PowerOn, protocol.PowerOn, 0},
		{"power off", protocol.PowerOff, protocol.PowerOff, 0},
		{"rebooting", protocol.PowerReboot, protocol.PowerOn, 0},
		{"soft power off", protocol.PowerSoftOff, protocol.PowerOff, 0},
		{"soft rebooting", protocol.PowerSoftReboot, protocol.PowerOn, 0},
		{"rebooted", protocol.PowerReboot, protocol.PowerOn, 0},
		{"bogus", "", "", 400},
	} {
		m := testMachine(t)
		n := &Node{UUID: "u", Name: "n", Driver: "fake", Site: "s", ProvisionState: Manageable}
		out, r := m.PowerRequest(n, c.target, time.Unix(0, 0))
		if c.code != 0 {
			if r == nil || r.httpCode() != c.code {
				t.Errorf("power %q: %+v, want %d (cites %s)", c.target, r, c.code, row)
			}
			continue
		}
		if r != nil || len(out.Send) != 1 || out.Send[0].Msg.Args["state"] != c.sent || n.TargetPowerState != c.shown {
			t.Errorf("power %q: refusal %v, sent %v, target_power_state %q; want %q sent and %q shown (cites %s)", c.target, r, out.Send, n.TargetPowerState, c.sent, c.shown, row)
		}
	}
}

// TestCompatBootDevice: PUT boot_device sets it through the edge agent
// and records it when the BMC answers; unknown devices are 400, a busy
// node 409.
func TestCompatBootDevice(t *testing.T) {
	w := newWorld(t)
	w.n.ProvisionState = Active
	out, r := w.m.BootDeviceRequest(w.n, "disk", w.now)
	if r != nil || w.n.BootDevice != "" || !w.n.Locked() {
		t.Fatalf("boot device disk: %v, recorded %q before the BMC answered, locked %v", r, w.n.BootDevice, w.n.Locked())
	}
	w.run(out)
	if w.n.BootDevice != "disk" || w.n.Locked() || w.n.ProvisionState != Active || !slices.Equal(w.log, []string{"boot disk"}) {
		t.Fatalf("after the BMC answered: device %q, locked %v, state %q, log %v", w.n.BootDevice, w.n.Locked(), w.n.ProvisionState, w.log)
	}
	if _, r := w.m.BootDeviceRequest(w.n, "cdrom", w.now); r == nil || r.httpCode() != 400 {
		t.Errorf("boot device cdrom: %+v, want 400", r)
	}
	w.n.Reservation = "coordinator"
	if _, r := w.m.BootDeviceRequest(w.n, "pxe", w.now); r == nil || r.httpCode() != 409 {
		t.Errorf("boot device on a locked node: %+v, want 409", r)
	}
}
