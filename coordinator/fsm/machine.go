package fsm

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/protocol"
)

// Config holds the knobs of the lifecycle. NewID and NewToken are injected
// so that the machine stays deterministic under test.
type Config struct {
	// WaitTimeout fails a WAIT state that hears nothing (reset by heartbeats).
	WaitTimeout time.Duration
	// CommandTimeout fails an out-of-band command without a result.
	CommandTimeout time.Duration
	// ResendInterval is how often an unanswered command is sent again.
	ResendInterval time.Duration
	// AutomatedClean runs priority > 0 clean steps on provide and undeploy.
	AutomatedClean bool
	// PriorityOverrides maps "interface.step" to a priority for automated
	// cleaning; 0 disables the step.
	PriorityOverrides map[string]int
	Drivers           *drivers.Registry
	NewID             func() string
	NewToken          func() string
	// Holder names the coordinator in reservations.
	Holder string
	// RequiredCleanSteps are the in-band steps ("interface.step") that
	// automated cleaning must run: a ramdisk that does not offer one of
	// them fails the cleaning instead of skipping it. Nil: the standard
	// ramdisk's clean steps of priority > 0 (after PriorityOverrides).
	RequiredCleanSteps []string
	// ForcePowerStateDuringSync (Ironic's force_power_state_during_sync;
	// serve defaults it to true): when the edge agent reports a resting
	// node's BMC in another power state than recorded, power it back to
	// the recorded state. Without it the reading is recorded instead.
	ForcePowerStateDuringSync bool
}

// Machine applies events to nodes. It holds only configuration.
type Machine struct{ cfg Config }

// New returns a machine with cfg, filling unset durations with defaults.
func New(cfg Config) *Machine {
	if cfg.WaitTimeout == 0 {
		cfg.WaitTimeout = 30 * time.Minute
	}
	if cfg.CommandTimeout == 0 {
		cfg.CommandTimeout = 5 * time.Minute
	}
	if cfg.ResendInterval == 0 {
		cfg.ResendInterval = 10 * time.Second
	}
	if cfg.Holder == "" {
		cfg.Holder = "coordinator"
	}
	return &Machine{cfg: cfg}
}

// Config returns the machine's configuration.
func (m *Machine) Config() Config { return m.cfg }

// Outgoing is a message to publish.
type Outgoing struct {
	Topic string
	Msg   *protocol.Message
}

// Output is what the engine must do after an event: store the node if
// Changed, append History, store Inventory, publish Send.
type Output struct {
	Changed   bool
	Send      []Outgoing
	History   []HistoryEntry
	Inventory map[string]any
	// Reject is why an incoming message was not acted on (to be logged).
	Reject string
	// Late marks a Reject that is expected now and then: a message that
	// crossed the end of the ramdisk's boot (logged below warning level).
	Late bool
}

// Refusal is a verb refused, with the HTTP status Ironic answers.
type Refusal struct {
	Code int
	Msg  string
}

func (r *Refusal) Error() string { return r.Msg }

func refuse(code int, format string, a ...any) *Refusal {
	return &Refusal{Code: code, Msg: fmt.Sprintf(format, a...)}
}

// VerbRequest is an operator's provision request.
type VerbRequest struct {
	Verb Event
	// CleanSteps is the manual clean list, as decoded JSON objects.
	CleanSteps []map[string]any
	// DeploySteps are extra or overriding deploy steps.
	DeploySteps    []map[string]any
	RescuePassword string
}

// Ident names a node in messages: its name when it has one.
func (n *Node) Ident() string {
	if n.Name != "" {
		return n.Name
	}
	return n.UUID
}

// Locked tells whether the coordinator is working on the node.
func (n *Node) Locked() bool { return n.Reservation != "" }

func verbList(vs []Event) string {
	if len(vs) == 0 {
		return "none"
	}
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = string(v)
	}
	return strings.Join(s, ", ")
}

// CheckVerb says whether verb may start on n now, without changing n.
func (m *Machine) CheckVerb(n *Node, req VerbRequest) *Refusal {
	if n.Locked() {
		return refuse(409, "Node %s is locked by host %s, please retry after the current operation is completed.", n.Ident(), n.Reservation)
	}
	if !IsVerb(req.Verb) {
		return refuse(400, "%q is not a valid provision target; valid targets: %s", req.Verb, verbList(Verbs()))
	}
	if _, ok := Next(n.ProvisionState, req.Verb, ""); !ok {
		return refuse(400, "The requested action %q can not be performed on node %q while it is in state %q. Allowed there: %s.",
			req.Verb, n.Ident(), n.ProvisionState, verbList(Allowed(n.ProvisionState)))
	}
	// As Ironic (allow_provisioning_in_maintenance): manage, inspect,
	// clean, provide, undeploy and abort start in maintenance, and the
	// node pauses when it reaches a WAIT state; deploy, rebuild, rescue
	// and unrescue are refused.
	if op, refused := MaintenanceOp(req.Verb); refused && n.Maintenance {
		return refuse(400, "The %s operation can't be performed on node %s because it's in maintenance mode. (maintenance reason: %q; unset maintenance first)", op, n.Ident(), n.MaintenanceReason)
	}
	if needsRamdisk(req.Verb, m.cfg.AutomatedClean) {
		if d, err := m.cfg.Drivers.Get(n.Driver); err == nil && d.NoRamdiskBoot != "" {
			return refuse(400, "Cannot %s node %s: it needs the ramdisk, and %s. Nodes of driver %s can be managed, powered and cleaned with out-of-band steps for now.",
				req.Verb, n.Ident(), d.NoRamdiskBoot, n.Driver)
		}
	}
	switch req.Verb {
	case Provide:
		if n.Retired {
			return refuse(409, "cannot provide node %s: node is retired (reason %q); unset retired first", n.Ident(), n.RetiredReason)
		}
	case Clean:
		if len(req.CleanSteps) == 0 {
			return refuse(400, "clean_steps is required and must be a non-empty list for target \"clean\" on node %s", n.Ident())
		}
		if err := CheckCleanStepsSchema(req.CleanSteps); err != nil {
			return refuse(400, "%v", err)
		}
	case Deploy, Rebuild:
		if s, _ := n.InstanceInfo["image_source"].(string); s == "" {
			return refuse(400, "Cannot deploy node %s: instance_info/image_source is missing; set it with node set %s --instance-info image_source=URL", n.Ident(), n.Ident())
		}
		if err := m.checkDeploySteps(n, req.DeploySteps); err != nil {
			return refuse(400, "%v", err)
		}
	case RescueV:
		if req.RescuePassword == "" {
			return refuse(400, "A non-empty rescue_password is required to rescue node %s", n.Ident())
		}
	}
	return nil
}

// Verb starts an operator verb on n. A refusal leaves n untouched.
func (m *Machine) Verb(n *Node, req VerbRequest, now time.Time) (Output, *Refusal) {
	var out Output
	if r := m.CheckVerb(n, req); r != nil {
		return out, r
	}
	out.Changed = true
	retiredTarget := Available
	if n.Retired {
		retiredTarget = Manageable
	}
	switch req.Verb {
	case Manage:
		if n.ProvisionState == Enroll {
			m.start(n, req.Verb, Manageable, "verify", []Action{{Kind: ActOOB, Action: protocol.ActionValidate}}, now, &out)
			return out, nil
		}
		// A direct move: no operation starts, and last_error stays (as
		// Ironic keeps it when a node leaves clean failed).
		m.fire(n, Manage, "", now, &out)
	case Inspect:
		t := now
		n.InspectionStartedAt, n.InspectionFinishedAt = &t, nil
		plan := append(bootRamdisk(),
			Action{Kind: ActStep, Step: &StepRun{Interface: "deploy", Step: "inspect_hardware", InBand: true, Abortable: true}},
			powerAction(protocol.PowerOff))
		m.start(n, req.Verb, Manageable, "inspect", plan, now, &out)
	case Provide:
		m.start(n, req.Verb, retiredTarget, "clean", m.autoCleanPlan(), now, &out)
	case Clean:
		m.startManualClean(n, req.CleanSteps, now, &out)
	case Deploy, Rebuild:
		plan := append(bootRamdisk(), Action{Kind: ActPlanDeploy, Args: map[string]any{"deploy_steps": req.DeploySteps}})
		m.start(n, req.Verb, Active, "deploy", plan, now, &out)
	case RescueV:
		plan := append(bootRamdisk(), Action{Kind: ActStep, Step: &StepRun{Interface: "rescue", Step: "finalize_rescue", InBand: true}})
		m.start(n, req.Verb, Rescue, "rescue", plan, now, &out)
		if n.Op != nil {
			n.Op.RescuePassword = req.RescuePassword
		}
	case Unrescue:
		plan := []Action{powerAction(protocol.PowerOff), bootDevAction(protocol.BootDisk), powerAction(protocol.PowerOn)}
		m.start(n, req.Verb, Active, "unrescue", plan, now, &out)
	case Undeploy:
		m.start(n, req.Verb, retiredTarget, "delete", []Action{powerAction(protocol.PowerOff)}, now, &out)
	case Abort:
		m.abort(n, now, &out)
	}
	return out, nil
}

// needsRamdisk tells whether a verb always boots the ramdisk (a manual
// clean does only when its list has an in-band step).
func needsRamdisk(v Event, automatedClean bool) bool {
	switch v {
	case Inspect, Deploy, Rebuild, RescueV:
		return true
	case Provide:
		return automatedClean
	}
	return false
}

func bootRamdisk() []Action {
	return []Action{bootDevAction(protocol.BootPXE), powerAction(protocol.PowerReboot), {Kind: ActAwaitAgent}}
}

func powerAction(state string) Action {
	return Action{Kind: ActOOB, Action: protocol.ActionPower, Args: map[string]any{"state": state}}
}

func bootDevAction(dev string) Action {
	return Action{Kind: ActOOB, Action: protocol.ActionBootDev, Args: map[string]any{"device": dev}}
}

func (m *Machine) autoCleanPlan() []Action {
	if !m.cfg.AutomatedClean {
		return nil
	}
	return append(bootRamdisk(), Action{Kind: ActPlanClean}, powerAction(protocol.PowerOff))
}

// start enters the -ING state of verb and runs the plan as far as it goes.
func (m *Machine) start(n *Node, verb Event, target State, phase string, plan []Action, now time.Time, out *Output) {
	m.begin(n, verb, target, phase, plan, now, out)
	m.advance(n, now, out)
}

// begin enters the -ING state of verb with an operation, running nothing.
func (m *Machine) begin(n *Node, verb Event, target State, phase string, plan []Action, now time.Time, out *Output) {
	n.LastError = ""
	n.CleanStep, n.DeployStep = nil, nil
	n.Op = &Operation{Verb: verb, Target: target, Phase: phase, Plan: plan, StartedAt: now}
	n.Reservation = m.cfg.Holder
	m.fire(n, verb, "", now, out)
	n.TargetProvisionState = target
}

// AsObjects reads a JSON list of objects, as decoded or as built in code.
func AsObjects(v any) []map[string]any {
	switch l := v.(type) {
	case []map[string]any:
		return l
	case []any:
		out := make([]map[string]any, 0, len(l))
		for _, e := range l {
			o, _ := e.(map[string]any)
			out = append(out, o)
		}
		return out
	}
	return nil
}

// fire moves n along the table; a missing row is a bug in this package.
func (m *Machine) fire(n *Node, e Event, want State, now time.Time, out *Output) {
	to, ok := Next(n.ProvisionState, e, want)
	if !ok {
		panic(fmt.Sprintf("fsm: no transition from %q on %q to %q", n.ProvisionState, e, want))
	}
	from := n.ProvisionState
	n.ProvisionState = to
	n.ProvisionUpdatedAt = now
	n.UpdatedAt = now
	if Stable(to) {
		n.TargetProvisionState = ""
	}
	out.History = append(out.History, HistoryEntry{Time: now, Severity: "INFO", EventType: "provisioning",
		Event: fmt.Sprintf("%s: %s -> %s", e, from, to), From: from, To: to})
	out.Changed = true
}

func (m *Machine) current(n *Node) *Action {
	if n.Op == nil || n.Op.Index >= len(n.Op.Plan) {
		return nil
	}
	return &n.Op.Plan[n.Op.Index]
}

// ensureWorking puts a node that waits back into its -ING state and locks it.
func (m *Machine) ensureWorking(n *Node, now time.Time, out *Output) {
	if IsWait(n.ProvisionState) {
		m.fire(n, Resume, "", now, out)
	}
	if n.Op != nil {
		n.Reservation = m.cfg.Holder
	}
}

// enterWait moves an -ING node into its WAIT state: unlocked, with a deadline.
func (m *Machine) enterWait(n *Node, now time.Time, out *Output) {
	if !IsWait(n.ProvisionState) {
		m.fire(n, Wait, "", now, out)
	}
	n.Reservation = ""
	n.Deadline = now.Add(m.cfg.WaitTimeout)
}

// advance runs the plan from its current action until something must be
// awaited (a command result, the ramdisk) or the plan ends.
func (m *Machine) advance(n *Node, now time.Time, out *Output) {
	for n.Op != nil {
		a := m.current(n)
		if a == nil {
			m.finish(n, now, out)
			return
		}
		switch a.Kind {
		case ActOOB:
			if a.Action == protocol.ActionValidate {
				if err := m.checkDriverInfo(n); err != nil {
					m.fail(n, now, out, err.Error())
					return
				}
			}
			m.ensureWorking(n, now, out)
			m.sendOOB(n, a.Action, a.Args, nil, now, out)
			return
		case ActAwaitAgent:
			if n.AgentToken != "" {
				n.Op.Index++
				continue
			}
			m.enterWait(n, now, out)
			return
		case ActPlanClean, ActPlanDeploy:
			steps, err := m.planSteps(n, a)
			if err != nil {
				m.fail(n, now, out, err.Error())
				return
			}
			i := n.Op.Index
			plan := append([]Action{}, n.Op.Plan[:i]...)
			plan = append(plan, steps...)
			n.Op.Plan = append(plan, n.Op.Plan[i+1:]...)
			continue
		case ActStep:
			s := *a.Step
			s.Progress, s.Detail = 0, ""
			if n.Op.Phase == "deploy" {
				n.DeployStep = &s
			} else if n.Op.Phase == "clean" {
				n.CleanStep = &s
			}
			if s.InBand {
				args := s.Args
				if s.Step == "finalize_rescue" {
					args = map[string]any{"rescue_password": n.Op.RescuePassword}
				}
				if s.Step == "write_image" {
					args = imageArgs(n.InstanceInfo, s.Args)
				}
				// Ironic's root device hints live in the node's properties.
				if rd, ok := n.Properties["root_device"]; ok && (s.Step == "write_image" || s.Step == "inspect_hardware") {
					args = maps.Clone(args)
					if args == nil {
						args = map[string]any{}
					}
					if _, set := args["root_device"]; !set {
						args["root_device"] = rd
					}
				}
				m.sendInband(n, &s, args, now, out)
				m.enterWait(n, now, out)
				return
			}
			m.ensureWorking(n, now, out)
			m.sendOOB(n, protocol.ActionOOBStep, nil, &s, now, out)
			return
		default:
			m.fail(n, now, out, fmt.Sprintf("internal error: unknown plan action %q", a.Kind))
			return
		}
	}
}

func imageArgs(ii map[string]any, extra map[string]any) map[string]any {
	args := map[string]any{}
	for _, k := range []string{"image_source", "image_checksum", "image_os_hash_algo", "image_os_hash_value", "image_disk_format", "root_device"} {
		if v, ok := ii[k]; ok {
			args[k] = v
		}
	}
	maps.Copy(args, extra)
	return args
}

func (m *Machine) checkDriverInfo(n *Node) error {
	d, err := m.cfg.Drivers.Get(n.Driver)
	if err != nil {
		return err
	}
	var missing []string
	for _, k := range d.RequiredInfo {
		if v, ok := n.DriverInfo[k]; !ok || v == "" {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("Failed to validate power driver interface for node %s: driver %s needs driver_info %s; set it with node set %s --driver-info KEY=VALUE",
			n.Ident(), n.Driver, strings.Join(missing, ", "), n.Ident())
	}
	return nil
}

func (m *Machine) newCommand(n *Node, topic string, msg *protocol.Message, now time.Time, out *Output) {
	msg.V = protocol.Version
	msg.Kind = protocol.KindCommand
	msg.ID = m.cfg.NewID()
	msg.Site = n.Site
	msg.Node = n.UUID
	msg.Sent = now
	msg.Deadline = now.Add(m.cfg.CommandTimeout)
	n.Pending = &Command{ID: msg.ID, Topic: topic, Msg: msg, LastSent: now, Attempts: 1}
	out.Send = append(out.Send, Outgoing{Topic: topic, Msg: msg})
}

func (m *Machine) sendOOB(n *Node, action string, args map[string]any, step *StepRun, now time.Time, out *Output) {
	msg := &protocol.Message{Action: action, Args: args, Driver: n.Driver, DriverInfo: n.DriverInfo}
	if step != nil {
		msg.Step = &protocol.Step{Interface: step.Interface, Step: step.Step, Args: step.Args, Priority: step.Priority, Abortable: step.Abortable}
	}
	if action == protocol.ActionPower {
		// A power cycle ends the ramdisk's boot: its token dies with it.
		withdrawToken(n)
		s, _ := args["state"].(string)
		// Ironic shows where the power goes: a reboot's target is "power on".
		n.TargetPowerState = s
		switch s {
		case protocol.PowerReboot, protocol.PowerSoftReboot:
			n.TargetPowerState = protocol.PowerOn
		case protocol.PowerSoftOff:
			n.TargetPowerState = protocol.PowerOff
		}
		if !protocol.PowerIsOff(s) {
			// Every boot gets a credential of its own. Only its nonce is
			// kept here; the engine derives the credential from it when it
			// sends the command, so that no credential is ever stored.
			n.BootNonce = m.cfg.NewToken()
			msg.Args = maps.Clone(args)
			msg.Args[protocol.ArgBootNonce] = n.BootNonce
		}
	}
	n.Pending = nil
	m.newCommand(n, protocol.BMCCmdTopic(n.Site), msg, now, out)
	n.Deadline = now.Add(m.cfg.CommandTimeout)
}

func (m *Machine) sendInband(n *Node, step *StepRun, args map[string]any, now time.Time, out *Output) {
	msg := &protocol.Message{Action: protocol.ActionInbandRun, Token: n.AgentToken,
		Step: &protocol.Step{Interface: step.Interface, Step: step.Step, Args: args, Priority: step.Priority, Abortable: step.Abortable}}
	n.Pending = nil
	m.newCommand(n, protocol.NodeCmdTopic(n.Site, n.UUID), msg, now, out)
	msg.Deadline = now.Add(m.cfg.WaitTimeout)
	n.Pending.InBand = true
}

// standardPriorities gives the steps a ramdisk offered that the standard
// ramdisk also has the standard ramdisk's priorities: the coordinator
// decides what runs (with the operator's overrides on top), so a ramdisk
// that offers erase_devices or write_image at priority 0 cannot make an
// automated clean or a deploy skip them. Other steps keep their own.
func standardPriorities(offered, standard []drivers.Step) []drivers.Step {
	out := make([]drivers.Step, len(offered))
	for i, s := range offered {
		if std, ok := drivers.Find(standard, s.Interface, s.Step); ok {
			s.Priority = std.Priority
		}
		out[i] = s
	}
	return out
}

// requiredCleanSteps are the in-band steps automated cleaning must run.
func (m *Machine) requiredCleanSteps() []string {
	if m.cfg.RequiredCleanSteps != nil {
		return m.cfg.RequiredCleanSteps
	}
	var out []string
	for _, s := range drivers.InbandCleanSteps() {
		p := s.Priority
		if o, ok := m.cfg.PriorityOverrides[s.Name()]; ok {
			p = o
		}
		if p > 0 {
			out = append(out, s.Name())
		}
	}
	return out
}

// planSteps computes the clean or deploy steps now that the ramdisk's
// steps are cached on the node.
func (m *Machine) planSteps(n *Node, a *Action) ([]Action, error) {
	d, err := m.cfg.Drivers.Get(n.Driver)
	if err != nil {
		return nil, err
	}
	if a.Kind == ActPlanClean {
		if n.Op.Manual {
			list := AsObjects(a.Args["clean_steps"])
			return m.resolveManual(n, d, list, true)
		}
		// Automated cleaning runs what the coordinator requires, not only
		// what a ramdisk offers: a ramdisk (or an impostor) that offers no
		// erase step must not turn cleaning into a no-op.
		var missing []string
		for _, name := range m.requiredCleanSteps() {
			iface, step, _ := strings.Cut(name, ".")
			if _, ok := drivers.Find(n.CachedCleanSteps, iface, step); !ok {
				missing = append(missing, name)
			}
		}
		if len(missing) > 0 {
			return nil, fmt.Errorf("Cleaning of node %s failed: its ramdisk does not offer the clean step(s) %s that automated cleaning requires (it offered %d); check the ramdisk image the node boots",
				n.Ident(), strings.Join(missing, ", "), len(n.CachedCleanSteps))
		}
		var all []drivers.Step
		for _, s := range append(append([]drivers.Step{}, d.CleanSteps...), standardPriorities(n.CachedCleanSteps, drivers.InbandCleanSteps())...) {
			if p, ok := m.cfg.PriorityOverrides[s.Name()]; ok {
				s.Priority = p
			}
			if s.Priority > 0 {
				all = append(all, s)
			}
		}
		drivers.Sort(all)
		return stepActions(all, nil), nil
	}
	// Deploy: driver's deploy steps plus the ramdisk's, user overrides on top.
	all := append(append([]drivers.Step{}, d.DeploySteps...), standardPriorities(n.CachedDeploySteps, drivers.InbandDeploySteps())...)
	if _, ok := drivers.Find(all, "deploy", "write_image"); !ok {
		return nil, fmt.Errorf("Deploy of node %s failed: the ramdisk does not offer deploy.write_image (it offered %d deploy steps)", n.Ident(), len(n.CachedDeploySteps))
	}
	args := map[string]map[string]any{}
	user := AsObjects(a.Args["deploy_steps"])
	for i, u := range user {
		iface, _ := u["interface"].(string)
		name, _ := u["step"].(string)
		idx := -1
		for j, s := range all {
			if s.Interface == iface && s.Step == name {
				idx = j
			}
		}
		if idx < 0 {
			// As Ironic: a user deploy step the node does not have is
			// skipped (the API checked the shape of the list).
			continue
		}
		if all[idx].Name() == CoreDeployStep {
			return nil, fmt.Errorf("deploy step %d (%s) is the core deploy step: it can be neither re-prioritised nor disabled", i+1, CoreDeployStep)
		}
		if p, ok := stepPriority(u["priority"]); ok {
			all[idx].Priority = p
		}
		if a, ok := u["args"].(map[string]any); ok {
			if err := drivers.CheckArgs(all[idx], a); err != nil {
				return nil, err
			}
			args[all[idx].Name()] = a
		}
	}
	var run []drivers.Step
	for _, s := range all {
		if s.Priority > 0 {
			run = append(run, s)
		}
	}
	drivers.Sort(run)
	return stepActions(run, args), nil
}

func stepActions(steps []drivers.Step, args map[string]map[string]any) []Action {
	out := make([]Action, 0, len(steps))
	for _, s := range steps {
		out = append(out, Action{Kind: ActStep, Step: &StepRun{Interface: s.Interface, Step: s.Step, Priority: s.Priority,
			Abortable: s.Abortable, InBand: s.RequiresRamdisk, Args: args[s.Name()]}})
	}
	return out
}

func toInt(v any) (int, bool) {
	switch x := v.(type) {
	case float64:
		return int(x), x == float64(int(x))
	case int:
		return x, true
	}
	return 0, false
}

// resolveManual validates the operator's clean list against the driver's
// steps and, when known (or when inbandKnown), the ramdisk's. It returns
// the actions in the operator's order, or an error naming the step and
// argument at fault.
func (m *Machine) resolveManual(n *Node, d drivers.Declaration, list []map[string]any, inbandKnown bool) ([]Action, error) {
	var out []Action
	for i, raw := range list {
		iface, ok1 := raw["interface"].(string)
		name, ok2 := raw["step"].(string)
		label := fmt.Sprintf("clean step %d", i+1)
		if ok2 && name != "" {
			label = fmt.Sprintf("clean step %d (%q)", i+1, name)
		}
		if !ok1 || iface == "" {
			return nil, fmt.Errorf("Invalid %s: argument \"interface\" is required and must be one of %s", label, strings.Join(drivers.Interfaces(), ", "))
		}
		if drivers.InterfaceRank(iface) < 0 {
			return nil, fmt.Errorf("Invalid %s: interface %q is unknown; it must be one of %s", label, iface, strings.Join(drivers.Interfaces(), ", "))
		}
		if !ok2 || name == "" {
			return nil, fmt.Errorf("Invalid %s: argument \"step\" is required", label)
		}
		for k := range raw {
			if k != "interface" && k != "step" && k != "args" && k != "abortable" && k != "priority" {
				return nil, fmt.Errorf("Invalid clean step %s.%s: unknown field %q; a clean step has interface, step and args", iface, name, k)
			}
		}
		args := map[string]any{}
		if v, ok := raw["args"]; ok && v != nil {
			a, ok := v.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("Invalid clean step %s.%s: argument \"args\" must be an object of name: value", iface, name)
			}
			args = a
		}
		decl, found := drivers.Find(d.CleanSteps, iface, name)
		if !found {
			decl, found = drivers.Find(n.CachedCleanSteps, iface, name)
			if !found {
				if !inbandKnown {
					// Checked once the ramdisk has said which steps it has.
					out = append(out, Action{Kind: ActStep, Step: &StepRun{Interface: iface, Step: name, InBand: true, Args: args}})
					continue
				}
				return nil, fmt.Errorf("Invalid clean step %s.%s: driver %s and the node's ramdisk offer no such step", iface, name, n.Driver)
			}
		}
		if err := drivers.CheckArgs(decl, args); err != nil {
			return nil, fmt.Errorf("Invalid clean step: %v", err)
		}
		out = append(out, Action{Kind: ActStep, Step: &StepRun{Interface: iface, Step: name, Priority: decl.Priority,
			Abortable: decl.Abortable, InBand: decl.RequiresRamdisk, Args: args}})
	}
	return out, nil
}

func (m *Machine) startManualClean(n *Node, list []map[string]any, now time.Time, out *Output) {
	d, err := m.cfg.Drivers.Get(n.Driver)
	var actions []Action
	if err == nil {
		actions, err = m.resolveManual(n, d, list, len(n.CachedCleanSteps) > 0)
	}
	inband := false
	for _, a := range actions {
		inband = inband || a.Step.InBand
	}
	var plan []Action
	if inband && err == nil && d.NoRamdiskBoot != "" {
		err = fmt.Errorf("Cannot clean node %s with in-band steps: %s; only out-of-band steps can run on it for now", n.Ident(), d.NoRamdiskBoot)
	}
	if inband {
		plan = append(bootRamdisk(), Action{Kind: ActPlanClean, Args: map[string]any{"clean_steps": list}}, powerAction(protocol.PowerOff))
	} else {
		plan = actions
	}
	// A bad list fails before any step is current: nothing ran, so no
	// maintenance is set.
	m.begin(n, Clean, Manageable, "clean", nil, now, out)
	n.Op.Manual = true
	if err != nil {
		m.fail(n, now, out, err.Error())
		return
	}
	n.Op.Plan = plan
	m.advance(n, now, out)
}

// finish ends the operation in its target state.
func (m *Machine) finish(n *Node, now time.Time, out *Output) {
	if IsWait(n.ProvisionState) {
		m.fire(n, Resume, "", now, out)
	}
	op := n.Op
	n.Op, n.Pending, n.Deadline, n.Reservation = nil, nil, time.Time{}, ""
	n.CleanStep, n.DeployStep = nil, nil
	if op.Phase != "rescue" && op.Phase != "boot_device" {
		// The operation is over, and so is its boot (a rescued node keeps
		// its ramdisk until unrescue powers it off; setting the boot
		// device ends no boot).
		withdrawToken(n)
	}
	switch op.Phase {
	case "power", "boot_device":
		return
	case "inspect":
		t := now
		n.InspectionFinishedAt = &t
	case "delete":
		n.InstanceInfo = nil
		if m.cfg.AutomatedClean {
			n.Op = &Operation{Verb: Clean, Target: op.Target, Phase: "clean", Plan: m.autoCleanPlan(), StartedAt: now}
			n.Reservation = m.cfg.Holder
			m.fire(n, Clean, "", now, out)
			n.TargetProvisionState = op.Target
			m.advance(n, now, out)
			return
		}
	}
	m.fire(n, Done, op.Target, now, out)
}

// fail ends the operation in its failed state with last_error.
func (m *Machine) fail(n *Node, now time.Time, out *Output, msg string) {
	m.failWith(n, now, out, msg, Fail)
}

func (m *Machine) failWith(n *Node, now time.Time, out *Output, msg string, e Event) {
	op := n.Op
	stepRunning := false
	if a := m.current(n); a != nil && a.Kind == ActStep {
		stepRunning = true
	}
	n.LastError = msg
	n.Op, n.Pending, n.Deadline, n.Reservation = nil, nil, time.Time{}, ""
	if op == nil || op.Phase != "boot_device" {
		withdrawToken(n)
	}
	out.History = append(out.History, HistoryEntry{Time: now, Severity: "ERROR", EventType: eventType(op), Event: msg})
	out.Changed = true
	// Whatever power action was under way is over too: a node at rest
	// has no power target (Ironic clears it when the action ends).
	n.TargetPowerState = ""
	if op == nil || op.Phase == "power" || op.Phase == "boot_device" {
		return
	}
	if op.Phase == "clean" && stepRunning && e == Fail {
		n.Maintenance = true
		n.MaintenanceReason = msg
		n.Fault = "clean failure"
	}
	m.fire(n, e, "", now, out)
	n.TargetProvisionState = ""
	if KeepsTarget(n.ProvisionState) {
		// Ironic's failed states show where the operation was going.
		n.TargetProvisionState = op.Target
	}
}

func eventType(op *Operation) string {
	if op == nil {
		return "power"
	}
	switch op.Phase {
	case "clean":
		return "cleaning"
	case "deploy":
		return "deployment"
	case "inspect":
		return "inspection"
	case "verify":
		return "verification"
	}
	return op.Phase
}

func (m *Machine) abort(n *Node, now time.Time, out *Output) {
	a := m.current(n)
	if a == nil || a.Kind != ActStep || a.Step == nil {
		m.failWith(n, now, out, fmt.Sprintf("aborted by request while waiting for the ramdisk of node %s to boot", n.Ident()), Abort)
		return
	}
	if !a.Step.Abortable {
		n.Op.AbortAfter = true
		n.UpdatedAt = now
		out.History = append(out.History, HistoryEntry{Time: now, Severity: "INFO", EventType: eventType(n.Op),
			Event: fmt.Sprintf("abort requested during step %s, which cannot be aborted; the operation fails when it ends", a.Step.Name())})
		return
	}
	if n.Pending != nil && n.Pending.InBand {
		stop := &protocol.Message{V: protocol.Version, Kind: protocol.KindCommand, ID: m.cfg.NewID(), Site: n.Site, Node: n.UUID,
			Sent: now, Action: protocol.ActionAbort, Token: n.AgentToken, Deadline: now.Add(m.cfg.CommandTimeout),
			Args: map[string]any{"command_id": n.Pending.ID}}
		out.Send = append(out.Send, Outgoing{Topic: protocol.NodeCmdTopic(n.Site, n.UUID), Msg: stop})
	}
	m.failWith(n, now, out, fmt.Sprintf("aborted by request during step %s", a.Step.Name()), Abort)
}

// withdrawToken ends the ramdisk boot: its agent token and its MQTT
// credential are revoked, and the boot is remembered.
func withdrawToken(n *Node) {
	if n.BootID != "" {
		n.PastBoots = appendBoot(n.PastBoots, n.BootID)
	}
	n.AgentToken, n.BootID, n.BootNonce = "", "", ""
}

// appendBoot adds id to the last few boots remembered.
func appendBoot(past []string, id string) []string {
	const keep = 4
	if slices.Contains(past, id) {
		return past
	}
	past = append(past, id)
	if len(past) > keep {
		past = slices.Clone(past[len(past)-keep:])
	}
	return past
}

// Hello handles a booted ramdisk's first message: it issues the boot's
// agent token, caches the ramdisk's steps and moves the node on.
func (m *Machine) Hello(n *Node, msg *protocol.Message, now time.Time) Output {
	var out Output
	if slices.Contains(n.PastBoots, msg.BootID) {
		// A boot whose token was withdrawn: its hello crossed the end.
		out.Reject, out.Late = fmt.Sprintf("node %s: hello from an earlier boot %s ignored", n.Ident(), msg.BootID), true
		return out
	}
	if n.AgentToken != "" {
		if msg.BootID == n.BootID {
			// The welcome was lost: say it again.
			out.Send = append(out.Send, m.welcome(n, now))
			return out
		}
		// A boot the coordinator did not start: the ramdisk restarted on
		// its own (crash-only), so whatever it ran is lost. No second
		// token is issued for it; the operation fails now rather than at
		// its timeout.
		old, what := n.BootID, "while the coordinator waited for it"
		if a := m.current(n); a != nil && a.Kind == ActStep && a.Step != nil {
			what = "during step " + a.Step.Name()
		}
		n.PastBoots = appendBoot(n.PastBoots, msg.BootID)
		m.fail(n, now, &out, fmt.Sprintf("the ramdisk of node %s restarted on its own (boot %s, now boot %s) %s; its work is lost: see the node's console for why, then retry", n.Ident(), old, msg.BootID, what))
		return out
	}
	if !m.expectsAgent(n) {
		out.Reject = fmt.Sprintf("node %s in state %q does not expect a ramdisk; hello from boot %s ignored", n.Ident(), n.ProvisionState, msg.BootID)
		return out
	}
	n.AgentToken = m.cfg.NewToken()
	n.BootID = msg.BootID
	n.LastHeartbeat = now
	n.CachedCleanSteps = wireSteps(msg.CleanSteps)
	n.CachedDeploySteps = wireSteps(msg.DeploySteps)
	n.StepsCachedAt = now
	n.UpdatedAt = now
	out.Changed = true
	out.Send = append(out.Send, m.welcome(n, now))
	out.History = append(out.History, HistoryEntry{Time: now, Severity: "INFO", EventType: "agent",
		Event: fmt.Sprintf("ramdisk booted (boot %s) offering %d clean and %d deploy steps", msg.BootID, len(msg.CleanSteps), len(msg.DeploySteps))})
	if !n.Maintenance {
		if a := m.current(n); a != nil && a.Kind == ActAwaitAgent {
			n.Op.Index++
			m.advance(n, now, &out)
		}
	}
	return out
}

func (m *Machine) welcome(n *Node, now time.Time) Outgoing {
	return Outgoing{Topic: protocol.NodeCmdTopic(n.Site, n.UUID), Msg: &protocol.Message{V: protocol.Version, Kind: protocol.KindWelcome,
		ID: m.cfg.NewID(), Site: n.Site, Node: n.UUID, Sent: now, Token: n.AgentToken, BootID: n.BootID}}
}

func (m *Machine) expectsAgent(n *Node) bool {
	if n.Op == nil {
		return false
	}
	for i := n.Op.Index; i < len(n.Op.Plan); i++ {
		if n.Op.Plan[i].Kind == ActAwaitAgent {
			return true
		}
	}
	return false
}

func wireSteps(in []protocol.Step) []drivers.Step {
	out := make([]drivers.Step, 0, len(in))
	for _, s := range in {
		out = append(out, drivers.Step{Interface: s.Interface, Step: s.Step, Priority: s.Priority, Abortable: s.Abortable, RequiresRamdisk: true})
	}
	return out
}

// Heartbeat records a ramdisk's heartbeat and pushes the WAIT deadline.
func (m *Machine) Heartbeat(n *Node, msg *protocol.Message, now time.Time) Output {
	var out Output
	if n.AgentToken == "" {
		// The token was withdrawn (power-off, reboot, the operation
		// ended): a heartbeat sent just before crossed it.
		out.Reject = fmt.Sprintf("node %s: heartbeat after the ramdisk's token was withdrawn (powered off or operation over) ignored", n.Ident())
		out.Late = true
		return out
	}
	if msg.Token != n.AgentToken {
		out.Reject = fmt.Sprintf("node %s: heartbeat with a wrong or stale agent token refused", n.Ident())
		return out
	}
	n.LastHeartbeat = now
	out.Changed = true
	if n.Pending != nil && n.Pending.InBand && msg.Running == n.Pending.ID {
		n.Pending.Accepted = true
		for _, s := range []*StepRun{n.CleanStep, n.DeployStep} {
			if s != nil {
				s.Progress, s.Detail = msg.Progress, msg.Detail
			}
		}
	}
	if !n.Maintenance && IsWait(n.ProvisionState) {
		n.Deadline = now.Add(m.cfg.WaitTimeout)
	}
	return out
}

// Result handles the result of the node's outstanding command. A result
// for any other command (a duplicate) is ignored; the caller acks it all
// the same so that the sender's outbox lets go of it.
func (m *Machine) Result(n *Node, msg *protocol.Message, now time.Time) Output {
	var out Output
	if n.Pending == nil || msg.CommandID != n.Pending.ID {
		return out
	}
	if n.Pending.InBand && (n.AgentToken == "" || msg.Token != n.AgentToken) {
		out.Reject = fmt.Sprintf("node %s: result of %s with a wrong or stale agent token refused", n.Ident(), msg.CommandID)
		return out
	}
	if n.Maintenance && IsWait(n.ProvisionState) {
		// Maintenance pauses a node in a WAIT state (Ironic ignores the
		// ramdisk's heartbeats in maintenance); the result is applied
		// when maintenance ends. Out-of-band work (an -ING state, a power
		// change) goes on, as Ironic's conductor goes on with it.
		n.Held = msg
		out.Changed = true
		return out
	}
	m.applyResult(n, msg, now, &out)
	return out
}

func (m *Machine) applyResult(n *Node, msg *protocol.Message, now time.Time, out *Output) {
	out.Changed = true
	n.UpdatedAt = now
	cmd := n.Pending
	n.Pending, n.Deadline = nil, time.Time{}
	a := m.current(n)
	if a == nil {
		return
	}
	what := describe(n, a)
	if !msg.OK {
		m.fail(n, now, out, fmt.Sprintf("%s failed on node %s: %s", what, n.Ident(), msg.Error))
		return
	}
	if cmd.Msg != nil && cmd.Msg.Action == protocol.ActionBootDev {
		n.BootDevice, _ = cmd.Msg.Args["device"].(string)
	}
	if cmd.Msg != nil && cmd.Msg.Action == protocol.ActionPower {
		if s, _ := cmd.Msg.Args["state"].(string); protocol.PowerIsOff(s) {
			n.PowerState = protocol.PowerOff
		} else {
			n.PowerState = protocol.PowerOn
		}
		n.TargetPowerState = ""
	}
	if a.Kind == ActStep && a.Step.Step == "inspect_hardware" {
		if inv, ok := msg.Data["inventory"].(map[string]any); ok {
			out.Inventory = inv
			// A new map, never the old one changed in place: the API's
			// readers may be encoding the node's current maps right now.
			props := maps.Clone(n.Properties)
			if props == nil {
				props = map[string]any{}
			}
			if p, ok := msg.Data["properties"].(map[string]any); ok {
				maps.Copy(props, p)
			}
			n.Properties = props
		}
	}
	if a.Kind == ActStep && a.Step.InBand {
		event := fmt.Sprintf("%s done", what)
		if sum := resultSummary(msg.Data); sum != "" {
			event += ": " + sum
		}
		out.History = append(out.History, HistoryEntry{Time: now, Severity: "INFO", EventType: eventType(n.Op), Event: event})
	} else if a.Kind == ActStep {
		out.History = append(out.History, HistoryEntry{Time: now, Severity: "INFO", EventType: eventType(n.Op),
			Event: fmt.Sprintf("%s done (out of band)", what)})
	}
	if a.Kind == ActStep && (a.Step.Step == "tear_down_agent") {
		n.PowerState = protocol.PowerOff
	}
	if a.Kind == ActStep && (a.Step.Step == "boot_instance") {
		n.PowerState = protocol.PowerOn
	}
	n.Op.Index++
	if n.Op.AbortAfter {
		m.failWith(n, now, out, fmt.Sprintf("aborted by request after step %s finished", a.Step.Name()), Abort)
		return
	}
	m.advance(n, now, out)
}

// resultSummary is the one-line account a step's result may carry in
// data["summary"] (for example which erase method each disk got), kept
// short and printable for the node's history.
func resultSummary(data map[string]any) string {
	sum, _ := data["summary"].(string)
	sum = strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return ' '
	}, sum)
	const maxLen = 500
	if len(sum) > maxLen {
		cut := maxLen
		for cut > 0 && !utf8.RuneStart(sum[cut]) {
			cut--
		}
		sum = sum[:cut] + "…"
	}
	return strings.TrimSpace(sum)
}

func describe(n *Node, a *Action) string {
	switch a.Kind {
	case ActStep:
		return fmt.Sprintf("%s step %s", n.Op.Phase, a.Step.Name())
	case ActOOB:
		if a.Action == protocol.ActionPower {
			// "power on", "power off", "rebooted" → "power on", "power off", "reboot".
			switch st := fmt.Sprint(a.Args["state"]); {
			case st == protocol.PowerReboot:
				return "reboot"
			case st == protocol.PowerSoftReboot:
				return "soft reboot"
			case strings.HasPrefix(st, "power "), st == protocol.PowerSoftOff:
				return st
			default:
				return "power " + st
			}
		}
		if a.Action == protocol.ActionBootDev {
			return fmt.Sprintf("setting boot device %v", a.Args["device"])
		}
		return "BMC " + a.Action
	}
	return a.Kind
}

// Tick resends unanswered commands and fails what has timed out. A node
// in maintenance is paused in a WAIT state (elsewhere its out-of-band
// work goes on); a site that is offline does not time out its nodes for
// silence the coordinator cannot hear.
func (m *Machine) Tick(n *Node, now time.Time, siteOnline bool) Output {
	var out Output
	if n.Op == nil || (n.Maintenance && IsWait(n.ProvisionState)) {
		return out
	}
	if p := n.Pending; p != nil && !p.Accepted && now.Sub(p.LastSent) >= m.cfg.ResendInterval && siteOnline {
		p.LastSent = now
		p.Attempts++
		out.Send = append(out.Send, Outgoing{Topic: p.Topic, Msg: p.Msg})
		out.Changed = true
	}
	if n.Deadline.IsZero() || !now.After(n.Deadline) || !siteOnline {
		return out
	}
	a := m.current(n)
	switch {
	case IsWait(n.ProvisionState) && a != nil && a.Kind == ActStep:
		m.fail(n, now, &out, fmt.Sprintf("Timeout reached while waiting for the ramdisk of node %s in state %q: no heartbeat for %s during %s",
			n.Ident(), n.ProvisionState, m.cfg.WaitTimeout, describe(n, a)))
	case IsWait(n.ProvisionState):
		m.fail(n, now, &out, fmt.Sprintf("Timeout reached while waiting for the ramdisk of node %s to boot in state %q (%s); check that it network-boots",
			n.Ident(), n.ProvisionState, m.cfg.WaitTimeout))
	case n.Pending != nil && a != nil:
		m.fail(n, now, &out, fmt.Sprintf("%s on node %s got no result from the edge agent of site %s within %s",
			describe(n, a), n.Ident(), n.Site, m.cfg.CommandTimeout))
	}
	return out
}

// SiteBack extends the deadlines of a site's node when the site returns,
// so that silence during the outage does not fail them.
func (m *Machine) SiteBack(n *Node, now time.Time) Output {
	var out Output
	if n.Deadline.IsZero() {
		return out
	}
	min := now.Add(m.cfg.CommandTimeout)
	if IsWait(n.ProvisionState) {
		min = now.Add(m.cfg.WaitTimeout)
	}
	if n.Deadline.Before(min) {
		n.Deadline = min
		out.Changed = true
	}
	if n.Pending != nil {
		n.Pending.LastSent = time.Time{}
	}
	return out
}

// SetMaintenance pauses or resumes a node.
func (m *Machine) SetMaintenance(n *Node, on bool, reason string, now time.Time) Output {
	var out Output
	out.Changed = true
	n.UpdatedAt = now
	if on {
		n.Maintenance, n.MaintenanceReason = true, reason
		out.History = append(out.History, HistoryEntry{Time: now, Severity: "INFO", EventType: "maintenance", Event: "maintenance set: " + reason})
		return out
	}
	n.Maintenance, n.MaintenanceReason, n.Fault = false, "", ""
	out.History = append(out.History, HistoryEntry{Time: now, Severity: "INFO", EventType: "maintenance", Event: "maintenance unset"})
	if n.Op == nil {
		return out
	}
	if IsWait(n.ProvisionState) {
		n.Deadline = now.Add(m.cfg.WaitTimeout)
	}
	if n.Pending != nil && !n.Pending.Accepted {
		n.Pending.LastSent = time.Time{}
	}
	if h := n.Held; h != nil {
		n.Held = nil
		m.applyResult(n, h, now, &out)
		return out
	}
	if a := m.current(n); a != nil && a.Kind == ActAwaitAgent && n.AgentToken != "" {
		n.Op.Index++
		m.advance(n, now, &out)
	}
	return out
}

// Recover is run once per node when the coordinator starts: outstanding
// commands are sent again at once (steps are idempotent; receivers
// deduplicate by id), WAIT states keep their stored deadlines, and a node
// caught in an -ING state with nothing outstanding fails with a reason.
func (m *Machine) Recover(n *Node, now time.Time) Output {
	var out Output
	if n.Op == nil {
		if n.Reservation != "" {
			n.Reservation = ""
			out.Changed = true
		}
		return out
	}
	if n.Pending != nil {
		n.Pending.LastSent = time.Time{}
		if !IsWait(n.ProvisionState) {
			n.Reservation = m.cfg.Holder
		}
		out.Changed = true
		out.History = append(out.History, HistoryEntry{Time: now, Severity: "INFO", EventType: "recovery",
			Event: fmt.Sprintf("coordinator restarted; re-sending %s", describe(n, m.current(n)))})
		return out
	}
	if IsWait(n.ProvisionState) {
		return out
	}
	m.fail(n, now, &out, fmt.Sprintf("coordinator restarted while node %s was in state %q with nothing outstanding; retry the operation", n.Ident(), n.ProvisionState))
	return out
}

// PowerRequest starts a power change outside any provision operation.
func (m *Machine) PowerRequest(n *Node, target string, now time.Time) (Output, *Refusal) {
	var out Output
	if r := checkIdle(n, "changing power"); r != nil {
		return out, r
	}
	state, ok := powerCommand(target)
	if !ok {
		return out, refuse(400, "Invalid power target %q for node %s; use one of: %s", target, n.Ident(), strings.Join(PowerTargets(), ", "))
	}
	n.Op = &Operation{Verb: "power", Phase: "power", Plan: []Action{powerAction(state)}, StartedAt: now}
	n.Reservation = m.cfg.Holder
	n.LastError = ""
	out.Changed = true
	m.advance(n, now, &out)
	return out, nil
}

// SortedStepsView returns clean steps for the steps API: the driver's and
// the cached in-band ones, with priority overrides, sorted, filtered by
// minPriority. known is false when the ramdisk has not reported yet.
func (m *Machine) SortedStepsView(n *Node, minPriority int) (steps []drivers.Step, known bool, err error) {
	d, err := m.cfg.Drivers.Get(n.Driver)
	if err != nil {
		return nil, false, err
	}
	all := append(append([]drivers.Step{}, d.CleanSteps...), n.CachedCleanSteps...)
	for i := range all {
		if p, ok := m.cfg.PriorityOverrides[all[i].Name()]; ok {
			all[i].Priority = p
		}
	}
	var out []drivers.Step
	for _, s := range all {
		if s.Priority >= minPriority {
			out = append(out, s)
		}
	}
	drivers.Sort(out)
	return out, !n.StepsCachedAt.IsZero(), nil
}

// InterfaceCheck is one interface's answer in a node's validation, in
// Ironic's shape: Result nil means the interface is not supported.
type InterfaceCheck struct {
	Result *bool  `json:"result"`
	Reason string `json:"reason,omitempty"`
}

// Validate answers GET /v1/nodes/{id}/validate from what the coordinator
// knows without asking the BMC (as Ironic's validate does): the driver's
// required driver_info, whether the edge can boot the node into the
// ramdisk, the image to deploy, the driver's interfaces.
func (m *Machine) Validate(n *Node) map[string]InterfaceCheck {
	yes, no := true, false
	ok := InterfaceCheck{Result: &yes}
	fail := func(reason string) InterfaceCheck { return InterfaceCheck{Result: &no, Reason: reason} }
	unsupported := InterfaceCheck{Reason: "not supported"}
	out := map[string]InterfaceCheck{"console": unsupported, "raid": unsupported, "network": ok}
	d, err := m.cfg.Drivers.Get(n.Driver)
	if err != nil {
		for _, k := range []string{"power", "management", "boot", "deploy", "inspect", "rescue", "bios"} {
			out[k] = fail(err.Error())
		}
		return out
	}
	out["power"], out["management"] = ok, ok
	if err := m.checkDriverInfo(n); err != nil {
		out["power"], out["management"] = fail(err.Error()), fail(err.Error())
	}
	boot := ok
	if d.NoRamdiskBoot != "" {
		boot = fail(d.NoRamdiskBoot)
	}
	out["boot"], out["inspect"], out["rescue"] = boot, boot, boot
	out["deploy"] = boot
	if s, _ := n.InstanceInfo["image_source"].(string); s == "" && d.NoRamdiskBoot == "" {
		out["deploy"] = fail(fmt.Sprintf("instance_info image_source of node %s is not set", n.Ident()))
	}
	out["bios"] = unsupported
	for _, s := range d.CleanSteps {
		if s.Interface == "bios" {
			out["bios"] = ok
		}
	}
	return out
}
