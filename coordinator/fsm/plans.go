package fsm

import (
	"fmt"
	"strings"
	"time"

	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/protocol"
)

// This file holds the running of an operation's plan: out-of-band
// commands, in-band steps, the clean and deploy step plans, and the end of
// an operation in its target or its failed state.

// bootRamdisk reboots the node into the ramdisk: one command sets the
// boot device and reboots, so that a slow WAN carries one round trip,
// not two.
func bootRamdisk() []Action {
	boot := powerAction(protocol.PowerReboot)
	boot.Args[protocol.ArgBootDevice] = protocol.BootPXE
	return []Action{boot, {Kind: ActAwaitAgent}}
}

func powerAction(state string) Action {
	return Action{Kind: ActOOB, Action: protocol.ActionPower, Args: protocol.PowerArgs{State: state}.Args()}
}

func bootDevAction(dev string) Action {
	return Action{Kind: ActOOB, Action: protocol.ActionBootDev, Args: protocol.BootDeviceArgs{Device: dev}.Args()}
}

func (m *Machine) autoCleanPlan(n *Node) []Action {
	if !m.autoClean(n) || m.fakeDeploy(n) {
		return nil
	}
	return append(bootRamdisk(), Action{Kind: ActPlanClean}, endRamdisk())
}

// autoClean tells whether provide and undeploy clean node n (Ironic's
// skip_automated_cleaning): its automated_clean when set, else the
// coordinator's setting.
func (m *Machine) autoClean(n *Node) bool {
	if n.AutomatedClean != nil {
		return *n.AutomatedClean
	}
	return m.cfg.AutomatedClean
}

// fakeDeploy tells whether node n has Ironic's fake deploy interface (its
// own, or its driver's default: fake-hardware's): its deploy, undeploy
// and cleaning boot nothing and run no step.
func (m *Machine) fakeDeploy(n *Node) bool { return m.deployImpl(n) == drivers.DeployFake }

// ramdiskDeploy tells whether node n has Ironic's ramdisk deploy
// interface: its deploy boots instance_info boot_iso from the BMC's
// virtual CD (no ramdisk of this project, nothing written to disk) and
// its undeploy powers it off and ejects the ISO; cleaning is as for
// direct (Ironic's ramdisk deploy cleans with the agent too).
func (m *Machine) ramdiskDeploy(n *Node) bool { return m.deployImpl(n) == drivers.DeployRamdisk }

// deployImpl is node n's deploy interface: its own, or its driver's
// default.
func (m *Machine) deployImpl(n *Node) string {
	impl := n.DeployInterface
	if impl == "" {
		if d, err := m.cfg.Drivers.Get(n.Driver); err == nil {
			impl = d.InterfacesFor(n.Driver).Default("deploy")
		}
	}
	return impl
}

// bootISOPlan is the ramdisk deploy's plan, as Ironic's RamdiskDeploy
// deploy step: power off, the boot interface's prepare_instance (the
// ISO of instance_info boot_iso, or the one the edge agent builds of
// instance_info kernel and ramdisk, on the virtual CD, the CD as the
// persistent boot device), power on.
func bootISOPlan(n *Node) []Action {
	b := protocol.BootDeviceArgs{Device: protocol.BootISO}
	if iso, _ := n.InstanceInfo[BootISOField].(string); iso != "" {
		b.ISOURL = iso
	} else {
		// Ironic's prepare_boot_iso: an ISO of the kernel and the ramdisk.
		b.KernelURL, _ = n.InstanceInfo["kernel"].(string)
		b.RamdiskURL, _ = n.InstanceInfo["ramdisk"].(string)
		b.KernelParams, _ = n.InstanceInfo[RamdiskParamsField].(string)
	}
	insert := Action{Kind: ActOOB, Action: protocol.ActionBootDev, Args: b.Args()}
	return []Action{powerAction(protocol.PowerOff), insert, powerAction(protocol.PowerOn)}
}

// ejectISOPlan is the ramdisk deploy's tear down: power off, then the
// boot interface's clean_up_instance (the ISO ejected) and the disk as
// the boot device again.
func ejectISOPlan() []Action {
	return []Action{powerAction(protocol.PowerOff),
		{Kind: ActOOB, Action: protocol.ActionBootDev, Args: protocol.BootDeviceArgs{Device: protocol.BootDisk, EjectISO: true}.Args()}}
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
			if a.EndsRamdisk && m.keepRamdisk(n, now) {
				// Fast track: the ramdisk stays up for the next operation.
				n.Op.KeptRamdisk = true
				n.Op.Index++
				continue
			}
			if m.avoidPowerOff(n, now, out) {
				continue // disable_power_off: the plan reboots instead
			}
			if a.Action == protocol.ActionValidate {
				if err := m.checkDriverInfo(n); err != nil {
					m.fail(n, now, out, err.Error())
					return
				}
			}
			m.ensureWorking(n, now, out)
			m.issue(n, m.actionCommand(n, a.Action, a.Args), now, out)
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
			n.setStep(&s)
			if s.Step == HoldStep {
				m.hold(n, &s, now, out)
				return
			}
			if m.pendPlanned(n, &s, now, out) {
				// The site runs it (run_plan): its result is awaited.
				return
			}
			if m.sendSitePlan(n, now, out) {
				continue // the first step of the plan is pending now
			}
			c, err := m.stepCommand(n, &s)
			if err != nil {
				n.setStep(&s)
				m.fail(n, now, out, fmt.Sprintf("%s failed on node %s: %v", describe(n, a), n.Ident(), err))
				return
			}
			if s.InBand {
				m.issue(n, c, now, out)
				m.enterWait(n, now, out)
				return
			}
			m.ensureWorking(n, now, out)
			if run := m.oobRun(n); len(run) > 1 {
				// One command, one round trip; each step keeps the time
				// it would have had alone.
				c.msg.Steps, c.steps = run, len(run)
			}
			m.issue(n, c, now, out)
			return
		default:
			m.fail(n, now, out, fmt.Sprintf("internal error: unknown plan action %q", a.Kind))
			return
		}
	}
}

// hold stops the operation at a hold step: the node rests in its hold
// state, unlocked, with nothing outstanding and no timeout (a ramdisk
// that runs keeps running and heartbeating) until the operator's unhold
// or abort.
func (m *Machine) hold(n *Node, s *StepRun, now time.Time, out *Output) {
	m.fire(n, Hold, "", now, out)
	n.Reservation, n.Pending, n.Deadline = "", nil, time.Time{}
	out.History = append(out.History, HistoryEntry{Time: now, Severity: "INFO", EventType: eventType(n.Op),
		Event: fmt.Sprintf("held by step %s: unhold the node to go on with the next step, or abort it", s.Name())})
}

// holdStep is a hold step as planned (it takes no args).
func holdStep(iface string, priority int) Action {
	return Action{Kind: ActStep, Step: &StepRun{Interface: iface, Step: HoldStep, Priority: priority, Abortable: true}}
}

// oobRun is the run of consecutive out-of-band steps from the plan's
// current action (at most protocol.MaxOOBSteps): sent as one command,
// they cost one round trip to the site.
func (m *Machine) oobRun(n *Node) []protocol.Step {
	var run []protocol.Step
	for _, a := range n.Op.Plan[n.Op.Index:] {
		if a.Kind != ActStep || a.Step.InBand || a.Step.Step == HoldStep || len(run) == protocol.MaxOOBSteps {
			break
		}
		s := a.Step
		args, _ := m.stepArgs(n, s) // out of band: no source can fail
		run = append(run, protocol.Step{Interface: s.Interface, Step: s.Step, Args: args, Priority: s.Priority, Abortable: s.Abortable})
	}
	return run
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
	d, err := m.nodeDriver(n)
	if err != nil {
		return nil, err
	}
	if a.Kind == ActPlanClean {
		if n.Op.Manual {
			list := planArgsOf(a.Args).CleanSteps
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
		for _, s := range append(append([]drivers.Step{}, d.CleanSteps...), standardPriorities(raidInband(n, n.CachedCleanSteps), drivers.InbandCleanSteps())...) {
			if p, ok := m.cfg.PriorityOverrides[s.Name()]; ok {
				s.Priority = p
			}
			if s.Priority > 0 {
				all = append(all, s)
			}
		}
		// The overrides were checked at start against the standard
		// ramdisk; a ramdisk that offers other steps can still bring two
		// of one interface to one priority, and their order is undefined.
		if a, b, clash := samePriority(all); clash {
			return nil, fmt.Errorf("Cleaning of node %s failed: clean steps %s and %s, both of interface %s, have the same priority %d, so their order is undefined; give one another priority with a clean step priority override, or fix the ramdisk's steps",
				n.Ident(), a.Name(), b.Name(), a.Interface, a.Priority)
		}
		drivers.Sort(all)
		return stepActions(all, nil), nil
	}
	// Deploy: driver's deploy steps plus the ramdisk's, user overrides on top.
	all := append(append([]drivers.Step{}, d.DeploySteps...), standardPriorities(raidInband(n, n.CachedDeploySteps), drivers.InbandDeploySteps())...)
	if core, step, _ := strings.Cut(CoreDeployStep, "."); !hasStep(all, core, step) {
		return nil, fmt.Errorf("Deploy of node %s failed: the ramdisk does not offer %s (it offered %d deploy steps)", n.Ident(), CoreDeployStep, len(n.CachedDeploySteps))
	}
	args := map[string]map[string]any{}
	pa := planArgsOf(a.Args)
	user, err := withTemplateSteps(n, all, pa.TemplateSteps, pa.DeploySteps)
	if err != nil {
		return nil, err
	}
	var holds []drivers.Step
	for i, u := range user {
		iface, _ := u["interface"].(string)
		name, _ := u["step"].(string)
		if name == HoldStep {
			// The reserved hold step runs where its priority puts it.
			if p, ok := stepPriority(u["priority"]); ok && p > 0 {
				holds = append(holds, drivers.Step{Interface: iface, Step: HoldStep, Priority: p, Abortable: true})
			}
			continue
		}
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
	for _, h := range holds {
		// After the steps of its priority and interface: a hold at a
		// step's priority holds once that step is done.
		i := 0
		for i < len(run) && (run[i].Priority > h.Priority || (run[i].Priority == h.Priority &&
			drivers.InterfaceRank(run[i].Interface) <= drivers.InterfaceRank(h.Interface))) {
			i++
		}
		run = append(run[:i], append([]drivers.Step{h}, run[i:]...)...)
	}
	return stepActions(run, args), nil
}

func hasStep(steps []drivers.Step, iface, step string) bool {
	_, ok := drivers.Find(steps, iface, step)
	return ok
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
	kind := StepsClean
	if n.Op != nil && n.Op.Phase.Info().Steps == StepsService {
		kind = StepsService
	}
	for i, raw := range list {
		iface, ok1 := raw["interface"].(string)
		name, ok2 := raw["step"].(string)
		label := fmt.Sprintf("%s step %d", kind, i+1)
		if ok2 && name != "" {
			label = fmt.Sprintf("%s step %d (%q)", kind, i+1, name)
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
				return nil, fmt.Errorf("Invalid %s step %s.%s: unknown field %q; a %s step has interface, step and args", kind, iface, name, k, kind)
			}
		}
		if name == HoldStep {
			if err := checkHoldArgs(raw["args"], fmt.Sprintf("%s step %d (%s.%s)", kind, i+1, iface, name)); err != nil {
				return nil, err
			}
			out = append(out, holdStep(iface, 0))
			continue
		}
		args := map[string]any{}
		if v, ok := raw["args"]; ok && v != nil {
			a, ok := v.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("Invalid %s step %s.%s: argument \"args\" must be an object of name: value", kind, iface, name)
			}
			args = a
		}
		if std, ok := drivers.Standard(iface, name); ok && std.Refused != "" {
			return nil, fmt.Errorf("Invalid %s step %s.%s: %s", kind, iface, name, std.Refused)
		}
		decl, found := drivers.Find(d.CleanSteps, iface, name)
		if !found {
			decl, found = drivers.Find(withStandardArgs(raidInband(n, n.CachedCleanSteps)), iface, name)
			if !found {
				if !inbandKnown {
					// Checked once the ramdisk has said which steps it has.
					out = append(out, Action{Kind: ActStep, Step: &StepRun{Interface: iface, Step: name, InBand: true, Args: args}})
					continue
				}
				return nil, fmt.Errorf("Invalid %s step %s.%s: driver %s and the node's ramdisk offer no such step", kind, iface, name, n.Driver)
			}
		}
		if err := drivers.CheckArgs(decl, args); err != nil {
			return nil, fmt.Errorf("Invalid %s step: %v", kind, err)
		}
		out = append(out, Action{Kind: ActStep, Step: &StepRun{Interface: iface, Step: name, Priority: decl.Priority,
			Abortable: decl.Abortable, InBand: decl.RequiresRamdisk, Args: args}})
	}
	return out, nil
}

// checkHoldArgs refuses args given to a hold step, which takes none.
func checkHoldArgs(v any, at string) error {
	if a, ok := v.(map[string]any); v == nil || (ok && len(a) == 0) {
		return nil
	}
	return fmt.Errorf("Invalid %s: the hold step takes no args (it holds the node until unhold or abort); leave \"args\" out or empty", at)
}

// finish ends the operation in its target state.
func (m *Machine) finish(n *Node, now time.Time, out *Output) {
	if IsWait(n.ProvisionState) {
		m.fire(n, Resume, "", now, out)
	}
	op := n.Op
	n.Op, n.Pending, n.Deadline, n.Reservation = nil, nil, time.Time{}, ""
	n.CleanStep, n.DeployStep, n.ServiceStep = nil, nil, nil
	switch {
	case op.KeptRamdisk && n.AgentToken != "":
		// Fast track: the boot goes on, its token and credential too,
		// until the next operation uses it or the timeout powers it off.
		n.FastTrackUntil = now.Add(m.cfg.FastTrackTimeout)
		out.History = append(out.History, HistoryEntry{Time: now, Severity: "INFO", EventType: eventType(op),
			Event: fmt.Sprintf("fast track: the ramdisk (boot %s) stays up for the next operation until %s; the node is powered off then if none came",
				n.BootID, n.FastTrackUntil.UTC().Format(time.RFC3339))})
	case !n.FastTrackUntil.IsZero() && n.AgentToken != "":
		// An operation that did not use the kept ramdisk (out-of-band
		// steps only): it runs on until its timeout.
	case !op.Phase.Info().KeepsBoot:
		// The operation is over, and so is its boot (a rescued node keeps
		// its ramdisk until unrescue powers it off; setting the boot
		// device ends no boot).
		withdrawToken(n)
	}
	if op.Phase.Info().Aside {
		return
	}
	if f := op.Phase.Info().Finish; f != nil && f(m, n, op, now, out) {
		return
	}
	m.fire(n, Done, op.Target, now, out)
}

// finishInspect stamps the end of an inspection.
func finishInspect(_ *Machine, n *Node, _ *Operation, now time.Time, _ *Output) bool {
	t := now
	n.InspectionFinishedAt = &t
	return false
}

// finishDelete drops the instance; with automated cleaning the node goes
// on into cleaning toward the undeploy's target.
func finishDelete(m *Machine, n *Node, op *Operation, now time.Time, out *Output) bool {
	n.InstanceInfo, n.ConfigDrive, n.InstanceUUID, n.InstanceName = nil, "", "", ""
	if !m.autoClean(n) {
		return false
	}
	n.Op = &Operation{Verb: Clean, Target: op.Target, Phase: PhaseClean, Plan: m.autoCleanPlan(n), StartedAt: now}
	n.Reservation = m.cfg.Holder
	m.fire(n, Clean, "", now, out)
	n.TargetProvisionState = op.Target
	m.advance(n, now, out)
	return true
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
	// The site stops the plan at its first abortable point.
	m.stopSitePlan(n, op, protocol.PlanStopAbort, now, out)
	if op == nil || !(op.Phase.Info().Aside && op.Phase.Info().KeepsBoot) {
		if n.BootNonce != "" {
			// The node stays powered on with its ramdisk: the site must
			// stop admitting that boot's credential too.
			m.endBoot(n, now, out)
		}
		withdrawToken(n)
	}
	out.History = append(out.History, HistoryEntry{Time: now, Severity: "ERROR", EventType: eventType(op), Event: msg})
	out.Changed = true
	// Whatever power action was under way is over too: a node at rest
	// has no power target (Ironic clears it when the action ends).
	n.TargetPowerState = ""
	if op == nil || op.Phase.Info().Aside {
		return
	}
	if op.Phase.Info().FailMaintenance && stepRunning && e == Fail {
		// As Ironic's cleaning and servicing error handlers: a failed
		// step leaves the node in maintenance with its fault.
		n.Maintenance = true
		n.MaintenanceReason = msg
		n.Fault = string(op.Phase) + " failure"
	}
	m.fire(n, e, "", now, out)
	n.TargetProvisionState = ""
	if KeepsTarget(n.ProvisionState) {
		// Ironic's failed states show where the operation was going.
		n.TargetProvisionState = op.Target
	}
}

// SortedStepsView returns clean steps for the steps API: the driver's and
// the cached in-band ones, with priority overrides, sorted, filtered by
// minPriority. known is false when the ramdisk has not reported yet.
func (m *Machine) SortedStepsView(n *Node, minPriority int) (steps []drivers.Step, known bool, err error) {
	d, err := m.nodeDriver(n)
	if err != nil {
		return nil, false, err
	}
	all := append(append([]drivers.Step{}, d.CleanSteps...), withStandardArgs(raidInband(n, n.CachedCleanSteps))...)
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

// withStandardArgs gives the in-band steps a ramdisk offered the argsinfo
// of the standard ramdisk's declaration of the same step (the wire
// carries none): the coordinator, not the ramdisk, says which arguments a
// step takes.
func withStandardArgs(offered []drivers.Step) []drivers.Step {
	out := make([]drivers.Step, len(offered))
	for i, s := range offered {
		if std, ok := drivers.Standard(s.Interface, s.Step); ok && s.ArgsInfo == nil {
			s.ArgsInfo = std.ArgsInfo
		}
		out[i] = s
	}
	return out
}

// refusedSteps fails a clean list that names a step the standard ramdisk
// declares but cannot run here (drivers.Step.Refused), saying what is
// missing, before anything starts.
func refusedSteps(list []map[string]any) error {
	for i, raw := range list {
		iface, _ := raw["interface"].(string)
		name, _ := raw["step"].(string)
		if std, ok := drivers.Standard(iface, name); ok && std.Refused != "" {
			return fmt.Errorf("Invalid clean step %d (%s.%s): %s", i+1, iface, name, std.Refused)
		}
	}
	return nil
}
