package fsm

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/protocol"
)

// The fuzz targets of this file feed the machine the two kinds of outside
// input it validates: the operator's step lists (clean_steps of "clean",
// deploy_steps of "active"), decoded as the API decodes them, and the
// steps a ramdisk offers in its hello, decoded by protocol.Decode as the
// engine decodes every MQTT payload. They drive the real Verb, Hello and
// Result, so resolveManual and planSteps run where they run in service.

// fuzzSite answers the machine's commands as a healthy site would: every
// BMC action and step succeeds, and a reboot brings up a ramdisk whose
// hello offers the fuzzed steps. It records the steps that ran.
type fuzzSite struct {
	t   *testing.T
	m   *Machine
	n   *Node
	now time.Time
	// The step lists of the ramdisk's hello, as they come off the wire.
	helloClean, helloDeploy []byte
	ran                     []protocol.Step
	boots                   int
}

func newFuzzMachine(t *testing.T) *Machine {
	reg, err := drivers.NewRegistry(drivers.Builtin()...)
	if err != nil {
		t.Fatal(err)
	}
	id := 0
	return New(Config{Drivers: reg, AutomatedClean: true,
		NewID:    func() string { id++; return fmt.Sprintf("c%d", id) },
		NewToken: func() string { id++; return fmt.Sprintf("tok%d", id) }})
}

// helloMessage wraps a fuzzed step list into a hello and decodes it as
// the engine would; a hello that does not decode never reaches the
// machine, so the ramdisk is then taken to offer no steps at all.
func helloMessage(node string, boot int, cleanSteps, deploySteps []byte) []byte {
	field := func(b []byte) string {
		if len(b) == 0 {
			return "null"
		}
		return string(b)
	}
	return []byte(fmt.Sprintf(`{"v":1,"kind":"hello","id":"h%d","node":%q,"sent":"2030-01-01T00:00:00Z","boot_id":"boot-%d","clean_steps":%s,"deploy_steps":%s}`,
		boot, node, boot, field(cleanSteps), field(deploySteps)))
}

func (s *fuzzSite) run(out Output, limit int) {
	s.t.Helper()
	queue := out.Send
	for i := 0; len(queue) > 0; i++ {
		if i > limit {
			s.t.Fatalf("no end to the message exchange after %d messages; node %+v", limit, s.n)
		}
		msg := queue[0].Msg
		queue = queue[1:]
		s.now = s.now.Add(time.Second)
		if msg.Kind != protocol.KindCommand {
			continue
		}
		if b, err := protocol.Encode(msg); err != nil {
			s.t.Fatalf("the machine sent a command that does not encode: %v: %+v", err, msg)
		} else if _, err := protocol.Decode(b); err != nil {
			s.t.Fatalf("the machine sent a command that does not decode: %v: %s", err, b)
		}
		res := &protocol.Message{V: protocol.Version, Kind: protocol.KindResult, ID: "r-" + msg.ID, Node: msg.Node, CommandID: msg.ID, OK: true, Token: msg.Token}
		var next Output
		switch msg.Action {
		case protocol.ActionOOBStep, protocol.ActionInbandRun:
			s.ran = append(s.ran, *msg.Step)
			next = s.m.Result(s.n, res, s.now)
		case protocol.ActionPower:
			next = s.m.Result(s.n, res, s.now)
			if msg.Args["state"] == protocol.PowerReboot {
				s.boots++
				next.Send = append(next.Send, s.sayHello()...)
			}
		default:
			next = s.m.Result(s.n, res, s.now)
		}
		queue = append(queue, next.Send...)
	}
}

func (s *fuzzSite) sayHello() []Outgoing {
	return s.m.Hello(s.n, decodeHello(s.n.UUID, s.boots, s.helloClean, s.helloDeploy), s.now).Send
}

// decodeHello decodes a hello carrying the fuzzed step lists; when they
// make it something other than a valid hello, the ramdisk offers none.
func decodeHello(node string, boot int, clean, deploy []byte) *protocol.Message {
	m, err := protocol.Decode(helloMessage(node, boot, clean, deploy))
	if err != nil || m.Kind != protocol.KindHello || m.BootID != fmt.Sprintf("boot-%d", boot) {
		m, _ = protocol.Decode(helloMessage(node, boot, nil, nil))
	}
	return m
}

// checkRests asserts what every operation must leave behind once its
// commands are answered: no lock, no operation, a stable state, and a
// node record the engine can store.
func checkRests(t *testing.T, n *Node, want ...State) {
	t.Helper()
	if n.Op != nil || n.Reservation != "" || n.Pending != nil {
		t.Fatalf("node does not rest: state %q op %+v reservation %q", n.ProvisionState, n.Op, n.Reservation)
	}
	ok := false
	for _, s := range want {
		ok = ok || n.ProvisionState == s
	}
	if !ok {
		t.Fatalf("node in %q, want one of %v (last_error %q)", n.ProvisionState, want, n.LastError)
	}
	if _, err := json.Marshal(n); err != nil {
		t.Fatalf("node cannot be stored: %v", err)
	}
}

// decodeStepList decodes a step list the way the API's provision handler
// does (a JSON list, each entry taken as an object).
func decodeStepList(b []byte) ([]map[string]any, bool) {
	var list []any
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, false
	}
	return AsObjects(list), true
}

var fuzzDrivers = []string{"fake", "redfish", "ipmi", "qemu-dev"}

// The steps the real ramdisk offers (ramdisk/steps), as its hello lists them.
const (
	fuzzInbandSteps = `[{"interface":"deploy","step":"erase_devices_metadata","priority":99,"abortable":true},` +
		`{"interface":"deploy","step":"erase_devices","priority":10,"abortable":true},` +
		`{"interface":"deploy","step":"inspect_hardware","abortable":true}]`
	fuzzInbandDeploySteps = `[{"interface":"deploy","step":"write_image","priority":80}]`
)

// FuzzManualCleanSteps runs "clean" with a fuzzed clean_steps list on a
// manageable node, with the ramdisk's steps already cached (the list is
// checked at once) or not (in-band steps are checked after the ramdisk's
// hello, which offers fuzzed steps). The design's rules: a bad list ends
// in clean failed with last_error, before any step ran and without
// maintenance; a good list runs exactly its steps, in the operator's order.
func FuzzManualCleanSteps(f *testing.F) {
	f.Add([]byte(`[{"interface":"deploy","step":"erase_devices_metadata"},{"interface":"management","step":"fake_reset_bmc","args":{"delay":1}}]`), []byte(fuzzInbandSteps), uint8(0), true)
	f.Add([]byte(`[{"interface":"deploy","step":"erase_devices_metadata"},{"interface":"management","step":"fake_reset_bmc","args":{"delay":1}}]`), []byte(fuzzInbandSteps), uint8(0), false)
	f.Add([]byte(`[{"interface":"deploy","step":"erase_devices","priority":5,"abortable":true}]`), []byte(fuzzInbandSteps), uint8(0), false)
	f.Add([]byte(`[{"interface":"bios","step":"apply_configuration","args":{"settings":[{"name":"ProcVirtualization","value":"Enabled"}]}}]`), []byte(fuzzInbandSteps), uint8(1), true)
	f.Add([]byte(`[{"interface":"bios","step":"apply_configuration"}]`), []byte(fuzzInbandSteps), uint8(1), true)
	f.Add([]byte(`[{"interface":"management","step":"reset_bmc"}]`), []byte(`[]`), uint8(2), false)
	f.Add([]byte(`[{"step":"erase_devices"}]`), []byte(fuzzInbandSteps), uint8(0), true)
	f.Add([]byte(`[{"interface":"disk","step":"x"}]`), []byte(fuzzInbandSteps), uint8(0), true)
	f.Add([]byte(`[{"interface":"deploy"}]`), []byte(fuzzInbandSteps), uint8(0), true)
	f.Add([]byte(`[{"interface":"management","step":"fake_reset_bmc","args":{"speed":1}}]`), []byte(fuzzInbandSteps), uint8(0), true)
	f.Add([]byte(`[{"interface":"deploy","step":"melt"}]`), []byte(fuzzInbandSteps), uint8(0), false)
	f.Add([]byte(`[{"interface":"management","step":"fake_reset_bmc","args":3}]`), []byte(fuzzInbandSteps), uint8(0), true)
	f.Add([]byte(`[{"interface":"deploy","step":"erase_devices","extra":1}]`), []byte(fuzzInbandSteps), uint8(0), true)
	f.Add([]byte(`[3, null, "x"]`), []byte(`[{"interface":"","step":""}]`), uint8(0), false)
	f.Fuzz(func(t *testing.T, steps, offered []byte, driver uint8, cached bool) {
		list, ok := decodeStepList(steps)
		if !ok {
			return // the API answers 400 before the machine sees it
		}
		m := newFuzzMachine(t)
		n := &Node{UUID: "u1", Name: "n1", Driver: fuzzDrivers[int(driver)%len(fuzzDrivers)], Site: "s1", ProvisionState: Manageable}
		if cached {
			n.CachedCleanSteps = wireSteps(decodeHello(n.UUID, 0, offered, nil).CleanSteps)
			n.StepsCachedAt = time.Unix(900, 0)
		}
		s := &fuzzSite{t: t, m: m, n: n, now: time.Unix(1000, 0), helloClean: offered, helloDeploy: []byte(fuzzInbandDeploySteps)}
		out, r := m.Verb(n, VerbRequest{Verb: Clean, CleanSteps: list}, s.now)
		if r != nil {
			// An empty list, or one of the wrong shape, is refused at
			// once (Ironic's 400), the node untouched.
			malformed := len(list) == 0 || CheckCleanStepsSchema(list) != nil
			if !malformed || r.httpCode() != 400 || n.ProvisionState != Manageable {
				t.Fatalf("clean refused (%d %s) for a list of %d steps; state %q", r.httpCode(), r.Msg, len(list), n.ProvisionState)
			}
			return
		}
		s.run(out, 2*len(list)+20)
		checkRests(t, n, Manageable, CleanFailed)
		if n.ProvisionState == CleanFailed {
			if n.LastError == "" || n.Maintenance || len(s.ran) != 0 {
				t.Fatalf("bad list: last_error %q, maintenance %v, steps run %v; want an error, no maintenance, nothing run", n.LastError, n.Maintenance, s.ran)
			}
			return
		}
		if len(s.ran) != len(list) {
			t.Fatalf("ran %d steps for a list of %d: %v", len(s.ran), len(list), s.ran)
		}
		for i, want := range list {
			if got := s.ran[i]; got.Interface != want["interface"] || got.Step != want["step"] {
				t.Fatalf("step %d ran %s.%s, the operator asked for %v", i+1, got.Interface, got.Step, want)
			}
		}
	})
}

// FuzzDeploySteps runs "active" with fuzzed deploy_steps on an available
// node whose ramdisk offers fuzzed deploy steps. The deploy either fails
// before any step ran, naming why, or runs every enabled step once in
// priority order. (Whether write_image runs depends on the priority the
// ramdisk offers it at, which this target fuzzes too.)
func FuzzDeploySteps(f *testing.F) {
	f.Add([]byte(`null`), []byte(fuzzInbandDeploySteps), uint8(0))
	f.Add([]byte(`[{"interface":"deploy","step":"write_image","args":{"image_source":"http://img/2.raw"},"priority":80}]`), []byte(fuzzInbandDeploySteps), uint8(0))
	f.Add([]byte(`[{"interface":"deploy","step":"prepare_instance_boot","priority":0,"args":{}}]`), []byte(fuzzInbandDeploySteps), uint8(1))
	f.Add([]byte(`[{"interface":"deploy","step":"boot_instance","priority":90,"args":{}}]`), []byte(fuzzInbandDeploySteps), uint8(2))
	f.Add([]byte(`[{"interface":"deploy","step":"write_image","priority":1.5}]`), []byte(fuzzInbandDeploySteps), uint8(0))
	f.Add([]byte(`[{"interface":"deploy","step":"melt","priority":"5","args":{}}]`), []byte(fuzzInbandDeploySteps), uint8(0))
	f.Add([]byte(`[{"interface":"deploy","step":"tear_down_agent","args":{"x":1},"priority":40}]`), []byte(fuzzInbandDeploySteps), uint8(0))
	f.Add([]byte(`[]`), []byte(`[{"interface":"deploy","step":"write_image","priority":80},{"interface":"deploy","step":"write_image","priority":0},{"interface":"raid","step":"create_configuration","priority":70}]`), uint8(0))
	f.Add([]byte(`[{"interface":"deploy","step":"write_image","priority":-1}]`), []byte(fuzzInbandDeploySteps), uint8(3))
	f.Add([]byte(`[]`), []byte(`[{"interface":"deploy","step":"erase_devices","priority":10}]`), uint8(0))
	f.Fuzz(func(t *testing.T, steps, offered []byte, driver uint8) {
		var list []map[string]any
		if len(steps) > 0 && string(steps) != "null" {
			var ok bool
			if list, ok = decodeStepList(steps); !ok {
				return // the API answers 400 before the machine sees it
			}
		}
		m := newFuzzMachine(t)
		n := &Node{UUID: "u1", Name: "n1", Driver: fuzzDrivers[int(driver)%len(fuzzDrivers)], Site: "s1", ProvisionState: Available,
			InstanceInfo: map[string]any{"image_source": "http://img/1.raw", "image_checksum": strings.Repeat("0", 64)}}
		s := &fuzzSite{t: t, m: m, n: n, now: time.Unix(1000, 0), helloClean: []byte(fuzzInbandSteps), helloDeploy: offered}
		out, r := m.Verb(n, VerbRequest{Verb: Deploy, DeploySteps: list}, s.now)
		if d, _ := m.cfg.Drivers.Get(n.Driver); d.NoRamdiskBoot != "" {
			// The edge cannot boot this driver's nodes into the ramdisk:
			// the deploy is refused at once, saying why.
			if r == nil || !strings.Contains(r.Msg, d.NoRamdiskBoot) || n.ProvisionState != Available {
				t.Fatalf("deploy of a %s node: refusal %v, state %q", n.Driver, r, n.ProvisionState)
			}
			return
		}
		if r != nil {
			// A list of the wrong shape, or one that touches the core
			// step or gives a known step wrong arguments, is refused at
			// once (Ironic's 400), the node untouched.
			if r.httpCode() != 400 || n.ProvisionState != Available || len(list) == 0 {
				t.Fatalf("deploy refused: %d %s (state %q)", r.httpCode(), r.Msg, n.ProvisionState)
			}
			return
		}
		s.run(out, 4*(len(list)+len(offered))+40)
		checkRests(t, n, Active, DeployFailed)
		if n.ProvisionState == DeployFailed {
			if n.LastError == "" || len(s.ran) != 0 {
				t.Fatalf("failed deploy: last_error %q, steps run %v", n.LastError, s.ran)
			}
			return
		}
		for i, st := range s.ran {
			if st.Priority <= 0 {
				t.Fatalf("disabled step %s.%s (priority %d) ran: %v", st.Interface, st.Step, st.Priority, s.ran)
			}
			if i > 0 && s.ran[i-1].Priority < st.Priority {
				t.Fatalf("steps out of priority order: %v", s.ran)
			}
		}
	})
}

// FuzzAgentMessage hands one fuzzed MQTT payload, decoded by
// protocol.Decode, to the machine the way the engine dispatches it
// (hello, heartbeat or result) while a node waits in each kind of WAIT
// state. Whatever the message, the node must stay in a state of the
// table, locked only while it works, and storable.
func FuzzAgentMessage(f *testing.F) {
	// The seeds' ids and tokens are those the deterministic machine of
	// newFuzzMachine hands out in each scenario (see prepare).
	f.Add(uint8(0), []byte(`{"v":1,"kind":"hello","id":"h1","node":"u1","sent":"2030-01-01T00:00:00Z","boot_id":"b1","clean_steps":`+fuzzInbandSteps+`,"deploy_steps":`+fuzzInbandSteps+`}`))
	f.Add(uint8(1), []byte(`{"v":1,"kind":"heartbeat","id":"hb1","node":"u1","sent":"2030-01-01T00:00:00Z","token":"tok4","running":"c6","progress":0.25,"detail":"/dev/vda"}`))
	f.Add(uint8(1), []byte(`{"v":1,"kind":"result","id":"r1","node":"u1","sent":"2030-01-01T00:00:00Z","token":"tok4","command_id":"c6","ok":true,"data":{"inventory":{"cpu":{"count":4}},"properties":{"cpus":4,"memory_mb":8192,"local_gb":20},"summary":"inspected"}}`))
	f.Add(uint8(2), []byte(`{"v":1,"kind":"result","id":"r1","node":"u1","sent":"2030-01-01T00:00:00Z","token":"tok4","command_id":"c6","error":"disk on fire"}`))
	f.Add(uint8(3), []byte(`{"v":1,"kind":"result","id":"r1","node":"u1","sent":"2030-01-01T00:00:00Z","token":"tok4","command_id":"c6","ok":true,"data":{"summary":"`+strings.Repeat("é", 300)+`"}}`))
	f.Add(uint8(1), []byte(`{"v":1,"kind":"hello","id":"h2","node":"u1","sent":"2030-01-01T00:00:00Z","boot_id":"other"}`))
	f.Add(uint8(2), []byte(`{"v":1,"kind":"heartbeat","id":"hb1","node":"u1","sent":"2030-01-01T00:00:00Z","token":"forged"}`))
	f.Fuzz(func(t *testing.T, scenario uint8, payload []byte) {
		msg, err := protocol.Decode(payload)
		if err != nil {
			return // the engine logs and drops it
		}
		m := newFuzzMachine(t)
		n, now := prepare(t, m, scenario)
		var out Output
		switch msg.Kind {
		case protocol.KindHello:
			out = m.Hello(n, msg, now)
		case protocol.KindHeartbeat:
			out = m.Heartbeat(n, msg, now)
		case protocol.KindResult:
			out = m.Result(n, msg, now)
		default:
			return // the engine refuses other kinds from agents
		}
		if !IsWait(n.ProvisionState) && !IsHold(n.ProvisionState) && !Stable(n.ProvisionState) && n.Reservation == "" && n.Op != nil {
			t.Fatalf("node in %q works unlocked", n.ProvisionState)
		}
		if n.Op == nil && n.Reservation != "" {
			t.Fatalf("resting node in %q is locked by %q", n.ProvisionState, n.Reservation)
		}
		known := false
		for _, s := range AllStates() {
			known = known || s == n.ProvisionState
		}
		if !known {
			t.Fatalf("node in unknown state %q", n.ProvisionState)
		}
		if _, err := json.Marshal(n); err != nil {
			t.Fatalf("node cannot be stored: %v", err)
		}
		for _, h := range out.History {
			if _, err := json.Marshal(h); err != nil {
				t.Fatalf("history entry cannot be stored: %v", err)
			}
		}
	})
}

// prepare puts a node in one of four waits: for the ramdisk's hello
// (inspection), and running an in-band step of inspection, cleaning and
// deployment (command c6, token tok4).
func prepare(t *testing.T, m *Machine, scenario uint8) (*Node, time.Time) {
	now := time.Unix(1000, 0)
	n := &Node{UUID: "u1", Name: "n1", Driver: "fake", Site: "s1", ProvisionState: Manageable,
		InstanceInfo: map[string]any{"image_source": "http://img/1.raw"}}
	verb := Inspect
	switch scenario % 4 {
	case 2:
		verb = Provide
	case 3:
		n.ProvisionState = Available
		verb = Deploy
	}
	out, r := m.Verb(n, VerbRequest{Verb: verb}, now)
	if r != nil {
		t.Fatal(r.Msg)
	}
	// Answer the boot-device and reboot commands (c1, c2).
	for len(out.Send) > 0 {
		msg := out.Send[0].Msg
		out = m.Result(n, &protocol.Message{CommandID: msg.ID, OK: true}, now)
	}
	if scenario%4 == 0 {
		return n, now
	}
	wire := func(steps []drivers.Step) (out []protocol.Step) {
		for _, s := range steps {
			out = append(out, protocol.Step{Interface: s.Interface, Step: s.Step, Priority: s.Priority, Abortable: s.Abortable})
		}
		return out
	}
	m.Hello(n, &protocol.Message{BootID: "b1", CleanSteps: wire(drivers.InbandCleanSteps()), DeploySteps: wire(drivers.InbandDeploySteps())}, now)
	if n.Pending == nil || !n.Pending.InBand || n.AgentToken == "" {
		t.Fatalf("scenario %d: no in-band step running; state %q pending %+v last_error %q", scenario%4, n.ProvisionState, n.Pending, n.LastError)
	}
	return n, now
}
