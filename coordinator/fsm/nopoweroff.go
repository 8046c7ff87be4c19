package fsm

import (
	"maps"
	"time"

	"github.com/bmedge/bmedge/protocol"
)

// This file holds disable_power_off (Ironic's API 1.95): a node that must
// never be powered off by the conductor. Its operations keep their plans;
// each power-off of a plan is rewritten, when its turn comes, into what
// Ironic does instead:
//   - a power-off followed (after boot device changes only) by a power-on
//     is dropped and the power-on becomes a reboot (Ironic's
//     power_off_and_on: the ramdisk deploy's boot of its ISO, unrescue,
//     the boot back into the instance after servicing);
//   - the power-off that ends a ramdisk boot (after inspection and
//     cleaning, and when a kept ramdisk's fast track window ends) becomes
//     the boot device disk and a reboot (Ironic's clean_up_ramdisk, then
//     a reboot): the ramdisk's boot media are gone and the node boots
//     its disk;
//   - any other power-off (undeploy's) becomes a reboot after the boot
//     device changes that follow it (Ironic's tear_down skips the power
//     off and clean_up reboots).
// The deploy steps tear_down_agent and boot_instance are told through
// their args (protocol.ArgDisablePowerOff: stepArgs' FromPowerPolicy); an
// operator's power off or soft power off is refused with Ironic's words
// (PowerRequest), and power-state sync never forces the power (Ironic's
// sync skips such nodes).

// PowerOffRefused is Ironic's PowerStateFailure for a power off of a node
// with disable_power_off (a 409), with what to do.
func PowerOffRefused(n *Node, target string) *Refusal {
	return refuse(Conflict, "Failed to set node power state to %s. Node %s has disable_power_off set: it is never powered off; reboot it instead (target \"rebooting\"), or set disable_power_off to false first", target, n.Ident())
}

// isPowerOff tells whether a is a power action that ends with the node off.
func isPowerOff(a Action) bool {
	return a.Kind == ActOOB && a.Action == protocol.ActionPower && protocol.PowerIsOff(protocol.PowerArgsOf(a.Args).State)
}

// isPowerBoot tells whether a is a power action that ends with the node on.
func isPowerBoot(a Action) bool {
	return a.Kind == ActOOB && a.Action == protocol.ActionPower && protocol.PowerArgsOf(a.Args).Boots()
}

// withReboot is power action a as a reboot, its other arguments kept.
func withReboot(a Action) Action {
	p := protocol.PowerArgsOf(a.Args)
	p.State = protocol.PowerReboot
	args := maps.Clone(a.Args)
	maps.Copy(args, p.Args())
	a.Args = args
	a.EndsRamdisk = false
	return a
}

// withoutPowerOff rewrites plan from its action i, a power-off, as the
// rules above say: the plan a node with disable_power_off runs instead.
func withoutPowerOff(plan []Action, i int) []Action {
	off := plan[i]
	j := i + 1
	for j < len(plan) && plan[j].Kind == ActOOB && (plan[j].Action == protocol.ActionBootDev || plan[j].Action == protocol.ActionVMedia) {
		j++
	}
	out := append([]Action{}, plan[:i]...)
	switch {
	case j < len(plan) && isPowerBoot(plan[j]):
		// power_off_and_on: one reboot at the end.
		out = append(out, plan[i+1:j]...)
		out = append(out, withReboot(plan[j]))
		return append(out, plan[j+1:]...)
	case off.EndsRamdisk:
		out = append(out, bootDevAction(protocol.BootDisk), withReboot(off))
		return append(out, plan[i+1:]...)
	default:
		out = append(out, plan[i+1:j]...)
		out = append(out, withReboot(off))
		return append(out, plan[j:]...)
	}
}

// avoidPowerOff rewrites the node's plan at its current action when that
// is a power-off and the node has disable_power_off; it tells whether it
// did (the plan's current action is another one now).
func (m *Machine) avoidPowerOff(n *Node, now time.Time, out *Output) bool {
	if !n.DisablePowerOff || n.Op == nil || n.Op.Index >= len(n.Op.Plan) || !isPowerOff(n.Op.Plan[n.Op.Index]) {
		return false
	}
	n.Op.Plan = withoutPowerOff(n.Op.Plan, n.Op.Index)
	out.History = append(out.History, HistoryEntry{Time: now, Severity: "INFO", EventType: eventType(n.Op),
		Event: "rebooting the node instead of powering it off: disable_power_off is set"})
	return true
}
