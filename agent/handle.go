package agent

import "github.com/bmedge/bmedge/protocol"

// handle takes what the coordinator sent on the site's topics: BMC
// commands and acks (bmc/cmd, alone or bundled) and what goes to a
// node's ramdisk (cmd).
func (a *Agent) handle(topic string, payload []byte) {
	site, node, leaf, err := protocol.ParseTopic(topic)
	if err != nil || site != a.cfg.Site {
		a.log.Warn("message rejected", "topic", topic, "reason", "not a topic of this site")
		return
	}
	if leaf == "bmc/cmd" && protocol.IsBundle(payload) {
		if a.handleBundle(payload) {
			a.keepBeforeAck()
		}
		return
	}
	if leaf == "discovery" && len(payload) == 0 {
		// The coordinator cleared it: the site was deleted.
		a.takeDiscoveryConfig(&protocol.Message{Kind: protocol.KindDiscoveryConfig, Discovery: &protocol.DiscoveryConfig{}})
		return
	}
	m, err := protocol.Decode(payload)
	if err != nil {
		a.log.Warn("message rejected", "topic", topic, "reason", err)
		return
	}
	if a.handleOne(leaf, node, m) {
		a.keepBeforeAck()
	}
}

// keepBeforeAck waits until what handling a message queued for the state
// folder (a plan received) is on disk. handle returns to the MQTT link,
// which acknowledges the message to the broker: after that the
// coordinator counts the plan as delivered and does not send its steps
// again, so a kill must not lose it.
func (a *Agent) keepBeforeAck() {
	if err := a.ob.Store().Sync(); err != nil {
		a.log.Warn("plan not on disk before its acknowledgement", "err", err,
			"what_happens", "a kill before the next write loses the plan; the coordinator's resends carry its steps")
	}
}

// handleOne handles one message; it tells whether the message queued
// state that must be on disk before it is acknowledged.
func (a *Agent) handleOne(leaf, node string, m *protocol.Message) (keep bool) {
	// The discovery configuration is retained by the broker: its value
	// is the newest whoever sent it, and a new leader may not send it
	// again.
	if leaf != "discovery" && a.fenced(m) {
		return false
	}
	a.markHeard()
	switch leaf {
	case "discovery":
		a.takeDiscoveryConfig(m)
	case "console/cmd":
		if m.Kind == protocol.KindConsole && a.cons != nil {
			a.cons.Handle(m)
		}
	case "bmc/cmd":
		switch m.Kind {
		case protocol.KindAck:
			a.ob.Ack(m.AckIDs)
		case protocol.KindCommand:
			switch m.Action {
			case protocol.ActionCacheImage:
				go a.cacheImageCommand(m)
				return false
			case protocol.ActionForget:
				a.forget(m.Node)
				if a.cons != nil {
					a.cons.Forget(m.Node)
				}
				return false
			case protocol.ActionEndBoot:
				a.boot.End(m.Node)
				return false
			}
			go a.runBMC(m)
		}
	case "cmd":
		if m.Kind == protocol.KindCommand && (m.Action == protocol.ActionPlanRun || m.Action == protocol.ActionPlanStop) {
			a.planCommand(node, m)
			return true
		}
		a.relay.FromCoordinator(node, m)
	}
	return false
}

// handleBundle takes a bundle the coordinator sent on the site's bmc/cmd
// topic: each message is handled as if it had come on its own topic. It
// tells whether one of them queued state to keep before the bundle's
// acknowledgement.
func (a *Agent) handleBundle(payload []byte) (keep bool) {
	recs, err := protocol.DecodeBundle(a.cfg.Site, payload)
	if err != nil {
		a.log.Warn("bundle rejected", "topic", protocol.BMCCmdTopic(a.cfg.Site), "reason", err)
		return false
	}
	for _, r := range recs {
		_, node, leaf, _ := protocol.ParseTopic(r.Topic)
		if leaf != "cmd" && leaf != "bmc/cmd" {
			a.log.Warn("message rejected", "topic", r.Topic, "reason", "only command topics may be in the coordinator's bundle")
			continue
		}
		m, err := protocol.Decode(r.Payload)
		if err != nil {
			a.log.Warn("message rejected", "topic", r.Topic, "reason", err)
			continue
		}
		if a.handleOne(leaf, node, m) {
			keep = true
		}
	}
	return keep
}

// relays tells whether every ramdisk of the site reaches the coordinator
// through this agent: it runs the site broker, or no ramdisk is told
// another broker (simulated nodes only). Its presence says so, and the
// coordinator then bundles everything for the site.
func (a *Agent) relays() bool {
	return a.relay.Addr() != "" || (a.cfg.Ramdisk.BrokerURL == "" && a.cfg.QEMU.Kernel == "")
}
