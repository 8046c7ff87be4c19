package fsm

import (
	"encoding/json"
	"fmt"
	"maps"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/protocol"
	"github.com/cockroachdb/datadriven"
)

// The scenario files under testdata/scenarios are lifecycle tests that read
// like the seeds, run by cockroachdb/datadriven as etcd raft's rafttest
// runs its interaction tests: each block is a command, a line "----" and
// what the machine did (transitions, history, messages sent, refusals),
// ended by a blank line; an empty output is nothing printed (expect
// prints nothing: it fails the test when the node differs). A command's
// arguments that hold spaces (a quoted value, a JSON list) follow it on
// the next line, before the "----". go test -run TestScenarios -rewrite
// writes the outputs anew from what the machine does now; expect lines
// are never rewritten, so a rewrite cannot hide a broken rule.
//
// Commands, one handler each (scenarioCommands; arguments are words,
// key=value or key~value; a value may be a Go-quoted string or a JSON list
// or object):
//
//	config [clean=on|off] [priority=iface.step:N,...|none] [wait_timeout=D] [command_timeout=D]
//	       [site_plans=on|off] [fast_track=on|off] [fast_track_timeout=D]
//	                                     (checked as at the coordinator's start)
//	node create name=N [driver=fake] [site=site1]
//	set instance_info.K=V | driver_info.K=V | properties.K=V | retired=true|false | retired_reason=R
//	    | disable_power_off=true|false ...
//	maintenance on [reason=R] | maintenance off
//	verb VERB [steps=JSON] [deploy_steps=JSON] [service_steps=JSON] [password=P]   (CLI names: deploy, undeploy, ...)
//	     [templates=JSON] [runbook=JSON]  (deploy templates given to a deploy, a runbook used by clean or service)
//	set traits=JSON                      the node's traits (a list), checked as PUT .../traits checks them
//	power on|off|reboot|soft-off|TARGET
//	bmc ok | bmc fail [error=E]          answer the outstanding out-of-band command
//	agent hello [boot=B] [clean=standard|none|JSON] [deploy=standard|none|JSON]
//	agent result ok [data=JSON] | agent result fail [error=E] [token=T]
//	agent heartbeat [progress=P] [token=T]
//	plan early ok|fail [error=E]         the site ran the site plan's next step ahead of the machine
//	tick +D [offline]                    advance the clock by D, then tick
//	settle                               answer everything as a healthy site does
//	recover                              the coordinator restarted
//	expect KEY=VALUE | KEY~SUBSTRING ...
//	history                              the node's whole history
//	show                                 the node's main fields
//	steps [min_priority=N]               the clean steps, as the steps API shows them

func TestScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata/scenarios", func(t *testing.T, path string) {
		s := newScenario(t, path)
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			s.t, s.pos = t, d.Pos
			h, ok := scenarioCommands[d.Cmd]
			if !ok {
				s.fatalf("unknown command %q", d.Cmd)
			}
			if d.Cmd != "config" && d.Cmd != "node" && s.n == nil {
				s.fatalf("%s before node create", d.Cmd)
			}
			var b strings.Builder
			h(s, s.command(d), &b)
			return b.String()
		})
	})
}

// cmdArgs is a scenario command's arguments: all of them in order, the bare
// words after the command, the key=value ones.
type cmdArgs struct {
	args  []arg
	words []string
	o     opts
}

// command reads d's arguments: those of its line, then those of its
// input (the arguments that hold spaces), in order.
func (s *scenario) command(d *datadriven.TestData) cmdArgs {
	var parts []string
	for _, a := range d.CmdArgs {
		switch len(a.Vals) {
		case 0:
			parts = append(parts, a.Key)
		case 1:
			parts = append(parts, a.Key+"="+a.Vals[0])
		default:
			s.fatalf("argument %s: a list of values (%s) is not a scenario argument", a.Key, a)
		}
	}
	if in := strings.TrimSpace(d.Input); in != "" {
		parts = append(parts, strings.ReplaceAll(in, "\n", " "))
	}
	args, err := splitArgs(strings.Join(parts, " "))
	if err != nil {
		s.fatalf("%v", err)
	}
	c := cmdArgs{args: args, o: opts{}}
	for _, a := range args {
		if a.key == "" {
			c.words = append(c.words, a.val)
		} else if a.op == "=" {
			c.o[a.key] = a.val
		}
	}
	return c
}

// scenarioCommands are the handlers, one per command.
var scenarioCommands = map[string]func(s *scenario, c cmdArgs, b *strings.Builder){
	"config":      func(s *scenario, c cmdArgs, b *strings.Builder) { s.config(c.o, b) },
	"node":        (*scenario).nodeCreate,
	"set":         func(s *scenario, c cmdArgs, b *strings.Builder) { s.set(c.args, b) },
	"maintenance": (*scenario).maintenance,
	"verb":        (*scenario).verb,
	"power":       (*scenario).power,
	"bmc": func(s *scenario, c cmdArgs, b *strings.Builder) {
		s.bmc(len(c.words) > 0 && c.words[0] == "ok", c.o.get("error", "the BMC said no"), c.o.get("done", ""), b)
	},
	"agent":   (*scenario).agent,
	"plan":    (*scenario).planEarly,
	"tick":    (*scenario).tick,
	"settle":  func(s *scenario, _ cmdArgs, b *strings.Builder) { s.settle(b) },
	"recover": func(s *scenario, _ cmdArgs, b *strings.Builder) { s.apply(s.m.Recover(s.n, s.now), b) },
	"expect":  func(s *scenario, c cmdArgs, _ *strings.Builder) { s.expect(c.args) },
	"history": func(s *scenario, _ cmdArgs, b *strings.Builder) {
		for _, h := range s.hist {
			fmt.Fprintf(b, "%s %s: %s\n", h.Severity, h.EventType, h.Event)
		}
	},
	"show":  func(s *scenario, _ cmdArgs, b *strings.Builder) { s.show(b) },
	"steps": (*scenario).steps,
}

// scenario is one node, the machine and a clock; the site (edge agent and
// ramdisk) is played by the commands.
type scenario struct {
	t     *testing.T
	path  string
	pos   string // file:line of the command
	cfg   Config
	m     *Machine
	n     *Node
	now   time.Time
	ids   int
	boots int
	hist  []HistoryEntry
}

func newScenario(t *testing.T, path string) *scenario {
	s := &scenario{t: t, path: path, now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	// Besides the built-in drivers, one whose nodes cannot boot the
	// ramdisk, for the rules about such nodes whatever the built-in
	// drivers can do.
	noboot := drivers.Declaration{Name: "noboot", NoRamdiskBoot: "the scenario's noboot driver cannot boot the ramdisk",
		CleanSteps: []drivers.Step{{Interface: "management", Step: "reset_bmc"}}}
	reg, err := drivers.NewRegistry(append(drivers.Builtin(), noboot)...)
	if err != nil {
		t.Fatal(err)
	}
	s.cfg = Config{Drivers: reg, AutomatedClean: true,
		NewID:    func() string { s.ids++; return fmt.Sprintf("c%d", s.ids) },
		NewToken: func() string { s.ids++; return fmt.Sprintf("tok%d", s.ids) }}
	s.m = New(s.cfg)
	return s
}

func (s *scenario) fatalf(format string, a ...any) {
	s.t.Helper()
	s.t.Fatalf("%s: %s", s.pos, fmt.Sprintf(format, a...))
}

// arg is one word of a command: a bare word (key empty) or key=value,
// key~value.
type arg struct{ key, op, val string }

func splitArgs(line string) ([]arg, error) {
	var out []arg
	i := 0
	for i < len(line) {
		if line[i] == ' ' || line[i] == '\t' {
			i++
			continue
		}
		j := i
		for j < len(line) && !strings.ContainsRune(" \t=~", rune(line[j])) {
			j++
		}
		if j == len(line) || line[j] == ' ' || line[j] == '\t' {
			out = append(out, arg{val: line[i:j]})
			i = j
			continue
		}
		a := arg{key: line[i:j], op: string(line[j])}
		j++
		switch {
		case j < len(line) && line[j] == '"':
			q, err := strconv.QuotedPrefix(line[j:])
			if err != nil {
				return nil, fmt.Errorf("bad quoted value of %s: %v", a.key, err)
			}
			a.val, _ = strconv.Unquote(q)
			j += len(q)
		case j < len(line) && (line[j] == '[' || line[j] == '{'):
			end, err := jsonEnd(line[j:])
			if err != nil {
				return nil, fmt.Errorf("bad JSON value of %s: %v", a.key, err)
			}
			a.val = line[j : j+end]
			j += end
		default:
			k := j
			for k < len(line) && line[k] != ' ' && line[k] != '\t' {
				k++
			}
			a.val = line[j:k]
			j = k
		}
		out = append(out, a)
		i = j
	}
	return out, nil
}

// jsonEnd returns the length of the JSON list or object s starts with.
func jsonEnd(s string) (int, error) {
	depth, inStr := 0, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case inStr && c == '\\':
			i++
		case c == '"':
			inStr = !inStr
		case inStr:
		case c == '[' || c == '{':
			depth++
		case c == ']' || c == '}':
			depth--
			if depth == 0 {
				return i + 1, nil
			}
		}
	}
	return 0, fmt.Errorf("unbalanced %q", s)
}

// opts are a command's key=value arguments.
type opts map[string]string

func (o opts) get(k, def string) string {
	if v, ok := o[k]; ok {
		return v
	}
	return def
}

func (s *scenario) nodeCreate(c cmdArgs, b *strings.Builder) {
	if len(c.words) < 1 || c.words[0] != "create" {
		s.fatalf("want node create")
	}
	name := c.o.get("name", "n1")
	s.n = &Node{UUID: "uuid-" + name, Name: name, Driver: c.o.get("driver", "fake"), Site: c.o.get("site", "site1"),
		ProvisionState: Enroll, CreatedAt: s.now, UpdatedAt: s.now}
	fmt.Fprintf(b, "%s: %s\n", name, s.n.ProvisionState)
}

func (s *scenario) maintenance(c cmdArgs, b *strings.Builder) {
	on := len(c.words) > 0 && c.words[0] == "on"
	s.apply(s.m.SetMaintenance(s.n, on, c.o.get("reason", ""), s.now), b)
}

func (s *scenario) verb(c cmdArgs, b *strings.Builder) {
	if len(c.words) < 1 {
		s.fatalf("verb needs a verb")
	}
	o := c.o
	req := VerbRequest{Verb: cliVerb(c.words[0]), HashedRescuePassword: o.get("hashed_password", "")}
	if v, ok := o["steps"]; ok {
		req.CleanSteps = s.objects(v)
	}
	if v, ok := o["deploy_steps"]; ok {
		req.DeploySteps = s.objects(v)
	}
	if v, ok := o["service_steps"]; ok {
		req.ServiceSteps = s.objects(v)
	}
	s.catalogArgs(o, &req)
	out, r := s.m.Verb(s.n, req, s.now)
	if r != nil {
		fmt.Fprintf(b, "refused %d: %s\n", r.httpCode(), r.Msg)
		return
	}
	s.apply(out, b)
}

func (s *scenario) power(c cmdArgs, b *strings.Builder) {
	target := strings.Join(c.words, " ")
	switch target {
	case "on", "off":
		target = "power " + target
	case "reboot":
		target = PowerTargetReboot
	case "soft-off":
		target = PowerTargetSoftOff
	}
	out, r := s.m.PowerRequest(s.n, target, s.now)
	if r != nil {
		fmt.Fprintf(b, "refused %d: %s\n", r.httpCode(), r.Msg)
		return
	}
	s.apply(out, b)
}

func (s *scenario) agent(c cmdArgs, b *strings.Builder) {
	if len(c.words) < 1 {
		s.fatalf("agent hello|result|heartbeat")
	}
	switch c.words[0] {
	case "hello":
		s.hello(c.o, b)
	case "result":
		s.agentResult(len(c.words) > 1 && c.words[1] == "ok", c.o, b)
	case "heartbeat":
		s.heartbeat(c.o, b)
	default:
		s.fatalf("agent hello|result|heartbeat")
	}
}

func (s *scenario) tick(c cmdArgs, b *strings.Builder) {
	if len(c.words) < 1 || !strings.HasPrefix(c.words[0], "+") {
		s.fatalf("tick +DURATION")
	}
	d, err := time.ParseDuration(c.words[0][1:])
	if err != nil {
		s.fatalf("%v", err)
	}
	s.now = s.now.Add(d)
	online := !(len(c.words) > 1 && c.words[1] == "offline")
	s.apply(s.m.Tick(s.n, s.now, online), b)
}

func (s *scenario) steps(c cmdArgs, b *strings.Builder) {
	min, err := strconv.Atoi(c.o.get("min_priority", "0"))
	if err != nil {
		s.fatalf("min_priority: %v", err)
	}
	steps, known, err := s.m.SortedStepsView(s.n, min)
	if err != nil {
		s.fatalf("%v", err)
	}
	if !known {
		b.WriteString("in-band steps not known yet\n")
	}
	for _, st := range steps {
		where := "out of band"
		if st.RequiresRamdisk {
			where = "in band"
		}
		fmt.Fprintf(b, "%s priority %d, %s\n", st.Name(), st.Priority, where)
	}
}

// planEarly plays a site that ran the site plan's next step (the one
// after the pending one) before the machine got there: its result
// arrives early.
func (s *scenario) planEarly(c cmdArgs, b *strings.Builder) {
	if len(c.words) < 2 || c.words[0] != "early" {
		s.fatalf("plan early ok|fail")
	}
	op := s.n.Op
	if op == nil || op.SitePlan == nil {
		fmt.Fprintf(b, "error: no site plan\n")
		return
	}
	j := op.Index - op.SitePlan.First + 1
	if j < 0 || j >= len(op.SitePlan.Cmds) {
		fmt.Fprintf(b, "error: the site plan has no step after the current one\n")
		return
	}
	res := &protocol.Message{Kind: protocol.KindResult, CommandID: op.SitePlan.Cmds[j].ID, OK: c.words[1] == "ok"}
	if a := op.Plan[op.Index+1]; a.Kind == ActStep && a.Step.InBand {
		res.Token = s.n.AgentToken
	}
	if !res.OK {
		res.Error = c.o.get("error", "the step failed")
	}
	s.apply(s.m.Result(s.n, res, s.now), b)
}

// cliVerb is the verb of a CLI name (deploy, undeploy) or API target,
// from the verb table.
func cliVerb(v string) Event {
	if row, ok := VerbByName(v); ok {
		return row.Verb
	}
	return Event(v)
}

func (s *scenario) objects(v string) []map[string]any {
	var l []map[string]any
	if err := json.Unmarshal([]byte(v), &l); err != nil {
		s.fatalf("not a JSON list of objects: %v", err)
	}
	return l
}

func (s *scenario) config(o opts, b *strings.Builder) {
	cfg := s.cfg
	for k, v := range o {
		switch k {
		case "clean":
			cfg.AutomatedClean = v == "on"
		case "priority":
			cfg.PriorityOverrides = nil
			if v == "none" {
				break
			}
			cfg.PriorityOverrides = map[string]int{}
			for _, kv := range strings.Split(v, ",") {
				name, p, _ := strings.Cut(kv, ":")
				n, err := strconv.Atoi(p)
				if err != nil {
					s.fatalf("priority %s: want iface.step:N", kv)
				}
				cfg.PriorityOverrides[name] = n
			}
		case "wait_timeout":
			cfg.WaitTimeout = s.duration(v)
		case "command_timeout":
			cfg.CommandTimeout = s.duration(v)
		case "site_plans":
			// The site's edge agent runs plans (run_plan).
			on := v == "on"
			cfg.SitePlans = func(string) bool { return on }
		case "fast_track":
			cfg.FastTrack = v == "on"
		case "fast_track_timeout":
			cfg.FastTrackTimeout = s.duration(v)
		default:
			s.fatalf("unknown config %s", k)
		}
	}
	// As the coordinator at start: a bad configuration is refused and the
	// machine keeps the one it had.
	if err := cfg.Check(); err != nil {
		fmt.Fprintf(b, "error: %v\n", err)
		return
	}
	s.cfg = cfg
	s.m = New(cfg)
}

func (s *scenario) duration(v string) time.Duration {
	d, err := time.ParseDuration(v)
	if err != nil {
		s.fatalf("%v", err)
	}
	return d
}

func (s *scenario) set(args []arg, b *strings.Builder) {
	upd := *s.n
	upd.InstanceInfo, upd.DriverInfo, upd.Properties = maps.Clone(upd.InstanceInfo), maps.Clone(upd.DriverInfo), maps.Clone(upd.Properties)
	put := func(m *map[string]any, k, v string) {
		if *m == nil {
			*m = map[string]any{}
		}
		(*m)[k] = v
	}
	for _, a := range args {
		switch {
		case strings.HasPrefix(a.key, "instance_info.") && strings.HasPrefix(a.val, "["):
			var l []any
			if err := json.Unmarshal([]byte(a.val), &l); err != nil {
				s.fatalf("%s: %v", a.key, err)
			}
			if upd.InstanceInfo == nil {
				upd.InstanceInfo = map[string]any{}
			}
			upd.InstanceInfo[strings.TrimPrefix(a.key, "instance_info.")] = l
		case strings.HasPrefix(a.key, "instance_info."):
			put(&upd.InstanceInfo, strings.TrimPrefix(a.key, "instance_info."), a.val)
		case a.key == "traits":
			s.setTraits(&upd, a.val, b)
		case strings.HasPrefix(a.key, "driver_info."):
			put(&upd.DriverInfo, strings.TrimPrefix(a.key, "driver_info."), a.val)
		case strings.HasPrefix(a.key, "properties."):
			put(&upd.Properties, strings.TrimPrefix(a.key, "properties."), a.val)
		case a.key == "retired":
			upd.Retired = a.val == "true"
		case a.key == "retired_reason":
			upd.RetiredReason = a.val
		case a.key == "disable_power_off":
			upd.DisablePowerOff = a.val == "true"
		default:
			s.fatalf("set: unknown field %q", a.key)
		}
	}
	if r := CheckUpdate(s.n, &upd); r != nil {
		fmt.Fprintf(b, "refused %d: %s\n", r.httpCode(), r.Msg)
		return
	}
	*s.n = upd
}

// apply records an output and prints it: transitions, other history
// lines, what was sent, a rejection.
func (s *scenario) apply(out Output, b *strings.Builder) {
	for _, h := range out.History {
		s.hist = append(s.hist, h)
		if h.To != "" {
			fmt.Fprintf(b, "%s\n", h.Event)
		} else {
			fmt.Fprintf(b, "%s %s: %s\n", h.Severity, h.EventType, h.Event)
		}
	}
	if out.Inventory != nil {
		fmt.Fprintf(b, "inventory stored: %s\n", jsonText(out.Inventory))
	}
	for _, o := range out.Send {
		fmt.Fprintf(b, "send %s\n", sentText(o.Msg))
	}
	if out.Reject != "" {
		late := ""
		if out.Late {
			late = " (late)"
		}
		fmt.Fprintf(b, "rejected%s: %s\n", late, out.Reject)
	}
}

func jsonText(v any) string {
	j, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(j)
}

// sentText names a message the machine sent: to whom and what.
func sentText(msg *protocol.Message) string {
	switch {
	case msg.Kind == protocol.KindWelcome:
		return "ramdisk: welcome, boot " + msg.BootID
	case msg.Action == protocol.ActionInbandRun || msg.Action == protocol.ActionOOBStep:
		who := "ramdisk"
		if msg.Action == protocol.ActionOOBStep {
			who = "bmc"
		}
		t := fmt.Sprintf("%s: step %s.%s", who, msg.Step.Interface, msg.Step.Step)
		if len(msg.Step.Args) > 0 {
			t += " args " + jsonText(msg.Step.Args)
		}
		for _, s := range msg.Steps[min(1, len(msg.Steps)):] {
			t += fmt.Sprintf(", then %s.%s", s.Interface, s.Step)
			if len(s.Args) > 0 {
				t += " args " + jsonText(s.Args)
			}
		}
		return t
	case msg.Action == protocol.ActionPlanRun:
		var names []string
		for _, c := range msg.Plan {
			names = append(names, c.Step.Interface+"."+c.Step.Step)
		}
		return fmt.Sprintf("site: plan %s of %d steps: %s", msg.ID, len(msg.Plan), strings.Join(names, ", "))
	case msg.Action == protocol.ActionPlanStop:
		return fmt.Sprintf("site: stop plan %v (%v)", msg.Args["plan_id"], msg.Args["mode"])
	case msg.Action == protocol.ActionEndBoot:
		return "bmc: end_boot"
	case msg.Action == protocol.ActionAbort:
		return "ramdisk: abort the running step"
	case msg.Action == protocol.ActionPower:
		return "bmc: " + describeOOB(msg)
	case msg.Action == protocol.ActionBootDev:
		return "bmc: " + describeOOB(msg)
	}
	return "bmc: " + msg.Action
}

func describeOOB(msg *protocol.Message) string {
	n := &Node{}
	return describe(n, &Action{Kind: ActOOB, Action: msg.Action, Args: msg.Args})
}

// pendingText names the outstanding command.
func pendingText(n *Node) string {
	if n.Pending == nil {
		return "none"
	}
	return sentText(n.Pending.Msg)
}

// bmc answers the outstanding out-of-band command; done, for a failed
// run of several steps, is how many succeeded before the failure.
func (s *scenario) bmc(ok bool, errText, done string, b *strings.Builder) {
	p := s.n.Pending
	if p == nil || p.InBand {
		fmt.Fprintf(b, "error: no out-of-band command outstanding (outstanding: %s)\n", pendingText(s.n))
		return
	}
	res := &protocol.Message{Kind: protocol.KindResult, CommandID: p.ID, OK: ok}
	if !ok {
		res.Error = errText
	}
	if done != "" {
		d, err := strconv.Atoi(done)
		if err != nil {
			s.fatalf("bmc fail done=%q: want a number", done)
		}
		res.Data = map[string]any{protocol.StepsDone: float64(d)}
	}
	s.apply(s.m.Result(s.n, res, s.now), b)
}

func standardSteps(l []drivers.Step) []protocol.Step {
	var out []protocol.Step
	for _, d := range l {
		// The standard ramdisk's automated steps; the manual-only ones
		// (inspection, burn-in, verification...) are left out.
		if d.Priority == 0 {
			continue
		}
		out = append(out, protocol.Step{Interface: d.Interface, Step: d.Step, Priority: d.Priority, Abortable: d.Abortable})
	}
	return out
}

func (s *scenario) stepList(v string, standard []drivers.Step) []protocol.Step {
	switch v {
	case "standard":
		return standardSteps(standard)
	case "none":
		return nil
	}
	var l []protocol.Step
	if err := json.Unmarshal([]byte(v), &l); err != nil {
		s.fatalf("not a JSON list of steps: %v", err)
	}
	return l
}

func (s *scenario) hello(o opts, b *strings.Builder) {
	boot := o["boot"]
	if boot == "" {
		s.boots++
		boot = fmt.Sprintf("boot-%d", s.boots)
	}
	msg := &protocol.Message{Kind: protocol.KindHello, BootID: boot,
		CleanSteps:  s.stepList(o.get("clean", "standard"), drivers.InbandCleanSteps()),
		DeploySteps: s.stepList(o.get("deploy", "standard"), drivers.InbandDeploySteps())}
	s.apply(s.m.Hello(s.n, msg, s.now), b)
}

func (s *scenario) agentResult(ok bool, o opts, b *strings.Builder) {
	p := s.n.Pending
	if p == nil || !p.InBand {
		fmt.Fprintf(b, "error: no in-band step outstanding (outstanding: %s)\n", pendingText(s.n))
		return
	}
	res := &protocol.Message{Kind: protocol.KindResult, CommandID: p.ID, OK: ok, Token: o.get("token", s.n.AgentToken)}
	if !ok {
		res.Error = o.get("error", "the step failed")
	}
	if v, set := o["data"]; set {
		if err := json.Unmarshal([]byte(v), &res.Data); err != nil {
			s.fatalf("data: %v", err)
		}
	} else if p.Msg.Step != nil && p.Msg.Step.Step == "inspect_hardware" {
		res.Data = map[string]any{"inventory": map[string]any{"cpu": map[string]any{"count": 4.0}},
			"properties": map[string]any{"cpus": 4.0, "memory_mb": 1024.0}}
	}
	s.apply(s.m.Result(s.n, res, s.now), b)
}

func (s *scenario) heartbeat(o opts, b *strings.Builder) {
	msg := &protocol.Message{Kind: protocol.KindHeartbeat, Token: o.get("token", s.n.AgentToken)}
	if s.n.Pending != nil && s.n.Pending.InBand {
		msg.Running = s.n.Pending.ID
	}
	if v, ok := o["progress"]; ok {
		p, err := strconv.ParseFloat(v, 64)
		if err != nil {
			s.fatalf("progress: %v", err)
		}
		msg.Progress = p
	}
	s.apply(s.m.Heartbeat(s.n, msg, s.now), b)
}

// settle plays a healthy site: it answers every outstanding command with
// success and boots the ramdisk (hello with the standard steps) after
// every reboot, until nothing is outstanding or the node is in
// maintenance.
func (s *scenario) settle(b *strings.Builder) {
	for i := 0; ; i++ {
		if i > 50 {
			s.fatalf("settle: no end")
		}
		p := s.n.Pending
		if p == nil || (s.n.Maintenance && IsWait(s.n.ProvisionState)) {
			return
		}
		if p.InBand {
			fmt.Fprintf(b, "> agent result ok (%s)\n", pendingText(s.n))
			s.agentResult(true, opts{}, b)
			continue
		}
		reboot := p.Msg.Action == protocol.ActionPower && !protocol.PowerIsOff(fmt.Sprint(p.Msg.Args["state"]))
		fmt.Fprintf(b, "> bmc ok (%s)\n", pendingText(s.n))
		s.bmc(true, "", "", b)
		if reboot && s.n.Op != nil && s.m.expectsAgent(s.n) {
			fmt.Fprintf(b, "> agent hello\n")
			s.hello(opts{}, b)
		}
	}
}

func (s *scenario) show(b *strings.Builder) {
	n := s.n
	fmt.Fprintf(b, "provision_state: %s\n", n.ProvisionState)
	fmt.Fprintf(b, "target_provision_state: %s\n", orNone(string(n.TargetProvisionState)))
	fmt.Fprintf(b, "last_error: %s\n", orNone(n.LastError))
	fmt.Fprintf(b, "maintenance: %v\n", n.Maintenance)
	if n.MaintenanceReason != "" {
		fmt.Fprintf(b, "maintenance_reason: %s\n", n.MaintenanceReason)
	}
	fmt.Fprintf(b, "power_state: %s\n", orNone(n.PowerState))
	fmt.Fprintf(b, "clean_step: %s\n", stepName(n.CleanStep))
	fmt.Fprintf(b, "deploy_step: %s\n", stepName(n.DeployStep))
	fmt.Fprintf(b, "reservation: %s\n", orNone(n.Reservation))
	fmt.Fprintf(b, "outstanding: %s\n", pendingText(n))
	if len(n.Properties) > 0 {
		fmt.Fprintf(b, "properties: %s\n", jsonText(n.Properties))
	}
	if len(n.InstanceInfo) > 0 {
		fmt.Fprintf(b, "instance_info: %s\n", jsonText(n.InstanceInfo))
	}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func stepName(s *StepRun) string {
	if s == nil {
		return "none"
	}
	return s.Name()
}

// fields are what expect can check, each as text.
func (s *scenario) fields() map[string]string {
	n := s.n
	f := map[string]string{
		"state":              string(n.ProvisionState),
		"target":             string(n.TargetProvisionState),
		"last_error":         n.LastError,
		"maintenance":        strconv.FormatBool(n.Maintenance),
		"maintenance_reason": n.MaintenanceReason,
		"fault":              n.Fault,
		"power":              n.PowerState,
		"target_power":       n.TargetPowerState,
		"boot_device":        n.BootDevice,
		"locked":             strconv.FormatBool(n.Locked()),
		"retired":            strconv.FormatBool(n.Retired),
		"clean_step":         stepName(n.CleanStep),
		"deploy_step":        stepName(n.DeployStep),
		"service_step":       stepName(n.ServiceStep),
		"pending":            pendingText(n),
		"token":              map[bool]string{true: "none", false: "set"}[n.AgentToken == ""],
		"op":                 "none",
		"steps":              "none",
		"clean_step_index":   "none",
		"deploy_step_index":  "none",
		"deadline":           "none",
		"instance_info":      "none",
	}
	if n.Op != nil {
		f["op"] = string(n.Op.Phase)
		steps, index := n.Op.StepList()
		var names []string
		for _, st := range steps {
			names = append(names, st.Name())
		}
		if len(names) > 0 {
			f["steps"] = strings.Join(names, ",")
		}
		switch {
		case index < 0:
		case n.Op.Phase == "deploy":
			f["deploy_step_index"] = strconv.Itoa(index)
		case n.Op.Phase == "clean":
			f["clean_step_index"] = strconv.Itoa(index)
		}
	}
	if !n.Deadline.IsZero() {
		f["deadline"] = "+" + n.Deadline.Sub(s.now).String()
	}
	if len(n.InstanceInfo) > 0 {
		keys := slicesSorted(n.InstanceInfo)
		f["instance_info"] = strings.Join(keys, ",")
	}
	for k, v := range n.Properties {
		f["properties."+k] = fmt.Sprint(v)
	}
	return f
}

func slicesSorted(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// expect checks fields of the node: key=value (exact; "none" or nothing
// for an empty field) or key~part (contains). A mismatch fails the test
// at the scenario's line; it prints nothing, so -rewrite leaves it be.
func (s *scenario) expect(args []arg) {
	s.t.Helper()
	f := s.fields()
	for _, a := range args {
		if a.key == "" {
			s.fatalf("expect: %q is not key=value", a.val)
		}
		got, ok := f[a.key]
		if !ok && !strings.HasPrefix(a.key, "properties.") {
			s.fatalf("expect: unknown field %q", a.key)
		}
		switch a.op {
		case "=":
			want := a.val
			if want == "none" && got == "" {
				want = ""
			}
			if got != want {
				s.t.Errorf("%s: %s = %q, want %q (state %q, last_error %q)", s.pos, a.key, got, a.val, s.n.ProvisionState, s.n.LastError)
			}
		case "~":
			if !strings.Contains(got, a.val) {
				s.t.Errorf("%s: %s = %q, want it to contain %q", s.pos, a.key, got, a.val)
			}
		}
	}
}
