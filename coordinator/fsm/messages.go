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

// This file holds the messages of the ramdisk and the edge agent: the
// ramdisk's hello, its heartbeats, and the results of commands.

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
		if m.beforeRamdiskWork(n) {
			// Nothing ran in the first boot yet (the power action that
			// boots the ramdisk is still outstanding): the node booted
			// again, as it does when an edge agent restarted before it
			// kept that action's result and runs it again. The new boot
			// replaces the old.
			old := n.BootID
			n.PastBoots = appendBoot(n.PastBoots, old)
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
				Event: fmt.Sprintf("ramdisk booted again (boot %s replaces boot %s, in which nothing ran yet) offering %d clean and %d deploy steps",
					msg.BootID, old, len(msg.CleanSteps), len(msg.DeploySteps))})
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

// beforeRamdiskWork tells whether the power action that boots the
// node's ramdisk is still outstanding (its result not back): whatever
// boot said hello meanwhile ran nothing yet. (Once that action is done,
// a new boot is the ramdisk restarting on its own, even if the machine
// still waits, held by maintenance.)
func (m *Machine) beforeRamdiskWork(n *Node) bool {
	if n.Op == nil || n.Pending == nil {
		return false
	}
	a := m.current(n)
	if a == nil {
		return false
	}
	i := n.Op.Index + 1
	return a.Kind == ActOOB && a.Action == protocol.ActionPower && i < len(n.Op.Plan) && n.Op.Plan[i].Kind == ActAwaitAgent
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
		for _, s := range []*StepRun{n.CleanStep, n.DeployStep, n.ServiceStep} {
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
//
// The result of a later step of the site's plan (the site ran ahead)
// waits in the plan until that step's command is pending.
func (m *Machine) Result(n *Node, msg *protocol.Message, now time.Time) Output {
	var out Output
	if n.Pending == nil || msg.CommandID != n.Pending.ID {
		m.keepEarly(n, msg, &out)
		return out
	}
	m.takeResult(n, msg, now, &out)
	return out
}

// takeResult takes the result of the pending command.
func (m *Machine) takeResult(n *Node, msg *protocol.Message, now time.Time, out *Output) {
	if n.Pending.InBand && (n.AgentToken == "" || msg.Token != n.AgentToken) {
		out.Reject = fmt.Sprintf("node %s: result of %s with a wrong or stale agent token refused", n.Ident(), msg.CommandID)
		return
	}
	if n.Maintenance && IsWait(n.ProvisionState) {
		// Maintenance pauses a node in a WAIT state (Ironic ignores the
		// ramdisk's heartbeats in maintenance); the result is applied
		// when maintenance ends. Out-of-band work (an -ING state, a power
		// change) goes on, as Ironic's conductor goes on with it.
		n.Held = msg
		out.Changed = true
		return
	}
	m.applyResult(n, msg, now, out)
}

func (m *Machine) applyResult(n *Node, msg *protocol.Message, now time.Time, out *Output) {
	out.Changed = true
	n.UpdatedAt = now
	cmd := n.Pending
	n.Pending, n.Deadline = nil, time.Time{}
	resultWarnings(n, msg, now, out)
	if !msg.OK {
		// The BMC's power state as read back after the failure: a power
		// action that failed half way, or a boot that failed after the
		// power changed, leaves the record matching the BMC, so that
		// power sync does not force a state the node never reached.
		readBackPower(n, msg)
	}
	a := m.current(n)
	if a == nil {
		return
	}
	if cmd.Msg != nil && len(cmd.Msg.Steps) > 1 && a.Kind == ActStep && !a.Step.InBand {
		m.applyStepsResult(n, len(cmd.Msg.Steps), msg, now, out)
		return
	}
	what := describe(n, a)
	if !msg.OK {
		m.fail(n, now, out, fmt.Sprintf("%s failed on node %s: %s", what, n.Ident(), msg.Error))
		return
	}
	if cmd.Msg != nil && cmd.Msg.Action == protocol.ActionBootDev {
		n.BootDevice = protocol.BootDeviceArgsOf(cmd.Msg.Args).Device
	}
	if cmd.Msg != nil && cmd.Msg.Action == protocol.ActionVMedia {
		vmediaDone(n, cmd.Msg, msg.Data, now, out)
	}
	if cmd.Msg != nil && cmd.Msg.Action == protocol.ActionPower {
		p := protocol.PowerArgsOf(cmd.Msg.Args)
		if p.BootDevice != "" {
			n.BootDevice = p.BootDevice
		}
		if !p.Boots() {
			n.PowerState = protocol.PowerOff
		} else {
			n.PowerState = protocol.PowerOn
		}
		n.TargetPowerState = ""
	}
	m.stepDone(n, a, msg, what, now, out)
	if n.Op == nil {
		return // stepDone failed the operation (an inspection rule)
	}
	if n.Op.AbortAfter {
		service := n.Op.Phase.Info().Steps == StepsService
		m.failWith(n, now, out, fmt.Sprintf("aborted by request after step %s finished", a.Step.Name()), Abort)
		if service && n.ProvisionState == ServiceFailed {
			// As an abort during an abortable step: back to active.
			m.serviceAbort(n, true, now, out)
		}
		return
	}
	m.advance(n, now, out)
}

// applyStepsResult applies the result of a run of k out-of-band steps
// sent as one command: the steps that succeeded are done, each in the
// history as if sent alone, and the one that failed fails the operation.
func (m *Machine) applyStepsResult(n *Node, k int, msg *protocol.Message, now time.Time, out *Output) {
	done := k
	if !msg.OK {
		done = 0
		if d, ok := msg.Data[protocol.StepsDone].(float64); ok && d >= 0 && d < float64(k) {
			done = int(d)
		}
	}
	for range done {
		a := m.current(n)
		if a == nil || a.Kind != ActStep || a.Step.InBand {
			break
		}
		m.stepDone(n, a, msg, describe(n, a), now, out)
	}
	a := m.current(n)
	if !msg.OK && a != nil {
		if a.Kind == ActStep {
			s := *a.Step
			n.setStep(&s)
		}
		m.fail(n, now, out, fmt.Sprintf("%s failed on node %s: %s", describe(n, a), n.Ident(), msg.Error))
		return
	}
	m.advance(n, now, out)
}

// stepDone records that the plan's current action a succeeded, with the
// result msg, and moves the plan past it.
func (m *Machine) stepDone(n *Node, a *Action, msg *protocol.Message, what string, now time.Time, out *Output) {
	if a.Kind == ActStep && a.Step.Step == "inspect_hardware" {
		if inv, ok := msg.Data["inventory"].(map[string]any); ok {
			out.Inventory = inv
			takeBootMode(n, inv)
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
		if !a.Step.InBand {
			m.takeOOBInspection(n, msg, now, out)
		}
		if out.Inventory != nil && m.cfg.InspectionRules != nil && n.Op != nil && n.Op.Phase == PhaseInspect {
			// The inspection rules, in band and out of band alike (not
			// a clean's inspect_hardware step); one that fails the
			// inspection ends the operation here.
			h, pd, ports, err := m.cfg.InspectionRules(n, out.Inventory, out.PluginData, out.Ports, now)
			out.History = append(out.History, h...)
			if err != nil {
				m.fail(n, now, out, err.Error())
				return
			}
			out.PluginData, out.PortChanges = pd, ports
		}
	}
	if a.Kind == ActStep && a.Step.Interface == "raid" {
		// In-band (software RAID) or out of band (the BMC's).
		if err := raidDone(n, a.Step.Step, msg.Data, now); err != nil {
			out.History = append(out.History, HistoryEntry{Time: now, Severity: "ERROR", EventType: eventType(n.Op), Event: err.Error()})
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
	if a.Kind == ActStep && (a.Step.Step == "prepare_instance_boot") {
		// The edge agent set the boot device to disk.
		n.BootDevice = protocol.BootDisk
	}
	if a.Kind == ActStep && (a.Step.Step == "tear_down_agent") && !n.DisablePowerOff {
		n.PowerState = protocol.PowerOff
	}
	if a.Kind == ActStep && (a.Step.Step == "boot_instance") {
		n.PowerState = protocol.PowerOn
	}
	// What the BMC said after the command wins over what it aimed at.
	readBackPower(n, msg)
	n.Op.Index++
}

// readBackPower records the power state the edge agent read back from
// the BMC after a command (protocol.DataPowerState), if it did.
func readBackPower(n *Node, msg *protocol.Message) {
	st, _ := msg.Data[protocol.DataPowerState].(string)
	if st != protocol.PowerOn && st != protocol.PowerOff {
		return
	}
	n.PowerState = st
	if msg.Sent.After(n.PowerReadAt) {
		// A power-sync report read before this one is older news.
		n.PowerReadAt = msg.Sent
	}
}

// resultWarnings puts the warnings an edge agent's result carries
// (protocol.DataWarnings: what a command left undone or unread) into the
// node's history, each a WARNING, and counts them for /metrics. At most
// drivers' MaxWarnings of at most 2 KiB are taken from one result.
func resultWarnings(n *Node, msg *protocol.Message, now time.Time, out *Output) {
	list, _ := msg.Data[protocol.DataWarnings].([]any)
	for i, w := range list {
		s, _ := w.(string)
		if s == "" || i >= 16 {
			continue
		}
		if len(s) > 2048 {
			s = s[:2048] + "…"
		}
		out.History = append(out.History, HistoryEntry{Time: now, Severity: "WARNING", EventType: eventType(n.Op),
			Event: fmt.Sprintf("node %s: %s", n.Ident(), s)})
		out.BMCWarnings++
	}
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
