package fsm

import (
	"fmt"
	"time"

	"github.com/bmedge/bmedge/protocol"
)

// FaultPowerFailure is the fault of a node that power-state sync put into
// maintenance because its BMC could not be read (Ironic's "power failure").
// Only maintenance with this fault is ever cleared by power-state sync.
const FaultPowerFailure = "power failure"

// PowerFailureLimit is how many failed readings in a row put a node into
// maintenance (Ironic's power_state_sync_max_retries is 3 as well).
const PowerFailureLimit = 3

// PowerReport applies an edge agent's power-state sync report (kind
// "power"): the BMC's reading msg.PowerState, or msg.Error when it could
// not be read. As Ironic's power sync does:
//   - a node under an operation is left alone: its commands own its power
//     state, and a reading may have crossed one of them;
//   - a node in enroll is skipped: its BMC credentials are not verified;
//   - a failed reading counts; PowerFailureLimit in a row put the node into
//     maintenance with fault FaultPowerFailure, which the next good
//     reading clears (an operator's maintenance is never cleared);
//   - a resting node whose BMC differs from the recorded power_state is
//     powered back to it (ForcePowerStateDuringSync), through the same
//     "power" operation as the API's power verb, so the command is resent
//     until its result comes and the node is locked meanwhile; in
//     maintenance, or without force, the reading is recorded instead.
func (m *Machine) PowerReport(n *Node, msg *protocol.Message, now time.Time) Output {
	var out Output
	if !msg.Sent.After(n.PowerReadAt) {
		// A resend of a report already applied, or one overtaken by a
		// newer reading: applying it would count a failure twice or
		// force an old state.
		return out
	}
	if n.ProvisionState == Enroll || n.Op != nil || n.Locked() {
		return out
	}
	n.PowerReadAt = msg.Sent
	out.Changed = true
	if msg.Error != "" {
		n.PowerFailures++
		if n.PowerFailures == PowerFailureLimit && !n.Maintenance {
			reason := fmt.Sprintf("power state of node %s could not be read %d times in a row: %s; check the BMC's address, credentials and network, then unset maintenance (a good reading unsets it by itself)",
				n.Ident(), n.PowerFailures, msg.Error)
			n.Maintenance, n.MaintenanceReason, n.Fault = true, reason, FaultPowerFailure
			n.UpdatedAt = now
			out.History = append(out.History, HistoryEntry{Time: now, Severity: "ERROR", EventType: "maintenance", Event: "maintenance set: " + reason})
		}
		return out
	}
	state := msg.PowerState
	n.PowerFailures = 0
	if n.Maintenance && n.Fault == FaultPowerFailure {
		n.Maintenance, n.MaintenanceReason, n.Fault = false, "", ""
		n.UpdatedAt = now
		out.History = append(out.History, HistoryEntry{Time: now, Severity: "INFO", EventType: "maintenance",
			Event: fmt.Sprintf("maintenance unset: the BMC answers again (%s)", state)})
	}
	if state == n.PowerState {
		return out
	}
	recorded := n.PowerState
	n.UpdatedAt = now
	if !n.FastTrackUntil.IsZero() && protocol.PowerIsOff(state) {
		// The node that kept its ramdisk for fast track was powered off
		// behind the coordinator's back: its boot is over, and nothing
		// powers it back on into a ramdisk no operation waits for.
		n.PowerState = state
		if n.BootNonce != "" {
			m.endBoot(n, now, &out)
		}
		withdrawToken(n)
		out.History = append(out.History, HistoryEntry{Time: now, Severity: "WARNING", EventType: "power",
			Event: fmt.Sprintf("power state changed behind the coordinator's back: BMC reports %s while the node kept its ramdisk for fast track; recording %s, the ramdisk boot is over", state, state)})
		return out
	}
	if recorded == "" {
		n.PowerState = state
		out.History = append(out.History, HistoryEntry{Time: now, Severity: "INFO", EventType: "power",
			Event: fmt.Sprintf("power state read from the BMC: %s", state)})
		return out
	}
	if n.Maintenance || !m.cfg.ForcePowerStateDuringSync || n.DisablePowerOff {
		n.PowerState = state
		why := "force_power_state_during_sync is off"
		switch {
		case n.Maintenance:
			why = "the node is in maintenance"
		case n.DisablePowerOff:
			why = "the node has disable_power_off"
		}
		out.History = append(out.History, HistoryEntry{Time: now, Severity: "WARNING", EventType: "power",
			Event: fmt.Sprintf("power state changed behind the coordinator's back: BMC reports %s, recorded %s; recording %s (%s)", state, recorded, state, why)})
		return out
	}
	out.History = append(out.History, HistoryEntry{Time: now, Severity: "WARNING", EventType: "power",
		Event: fmt.Sprintf("power state changed behind the coordinator's back: BMC reports %s, recorded %s; forcing %s", state, recorded, recorded)})
	n.Op = &Operation{Verb: "power", Phase: PhasePower, Plan: []Action{powerAction(recorded)}, StartedAt: now}
	n.Reservation = m.cfg.Holder
	m.advance(n, now, &out)
	return out
}
