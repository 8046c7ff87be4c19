package fsm

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/bmedge/bmedge/protocol"
)

// This file holds fast track (Ironic's [deploy]fast_track): a node whose
// ramdisk is up and heartbeating after inspection or cleaning keeps it,
// powered on, and its next operation uses it without a power cycle. The
// running boot keeps its agent token and its MQTT credential; a boot the
// coordinator starts still mints new ones.

// DefaultFastTrackTimeout is Ironic's [deploy]fast_track_timeout default:
// how long a heartbeat counts as a sign of a running ramdisk, and here
// also how long a kept ramdisk waits for the next operation before the
// node is powered off.
const DefaultFastTrackTimeout = 300 * time.Second

// DriverInfoFastTrack is the driver_info key that turns fast track on or
// off for one node (Ironic's driver_info/fast_track), over the
// coordinator's --fast-track.
const DriverInfoFastTrack = "fast_track"

// FastTrackEnabled tells whether fast track is on for n: its
// driver_info/fast_track when set (a boolean, or a string Ironic's
// strict bool_from_string takes), else the coordinator's FastTrack.
func (m *Machine) FastTrackEnabled(n *Node) (bool, error) {
	v, ok := n.DriverInfo[DriverInfoFastTrack]
	if !ok || v == nil {
		return m.cfg.FastTrack, nil
	}
	switch x := v.(type) {
	case bool:
		return x, nil
	case string:
		switch strings.ToLower(strings.TrimSpace(x)) {
		case "1", "t", "true", "on", "y", "yes":
			return true, nil
		case "0", "f", "false", "off", "n", "no":
			return false, nil
		}
	}
	return false, fmt.Errorf("Invalid value of driver_info/fast_track of node %s: %s; set it to true or false, or remove it to follow the coordinator's --fast-track",
		n.Ident(), strconv.Quote(fmt.Sprint(v)))
}

// fastTrackOn is FastTrackEnabled, with an invalid value taken as off
// (CheckVerb refuses the verbs that would use it).
func (m *Machine) fastTrackOn(n *Node) bool {
	on, err := m.FastTrackEnabled(n)
	return on && err == nil
}

// ramdiskAlive tells whether n has a ramdisk boot the coordinator knows,
// powered on, that heartbeated within the fast track timeout (Ironic's
// agent_is_alive).
func (m *Machine) ramdiskAlive(n *Node, now time.Time) bool {
	return n.AgentToken != "" && n.BootNonce != "" && n.PowerState == protocol.PowerOn &&
		!n.LastHeartbeat.IsZero() && !now.Before(n.LastHeartbeat) && now.Sub(n.LastHeartbeat) <= m.cfg.FastTrackTimeout
}

// FastTrackable tells whether an operation that n starts now may use the
// ramdisk it runs instead of rebooting into a new one (Ironic's
// is_fast_track): fast track is on for n, n rests with no last_error and
// outside maintenance, in the window its last operation left it
// (fast_track_timeout from its end), and its ramdisk is alive. why says
// which condition fails, for the node's history.
func (m *Machine) FastTrackable(n *Node, now time.Time) (ok bool, why string) {
	switch {
	case !m.fastTrackOn(n):
		return false, "fast track is off"
	case n.Op != nil || n.Locked():
		return false, "the node is busy"
	case n.FastTrackUntil.IsZero():
		return false, "no ramdisk was kept running after the last operation"
	case n.Maintenance:
		return false, "the node is in maintenance"
	case n.LastError != "":
		return false, "the node has a last_error"
	case now.After(n.FastTrackUntil):
		return false, fmt.Sprintf("its fast track window ended at %s", n.FastTrackUntil.UTC().Format(time.RFC3339))
	case !m.ramdiskAlive(n, now):
		return false, fmt.Sprintf("its ramdisk has not heartbeated within the fast track timeout (%s)", m.cfg.FastTrackTimeout)
	}
	return true, ""
}

// fastTrackStart drops the reboot into the ramdisk from the plan of an
// operation starting now on a fast-trackable node (ft, decided before the
// verb moved the node): the plan's ActAwaitAgent then finds the running
// boot's token and goes on. The kept ramdisk now belongs to the
// operation.
func (m *Machine) fastTrackStart(n *Node, ft bool, now time.Time, out *Output) {
	if !ft || n.Op == nil || len(n.Op.Plan) < 2 || !isRamdiskReboot(n.Op.Plan[0]) || n.Op.Plan[1].Kind != ActAwaitAgent {
		return
	}
	n.Op.Plan = n.Op.Plan[1:]
	n.FastTrackUntil = time.Time{}
	out.History = append(out.History, HistoryEntry{Time: now, Severity: "INFO", EventType: eventType(n.Op),
		Event: fmt.Sprintf("fast track: the running ramdisk (boot %s, last heartbeat %s ago) is used without a reboot", n.BootID, now.Sub(n.LastHeartbeat).Round(time.Second))})
}

// isRamdiskReboot tells whether a is bootRamdisk's reboot into the ramdisk.
func isRamdiskReboot(a Action) bool {
	if a.Kind != ActOOB || a.Action != protocol.ActionPower {
		return false
	}
	p := protocol.PowerArgsOf(a.Args)
	return p.State == protocol.PowerReboot && p.BootDevice == protocol.BootPXE
}

// endRamdisk is the power-off that ends an inspection's or a cleaning's
// ramdisk boot; fast track skips it (keepRamdisk).
func endRamdisk() Action {
	a := powerAction(protocol.PowerOff)
	a.EndsRamdisk = true
	return a
}

// keepRamdisk tells whether the operation's closing power-off may be
// skipped to keep the ramdisk for the next operation: fast track is on,
// the node is outside maintenance and its ramdisk is alive.
func (m *Machine) keepRamdisk(n *Node, now time.Time) bool {
	return m.fastTrackOn(n) && !n.Maintenance && n.Op != nil && n.Op.Phase.Info().FastTrack &&
		m.ramdiskAlive(n, now)
}

// fastTrackExpire powers off a resting node whose kept ramdisk waited
// fast_track_timeout for an operation in vain. A node in maintenance, or
// whose site is offline, waits (the power-off follows when that ends).
func (m *Machine) fastTrackExpire(n *Node, now time.Time, siteOnline bool) Output {
	var out Output
	if n.FastTrackUntil.IsZero() || !now.After(n.FastTrackUntil) || !siteOnline || n.Maintenance || n.Locked() {
		return out
	}
	n.FastTrackUntil = time.Time{}
	n.UpdatedAt = now
	out.Changed = true
	what := "powering the node off"
	if n.DisablePowerOff {
		what = "booting the node from its disk (disable_power_off: a reboot, no power-off)"
	}
	out.History = append(out.History, HistoryEntry{Time: now, Severity: "INFO", EventType: "power",
		Event: fmt.Sprintf("fast track: no operation came within the fast track timeout (%s); %s, which ends its ramdisk boot", m.cfg.FastTrackTimeout, what)})
	n.Op = &Operation{Verb: "power", Phase: PhasePower, Plan: []Action{endRamdisk()}, StartedAt: now}
	n.Reservation = m.cfg.Holder
	m.advance(n, now, &out)
	return out
}
