package agent

import (
	"compress/flate"
	"context"
	"time"

	"github.com/bmedge/bmedge/protocol"
)

// The way to the coordinator: everything the agent sends (results,
// reports, relayed hellos and heartbeats, summaries) is queued by publish
// and sent by uplink in bundles (protocol.EncodeBundle) on the site's
// bmc/evt topic, one MQTT publish for what was queued about the same
// time. Over a slow or lossy WAN this saves the per-message MQTT, TCP and
// IP overhead and the round trips of many small publishes.

// uplinkGather is how long uplink waits after a first message for more
// to bundle with it; uplinkInFlight is how many bundles may await the
// broker's ack at once.
const (
	uplinkGather   = 15 * time.Millisecond
	uplinkInFlight = 16
)

type upItem struct {
	topic   string
	payload []byte
}

// uplink sends what publish queues until ctx ends.
func (a *Agent) uplink(ctx context.Context) {
	slots := make(chan struct{}, uplinkInFlight)
	site := a.cfg.Site
	var carry *upItem
	for {
		var first upItem
		if carry != nil {
			first, carry = *carry, nil
		} else {
			select {
			case <-ctx.Done():
				return
			case first = <-a.up:
			}
		}
		rec := protocol.BundleRecord{Topic: first.topic, Payload: first.payload}
		size := protocol.BundleSize(site, rec)
		if size > protocol.MaxBundleBytes/2 {
			// A large message (an inventory) goes on its own.
			a.sendUp(ctx, slots, nil, &first)
			continue
		}
		recs := []protocol.BundleRecord{rec}
		timer := time.NewTimer(uplinkGather)
	gather:
		for len(recs) < protocol.MaxBundleRecords {
			select {
			case <-ctx.Done():
				timer.Stop()
				return
			case <-timer.C:
				break gather
			case it := <-a.up:
				r := protocol.BundleRecord{Topic: it.topic, Payload: it.payload}
				s := protocol.BundleSize(site, r)
				if size+s > protocol.MaxBundleBytes || s > protocol.MaxBundleBytes/2 {
					carry = &it
					break gather
				}
				recs = append(recs, r)
				size += s
			}
		}
		timer.Stop()
		a.sendUp(ctx, slots, recs, nil)
	}
}

// sendUp publishes a bundle of recs, or one message alone, in its own
// goroutine once one of slots is free. A failed publish is left to the
// outbox's resend (results, reports) or to the ramdisks (hello,
// heartbeat), as before bundling.
func (a *Agent) sendUp(ctx context.Context, slots chan struct{}, recs []protocol.BundleRecord, one *upItem) {
	topic := protocol.BMCEvtTopic(a.cfg.Site)
	var payload []byte
	if one != nil {
		topic, payload = one.topic, one.payload
	} else {
		b, err := protocol.EncodeBundle(a.cfg.Site, recs, flate.BestSpeed)
		if err != nil {
			a.log.Error("bundle not made; its messages are sent again later", "messages", len(recs), "err", err)
			return
		}
		payload = b
	}
	select {
	case <-ctx.Done():
		return
	case slots <- struct{}{}:
	}
	go func() {
		defer func() { <-slots }()
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := a.link.Publish(pctx, topic, payload, false); err != nil {
			a.log.Debug("publish failed; will resend", "topic", topic, "messages", max(len(recs), 1), "err", err)
		}
	}()
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
	return a.site != nil || (a.cfg.Ramdisk.BrokerURL == "" && a.cfg.QEMU.Kernel == "")
}
