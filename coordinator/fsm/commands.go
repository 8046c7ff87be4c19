package fsm

import (
	"maps"
	"time"

	"github.com/bmedge/bmedge/protocol"
)

// This file builds every command the machine sends a site: out-of-band
// steps and runs of them, in-band steps, power and boot device actions,
// the steps of a site plan and the plan itself, and the notices (forget,
// end_boot, abort, stop_plan). issue stamps them (stamp), gives them
// their time (span) and marks them pending; nothing else does.

// cmd is a command to issue: its payload (msg, whose envelope issue
// fills) and how it is delivered.
type cmd struct {
	topic string
	msg   *protocol.Message
	// inBand: the node's ramdisk runs it (its span is the wait timeout).
	inBand bool
	// steps is the number of out-of-band steps it carries (a run of
	// them is one command); 0 or 1 for one.
	steps int
	// pend: the node's outstanding command, resent until its result
	// comes, with a Seq of its own; a notice (forget, end_boot, abort,
	// stop_plan) is sent once, answered by nothing, and has no Seq.
	pend bool
	// planned is the id and Seq a site plan fixed for it: it is made
	// pending without being sent (the site has it in its plan).
	planned *PlannedCmd
}

// span is the time a command has once sent: the wait timeout for an
// in-band step (as long as its ramdisk heartbeats), the command timeout
// for each out-of-band step or action it carries.
func (m *Machine) span(inBand bool, steps int) time.Duration {
	if inBand {
		return m.cfg.WaitTimeout
	}
	return time.Duration(max(steps, 1)) * m.cfg.CommandTimeout
}

// nextSeq is the Seq of a node's next command after prev. Each new
// command of the node gets a higher Seq, which lets the edge agent refuse
// stale copies of older ones without remembering them. It starts from
// the clock so that it also grows over a node deleted and enrolled
// again, or a store restored from a backup.
func nextSeq(prev uint64, now time.Time) uint64 {
	return max(prev+1, uint64(max(now.UnixNano(), 0)))
}

// stamp fills a command's envelope: version, kind, id, site, node, the
// time sent, Seq (0 for none) and the deadline span from now.
func stamp(n *Node, msg *protocol.Message, id string, seq uint64, span time.Duration, now time.Time) {
	msg.V, msg.Kind, msg.ID, msg.Site, msg.Node, msg.Sent, msg.Seq = protocol.Version, protocol.KindCommand, id, n.Site, n.UUID, now, seq
	msg.Deadline = now.Add(span)
}

// issue stamps c's message, makes it the node's pending command when it
// is one (an out-of-band one sets the node's deadline; an in-band one
// waits in the WAIT state's) and sends it unless a site plan holds it.
func (m *Machine) issue(n *Node, c cmd, now time.Time, out *Output) *protocol.Message {
	var id string
	var seq uint64
	switch {
	case c.planned != nil:
		id, seq = c.planned.ID, c.planned.Seq
		n.CmdSeq = max(n.CmdSeq, seq)
	case c.pend:
		id = m.cfg.NewID()
		n.CmdSeq = nextSeq(n.CmdSeq, now)
		seq = n.CmdSeq
	default:
		id = m.cfg.NewID()
	}
	stamp(n, c.msg, id, seq, m.span(c.inBand, c.steps), now)
	if c.pend {
		n.Pending = &Command{ID: id, Topic: c.topic, Msg: c.msg, LastSent: now, Attempts: 1, InBand: c.inBand}
		if !c.inBand {
			n.Deadline = c.msg.Deadline
		}
	}
	if c.planned == nil {
		out.Send = append(out.Send, Outgoing{Topic: c.topic, Msg: c.msg})
	}
	return c.msg
}

// notice issues a command sent once and answered by no result.
func (m *Machine) notice(n *Node, topic string, msg *protocol.Message, now time.Time, out *Output) {
	m.issue(n, cmd{topic: topic, msg: msg}, now, out)
}

// commandSpan is the time the node's outstanding out-of-band command has.
func (m *Machine) commandSpan(n *Node) time.Duration {
	if n.Pending != nil && n.Pending.Msg != nil {
		return m.span(false, len(n.Pending.Msg.Steps))
	}
	return m.span(false, 1)
}

// actionCommand is the command of an out-of-band action of the plan (a
// power or boot device change, the BMC's validation). A power action
// ends the ramdisk's boot and, unless it powers off, mints the next
// boot's nonce.
func (m *Machine) actionCommand(n *Node, action string, args map[string]any) cmd {
	msg := &protocol.Message{Action: action, Args: args, Driver: n.Driver, DriverInfo: n.DriverInfo}
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
			// A plan's own secure_boot wins (undeploy's false, on the
			// reboot that replaces its power-off under disable_power_off).
			if _, given := args[protocol.ArgSecureBoot]; !given && SecureBootRequested(n) {
				msg.Args[protocol.ArgSecureBoot] = true
			}
		}
	}
	return cmd{topic: protocol.BMCCmdTopic(n.Site), msg: msg, pend: true}
}

// stepCommand is the command of step s as it would be sent alone, with
// its arguments filled (stepArgs).
func (m *Machine) stepCommand(n *Node, s *StepRun) (cmd, error) {
	args, err := m.stepArgs(n, s)
	if err != nil {
		return cmd{}, err
	}
	step := &protocol.Step{Interface: s.Interface, Step: s.Step, Args: args, Priority: s.Priority, Abortable: s.Abortable}
	if s.InBand {
		return cmd{topic: protocol.NodeCmdTopic(n.Site, n.UUID), inBand: true, pend: true,
			msg: &protocol.Message{Action: protocol.ActionInbandRun, Token: n.AgentToken, Step: step}}, nil
	}
	return cmd{topic: protocol.BMCCmdTopic(n.Site), pend: true,
		msg: &protocol.Message{Action: protocol.ActionOOBStep, Driver: n.Driver, DriverInfo: n.DriverInfo, Step: step}}, nil
}
