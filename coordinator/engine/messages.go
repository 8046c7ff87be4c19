package engine

import (
	"fmt"

	"github.com/bmedge/bmedge/coordinator/engine/readings"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/protocol"
)

// HandleMessage takes one MQTT message from an agent. Malformed or
// unauthorised messages are logged with the reason and dropped.
func (e *Engine) HandleMessage(topic string, payload []byte) {
	site, nodeID, leaf, err := protocol.ParseTopic(topic)
	if err != nil {
		e.rejects.Warn("message rejected", "message rejected", "topic", topic, "reason", err)
		return
	}
	if leaf == "cmd" || leaf == "bmc/cmd" || leaf == "console/cmd" {
		return
	}
	if leaf == "bmc/evt" && protocol.IsBundle(payload) {
		e.handleBundle(site, payload)
		return
	}
	if leaf == "presence" && len(payload) == 0 {
		return // a retained presence cleared (a deleted site)
	}
	msg, err := protocol.Decode(payload)
	if err != nil {
		e.rejects.Warn("message rejected", "message rejected", "topic", topic, "reason", err)
		return
	}
	// A site's, a ramdisk's or a BMC's text is bounded before anything
	// keeps it (fsm.MaxRemoteText).
	msg.Error, msg.Detail = fsm.BoundText(msg.Error, fsm.MaxRemoteText), fsm.BoundText(msg.Detail, fsm.MaxRemoteText)
	for i := range msg.Beats {
		b := &msg.Beats[i]
		b.Error, b.Detail = fsm.BoundText(b.Error, fsm.MaxRemoteText), fsm.BoundText(b.Detail, fsm.MaxRemoteText)
	}
	if leaf == "console/evt" {
		e.handleConsoleOutput(site, msg)
		return
	}
	if leaf == "presence" {
		if nodeID != "" {
			return
		}
		if msg.Online {
			go e.consoleSiteBack(site)
		}
		e.sites.NoteRelay(site, msg.Online, msg.Relay, msg.Plans)
		e.NoteSiteBroker(site, msg.Online, msg.SiteBroker)
		e.sites.NoteSoftware(site, msg.Online, msg.Software)
		if msg.Online {
			// Its discovery configuration is retained; said again all
			// the same (a broker may have lost it).
			e.discoveryDirty(site)
		}
		_ = e.submit(func(t *tx) error {
			e.sitePresence(t, site, msg.Online)
			return nil
		}, false)
		return
	}
	if leaf == "bmc/evt" && msg.Kind == protocol.KindBeats {
		e.handleBeats(site, msg)
		return
	}
	if leaf == "bmc/evt" && msg.Kind == protocol.KindDiscovery {
		e.handleDiscovery(site, msg)
		return
	}
	if leaf == "bmc/evt" && msg.Kind == protocol.KindResult && msg.Node == "" {
		e.handleSiteResult(site, msg)
		return
	}
	if leaf == "evt" && (msg.Node != nodeID || msg.Node == "") {
		e.rejects.Warn("message rejected", "message rejected", "topic", topic, "reason", fmt.Sprintf("message names node %q but came on node %q's topic", msg.Node, nodeID))
		return
	}
	var oob *readings.Report // firmware and BIOS read by the edge agent (readings)
	if leaf == "bmc/evt" {
		oob = readings.Read(msg)
	}
	_ = e.submit(func(t *tx) error {
		e.noteSiteHeard(t, site)
		n, ok := e.reg.nodes[msg.Node]
		if !ok || n.Site != site {
			e.rejects.Warn("message rejected", "message rejected", "topic", topic, "reason", fmt.Sprintf("node %q is not a node of site %q", msg.Node, site))
			switch {
			case (msg.Kind == protocol.KindPower || msg.Kind == protocol.KindHealth || msg.Kind == protocol.KindResult) && leaf == "bmc/evt":
				// The agent polls a deleted node's BMC until it restarts,
				// and may hold a result for a node deleted meanwhile:
				// acked, they leave its (durable) outbox instead of being
				// resent forever.
				t.acks[protocol.BMCCmdTopic(site)] = append(t.acks[protocol.BMCCmdTopic(site)], msg.ID)
			case msg.Kind == protocol.KindResult && leaf == "evt":
				// So does a ramdisk's result the agent relays (or the
				// ramdisk's own outbox): acked on the node's cmd topic,
				// as a known node's is.
				ackTopic := protocol.NodeCmdTopic(site, msg.Node)
				t.acks[ackTopic] = append(t.acks[ackTopic], msg.ID)
			}
			return nil
		}
		ackTopic := protocol.BMCCmdTopic(site)
		if leaf == "evt" {
			ackTopic = protocol.NodeCmdTopic(site, n.UUID)
		}
		switch msg.Kind {
		case protocol.KindResult:
			// An out-of-band step's readings count for the step pending, or
			// a later step of the site's plan (the site ran ahead).
			fresh := oob != nil && ((n.Pending != nil && !n.Pending.InBand && msg.CommandID == n.Pending.ID) ||
				(n.Op != nil && n.Op.SitePlan.Holds(msg.CommandID) && (n.Pending == nil || msg.CommandID != n.Pending.ID)))
			t.run(n, func() fsm.Output { return e.m.Result(n, msg, t.now) })
			if fresh {
				t.keepOOBReport(n, oob)
			}
			t.acks[ackTopic] = append(t.acks[ackTopic], msg.ID)
			e.cfg.Metrics.Acked()
		case protocol.KindPower:
			if leaf != "bmc/evt" {
				e.rejects.Warn("message rejected", "message rejected", "topic", topic, "reason", "power reports come from the edge agent on the site's bmc/evt topic")
				return nil
			}
			t.run(n, func() fsm.Output { return e.m.PowerReport(n, msg, t.now) })
			t.acks[ackTopic] = append(t.acks[ackTopic], msg.ID)
		case protocol.KindHealth:
			if leaf != "bmc/evt" {
				e.rejects.Warn("message rejected", "message rejected", "topic", topic, "reason", "health reports come from the edge agent on the site's bmc/evt topic")
				return nil
			}
			t.keepHealth(n, msg.HealthReport, msg.Sent, msg.Sent.After(n.HealthReadAt))
			t.run(n, func() fsm.Output { return e.m.HealthReport(n, msg, t.now) })
			t.acks[ackTopic] = append(t.acks[ackTopic], msg.ID)
		case protocol.KindHello:
			if leaf != "evt" {
				return nil
			}
			t.run(n, func() fsm.Output { return e.m.Hello(n, msg, t.now) })
		case protocol.KindHeartbeat:
			if leaf != "evt" {
				return nil
			}
			e.noteRescueRefused(n, msg)
			t.run(n, func() fsm.Output { return e.m.Heartbeat(n, msg, t.now) })
		default:
			e.rejects.Warn("message rejected", "message rejected", "topic", topic, "reason", fmt.Sprintf("kind %q is not accepted from agents", msg.Kind))
		}
		return nil
	}, false)
}

// noteRescueRefused counts a heartbeat's rescue refusals on /metrics if
// the heartbeat is the node's ramdisk's (its agent token).
func (e *Engine) noteRescueRefused(n *fsm.Node, msg *protocol.Message) {
	if n.AgentToken != "" && msg.Token == n.AgentToken {
		e.cfg.Metrics.RescueRefused(n.UUID, msg.Token, msg.RescueRefused)
	}
}
