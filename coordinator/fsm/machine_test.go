package fsm

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/protocol"
)

func testMachine(t *testing.T) *Machine {
	t.Helper()
	reg, err := drivers.NewRegistry(drivers.Builtin()...)
	if err != nil {
		t.Fatal(err)
	}
	id := 0
	return New(Config{Drivers: reg, AutomatedClean: true,
		NewID:    func() string { id++; return fmt.Sprintf("c%d", id) },
		NewToken: func() string { id++; return fmt.Sprintf("tok%d", id) }})
}

// world answers the machine's commands the way a healthy site would.
type world struct {
	t       *testing.T
	m       *Machine
	now     time.Time
	n       *Node
	failOn  string // step name that fails
	log     []string
	noAgent bool
	// holdInband keeps in-band commands in held instead of answering them.
	holdInband bool
	held       []Outgoing
	boots      int // ramdisk boots so far (each gets its own boot id)
	sent       []Outgoing
	// path is every state the node entered, in order.
	path []State
	// plans are the run_plan commands sent (siteplan_test.go); holdPlan
	// keeps their steps unanswered.
	plans    []*protocol.Message
	holdPlan bool
	// offer, when set, is the clean steps the ramdisk offers (else the
	// two erase steps).
	offer []protocol.Step
}

// record notes the states an output moved the node through.
func (w *world) record(out Output) {
	for _, h := range out.History {
		if h.To != "" {
			w.path = append(w.path, h.To)
		}
	}
}

func (w *world) run(out Output) {
	w.t.Helper()
	w.record(out)
	queue := out.Send
	for steps := 0; len(queue) > 0; steps++ {
		if steps > 200 {
			w.t.Fatal("no end to the message exchange")
		}
		o := queue[0]
		queue = queue[1:]
		w.sent = append(w.sent, o)
		msg := o.Msg
		w.now = w.now.Add(time.Second)
		if w.holdInband && msg.Action == protocol.ActionInbandRun {
			w.held = append(w.held, o)
			continue
		}
		var next Output
		switch {
		case msg.Kind == protocol.KindCommand && msg.Action == protocol.ActionPower:
			if d, _ := msg.Args[protocol.ArgBootDevice].(string); d != "" {
				w.log = append(w.log, "boot "+d)
			}
			w.log = append(w.log, "power "+msg.Args["state"].(string))
			next = w.m.Result(w.n, &protocol.Message{Kind: protocol.KindResult, CommandID: msg.ID, OK: true}, w.now)
			d, _ := msg.Args[protocol.ArgBootDevice].(string)
			if st := msg.Args["state"]; st == protocol.PowerReboot && !w.noAgent && (d == protocol.BootPXE || d == "" && w.n.BootDevice != protocol.BootDisk) {
				// The ramdisk boots and says hello (a reboot from the
				// disk boots no ramdisk).
				w.boots++
				offer := []protocol.Step{{Interface: "deploy", Step: "erase_devices_metadata", Priority: 99, Abortable: true}, {Interface: "deploy", Step: "erase_devices", Priority: 10, Abortable: true}}
				if w.offer != nil {
					offer = w.offer
				}
				h := w.m.Hello(w.n, &protocol.Message{BootID: fmt.Sprintf("boot-%d", w.boots),
					CleanSteps:  offer,
					DeploySteps: []protocol.Step{{Interface: "deploy", Step: "write_image", Priority: 80}}}, w.now)
				next.Send = append(next.Send, h.Send...)
				next.History = append(next.History, h.History...)
			}
		case msg.Kind == protocol.KindCommand && msg.Action == protocol.ActionPlanRun:
			// A site that runs plans: each step in turn, its result sent
			// as if the step had been sent alone.
			w.plans = append(w.plans, msg)
			if w.holdPlan {
				continue
			}
			for _, c := range msg.Plan {
				w.log = append(w.log, c.Step.Interface+"."+c.Step.Step)
				res := &protocol.Message{CommandID: c.ID, OK: c.Step.Step != w.failOn, Token: c.Token}
				if !res.OK {
					res.Error = "disk on fire"
				}
				r := w.m.Result(w.n, res, w.now)
				w.record(r)
				next.Send = append(next.Send, r.Send...)
				if !res.OK {
					break
				}
			}
		case msg.Kind == protocol.KindCommand && msg.Action == protocol.ActionBootDev:
			w.log = append(w.log, "boot "+msg.Args["device"].(string))
			next = w.m.Result(w.n, &protocol.Message{CommandID: msg.ID, OK: true}, w.now)
		case msg.Kind == protocol.KindCommand && (msg.Action == protocol.ActionOOBStep || msg.Action == protocol.ActionInbandRun || msg.Action == protocol.ActionValidate || msg.Action == protocol.ActionVMedia):
			res := &protocol.Message{CommandID: msg.ID, OK: true, Token: msg.Token}
			if msg.Step == nil {
				w.log = append(w.log, msg.Action)
			}
			// A run of out-of-band steps stops at the first that fails.
			for i, s := range msg.OOBSteps() {
				w.log = append(w.log, s.Interface+"."+s.Step)
				if s.Step == w.failOn {
					res.OK, res.Error = false, "disk on fire"
					if len(msg.Steps) > 1 {
						res.Data = map[string]any{protocol.StepsDone: float64(i)}
					}
					break
				}
			}
			if msg.Step != nil && msg.Step.Step == "inspect_hardware" {
				res.Data = map[string]any{"inventory": map[string]any{"cpu": 4}, "properties": map[string]any{"cpus": 4.0, "memory_mb": 1024.0}}
			}
			next = w.m.Result(w.n, res, w.now)
		}
		w.record(next)
		queue = append(queue, next.Send...)
	}
}

func (w *world) verb(v Event, req VerbRequest) {
	w.t.Helper()
	req.Verb = v
	out, r := w.m.Verb(w.n, req, w.now)
	if r != nil {
		w.t.Fatalf("%s refused: %s", v, r.Msg)
	}
	w.run(out)
}

func newWorld(t *testing.T) *world {
	m := testMachine(t)
	return &world{t: t, m: m, now: time.Unix(1000, 0), n: &Node{UUID: "u1", Name: "n1", Driver: "fake", Site: "s1", ProvisionState: Enroll}}
}

func (w *world) want(s State) {
	w.t.Helper()
	if w.n.ProvisionState != s {
		w.t.Fatalf("state %q, want %q (last_error %q, log %v)", w.n.ProvisionState, s, w.n.LastError, w.log)
	}
}

func TestFullLifecycle(t *testing.T) {
	w := newWorld(t)
	w.verb(Manage, VerbRequest{})
	w.want(Manageable)
	w.verb(Inspect, VerbRequest{})
	w.want(Manageable)
	if w.n.Properties["cpus"] != 4.0 {
		t.Fatalf("properties not filled: %v", w.n.Properties)
	}
	w.log = nil
	w.verb(Provide, VerbRequest{})
	w.want(Available)
	if got := strings.Join(w.log, ","); got != "boot pxe,power rebooted,deploy.erase_devices_metadata,deploy.erase_devices,power power off" {
		t.Fatalf("provide ran %s", got)
	}
	w.n.InstanceInfo = map[string]any{"image_source": "http://x/img"}
	w.log = nil
	w.verb(Deploy, VerbRequest{})
	w.want(Active)
	if got := strings.Join(w.log, ","); got != "boot pxe,power rebooted,deploy.write_image,deploy.prepare_instance_boot,deploy.tear_down_agent,deploy.boot_instance" {
		t.Fatalf("deploy ran %s", got)
	}
	w.verb(Rebuild, VerbRequest{})
	w.want(Active)
	w.verb(RescueV, VerbRequest{HashedRescuePassword: "$6$saltstring$xwVXmdoFwkuFfkvrCnFqepsb1G.0z7.VoLCq69.god.O.zXvYSQsLM/oDMuI05ufmibO/tzUYEh4IPt9kZAc0."})
	w.want(Rescue)
	w.verb(Unrescue, VerbRequest{})
	w.want(Active)
	w.verb(Undeploy, VerbRequest{})
	w.want(Available)
	if w.n.InstanceInfo != nil {
		t.Fatal("instance_info kept after undeploy")
	}
	if w.n.TargetProvisionState != "" || w.n.Reservation != "" || w.n.Op != nil {
		t.Fatalf("resting node still busy: %+v", w.n)
	}
}

func TestCleanStepFailureSetsMaintenance(t *testing.T) {
	w := newWorld(t)
	w.n.ProvisionState = Manageable
	w.failOn = "erase_devices"
	w.verb(Provide, VerbRequest{})
	w.want(CleanFailed)
	if !w.n.Maintenance || !strings.Contains(w.n.LastError, "deploy.erase_devices") || w.n.CleanStep == nil || w.n.CleanStep.Step != "erase_devices" {
		t.Fatalf("failure not recorded: maint=%v err=%q step=%v", w.n.Maintenance, w.n.LastError, w.n.CleanStep)
	}
	if w.n.PowerState == protocol.PowerOff {
		t.Fatal("clean failure powered the node off")
	}
}

func TestManualCleanValidation(t *testing.T) {
	cases := []struct {
		name  string
		steps []map[string]any
		want  string
	}{
		{"unknown arg", []map[string]any{{"interface": "management", "step": "fake_reset_bmc", "args": map[string]any{"speed": 1}}}, `unknown argument "speed"`},
		{"unknown inband step", []map[string]any{{"interface": "deploy", "step": "melt"}}, "no such step"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t)
			w.n.ProvisionState = Manageable
			w.n.CachedCleanSteps = drivers.InbandCleanSteps()
			w.n.StepsCachedAt = w.now
			w.verb(Clean, VerbRequest{CleanSteps: c.steps})
			w.want(CleanFailed)
			if !strings.Contains(w.n.LastError, c.want) {
				t.Fatalf("last_error %q lacks %q", w.n.LastError, c.want)
			}
			if len(w.log) != 0 || w.n.Maintenance {
				t.Fatalf("ran %v (maintenance %v) for a bad list", w.log, w.n.Maintenance)
			}
		})
	}
}

func TestRequiredArgMissing(t *testing.T) {
	w := newWorld(t)
	w.n.Driver = "redfish"
	w.n.ProvisionState = Manageable
	w.verb(Clean, VerbRequest{CleanSteps: []map[string]any{{"interface": "bios", "step": "apply_configuration"}}})
	w.want(CleanFailed)
	if !strings.Contains(w.n.LastError, "bios.apply_configuration") || !strings.Contains(w.n.LastError, `"settings"`) {
		t.Fatalf("last_error %q does not name step and argument", w.n.LastError)
	}
}

// TestRefusals checks every verb from every state against the table.
func TestRefusals(t *testing.T) {
	m := testMachine(t)
	for _, s := range AllStates() {
		for _, v := range Verbs() {
			n := &Node{UUID: "u", Name: "n", Driver: "fake", Site: "s", ProvisionState: s,
				InstanceInfo: map[string]any{"image_source": "http://i"}}
			_, allowed := Next(s, v, "")
			req := VerbRequest{Verb: v, HashedRescuePassword: "$6$saltstring$xwVXmdoFwkuFfkvrCnFqepsb1G.0z7.VoLCq69.god.O.zXvYSQsLM/oDMuI05ufmibO/tzUYEh4IPt9kZAc0.", CleanSteps: []map[string]any{{"interface": "management", "step": "fake_reset_bmc"}},
				ServiceSteps: []map[string]any{{"interface": "management", "step": "fake_reset_bmc"}}}
			if IsWait(s) {
				n.Op = &Operation{Phase: "clean", Plan: []Action{{Kind: ActAwaitAgent}}}
			}
			_, r := m.Verb(n, req, time.Unix(0, 0))
			if allowed && r != nil {
				t.Errorf("%s from %q refused: %s", v, s, r.Msg)
			}
			if !allowed {
				if r == nil || r.httpCode() != 400 {
					t.Errorf("%s from %q: got %v, want 400", v, s, r)
					continue
				}
				for _, part := range []string{string(v), string(s), `"n"`} {
					if !strings.Contains(r.Msg, part) {
						t.Errorf("refusal %q does not name %q", r.Msg, part)
					}
				}
			}
		}
	}
}

func TestLockedAndRetired(t *testing.T) {
	m := testMachine(t)
	n := &Node{UUID: "u", Name: "n", Driver: "fake", ProvisionState: Cleaning, Reservation: "coordinator"}
	if _, r := m.Verb(n, VerbRequest{Verb: Abort}, time.Now()); r == nil || r.httpCode() != 409 || !strings.Contains(r.Msg, "locked") {
		t.Fatalf("locked node: %v", r)
	}
	n = &Node{UUID: "u", Name: "n", Driver: "fake", ProvisionState: Manageable, Retired: true, RetiredReason: "old"}
	if _, r := m.Verb(n, VerbRequest{Verb: Provide}, time.Now()); r == nil || r.httpCode() != 409 || !strings.Contains(r.Msg, "retired") {
		t.Fatalf("retired provide: %v", r)
	}
}

func TestRetiredUndeployEndsManageable(t *testing.T) {
	w := newWorld(t)
	w.n.ProvisionState = Active
	w.n.Retired = true
	w.verb(Undeploy, VerbRequest{})
	w.want(Manageable)
}

func TestAbort(t *testing.T) {
	// Abortable step: fails at once.
	w := newWorld(t)
	w.n.ProvisionState = Manageable
	w.holdInband = true
	w.verb(Provide, VerbRequest{})
	held := w.held
	w.want(CleanWait)
	if len(held) != 1 {
		t.Fatalf("held %d", len(held))
	}
	res, r := w.m.Verb(w.n, VerbRequest{Verb: Abort}, w.now)
	if r != nil {
		t.Fatal(r.Msg)
	}
	w.want(CleanFailed)
	if !strings.Contains(w.n.LastError, "aborted by request during step deploy.erase_devices_metadata") || w.n.Maintenance {
		t.Fatalf("abort: %q maint=%v", w.n.LastError, w.n.Maintenance)
	}
	// The abort to the ramdisk, then the end of its boot to the site (the
	// node stays powered on; its credential must stop working there too).
	if len(res.Send) != 2 || res.Send[0].Msg.Action != protocol.ActionAbort ||
		res.Send[1].Msg.Action != protocol.ActionEndBoot || res.Send[1].Topic != protocol.BMCCmdTopic("s1") || res.Send[1].Msg.Node != "u1" {
		t.Fatalf("want the abort to the ramdisk, then end_boot to the site: %+v", res.Send)
	}

	// Non-abortable step: fails when it ends.
	w = newWorld(t)
	w.n.ProvisionState = Available
	w.n.InstanceInfo = map[string]any{"image_source": "http://i"}
	w.holdInband = true
	w.verb(Deploy, VerbRequest{})
	held = w.held
	w.holdInband = false
	w.want(DeployWait)
	if _, r := w.m.Verb(w.n, VerbRequest{Verb: Abort}, w.now); r != nil {
		t.Fatal(r.Msg)
	}
	w.want(DeployWait)
	w.run(Output{Send: held})
	w.want(DeployFailed)
	if !strings.Contains(w.n.LastError, "after step deploy.write_image") {
		t.Fatalf("abort-after: %q", w.n.LastError)
	}
}

func TestTimeoutAndMaintenance(t *testing.T) {
	w := newWorld(t)
	w.noAgent = true
	w.n.ProvisionState = Manageable
	w.verb(Provide, VerbRequest{})
	w.want(CleanWait)
	// Maintenance pauses: no timeout.
	w.m.SetMaintenance(w.n, true, "look", w.now)
	w.m.Tick(w.n, w.now.Add(time.Hour), true)
	w.want(CleanWait)
	// Offline site: no timeout.
	w.m.SetMaintenance(w.n, false, "", w.now)
	w.m.Tick(w.n, w.now.Add(time.Hour), false)
	w.want(CleanWait)
	w.m.Tick(w.n, w.now.Add(time.Hour), true)
	w.want(CleanFailed)
	if !strings.Contains(w.n.LastError, "Timeout") {
		t.Fatalf("timeout error %q", w.n.LastError)
	}
}

func TestTableIsConsistent(t *testing.T) {
	for _, tr := range Table() {
		if Stable(tr.From) && !IsVerb(tr.Event) {
			t.Errorf("stable state %q moves on internal event %q", tr.From, tr.Event)
		}
	}
	for _, s := range AllStates() {
		if !Stable(s) && len(Allowed(s)) == 0 && !IsWait(s) {
			// -ING states accept no verb: they are locked.
			continue
		}
	}
}

func TestWrongTokenRejected(t *testing.T) {
	w := newWorld(t)
	w.noAgent = true
	w.n.ProvisionState = Manageable
	w.verb(Provide, VerbRequest{})
	w.want(CleanWait)
	h := w.m.Hello(w.n, &protocol.Message{BootID: "b1", CleanSteps: standardCleanSteps}, w.now)
	if h.Reject != "" || w.n.AgentToken == "" {
		t.Fatalf("hello: %q token %q state %q err %q", h.Reject, w.n.AgentToken, w.n.ProvisionState, w.n.LastError)
	}
	deadline := w.n.Deadline
	later := w.now.Add(time.Minute)
	if out := w.m.Heartbeat(w.n, &protocol.Message{Token: "forged"}, later); out.Reject == "" || out.Late || !w.n.Deadline.Equal(deadline) {
		t.Fatalf("forged heartbeat accepted or taken for a late one: %q late=%v", out.Reject, out.Late)
	}
	if out := w.m.Hello(w.n, &protocol.Message{BootID: "b1"}, later); out.Reject != "" || len(out.Send) != 1 || out.Send[0].Msg.Token != w.n.AgentToken {
		t.Fatal("repeated hello of the same boot did not get the welcome again")
	}
	p := w.n.Pending
	if out := w.m.Result(w.n, &protocol.Message{CommandID: p.ID, OK: true, Token: "forged"}, later); out.Reject == "" || w.n.Pending == nil {
		t.Fatal("result with a forged token accepted")
	}
	if out := w.m.Heartbeat(w.n, &protocol.Message{Token: w.n.AgentToken, Running: p.ID, Progress: 0.5}, later); out.Reject != "" ||
		!w.n.Deadline.After(deadline) || !w.n.Pending.Accepted || w.n.CleanStep.Progress != 0.5 {
		t.Fatal("good heartbeat did not push the deadline and mark the command accepted")
	}
	// Once the token is withdrawn, a heartbeat that crossed it is late, not forged.
	tok := w.n.AgentToken
	w.n.AgentToken = ""
	if out := w.m.Heartbeat(w.n, &protocol.Message{Token: tok}, later); out.Reject == "" || !out.Late {
		t.Fatalf("heartbeat after the token was withdrawn: %q late=%v, want a late rejection", out.Reject, out.Late)
	}
}

// A ramdisk that restarts on its own (a boot the coordinator did not
// start) gets no second token: the operation fails at once, naming the
// step and both boots. Late hellos of earlier boots are only ignored.
func TestRamdiskRestartedOnItsOwn(t *testing.T) {
	w := newWorld(t)
	w.holdInband = true
	w.n.ProvisionState = Manageable
	w.verb(Provide, VerbRequest{})
	w.want(CleanWait)
	if len(w.held) != 1 || w.n.BootID == "" {
		t.Fatalf("want the first step sent to a welcomed ramdisk; held %d, boot %q", len(w.held), w.n.BootID)
	}
	first := w.n.BootID
	// The same boot saying hello again is fine: the welcome was lost.
	if out := w.m.Hello(w.n, &protocol.Message{BootID: first}, w.now); out.Reject != "" || w.n.ProvisionState != CleanWait {
		t.Fatalf("repeated hello: %q, state %q", out.Reject, w.n.ProvisionState)
	}
	out := w.m.Hello(w.n, &protocol.Message{BootID: "crashed-and-back"}, w.now)
	if w.n.ProvisionState != CleanFailed || w.n.AgentToken != "" {
		t.Fatalf("after a self-restart: state %q token %q, want clean failed and no token", w.n.ProvisionState, w.n.AgentToken)
	}
	for _, part := range []string{"restarted on its own", first, "crashed-and-back", "erase_devices_metadata"} {
		if !strings.Contains(w.n.LastError, part) {
			t.Errorf("last_error %q does not name %q", w.n.LastError, part)
		}
	}
	if !w.n.Maintenance {
		t.Error("a clean step was running: the node should be in maintenance, as for any failed clean step")
	}
	if len(out.History) == 0 {
		t.Error("no history entry for the failure")
	}
	// Its further hellos and those of the first boot are late, not alarms.
	for _, b := range []string{"crashed-and-back", first} {
		if out := w.m.Hello(w.n, &protocol.Message{BootID: b}, w.now); !out.Late || w.n.AgentToken != "" {
			t.Errorf("hello from %s after the failure: late=%v reject %q token %q", b, out.Late, out.Reject, w.n.AgentToken)
		}
	}
}

func TestResultSummary(t *testing.T) {
	for _, c := range []struct {
		data map[string]any
		want string
	}{
		{nil, ""},
		{map[string]any{"summary": 42}, ""},
		{map[string]any{"summary": " /dev/vda blkzeroout\n\x1b[31m "}, "/dev/vda blkzeroout  [31m"},
	} {
		if got := resultSummary(c.data); got != c.want {
			t.Errorf("resultSummary(%q) = %q, want %q", c.data, got, c.want)
		}
	}
	long := strings.Repeat("é", 400) // 800 bytes
	got := resultSummary(map[string]any{"summary": long})
	if !strings.HasSuffix(got, "…") || len(got) > 503 || !utf8.ValidString(got) {
		t.Errorf("a long summary is cut to about 500 bytes on a rune boundary: %d bytes, valid %v", len(got), utf8.ValidString(got))
	}
}

var standardCleanSteps = []protocol.Step{{Interface: "deploy", Step: "erase_devices_metadata", Priority: 99, Abortable: true},
	{Interface: "deploy", Step: "erase_devices", Priority: 10, Abortable: true}}

// TestCleaningNeedsTheRequiredSteps: a hello that offers no erase step
// (an impostor's, or a broken ramdisk's) cannot take a node from clean
// wait to available; the cleaning fails naming the missing steps, and
// nothing is sent to run. A priority override of 0 drops the requirement.
func TestCleaningNeedsTheRequiredSteps(t *testing.T) {
	for _, c := range []struct {
		name    string
		offered []protocol.Step
		over    map[string]int
		want    State
		missing string
	}{
		{"nothing offered", nil, nil, CleanFailed, "deploy.erase_devices_metadata, deploy.erase_devices"},
		{"metadata only", standardCleanSteps[:1], nil, CleanFailed, "deploy.erase_devices"},
		{"both", standardCleanSteps, nil, CleanWait, ""},
		{"both, offered at priority 0", []protocol.Step{{Interface: "deploy", Step: "erase_devices_metadata"}, {Interface: "deploy", Step: "erase_devices"}}, nil, CleanWait, ""},
		{"full erase disabled by the operator", standardCleanSteps[:1], map[string]int{"deploy.erase_devices": 0}, CleanWait, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t)
			w.m.cfg.PriorityOverrides = c.over
			w.noAgent = true
			w.n.ProvisionState = Manageable
			w.verb(Provide, VerbRequest{})
			w.want(CleanWait)
			out := w.m.Hello(w.n, &protocol.Message{BootID: "b1", CleanSteps: c.offered}, w.now)
			if w.n.ProvisionState != c.want {
				t.Fatalf("state %q, want %q (last_error %q)", w.n.ProvisionState, c.want, w.n.LastError)
			}
			if c.missing == "" {
				if w.n.Pending == nil || w.n.Pending.Msg.Step == nil || w.n.Pending.Msg.Step.Step != "erase_devices_metadata" {
					t.Fatalf("want erase_devices_metadata sent first, pending %+v", w.n.Pending)
				}
				return
			}
			if !strings.Contains(w.n.LastError, c.missing) {
				t.Errorf("last_error %q does not name %s", w.n.LastError, c.missing)
			}
			for _, o := range out.Send {
				if o.Msg.Action == protocol.ActionInbandRun {
					t.Errorf("a step was sent although cleaning failed: %+v", o.Msg.Step)
				}
			}
			if w.n.AgentToken != "" || w.n.BootNonce != "" {
				t.Error("the boot's token and credential outlive the failed cleaning")
			}
		})
	}
}

// TestBootCredentialPerBoot: every power command that boots the node mints
// a new boot nonce (carried in the command, never a credential), and the
// end of the boot (power off, end of the operation, failure) revokes it.
func TestBootCredentialPerBoot(t *testing.T) {
	w := newWorld(t)
	w.noAgent = true
	w.n.ProvisionState = Manageable
	w.verb(Inspect, VerbRequest{})
	w.want(InspectWait)
	first := w.n.BootNonce
	if first == "" {
		t.Fatal("no boot nonce while the node boots the ramdisk")
	}
	var sent string
	for _, o := range w.sent {
		if o.Msg.Action == protocol.ActionPower {
			if _, leaked := o.Msg.Args[protocol.ArgAgentPassword]; leaked {
				t.Error("the machine put a credential into a command; only the nonce belongs there")
			}
			sent, _ = o.Msg.Args[protocol.ArgBootNonce].(string)
		}
	}
	if sent != first {
		t.Fatalf("power command carries nonce %q, node has %q", sent, first)
	}
	w.verb(Abort, VerbRequest{})
	w.want(InspectFailed)
	if w.n.BootNonce != "" {
		t.Fatal("the boot credential outlives the aborted inspection")
	}
	w.verb(Inspect, VerbRequest{})
	w.want(InspectWait)
	if w.n.BootNonce == "" || w.n.BootNonce == first {
		t.Fatalf("second boot reuses nonce %q", w.n.BootNonce)
	}
}

// TestDeployWritesImageWhateverTheRamdiskSays: a ramdisk that offers
// write_image at priority 0 does not make the deploy skip it.
func TestDeployWritesImageWhateverTheRamdiskSays(t *testing.T) {
	w := newWorld(t)
	w.noAgent = true
	w.n.ProvisionState = Available
	w.n.InstanceInfo = map[string]any{"image_source": "http://i"}
	w.verb(Deploy, VerbRequest{})
	w.want(DeployWait)
	w.holdInband = true
	w.run(w.m.Hello(w.n, &protocol.Message{BootID: "b1", CleanSteps: standardCleanSteps,
		DeploySteps: []protocol.Step{{Interface: "deploy", Step: "write_image", Priority: 0}}}, w.now))
	if len(w.held) != 1 || w.held[0].Msg.Step.Step != "write_image" {
		t.Fatalf("want write_image sent to the ramdisk, held %v (state %q, last_error %q)", w.held, w.n.ProvisionState, w.n.LastError)
	}
}

func TestValidate(t *testing.T) {
	m := testMachine(t)
	n := &Node{UUID: "u1", Name: "n1", Driver: "fake", Site: "s1"}
	v := m.Validate(n)
	for _, k := range []string{"power", "management", "boot", "inspect", "rescue", "network"} {
		if r := v[k].Result; r == nil || !*r {
			t.Errorf("fake node: %s = %+v, want true", k, v[k])
		}
	}
	if r := v["deploy"].Result; r == nil || *r || !strings.Contains(v["deploy"].Reason, "image_source") {
		t.Errorf("deploy without image_source: %+v", v["deploy"])
	}
	n.InstanceInfo = map[string]any{"image_source": "http://i"}
	if r := m.Validate(n)["deploy"].Result; r == nil || !*r {
		t.Error("deploy with image_source not valid")
	}
	n.Driver = "ipmi"
	v = m.Validate(n)
	if r := v["power"].Result; r == nil || *r || !strings.Contains(v["power"].Reason, "ipmi_address") {
		t.Errorf("ipmi without ipmi_address: power %+v", v["power"])
	}
	if r := v["boot"].Result; r == nil || !*r {
		t.Errorf("ipmi boot: %+v, want true (the edge agent's network boot)", v["boot"])
	}
	n.Driver = "redfish"
	if r := m.Validate(n)["bios"].Result; r == nil || !*r {
		t.Error("redfish has bios steps: bios must validate")
	}
	if r := m.Validate(n)["boot"].Result; r == nil || !*r {
		t.Error("redfish boots the ramdisk from virtual media: boot must validate")
	}
	if _, r := m.Verb(&Node{UUID: "u2", Name: "n2", Driver: "ipmi", ProvisionState: Manageable}, VerbRequest{Verb: Inspect}, time.Unix(0, 0)); r != nil {
		t.Errorf("inspect of an ipmi node refused: %+v", r)
	}
	if _, r := m.Verb(&Node{UUID: "u3", Name: "n3", Driver: "redfish", ProvisionState: Manageable}, VerbRequest{Verb: Inspect}, time.Unix(0, 0)); r != nil {
		t.Errorf("inspect of a redfish node refused: %+v", r)
	}
}

// TestDeployChecksumRefused: a deploy or rebuild whose image checksum the
// ramdisk would refuse (md5, sha1, one that does not parse) is refused
// with the reason and what to give, and the node is untouched; node
// validate says the same. No checksum, a sha256, sha384 or sha512
// digest (Glance's os_hash_algo values), and a checksum file URL go on.
func TestDeployChecksumRefused(t *testing.T) {
	sha256 := strings.Repeat("ab", 32)
	for _, c := range []struct {
		ii   map[string]any
		want string // "" when the deploy starts
	}{
		{map[string]any{}, ""},
		{map[string]any{"image_checksum": sha256}, ""},
		{map[string]any{"image_checksum": "sha512:" + strings.Repeat("cd", 64)}, ""},
		{map[string]any{"image_checksum": "https://images.example/SHA256SUMS"}, ""},
		{map[string]any{"image_os_hash_algo": "sha256", "image_os_hash_value": sha256, "image_checksum": strings.Repeat("0", 32)}, ""},
		{map[string]any{"image_checksum": strings.Repeat("0", 32)}, "image checksum is md5"},
		{map[string]any{"image_checksum": "md5:" + strings.Repeat("0", 32)}, "image checksum is md5"},
		{map[string]any{"image_os_hash_algo": "md5", "image_os_hash_value": strings.Repeat("0", 32)}, "image checksum is md5"},
		{map[string]any{"image_checksum": "sha1:" + strings.Repeat("0", 40)}, "image checksum is sha1"},
		{map[string]any{"image_os_hash_algo": "sha1", "image_os_hash_value": strings.Repeat("0", 40)}, "image checksum is sha1"},
		{map[string]any{"image_checksum": "sha384:" + strings.Repeat("0", 96)}, ""},
		{map[string]any{"image_os_hash_algo": "sha384", "image_os_hash_value": strings.Repeat("0", 96)}, ""},
		{map[string]any{"image_checksum": "sha256:" + strings.Repeat("0", 32)}, "not a sha256 digest"},
	} {
		w := newWorld(t)
		w.n.ProvisionState = Available
		w.n.InstanceInfo = map[string]any{"image_source": "http://i/img.raw"}
		maps.Copy(w.n.InstanceInfo, c.ii)
		v := w.m.Validate(w.n)
		out, r := w.m.Verb(w.n, VerbRequest{Verb: Deploy}, w.now)
		if c.want == "" {
			if r != nil || w.n.ProvisionState != Deploying || !out.Changed {
				t.Errorf("%v: refused %v, state %q; want the deploy started", c.ii, r, w.n.ProvisionState)
			}
			if res := v["deploy"].Result; res == nil || !*res {
				t.Errorf("%v: validate deploy %+v, want true", c.ii, v["deploy"])
			}
			continue
		}
		if r == nil || r.httpCode() != 400 || !strings.Contains(r.Msg, c.want) || !strings.Contains(r.Msg, "n1") {
			t.Errorf("%v: refusal %+v, want 400 with %q", c.ii, r, c.want)
		}
		if c.want != "not a sha256 digest" && (r == nil || !strings.Contains(r.Msg, "sha256:HEX")) {
			t.Errorf("%v: refusal %+v does not say what to give", c.ii, r)
		}
		if legacy := strings.HasSuffix(c.want, "md5") || strings.HasSuffix(c.want, "sha1"); legacy != (r != nil && strings.Contains(r.Msg, "--allow-md5-checksum")) {
			t.Errorf("%v: refusal %+v; want the option --allow-md5-checksum named for md5 and sha1 only", c.ii, r)
		}
		if w.n.ProvisionState != Available || w.n.Op != nil || out.Changed {
			t.Errorf("%v: refused deploy changed the node: state %q", c.ii, w.n.ProvisionState)
		}
		if res := v["deploy"].Result; res == nil || *res || !strings.Contains(v["deploy"].Reason, c.want) {
			t.Errorf("%v: validate deploy %+v, want false with %q", c.ii, v["deploy"], c.want)
		}
	}
}

// TestDeployChecksumMD5Allowed: with AllowMD5Checksum (serve
// --allow-md5-checksum) a deploy of an md5 or sha1 checksum starts and
// validates, and its write_image command tells the ramdisk to take it;
// without the option the command never carries the permission, whatever
// the step's own args say.
func TestDeployChecksumMD5Allowed(t *testing.T) {
	for _, ii := range []map[string]any{
		{"image_checksum": strings.Repeat("0", 32)},
		{"image_os_hash_algo": "md5", "image_os_hash_value": strings.Repeat("0", 32)},
		{"image_checksum": "sha1:" + strings.Repeat("0", 40)},
	} {
		w := newWorld(t)
		w.m.cfg.AllowMD5Checksum = true
		w.n.ProvisionState = Available
		w.n.InstanceInfo = map[string]any{"image_source": "http://i/img.raw"}
		maps.Copy(w.n.InstanceInfo, ii)
		if res := w.m.Validate(w.n)["deploy"].Result; res == nil || !*res {
			t.Errorf("%v: validate deploy %+v, want true", ii, w.m.Validate(w.n)["deploy"])
		}
		if _, r := w.m.Verb(w.n, VerbRequest{Verb: Deploy}, w.now); r != nil || w.n.ProvisionState != Deploying {
			t.Errorf("%v: refused %+v, state %q; want the deploy started", ii, r, w.n.ProvisionState)
		}
		args, err := w.m.stepArgs(w.n, &StepRun{Interface: "deploy", Step: "write_image", InBand: true})
		if err != nil || args[protocol.ArgAllowMD5Checksum] != true || args["image_checksum"] != ii["image_checksum"] {
			t.Errorf("%v: write_image args %v (%v); want allow_md5_checksum true with the checksum", ii, args, err)
		}
	}
	w := newWorld(t)
	w.n.InstanceInfo = map[string]any{"image_source": "http://i/img.raw", "image_checksum": strings.Repeat("ab", 32)}
	args, err := w.m.stepArgs(w.n, &StepRun{Interface: "deploy", Step: "write_image", InBand: true, Args: map[string]any{protocol.ArgAllowMD5Checksum: true}})
	if _, set := args[protocol.ArgAllowMD5Checksum]; err != nil || set {
		t.Errorf("write_image args without the option: %v (%v); want no allow_md5_checksum", args, err)
	}
}

// TestOverrideOfAStepTwoSourcesDeclare: a priority override of a RAID
// step that the Redfish driver (raid_interface redfish) and the standard
// ramdisk (agent) both declare is one step, not two of one interface at
// the same priority; a real clash is still refused.
func TestOverrideOfAStepTwoSourcesDeclare(t *testing.T) {
	reg, err := drivers.NewRegistry(drivers.Builtin()...)
	if err != nil {
		t.Fatal(err)
	}
	ok := Config{Drivers: reg, PriorityOverrides: map[string]int{"raid.create_configuration": 5}}
	if err := ok.Check(); err != nil {
		t.Fatalf("override raid.create_configuration=5 with the builtin drivers: %v", err)
	}
	bad := Config{Drivers: reg, PriorityOverrides: map[string]int{"raid.create_configuration": 5, "raid.delete_configuration": 5}}
	if err := bad.Check(); err == nil || !strings.Contains(err.Error(), "raid.delete_configuration") {
		t.Fatalf("two RAID steps at priority 5: %v; want the clash refused", err)
	}
}
