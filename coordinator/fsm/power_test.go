package fsm

import (
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/protocol"
)

// TestPowerReport: the rules of power-state sync, one report (or a run of
// reports) at a time against a node prepared by each case.
func TestPowerReport(t *testing.T) {
	t0 := time.Unix(5000, 0)
	on, off := protocol.PowerOn, protocol.PowerOff
	read := func(state string) *protocol.Message {
		return &protocol.Message{Kind: protocol.KindPower, PowerState: state}
	}
	fail := func(e string) *protocol.Message { return &protocol.Message{Kind: protocol.KindPower, Error: e} }
	resting := func() *Node {
		return &Node{UUID: "u1", Name: "n1", Driver: "fake", Site: "s1", ProvisionState: Manageable, PowerState: off}
	}
	busy := func() *Node {
		n := resting()
		n.ProvisionState = Cleaning
		n.Op = &Operation{Verb: Clean, Phase: "clean", Plan: []Action{powerAction(off)}}
		n.Reservation = "coordinator"
		return n
	}
	cases := []struct {
		name    string
		noForce bool
		node    func() *Node
		reports []*protocol.Message
		// want
		power       string // recorded power_state after
		forced      string // state of the power command sent, "" for none
		maintenance bool
		fault       string
		failures    int
		history     string // a substring of the last history line, "" for no history at all
		unchanged   bool   // the last report changes nothing to store
	}{
		{name: "no change, no output", node: resting, reports: []*protocol.Message{read(off)}, power: off},
		{name: "forced back", node: resting, reports: []*protocol.Message{read(on)}, power: off, forced: off,
			history: "power state changed behind the coordinator's back: BMC reports power on, recorded power off; forcing power off"},
		{name: "forced back on", node: func() *Node { n := resting(); n.ProvisionState, n.PowerState = Active, on; return n },
			reports: []*protocol.Message{read(off)}, power: on, forced: on, history: "forcing power on"},
		{name: "recorded without force", noForce: true, node: resting, reports: []*protocol.Message{read(on)}, power: on,
			history: "BMC reports power on, recorded power off; recording power on"},
		{name: "first reading recorded, not forced", node: func() *Node { n := resting(); n.PowerState = ""; return n },
			reports: []*protocol.Message{read(on)}, power: on, history: "power state read from the BMC: power on"},
		{name: "not forced under an operation", node: busy, reports: []*protocol.Message{read(on)}, power: off, unchanged: true},
		{name: "failures not counted under an operation", node: busy, reports: []*protocol.Message{fail("timeout"), fail("timeout"), fail("timeout")},
			power: off, unchanged: true},
		{name: "enroll is skipped", node: func() *Node { n := resting(); n.ProvisionState = Enroll; return n },
			reports: []*protocol.Message{read(on)}, power: off, unchanged: true},
		{name: "not forced in maintenance: recorded", node: func() *Node {
			n := resting()
			n.Maintenance, n.MaintenanceReason = true, "disk swap"
			return n
		}, reports: []*protocol.Message{read(on)}, power: on, maintenance: true, history: "recording power on (the node is in maintenance)"},
		{name: "two failures: counted, no maintenance", node: resting, reports: []*protocol.Message{fail("timeout"), fail("timeout")},
			power: off, failures: 2},
		{name: "three failures: maintenance", node: resting, reports: []*protocol.Message{fail("timeout"), fail("timeout"), fail("no answer from 10.0.0.9")},
			power: off, failures: 3, maintenance: true, fault: FaultPowerFailure, history: "could not be read 3 times in a row: no answer from 10.0.0.9"},
		{name: "a good reading between failures resets the count", node: resting,
			reports: []*protocol.Message{fail("timeout"), fail("timeout"), read(off), fail("timeout"), fail("timeout")}, power: off, failures: 2},
		{name: "good reading clears its own maintenance", node: resting,
			reports: []*protocol.Message{fail("timeout"), fail("timeout"), fail("timeout"), read(off)}, power: off,
			history: "maintenance unset: the BMC answers again (power off)"},
		{name: "good reading after failures forces a changed state", node: resting,
			reports: []*protocol.Message{fail("timeout"), fail("timeout"), fail("timeout"), read(on)}, power: off, forced: off,
			history: "forcing power off"},
		{name: "operator's maintenance is never cleared", node: func() *Node {
			n := resting()
			n.Maintenance, n.MaintenanceReason = true, "disk swap"
			return n
		}, reports: []*protocol.Message{fail("timeout"), fail("timeout"), fail("timeout"), read(off)}, power: off, maintenance: true},
		{name: "another fault's maintenance is never cleared", node: func() *Node {
			n := resting()
			n.ProvisionState = CleanFailed
			n.Maintenance, n.MaintenanceReason, n.Fault = true, "step failed", "clean failure"
			return n
		}, reports: []*protocol.Message{read(off)}, power: off, maintenance: true, fault: "clean failure"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := testMachine(t)
			m.cfg.ForcePowerStateDuringSync = !c.noForce
			n := c.node()
			now := t0
			var out Output
			var hist []HistoryEntry
			for _, r := range c.reports {
				now = now.Add(time.Second)
				r.Sent = now
				out = m.PowerReport(n, r, now)
				hist = append(hist, out.History...)
			}
			if n.PowerState != c.power {
				t.Errorf("power_state %q, want %q", n.PowerState, c.power)
			}
			if n.Maintenance != c.maintenance || n.Fault != c.fault {
				t.Errorf("maintenance %v fault %q (reason %q), want %v %q", n.Maintenance, n.Fault, n.MaintenanceReason, c.maintenance, c.fault)
			}
			if n.PowerFailures != c.failures {
				t.Errorf("power_failures %d, want %d", n.PowerFailures, c.failures)
			}
			var forced string
			for _, o := range out.Send {
				if o.Msg.Action == protocol.ActionPower {
					forced, _ = o.Msg.Args["state"].(string)
				}
			}
			if forced != c.forced {
				t.Errorf("power command %q sent, want %q (sends %+v)", forced, c.forced, out.Send)
			}
			if c.forced != "" {
				if n.Op == nil || n.Op.Phase != "power" || !n.Locked() || n.Pending == nil {
					t.Errorf("forcing without a locked power operation and its outstanding command: op %+v reservation %q pending %v", n.Op, n.Reservation, n.Pending)
				}
				if n.TargetPowerState != c.forced {
					t.Errorf("target_power_state %q, want %q", n.TargetPowerState, c.forced)
				}
			}
			switch {
			case c.history == "" && len(out.History) > 0 && c.fault == "":
				t.Errorf("history %+v, want none from the last report", out.History)
			case c.history != "" && (len(hist) == 0 || !strings.Contains(hist[len(hist)-1].Event, c.history)):
				t.Errorf("history %+v, want a last line with %q", hist, c.history)
			}
			if c.unchanged && (out.Changed || len(out.Send) > 0 || len(hist) > 0) {
				t.Errorf("report changed the node: %+v", out)
			}
		})
	}
}

// TestPowerReportDuplicates: a report resent by the agent's outbox, or
// overtaken by a newer one, is ignored (no failure counted twice, no old
// state forced).
func TestPowerReportDuplicates(t *testing.T) {
	m := testMachine(t)
	m.cfg.ForcePowerStateDuringSync = true
	n := &Node{UUID: "u1", Driver: "fake", Site: "s1", ProvisionState: Manageable, PowerState: protocol.PowerOff}
	t1 := time.Unix(100, 0)
	f := &protocol.Message{Kind: protocol.KindPower, Error: "timeout", Sent: t1}
	for range 3 {
		m.PowerReport(n, f, t1.Add(time.Minute))
	}
	if n.PowerFailures != 1 || n.Maintenance {
		t.Fatalf("one failure resent three times: %d failures, maintenance %v", n.PowerFailures, n.Maintenance)
	}
	m.PowerReport(n, &protocol.Message{Kind: protocol.KindPower, PowerState: protocol.PowerOff, Sent: t1.Add(2 * time.Second)}, t1.Add(time.Minute))
	out := m.PowerReport(n, &protocol.Message{Kind: protocol.KindPower, PowerState: protocol.PowerOn, Sent: t1.Add(time.Second)}, t1.Add(time.Minute))
	if len(out.Send) > 0 || out.Changed || n.Op != nil {
		t.Fatalf("an older reading was applied after a newer one: %+v", out)
	}
}

// TestForcedPowerCompletes: the forced power operation ends like the API's
// power verb: the result records the state and unlocks the node.
func TestForcedPowerCompletes(t *testing.T) {
	w := newWorld(t)
	w.m.cfg.ForcePowerStateDuringSync = true
	w.n.ProvisionState, w.n.PowerState = Manageable, protocol.PowerOff
	w.run(w.m.PowerReport(w.n, &protocol.Message{Kind: protocol.KindPower, PowerState: protocol.PowerOn, Sent: w.now}, w.now))
	if strings.Join(w.log, ",") != "power power off" {
		t.Fatalf("commands %v, want one power off", w.log)
	}
	if w.n.Op != nil || w.n.Locked() || w.n.PowerState != protocol.PowerOff || w.n.TargetPowerState != "" || w.n.ProvisionState != Manageable {
		t.Fatalf("after the forced power off: op %+v reservation %q power %q target %q state %q", w.n.Op, w.n.Reservation, w.n.PowerState, w.n.TargetPowerState, w.n.ProvisionState)
	}
}
