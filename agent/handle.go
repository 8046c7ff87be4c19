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
		a.handleBundle(payload)
		return
	}
	m, err := protocol.Decode(payload)
	if err != nil {
		a.log.Warn("message rejected", "topic", topic, "reason", err)
		return
	}
	a.handleOne(leaf, node, m)
}

func (a *Agent) handleOne(leaf, node string, m *protocol.Message) {
	a.markHeard()
	switch leaf {
	case "bmc/cmd":
		switch m.Kind {
		case protocol.KindAck:
			a.ob.Ack(m.AckIDs)
		case protocol.KindCommand:
			switch m.Action {
			case protocol.ActionCacheImage:
				go a.cacheImageCommand(m)
				return
			case protocol.ActionForget:
				a.forget(m.Node)
				return
			case protocol.ActionEndBoot:
				a.boot.End(m.Node)
				return
			}
			go a.runBMC(m)
		}
	case "cmd":
		if m.Kind == protocol.KindCommand && (m.Action == protocol.ActionPlanRun || m.Action == protocol.ActionPlanStop) {
			a.planCommand(node, m)
			return
		}
		a.relay.FromCoordinator(node, m)
	}
}

// handleBundle takes a bundle the coordinator sent on the site's bmc/cmd
// topic: each message is handled as if it had come on its own topic.
func (a *Agent) handleBundle(payload []byte) {
	recs, err := protocol.DecodeBundle(a.cfg.Site, payload)
	if err != nil {
		a.log.Warn("bundle rejected", "topic", protocol.BMCCmdTopic(a.cfg.Site), "reason", err)
		return
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
		a.handleOne(leaf, node, m)
	}
}

// relays tells whether every ramdisk of the site reaches the coordinator
// through this agent: it runs the site broker, or no ramdisk is told
// another broker (simulated nodes only). Its presence says so, and the
// coordinator then bundles everything for the site.
func (a *Agent) relays() bool {
	return a.relay.Addr() != "" || (a.cfg.Ramdisk.BrokerURL == "" && a.cfg.QEMU.Kernel == "")
}
