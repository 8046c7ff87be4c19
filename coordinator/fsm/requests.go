package fsm

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/protocol"
)

// This file holds the checks of operator requests that Ironic makes at
// its API, before anything starts: the shape of clean_steps and
// deploy_steps, node updates, deletes, power and boot device requests.

// CheckCleanStepsSchema checks a manual clean list the way Ironic's API
// schema does (every entry an object with interface and step, args an
// object, nothing else), so that a malformed list is a 400 and never
// starts a cleaning. Whether the steps exist and their arguments are
// right is checked when the cleaning starts: such a list ends in clean
// failed, as in Ironic.
func CheckCleanStepsSchema(list []map[string]any) error {
	for i, raw := range list {
		if err := checkStepShape(raw, i, false); err != nil {
			return fmt.Errorf("Invalid clean_steps: %v", err)
		}
	}
	return nil
}

// checkStepShape checks one user step: interface (one of the step
// interfaces), step (a non-empty string), args (an object) and, for
// deploy steps, priority (an integer >= 0, or a string of digits); deploy
// steps need all four, clean steps interface and step.
func checkStepShape(raw map[string]any, i int, deploy bool) error {
	at := fmt.Sprintf("step %d", i+1)
	if raw == nil {
		return fmt.Errorf("%s is not an object like {\"interface\": \"deploy\", \"step\": \"erase_devices\", \"args\": {}}", at)
	}
	allowed := []string{"interface", "step", "args"}
	required := []string{"interface", "step"}
	if deploy {
		allowed = append(allowed, "priority")
		required = append(required, "args", "priority")
	}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !slices.Contains(allowed, k) {
			return fmt.Errorf("additional properties are not allowed ('%s' was unexpected) in %s; a step has only %s", k, at, strings.Join(allowed, ", "))
		}
	}
	for _, k := range required {
		if _, ok := raw[k]; !ok {
			return fmt.Errorf("'%s' is a required property of %s", k, at)
		}
	}
	if iface, ok := raw["interface"].(string); !ok || drivers.InterfaceRank(iface) < 0 {
		return fmt.Errorf("%s: interface %v is not one of %s", at, quoteJSON(raw["interface"]), strings.Join(drivers.Interfaces(), ", "))
	}
	if name, ok := raw["step"].(string); !ok || name == "" {
		return fmt.Errorf("%s: step %v must be a non-empty string", at, quoteJSON(raw["step"]))
	}
	if v, ok := raw["args"]; ok {
		if _, obj := v.(map[string]any); !obj {
			return fmt.Errorf("%s: args %v is not an object of name: value", at, quoteJSON(v))
		}
	}
	if deploy {
		if _, ok := stepPriority(raw["priority"]); !ok {
			return fmt.Errorf("%s: priority %v must be an integer >= 0", at, quoteJSON(raw["priority"]))
		}
	}
	return nil
}

func quoteJSON(v any) string {
	if s, ok := v.(string); ok {
		return strconv.Quote(s)
	}
	if v == nil {
		return "null"
	}
	return fmt.Sprint(v)
}

// stepPriority reads a user step's priority: a JSON integer >= 0 or a
// string of digits, as Ironic's schema takes it.
func stepPriority(v any) (int, bool) {
	switch x := v.(type) {
	case string:
		if x == "" || strings.Trim(x, "0123456789") != "" {
			return 0, false
		}
		p, err := strconv.Atoi(x)
		return p, err == nil
	default:
		p, ok := toInt(v)
		return p, ok && p >= 0
	}
}

// CoreDeployStep is the step that writes the image: the deploy itself,
// which user deploy_steps can neither re-prioritise nor disable.
const CoreDeployStep = "deploy.write_image"

// knownDeploySteps are the deploy steps the node can run: its driver's
// and its ramdisk's (as cached at its last boot, or the standard
// ramdisk's when it never booted one).
func (m *Machine) knownDeploySteps(n *Node) ([]drivers.Step, error) {
	d, err := m.nodeDriver(n)
	if err != nil {
		return nil, err
	}
	inband := n.CachedDeploySteps
	if len(inband) == 0 {
		inband = drivers.InbandDeploySteps()
	}
	return append(append([]drivers.Step{}, d.DeploySteps...), standardPriorities(raidInband(n, inband), drivers.InbandDeploySteps())...), nil
}

// checkDeploySteps checks user deploy_steps as Ironic does before a
// deploy starts: the schema, then each step the node knows (unknown ones
// are skipped when the deploy runs, as Ironic skips them): no unexpected
// argument, every required one when the step is enabled, and the core
// step left alone.
func (m *Machine) checkDeploySteps(n *Node, list []map[string]any) error {
	for i, raw := range list {
		if err := checkStepShape(raw, i, true); err != nil {
			return fmt.Errorf("Invalid deploy_steps: %v", err)
		}
	}
	if len(list) == 0 {
		return nil
	}
	known, err := m.knownDeploySteps(n)
	if err != nil {
		return err
	}
	for _, raw := range list {
		iface, _ := raw["interface"].(string)
		name, _ := raw["step"].(string)
		prio, _ := stepPriority(raw["priority"])
		args, _ := raw["args"].(map[string]any)
		if name == HoldStep {
			if err := checkHoldArgs(raw["args"], "deploy step "+iface+"."+name); err != nil {
				return err
			}
			continue
		}
		decl, ok := drivers.Find(known, iface, name)
		if !ok {
			continue
		}
		if decl.Name() == CoreDeployStep {
			return fmt.Errorf("deploy step %s (priority %d) of node %s is the core deploy step: it writes the image, and can be neither re-prioritised nor disabled by user deploy steps (leave it out of deploy_steps)",
				CoreDeployStep, prio, n.Ident())
		}
		var unexpected, missing []string
		for a := range args {
			if _, ok := decl.ArgsInfo[a]; !ok {
				unexpected = append(unexpected, a)
			}
		}
		if prio > 0 {
			for a, info := range decl.ArgsInfo {
				if _, ok := args[a]; info.Required && !ok {
					missing = append(missing, fmt.Sprintf("%s (%s)", a, info.Description))
				}
			}
		}
		sort.Strings(unexpected)
		sort.Strings(missing)
		if len(unexpected) > 0 {
			return fmt.Errorf("deploy step %s of node %s has these unexpected arguments: %s", decl.Name(), n.Ident(), strings.Join(unexpected, ", "))
		}
		if len(missing) > 0 {
			return fmt.Errorf("deploy step %s of node %s is missing these required arguments: %s", decl.Name(), n.Ident(), strings.Join(missing, ", "))
		}
	}
	return nil
}

// CheckUpdate says whether a node may change from old to updated by a
// PATCH, as Ironic's API and conductor decide: nothing while a state
// transition is in progress (409), retired not in available (409),
// retired_reason only on a retired node (400). It may clear
// updated.RetiredReason (unretiring a node drops its reason).
func CheckUpdate(old, updated *Node) *Refusal {
	if !UpdateAllowed(old.ProvisionState) {
		return refuse(Conflict, "Node %s can not be updated while a state transition is in progress.", old.Ident())
	}
	if updated.Retired != old.Retired || updated.RetiredUnset != old.RetiredUnset {
		switch {
		case !updated.Retired:
			updated.RetiredReason = ""
		case old.ProvisionState == Available:
			return refuse(Conflict, "Node %s can not have 'retired' set in provision state 'available', the current state is '%s'; move it to manageable first ('node manage %s')",
				old.Ident(), old.ProvisionState, old.Ident())
		}
	}
	if updated.RetiredReason != old.RetiredReason && updated.RetiredReason != "" && !updated.Retired {
		return refuse(Invalid, "The retired_reason field can only be set when retired is True")
	}
	return nil
}

// CheckDelete says whether a node may be deleted: not while the
// coordinator works on it (409, locked), and outside maintenance only in
// enroll, manageable or available (409), as Ironic.
func CheckDelete(n *Node) *Refusal {
	if n.Locked() {
		return refuse(Conflict, "Node %s is locked by host %s, please retry after the current operation is completed.", n.Ident(), n.Reservation)
	}
	if !n.Maintenance && !DeleteAllowed(n.ProvisionState) {
		var valid []string
		for _, s := range AllStates() {
			if DeleteAllowed(s) {
				valid = append(valid, string(s))
			}
		}
		return refuse(Conflict, "Can not delete node \"%s\" while it is in provision state \"%s\". Valid provision states to perform deletion are: \"%s\", or set the node into maintenance mode",
			n.Ident(), n.ProvisionState, strings.Join(valid, "\", \""))
	}
	return nil
}

// Power targets of PUT /v1/nodes/{node}/states/power, as Ironic names
// them; "rebooted" is this system's older name of "rebooting".
const (
	PowerTargetReboot      = "rebooting"
	PowerTargetSoftOff     = "soft power off"
	PowerTargetSoftReboot  = "soft rebooting"
	powerTargetRebootAlias = "rebooted"
)

// PowerTargets lists the power targets the API takes.
func PowerTargets() []string {
	return []string{protocol.PowerOn, protocol.PowerOff, PowerTargetReboot, PowerTargetSoftOff, PowerTargetSoftReboot}
}

// powerCommand maps an API power target to the BMC command's state. The
// soft targets ask the operating system first (the ipmi and redfish
// drivers; the simulated and qemu-dev ones switch off at once).
func powerCommand(target string) (string, bool) {
	switch target {
	case protocol.PowerOn, protocol.PowerOff:
		return target, true
	case PowerTargetReboot, powerTargetRebootAlias:
		return protocol.PowerReboot, true
	case PowerTargetSoftReboot:
		return protocol.PowerSoftReboot, true
	case PowerTargetSoftOff:
		return protocol.PowerSoftOff, true
	}
	return "", false
}

// BootDevices are the boot devices the edge agent's drivers set.
func BootDevices() []string { return []string{protocol.BootPXE, protocol.BootDisk} }

// checkIdle refuses an out-of-band request (power, boot device) on a
// node that the coordinator works on, or that waits in an operation.
func checkIdle(n *Node, what string) *Refusal {
	if n.Locked() {
		return refuse(Conflict, "Node %s is locked by host %s, please retry after the current operation is completed.", n.Ident(), n.Reservation)
	}
	if n.Op != nil {
		return refuse(Conflict, "Node %s is in state %q with an operation in progress; abort it or wait before %s", n.Ident(), n.ProvisionState, what)
	}
	return nil
}

// BootDeviceRequest sets the node's boot device outside any provision
// operation (PUT /v1/nodes/{node}/management/boot_device), through the
// edge agent like a power change. The device is recorded on the node
// when the BMC has set it.
func (m *Machine) BootDeviceRequest(n *Node, device string, now time.Time) (Output, *Refusal) {
	var out Output
	if r := checkIdle(n, "setting the boot device"); r != nil {
		return out, r
	}
	if !slices.Contains(BootDevices(), device) {
		return out, refuse(Invalid, "Invalid boot device %q for node %s; the supported boot devices are: %s", device, n.Ident(), strings.Join(BootDevices(), ", "))
	}
	n.Op = &Operation{Verb: "boot_device", Phase: PhaseBootDevice, Plan: []Action{bootDevAction(device)}, StartedAt: now}
	n.Reservation = m.cfg.Holder
	n.LastError = ""
	out.Changed = true
	m.advance(n, now, &out)
	return out, nil
}
