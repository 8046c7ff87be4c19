package agent

import (
	"context"
	"errors"
	"time"

	"github.com/bmedge/bmedge/agent/bmc"
	"github.com/bmedge/bmedge/agent/imagecache"
	"github.com/bmedge/bmedge/agent/outbox"
	"github.com/bmedge/bmedge/agent/plan"
	"github.com/bmedge/bmedge/protocol"
)

// runBMC runs a BMC command through the one exactly-once runner
// (agent/outbox) on the site's BMCs (agent/bmc).
func (a *Agent) runBMC(m *protocol.Message) { a.runOnce(m) }

// runOnce is runBMC, saying what became of the command; once an
// out-of-band step's result is kept (or a kept one answered it), the
// plan runner is told (agent/plan).
func (a *Agent) runOnce(m *protocol.Message) outbox.Outcome {
	out := a.ob.Once(outbox.Command{Msg: m, CheckSeq: true, CheckFull: true,
		Start:   func() { a.bmcs.Begin(m.Node) },
		End:     func() { a.bmcs.End(m.Node) },
		Run:     func() *protocol.Message { return a.bmcCommand(m) },
		Intent:  rebootCommand(m),
		Resumed: func() *protocol.Message { return a.resumedReboot(m) }})
	switch out {
	case outbox.Stale:
		a.metrics.stale.Inc()
		a.log.Debug("stale BMC command not run: a newer command of the node has started", "node", m.Node, "command", m.ID, "action", m.Action)
	case outbox.Full:
		a.log.Debug("BMC command not run: the outbox is full", "node", m.Node, "command", m.ID, "action", m.Action)
	case outbox.Unsequenced:
		a.refuseCommand(refusedUnsequenced, m)
	case outbox.Ran, outbox.Redone:
		if m.Action == protocol.ActionOOBStep {
			a.tellPlan(m.Node, m.ID)
		}
	}
	return out
}

// bmcCommand runs a BMC command and returns its result (nil when the
// agent is stopping).
func (a *Agent) bmcCommand(m *protocol.Message) *protocol.Message {
	// The command ends a little before its deadline, so that its result,
	// a failure saying what the BMC did, reaches the coordinator before
	// the coordinator gives up on the command with less to say.
	ctx, cancel := context.WithDeadline(a.ctx, m.Deadline.Add(-resultMargin(time.Until(m.Deadline))))
	defer cancel()
	ctx, data := bmc.WithData(ctx)
	err := a.execLimited(ctx, m)
	if err != nil && a.ctx.Err() != nil {
		// The agent is stopping: its failure says nothing about the BMC,
		// and stored it would fail the node's operation after a restart.
		// The coordinator sends the command again to the next agent.
		a.log.Info("edge agent stopping: BMC command interrupted, no result kept", "node", m.Node, "command", m.ID, "action", m.Action)
		return nil
	}
	done := bmc.StepsDone(m, err)
	var se *bmc.StepsError
	errors.As(err, &se)
	if err == nil {
		a.bmcs.CommandDone(m)
	}
	if err == nil || done > 0 {
		a.boot.Ended(m, done)
	}
	res := &protocol.Message{Kind: protocol.KindResult, ID: outbox.NewID(), Site: a.cfg.Site, Node: m.Node, Sent: a.cfg.Clock.Now(), CommandID: m.ID, Seq: m.Seq, OK: err == nil}
	if err != nil {
		res.Error = err.Error()
	}
	res.Data = data()
	if se != nil {
		if res.Data == nil {
			res.Data = map[string]any{}
		}
		res.Data[protocol.StepsDone] = se.Done
	}
	return res
}

// rebootCommand tells whether m reboots its node (a boot into the
// ramdisk): such a command is kept as started before it runs, so that a
// kill of the agent while it runs never boots the node twice.
func rebootCommand(m *protocol.Message) bool {
	return m.Action == protocol.ActionPower && protocol.PowerArgsOf(m.Args).Reboots()
}

// resumedReboot answers a copy of a reboot the agent started before it
// was killed, without its result: rebooting again would boot the node a
// second time (its ramdisk would say hello twice, and the coordinator
// fail the operation: "restarted on its own"). The boot's credential is
// noted again (the kill may have come before), and the node's power is
// read: on, the reboot ran; off, it did not take, and the command runs
// now (powering the node on boots it once).
func (a *Agent) resumedReboot(m *protocol.Message) *protocol.Message {
	ctx, cancel := context.WithDeadline(a.ctx, m.Deadline.Add(-resultMargin(time.Until(m.Deadline))))
	defer cancel()
	if protocol.PowerArgsOf(m.Args).AgentUsername != "" {
		a.boot.NoteArgs(m.Node, m.Args)
	}
	st := ""
	b, err := a.bmcs.Get(m.Node, m.Driver, m.DriverInfo)
	if err == nil {
		err = a.bmcs.Limited(ctx, func() error {
			var e error
			st, e = b.PowerState(ctx)
			return e
		})
	}
	if err != nil && a.ctx.Err() != nil {
		return nil // stopping: the next agent answers it
	}
	res := &protocol.Message{Kind: protocol.KindResult, ID: outbox.NewID(), Site: a.cfg.Site, Node: m.Node, Sent: a.cfg.Clock.Now(), CommandID: m.ID, Seq: m.Seq}
	switch {
	case err != nil:
		res.Error = "the edge agent restarted while this reboot ran and could not read the node's power to learn whether it took (" + err.Error() +
			"); it did not reboot the node again, which would boot it twice"
	case st == protocol.PowerOff:
		a.log.Info("a reboot started before the agent restarted did not take (the node is off): it runs now", "node", m.Node, "command", m.ID)
		return a.bmcCommand(m)
	default:
		a.log.Info("a reboot started before the agent restarted: the node is on, so it ran; not run again", "node", m.Node, "command", m.ID)
		res.OK = true
		a.bmcs.CommandDone(m)
	}
	return res
}

// execLimited runs a BMC command when one of the site's BMC slots is
// free (Config.BMCConcurrency), or fails when ctx ends first.
func (a *Agent) execLimited(ctx context.Context, m *protocol.Message) error {
	return a.bmcs.Limited(ctx, func() error { return a.execBMC(ctx, m) })
}

// resultMargin is the time kept back from a command's deadline for its
// result to travel: a tenth of the time left, at most 5 s.
func resultMargin(left time.Duration) time.Duration {
	return min(max(left/10, 0), 5*time.Second)
}

func (a *Agent) execBMC(ctx context.Context, m *protocol.Message) (err error) {
	defer a.observeBMC(m, time.Now(), &err)
	return a.bmcs.Exec(ctx, m, a.boot)
}

// cacheImageCommand runs a cache_image command (coordinator site cache)
// and sends its result.
func (a *Agent) cacheImageCommand(m *protocol.Message) {
	a.ob.Once(outbox.Command{Msg: m, Run: func() *protocol.Message { return a.cacheImage(m) }})
}

// cacheImage pre-seeds the image and returns the result (nil when the
// agent is stopping).
func (a *Agent) cacheImage(m *protocol.Message) *protocol.Message {
	u := protocol.CacheImageArgsOf(m.Args).URL
	res := &protocol.Message{Kind: protocol.KindResult, ID: outbox.NewID(), Site: a.cfg.Site, CommandID: m.ID}
	// Within the command's deadline, less the time its result needs.
	ctx, cancel := context.WithDeadline(a.ctx, m.Deadline.Add(-resultMargin(time.Until(m.Deadline))))
	defer cancel()
	r, err := a.cache.Preseed(ctx, m)
	if err != nil && a.ctx.Err() != nil {
		a.log.Info("edge agent stopping: image pre-seed interrupted, no result kept", "url", imagecache.Redact(u), "command", m.ID)
		return nil
	}
	if err != nil {
		res.Error = err.Error()
		a.log.Warn("image pre-seed failed", "url", imagecache.Redact(u), "command", m.ID, "err", err)
	} else {
		res.OK = true
		res.Data = map[string]any{"url": imagecache.Redact(u), "size": r.Size, "already_cached": r.AlreadyCached, "seconds": r.Duration.Seconds()}
		a.log.Info("image pre-seeded in the site cache", "url", imagecache.Redact(u), "size", r.Size, "already_cached", r.AlreadyCached,
			"seconds", r.Duration.Seconds(), "command", m.ID)
	}
	res.Sent = a.cfg.Clock.Now()
	return res
}

// Kinds of command refused by the agent itself, as counted by
// bmedge_agent_commands_refused_total (the coordinator's broker refuses
// commands from anybody but the coordinator before they get here).
const (
	// refusedUnsequenced: a node's command without a Seq once the site
	// has had sequenced ones.
	refusedUnsequenced = "unsequenced"
	// refusedPlanEnded: a run_plan of a plan that ended (kept in the
	// state folder until its deadline).
	refusedPlanEnded = plan.RefusedEnded
	// refusedPlanExpired: a run_plan past its deadline.
	refusedPlanExpired = plan.RefusedExpired
)

// refuseCommand counts and logs (at a bounded rate) a command the agent
// will not run.
func (a *Agent) refuseCommand(kind string, m *protocol.Message) {
	if a.metrics == nil {
		return // not running yet
	}
	a.metrics.refused.WithLabelValues(kind).Inc()
	a.warn.Warn("command refused "+kind, "command refused: it is not the coordinator's, or no longer stands", "kind", kind,
		"node", m.Node, "command", m.ID, "action", m.Action)
}
