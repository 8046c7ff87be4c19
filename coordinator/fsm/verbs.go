package fsm

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/lib/imagechecksum"
	"github.com/bmedge/bmedge/protocol"
)

// This file holds the operator's verbs: the checks Ironic makes before a
// verb starts, and the start of each operation with its plan.

// VerbRequest is an operator's provision request.
type VerbRequest struct {
	Verb Event
	// CleanSteps is the manual clean list, as decoded JSON objects.
	CleanSteps []map[string]any
	// DeploySteps are extra or overriding deploy steps.
	DeploySteps []map[string]any
	// ServiceSteps is the service list (API 1.87), as decoded JSON objects.
	ServiceSteps []map[string]any
	// HashedRescuePassword is the SHA-crypt hash of the rescue password
	// (Ironic's hashed_rescue_password): all that the node keeps and the
	// rescue ramdisk gets. The API hashes the operator's rescue_password;
	// the password itself never reaches the machine.
	HashedRescuePassword string
	// ConfigDrive, for deploy and rebuild, replaces the node's config
	// drive (Node.ConfigDrive) when set.
	ConfigDrive string
	// Runbook names the runbook whose steps are CleanSteps or
	// ServiceSteps (API 1.92): the node must have a trait of its name.
	// DisableRamdisk is the runbook's: no step may need the ramdisk.
	Runbook        string
	DisableRamdisk bool
	// Templates are the deploy templates a deploy or rebuild may use:
	// those its instance_info traits name add their steps.
	Templates []DeployTemplate
}

// NoServiceSteps are the steps service refuses: they erase or rewrite the
// instance's disk, which service must never do (it changes a running
// server without re-imaging it).
var NoServiceSteps = map[string]string{
	"erase_devices":          "it erases every disk of the node, the instance's included",
	"erase_devices_metadata": "it erases the partition tables and file system signatures of the node's disks, the instance's included",
	"write_image":            "it writes an image over the instance's disk; rebuild the node to re-image it",
	"erase_devices_express":  "it erases every disk of the node by hardware, the instance's included",
	"burnin_disk":            "it writes test patterns over every disk of the node, the instance's included",
}

// CheckServiceSteps checks a service list before anything starts: its
// shape as clean_steps are checked, and no step that would erase or
// rewrite the instance's disk.
func CheckServiceSteps(ident string, list []map[string]any) error {
	if len(list) == 0 {
		return fmt.Errorf("\"service_steps\" is required when setting target provision state to service (node %s): give a non-empty list of {\"interface\": ..., \"step\": ..., \"args\": {...}}", ident)
	}
	for i, raw := range list {
		if err := checkStepShape(raw, i, false); err != nil {
			return fmt.Errorf("Invalid service_steps: %v", err)
		}
	}
	for i, raw := range list {
		iface, _ := raw["interface"].(string)
		name, _ := raw["step"].(string)
		if why, bad := NoServiceSteps[name]; bad {
			return fmt.Errorf("Invalid service_steps: step %d (%s.%s) is not allowed as a service step: %s. Service never touches the instance's disk; use clean or rebuild for that", i+1, iface, name, why)
		}
	}
	return nil
}

// CheckVerb says whether verb may start on n now, without changing n:
// the checks every verb has, then its row's own. It is the one check of
// a provision request; Start starts what it allowed.
func (m *Machine) CheckVerb(n *Node, req VerbRequest) *Refusal {
	if n.Locked() {
		return refuse(Conflict, "Node %s is locked by host %s, please retry after the current operation is completed.", n.Ident(), n.Reservation)
	}
	row, ok := VerbInfo(req.Verb)
	if !ok {
		return refuse(Invalid, "%q is not a valid provision target; valid targets: %s", req.Verb, VerbTargets())
	}
	if _, ok := Next(n.ProvisionState, req.Verb, ""); !ok {
		return refuse(Invalid, "The requested action %q can not be performed on node %q while it is in state %q. Allowed there: %s.",
			req.Verb, n.Ident(), n.ProvisionState, verbList(Allowed(n.ProvisionState)))
	}
	if r := m.checkRunbook(n, req); r != nil {
		return r
	}
	// As Ironic (allow_provisioning_in_maintenance): manage, inspect,
	// clean, provide, undeploy and abort start in maintenance, and the
	// node pauses when it reaches a WAIT state; deploy, rebuild, rescue
	// and unrescue are refused.
	if row.Maintenance != "" && n.Maintenance {
		return refuse(Invalid, "The %s operation can't be performed on node %s because it's in maintenance mode. (maintenance reason: %q; unset maintenance first)", row.Maintenance, n.Ident(), n.MaintenanceReason)
	}
	ramdisk := row.Ramdisk != nil && row.Ramdisk(m, n)
	if ramdisk || row.MayBootRamdisk {
		if _, err := m.FastTrackEnabled(n); err != nil {
			return refuse(Invalid, "%v", err)
		}
	}
	if row.Precheck != nil {
		if r := row.Precheck(m, n, req); r != nil {
			return r
		}
	}
	if ramdisk {
		if d, err := m.cfg.Drivers.Get(n.Driver); err == nil && d.NoRamdiskBoot != "" {
			return refuse(Invalid, "Cannot %s node %s: it needs the ramdisk, and %s. Nodes of driver %s can be managed, powered and cleaned with out-of-band steps for now.",
				req.Verb, n.Ident(), d.NoRamdiskBoot, n.Driver)
		}
	}
	if row.Check != nil {
		return row.Check(m, n, req)
	}
	return nil
}

func checkInspect(m *Machine, n *Node, _ VerbRequest) *Refusal {
	if err := m.checkInspectInterface(n); err != nil {
		return refuse(Invalid, "%v", err)
	}
	return nil
}

func checkClean(m *Machine, n *Node, req VerbRequest) *Refusal {
	if len(req.CleanSteps) == 0 {
		return refuse(Invalid, "clean_steps is required and must be a non-empty list for target \"clean\" on node %s", n.Ident())
	}
	if err := CheckCleanStepsSchema(req.CleanSteps); err != nil {
		return refuse(Invalid, "%v", err)
	}
	if err := refusedSteps(req.CleanSteps); err != nil {
		return refuse(Invalid, "%v", err)
	}
	if err := m.refusedSteps(n, "clean", req.CleanSteps); err != nil {
		return refuse(Invalid, "%v", err)
	}
	return nil
}

func checkDeploy(m *Machine, n *Node, req VerbRequest) *Refusal {
	if m.fakeDeploy(n) {
		// Ironic's fake deploy validates nothing and writes no image.
		if len(req.DeploySteps) > 0 || len(matchingTemplates(n, req.Templates)) > 0 {
			return refuse(Invalid, "Cannot deploy node %s with deploy steps or deploy templates: its deploy_interface is fake, which runs no step; set deploy_interface to direct (baremetal node set %s --deploy-interface direct)", n.Ident(), n.Ident())
		}
		return nil
	}
	if m.ramdiskDeploy(n) {
		return m.checkRamdiskDeploy(n, req)
	}
	if s, _ := n.InstanceInfo["image_source"].(string); s == "" {
		return refuse(Invalid, "Cannot deploy node %s: instance_info/image_source is missing; set it with node set %s --instance-info image_source=URL", n.Ident(), n.Ident())
	}
	if err := m.deployChecksumError(n); err != nil {
		return refuse(Invalid, "Cannot deploy node %s: %v", n.Ident(), err)
	}
	if err := partitionImageError(n); err != nil {
		return refuse(Invalid, "Cannot deploy node %s: %v", n.Ident(), err)
	}
	if err := m.checkDeploySteps(n, req.DeploySteps); err != nil {
		return refuse(Invalid, "%v", err)
	}
	if err := m.refusedSteps(n, "deploy", req.DeploySteps); err != nil {
		return refuse(Invalid, "%v", err)
	}
	if err := m.checkTemplates(n, req); err != nil {
		return refuse(Invalid, "%v", err)
	}
	return nil
}

// Verb starts an operator verb on n: CheckVerb, then Start. A refusal
// leaves n untouched.
func (m *Machine) Verb(n *Node, req VerbRequest, now time.Time) (Output, *Refusal) {
	if r := m.CheckVerb(n, req); r != nil {
		return Output{}, r
	}
	return m.Start(n, req, now), nil
}

// Start starts a verb that CheckVerb allowed, by its row's Start.
func (m *Machine) Start(n *Node, req VerbRequest, now time.Time) Output {
	out := Output{Changed: true}
	row, ok := VerbInfo(req.Verb)
	if !ok || row.Start == nil {
		// CheckVerb refuses an unknown verb: this is a caller's bug.
		panic(fmt.Sprintf("fsm: Start of verb %q, which CheckVerb refuses", req.Verb))
	}
	row.Start(m, n, req, now, &out)
	return out
}

func startManage(m *Machine, n *Node, req VerbRequest, now time.Time, out *Output) {
	if n.ProvisionState == Enroll {
		m.start(n, req.Verb, Manageable, PhaseVerify, []Action{{Kind: ActOOB, Action: protocol.ActionValidate}}, now, out)
		return
	}
	// A direct move: no operation starts, and last_error stays (as
	// Ironic keeps it when a node leaves clean failed).
	m.fire(n, Manage, "", now, out)
}

func startInspect(m *Machine, n *Node, req VerbRequest, now time.Time, out *Output) {
	t := now
	n.InspectionStartedAt, n.InspectionFinishedAt = &t, nil
	if m.inspectsOOB(n) {
		// The BMC reads the hardware: one out-of-band step at the
		// site, no ramdisk boot, no power action.
		m.start(n, req.Verb, Manageable, PhaseInspect, []Action{oobInspect(n)}, now, out)
		return
	}
	boot := bootRamdisk()
	// The BMC's firmware versions and BIOS settings are read again
	// (Ironic caches them at inspection too); a fast-tracked
	// inspection, which boots nothing, keeps the last reading.
	boot[0].Args[protocol.ArgReadHardware] = true
	plan := append(boot,
		Action{Kind: ActStep, Step: &StepRun{Interface: "deploy", Step: "inspect_hardware", InBand: true, Abortable: true}},
		endRamdisk())
	m.start(n, req.Verb, Manageable, PhaseInspect, plan, now, out)
}

func startDeploy(m *Machine, n *Node, req VerbRequest, now time.Time, out *Output) {
	if req.ConfigDrive != "" {
		n.ConfigDrive = req.ConfigDrive
	}
	plan := append(bootRamdisk(), Action{Kind: ActPlanDeploy, Args: deployPlanArgs(req.DeploySteps,
		templateStepObjects(matchingTemplates(n, req.Templates)))})
	if m.fakeDeploy(n) {
		plan = nil // Ironic's fake deploy: done at once
	}
	if m.ramdiskDeploy(n) {
		plan = bootISOPlan(n)
	}
	m.start(n, req.Verb, Active, PhaseDeploy, plan, now, out)
}

func startRescue(m *Machine, n *Node, req VerbRequest, now time.Time, out *Output) {
	plan := append(bootRamdisk(), Action{Kind: ActStep, Step: &StepRun{Interface: "rescue", Step: "finalize_rescue", InBand: true}})
	m.start(n, req.Verb, Rescue, PhaseRescue, plan, now, out)
	if n.Op != nil {
		n.Op.HashedRescuePassword = req.HashedRescuePassword
	}
}

func startUndeploy(m *Machine, n *Node, req VerbRequest, now time.Time, out *Output) {
	plan := []Action{powerAction(protocol.PowerOff)}
	if m.fakeDeploy(n) {
		plan = nil // Ironic's fake deploy: tear down changes nothing
	}
	if m.ramdiskDeploy(n) {
		plan = ejectISOPlan()
	}
	if len(plan) > 0 && SecureBootRequested(n) {
		// Ironic's clean_up_instance (deconfigure_secure_boot_if_needed):
		// the tear down's power-off turns Secure Boot off after it.
		plan[0].Args[protocol.ArgSecureBoot] = false
	}
	// The operator's virtual media are ejected, as Ironic's
	// clean_up_instance ejects every device.
	plan = append(plan, detachVMedia(n)...)
	m.start(n, req.Verb, retiredTarget(n), PhaseDelete, plan, now, out)
}

func startAbort(m *Machine, n *Node, req VerbRequest, now time.Time, out *Output) {
	if n.ProvisionState == ServiceFailed {
		m.serviceAbort(n, n.BootDevice == protocol.BootPXE, now, out)
		return
	}
	// Abort is allowed from service wait and service hold only, of
	// servicing's states (service failed is above).
	wasService := n.Op != nil && n.Op.Phase.Info().Steps == StepsService
	// A node in service wait has booted (or is booting) its
	// ramdisk; one held in service hold has if an in-band step ran.
	inRamdisk := n.ProvisionState == ServiceWait || n.AgentToken != "" || n.BootNonce != ""
	m.abort(n, now, out)
	if wasService && n.ProvisionState == ServiceFailed {
		// As Ironic's _do_abort: service wait (or hold) fails, then
		// aborts from service failed back to active.
		m.serviceAbort(n, inRamdisk, now, out)
	}
}

// unhold releases a held node (Ironic's unhold, API 1.85): it goes back
// to the WAIT state of its operation, as Ironic's, and the operation goes
// on at once with the step after the hold step (Ironic waits for the
// ramdisk's next heartbeat; here the coordinator knows the plan, and a
// clean or service of out-of-band steps has no ramdisk to wait for).
func (m *Machine) unhold(n *Node, now time.Time, out *Output) {
	held := n.ProvisionState
	m.fire(n, Unhold, "", now, out)
	if n.Op == nil {
		return
	}
	if a := m.current(n); a != nil && a.Kind == ActStep && a.Step.Step == HoldStep {
		n.Op.Index++
	}
	out.History = append(out.History, HistoryEntry{Time: now, Severity: "INFO", EventType: eventType(n.Op),
		Event: fmt.Sprintf("released from %s by unhold", held)})
	n.Deadline = now.Add(m.cfg.WaitTimeout)
	m.advance(n, now, out)
}

// start enters the -ING state of verb and runs the plan as far as it goes.
// A fast-trackable node (fasttrack.go) skips the plan's reboot into the
// ramdisk and uses the one it runs.
func (m *Machine) start(n *Node, verb Event, target State, phase Phase, plan []Action, now time.Time, out *Output) {
	ft, _ := m.FastTrackable(n, now)
	m.begin(n, verb, target, phase, plan, now, out)
	m.fastTrackStart(n, ft, now, out)
	m.advance(n, now, out)
}

// begin enters the -ING state of verb with an operation, running nothing.
func (m *Machine) begin(n *Node, verb Event, target State, phase Phase, plan []Action, now time.Time, out *Output) {
	n.LastError = ""
	n.CleanStep, n.DeployStep, n.ServiceStep = nil, nil, nil
	n.Op = &Operation{Verb: verb, Target: target, Phase: phase, Plan: plan, StartedAt: now}
	n.Reservation = m.cfg.Holder
	m.fire(n, verb, "", now, out)
	n.TargetProvisionState = target
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

func (m *Machine) startManualClean(n *Node, list []map[string]any, now time.Time, out *Output) {
	d, err := m.nodeDriver(n)
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
		plan = append(bootRamdisk(), Action{Kind: ActPlanClean, Args: cleanPlanArgs(list)}, endRamdisk())
	} else {
		plan = actions
	}
	// A bad list fails before any step is current: nothing ran, so no
	// maintenance is set.
	ft, _ := m.FastTrackable(n, now)
	m.begin(n, Clean, Manageable, PhaseClean, nil, now, out)
	n.Op.Manual = true
	if err != nil {
		m.fail(n, now, out, err.Error())
		return
	}
	n.Op.Plan = plan
	m.fastTrackStart(n, ft, now, out)
	m.advance(n, now, out)
}

// startService starts servicing an active node (or re-servicing one in
// service failed). Steps the driver has run out of band through the edge
// agent, with no reboot; an in-band step boots the ramdisk, and the node
// is booted back into its instance after the last step. A bad list fails
// before anything runs, in service failed with a message naming the step
// and the argument at fault.
func (m *Machine) startService(n *Node, list []map[string]any, now time.Time, out *Output) {
	d, err := m.nodeDriver(n)
	var actions []Action
	// From service hold the node may be in its ramdisk (an in-band step
	// ran before the hold): it is used, and the instance booted at the end.
	inRamdisk := n.ProvisionState == ServiceHold && n.AgentToken != ""
	m.begin(n, Service, Active, PhaseService, nil, now, out)
	n.Op.Manual = true
	if err == nil {
		actions, err = m.resolveManual(n, d, list, len(n.CachedCleanSteps) > 0)
	}
	inband := false
	for _, a := range actions {
		inband = inband || a.Step.InBand
	}
	if inband && err == nil && d.NoRamdiskBoot != "" {
		err = fmt.Errorf("Cannot service node %s with in-band steps: %s; only out-of-band steps can run on it for now", n.Ident(), d.NoRamdiskBoot)
	}
	if err != nil {
		m.fail(n, now, out, err.Error())
		return
	}
	n.Op.Plan = actions
	switch {
	case inband && inRamdisk:
		// Service again from service hold: the held ramdisk runs on.
		n.Op.Plan = append([]Action{{Kind: ActAwaitAgent}, {Kind: ActPlanClean, Args: cleanPlanArgs(list)}}, bootInstance()...)
	case inband:
		n.Op.Plan = append(bootRamdisk(), Action{Kind: ActPlanClean, Args: cleanPlanArgs(list)})
		n.Op.Plan = append(n.Op.Plan, bootInstance()...)
	case inRamdisk:
		n.Op.Plan = append(n.Op.Plan, bootInstance()...)
	}
	m.advance(n, now, out)
}

// bootInstance boots a node from its ramdisk back into its instance.
func bootInstance() []Action {
	return []Action{powerAction(protocol.PowerOff), bootDevAction(protocol.BootDisk), powerAction(protocol.PowerOn)}
}

// serviceAbort moves a node from service failed back to active, as
// Ironic's do_node_service_abort: a node left in its ramdisk is booted
// back into its instance (the node stays active and locked meanwhile);
// last_error stays.
func (m *Machine) serviceAbort(n *Node, inRamdisk bool, now time.Time, out *Output) {
	last := n.LastError
	m.fire(n, Abort, "", now, out)
	n.TargetProvisionState = ""
	n.ServiceStep = nil
	out.Changed = true
	if !inRamdisk {
		return
	}
	n.Op = &Operation{Verb: Abort, Target: Active, Phase: PhaseServiceAbort, Plan: bootInstance(), StartedAt: now}
	n.Reservation = m.cfg.Holder
	m.advance(n, now, out)
	n.LastError = last
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
		// The site lets the step finish and starts no other.
		m.stopSitePlan(n, n.Op, protocol.PlanStopAbort, now, out)
		out.History = append(out.History, HistoryEntry{Time: now, Severity: "INFO", EventType: eventType(n.Op),
			Event: fmt.Sprintf("abort requested during step %s, which cannot be aborted; the operation fails when it ends", a.Step.Name())})
		return
	}
	if n.Pending != nil && n.Pending.InBand {
		m.notice(n, protocol.NodeCmdTopic(n.Site, n.UUID), &protocol.Message{Action: protocol.ActionAbort, Token: n.AgentToken,
			Args: protocol.AbortArgs{CommandID: n.Pending.ID}.Args()}, now, out)
	}
	m.failWith(n, now, out, fmt.Sprintf("aborted by request during step %s", a.Step.Name()), Abort)
}

// PowerRequest starts a power change outside any provision operation.
func (m *Machine) PowerRequest(n *Node, target string, now time.Time) (Output, *Refusal) {
	var out Output
	if r := checkIdle(n, "changing power"); r != nil {
		return out, r
	}
	state, ok := powerCommand(target)
	if !ok {
		return out, refuse(Invalid, "Invalid power target %q for node %s; use one of: %s", target, n.Ident(), strings.Join(PowerTargets(), ", "))
	}
	if n.DisablePowerOff && protocol.PowerIsOff(state) {
		return out, PowerOffRefused(n, target)
	}
	n.Op = &Operation{Verb: "power", Phase: PhasePower, Plan: []Action{powerAction(state)}, StartedAt: now}
	n.Reservation = m.cfg.Holder
	n.LastError = ""
	out.Changed = true
	m.advance(n, now, &out)
	return out, nil
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
	// raid is the node's RAID interface (agent: the ramdisk's software
	// RAID; redfish: the BMC's), whose target_raid_config was validated
	// when it was set; no-raid is Ironic's unsupported interface.
	out := map[string]InterfaceCheck{"console": unsupported, "raid": ok, "network": ok}
	if noRAID(n) {
		out["raid"] = unsupported
	}
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
	if n.BootInterface == drivers.BootHTTPS && nodeBootMode(n) == "bios" {
		// Ironic's RedfishHttpsBoot.validate: UEFI HTTP boot is UEFI only.
		boot = fail(fmt.Sprintf("boot_interface redfish-https (UEFI HTTP boot) needs the UEFI boot mode, and node %s asks for bios (capabilities boot_mode:bios); set boot_mode:uefi or use redfish-virtual-media", n.Ident()))
	}
	out["boot"], out["inspect"], out["rescue"] = boot, boot, boot
	if m.inspectsOOB(n) {
		out["inspect"] = ok
	}
	if err := m.checkInspectInterface(n); err != nil {
		out["inspect"] = fail(err.Error())
	}
	out["deploy"] = boot
	if m.ramdiskDeploy(n) {
		// Ironic's RamdiskDeploy.validate: the boot interface boots the
		// ISO (here: the BMC's virtual media) and boot_iso is set.
		if r := m.checkRamdiskDeploy(n, VerbRequest{Verb: Deploy}); r != nil {
			out["deploy"] = fail(r.Msg)
		} else {
			out["deploy"] = ok
		}
	} else if s, _ := n.InstanceInfo["image_source"].(string); s == "" && d.NoRamdiskBoot == "" {
		out["deploy"] = fail(fmt.Sprintf("instance_info image_source of node %s is not set", n.Ident()))
	} else if err := m.deployChecksumError(n); err != nil && d.NoRamdiskBoot == "" {
		out["deploy"] = fail(fmt.Sprintf("node %s: %v", n.Ident(), err))
	}
	out["bios"] = unsupported
	for _, s := range d.CleanSteps {
		if s.Interface == "bios" {
			out["bios"] = ok
		}
	}
	return out
}

// BootISOField is the instance_info field of the ISO a ramdisk deploy
// boots (Ironic's boot_iso); without it, the deploy boots an ISO the
// edge agent builds of instance_info kernel and ramdisk, with the kernel
// parameters of RamdiskParamsField (Ironic's kernel_append_params).
const (
	BootISOField       = "boot_iso"
	RamdiskParamsField = "kernel_append_params"
)

// checkRamdiskDeploy checks a deploy (or rebuild) of a node of the
// ramdisk deploy interface: it boots instance_info boot_iso from the
// BMC's virtual CD, so it needs that URL and a BMC with virtual media,
// and it takes nothing it would not use (an image to write, a config
// drive, deploy steps): each is refused saying why.
func (m *Machine) checkRamdiskDeploy(n *Node, req VerbRequest) *Refusal {
	id := n.Ident()
	if d, err := m.cfg.Drivers.Get(n.Driver); err == nil && !d.InterfacesFor(n.Driver).Has("deploy", drivers.DeployRamdisk) {
		return refuse(Invalid, "Cannot deploy node %s with deploy_interface ramdisk: %s", id, drivers.Refused("deploy", drivers.DeployRamdisk))
	}
	set := func(k string) bool { v, ok := n.InstanceInfo[k]; return ok && v != nil && v != "" }
	httpURL := func(k string) bool {
		v, _ := n.InstanceInfo[k].(string)
		u, err := url.Parse(v)
		return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && len(v) <= protocol.MaxISOURLBytes
	}
	if v, ok := n.InstanceInfo[BootISOField]; ok && v != nil && v != "" {
		if !httpURL(BootISOField) {
			return refuse(Invalid, "Cannot deploy node %s: instance_info/boot_iso must be an http:// or https:// URL of at most %d bytes, which the site's edge agent fetches", id, protocol.MaxISOURLBytes)
		}
		for _, k := range []string{"kernel", "ramdisk", RamdiskParamsField} {
			if set(k) {
				return refuse(Invalid, "Cannot deploy node %s: instance_info/%s is set beside instance_info/boot_iso; the ramdisk deploy interface boots either boot_iso or an ISO built of kernel and ramdisk, not both: remove one", id, k)
			}
		}
	} else {
		if !set("kernel") || !set("ramdisk") {
			return refuse(Invalid, "Cannot deploy node %s: the ramdisk deploy interface boots instance_info/boot_iso, or an ISO the site's edge agent builds of instance_info/kernel and instance_info/ramdisk; set boot_iso (baremetal node set %s --instance-info boot_iso=URL), or both kernel and ramdisk", id, id)
		}
		for _, k := range []string{"kernel", "ramdisk"} {
			if !httpURL(k) {
				return refuse(Invalid, "Cannot deploy node %s: instance_info/%s must be an http:// or https:// URL of at most %d bytes, which the site's edge agent fetches", id, k, protocol.MaxISOURLBytes)
			}
		}
		if v, ok := n.InstanceInfo[RamdiskParamsField]; ok && v != nil {
			p, isString := v.(string)
			if !isString {
				return refuse(Invalid, "Cannot deploy node %s: instance_info/%s must be a string of kernel parameters", id, RamdiskParamsField)
			}
			if err := protocol.CheckKernelParams(p); err != nil {
				return refuse(Invalid, "Cannot deploy node %s: instance_info/%s: %v", id, RamdiskParamsField, err)
			}
		}
	}
	if set("image_source") {
		return refuse(Invalid, "Cannot deploy node %s: instance_info/image_source is set, but the ramdisk deploy interface boots an ISO and writes no image; remove image_source, or set deploy_interface direct to write an image", id)
	}
	if req.ConfigDrive != "" {
		return refuse(Invalid, "Cannot deploy node %s with a config drive: its deploy_interface is ramdisk, whose live ISO gets none (the BMC's virtual CD holds the ISO); deploy without configdrive", id)
	}
	if len(req.DeploySteps) > 0 || len(matchingTemplates(n, req.Templates)) > 0 {
		return refuse(Invalid, "Cannot deploy node %s with deploy steps or deploy templates: its deploy_interface is ramdisk, which runs only its own deploy (boot instance_info/boot_iso); set deploy_interface direct to run steps", id)
	}
	return nil
}

// partitionImageError refuses a partition image (Ironic's instance_info
// image_type partition, or kernel and ramdisk given, which Ironic reads
// as a partition image): the ramdisk writes whole-disk images only, and
// a partition image written as one would end active and not boot.
func partitionImageError(n *Node) error {
	t, _ := n.InstanceInfo["image_type"].(string)
	switch {
	case t != "" && t != "whole-disk":
		return fmt.Errorf("instance_info/image_type %q is not supported: the ramdisk writes whole-disk images only (no partition image with its own kernel and ramdisk is built); deploy a whole-disk image and set image_type whole-disk or remove it", t)
	case n.InstanceInfo["kernel"] != nil || n.InstanceInfo["ramdisk"] != nil:
		return fmt.Errorf("instance_info/kernel and instance_info/ramdisk make a partition image (Ironic's rule), which is not supported: the ramdisk writes whole-disk images only; remove kernel and ramdisk and deploy a whole-disk image")
	}
	return nil
}

// deployChecksumError says why the ramdisk would refuse the image checksum
// in the node's instance_info, so that such a deploy is refused before a
// boot and an image download instead of failing after them: a checksum
// that does not parse, md5 or sha1 unless the operator allows them
// (AllowMD5Checksum, as Ironic's [agent]allow_md5_checksum), or a digest
// the ramdisk does not verify. No checksum, or the URL of a checksum
// file, is left to the ramdisk.
func (m *Machine) deployChecksumError(n *Node) error {
	str := func(k string) string { s, _ := n.InstanceInfo[k].(string); return s }
	c, err := imagechecksum.Parse(str("image_checksum"), str("image_os_hash_algo"), str("image_os_hash_value"))
	if errors.Is(err, imagechecksum.ErrNoChecksum) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("its image checksum is not valid: %v", err)
	}
	switch {
	case c.IsURL() || c.Algo == imagechecksum.SHA256 || c.Algo == imagechecksum.SHA384 || c.Algo == imagechecksum.SHA512:
		return nil
	case imagechecksum.Legacy(c.Algo) && m.cfg.AllowMD5Checksum:
		return nil
	case imagechecksum.Legacy(c.Algo):
		return fmt.Errorf("its image checksum is %s, which this coordinator does not allow (the operator allows md5 and sha1 with serve --allow-md5-checksum, Ironic's [agent]allow_md5_checksum); set instance_info image_checksum to the image's sha256:HEX or sha512:HEX (or image_os_hash_algo and image_os_hash_value)", c.Algo)
	}
	return fmt.Errorf("its image checksum is %s, which the ramdisk does not verify; set instance_info image_checksum to the image's sha256:HEX or sha512:HEX (or image_os_hash_algo and image_os_hash_value)", c.Algo)
}
