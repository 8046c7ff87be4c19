package agent

import (
	"compress/flate"
	"context"
	"encoding/json"
	"sync"
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

// Order: the coordinator must get each node's messages in the order the
// agent produced them (a result before the heartbeat of the next step,
// a resent outbox in its order). Bundles are made in queue order, and a
// bundle is published only once no bundle in flight holds a message of
// one of its nodes; bundles of other nodes go on meanwhile, up to
// uplinkInFlight awaiting the broker's ack. So a node's messages reach
// the broker one bundle after the other, while a site's many nodes
// still keep several bundles in flight. A message naming no node (a
// site-wide result) is ordered with the other such messages; a
// heartbeat summary is not ordered (upKeys says why).

// inFlight tracks the bundles awaiting the broker's ack, by node.
type inFlight struct {
	mu    sync.Mutex
	cond  *sync.Cond
	n     int
	nodes map[string]int
}

func newInFlight() *inFlight {
	f := &inFlight{nodes: map[string]int{}}
	f.cond = sync.NewCond(&f.mu)
	return f
}

// acquire waits until a bundle of keys may go (a slot is free and none
// of its nodes is in flight), and takes its place; false once ctx ended.
func (f *inFlight) acquire(ctx context.Context, keys []string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for ctx.Err() == nil {
		free := f.n < uplinkInFlight
		for _, k := range keys {
			free = free && f.nodes[k] == 0
		}
		if free {
			f.n++
			for _, k := range keys {
				f.nodes[k]++
			}
			return true
		}
		f.cond.Wait()
	}
	return false
}

func (f *inFlight) release(keys []string) {
	f.mu.Lock()
	f.n--
	for _, k := range keys {
		if f.nodes[k]--; f.nodes[k] <= 0 {
			delete(f.nodes, k)
		}
	}
	f.mu.Unlock()
	f.cond.Broadcast()
}

// wake makes acquire look at ctx again.
func (f *inFlight) wake() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cond.Broadcast()
}

// upKeys adds to keys the nodes a queued message is about: its topic's,
// or for a message on the site's bmc/evt topic the node it names ("" for
// none). A heartbeat summary adds none: a beat only reports a step's
// progress, and it cannot get ahead of a result it depends on (a node's
// next command, whose beats these would be, is sent only once the
// coordinator has the result before it), while holding a summary until
// every node it carries has nothing in flight holds the whole site's
// beats back behind its slowest node (docs/benchmarks.md, "WAN").
func upKeys(keys map[string]struct{}, it *upItem) {
	if _, node, _, err := protocol.ParseTopic(it.topic); err == nil && node != "" {
		keys[node] = struct{}{}
		return
	}
	var m struct {
		Kind string `json:"kind"`
		Node string `json:"node"`
	}
	_ = json.Unmarshal(it.payload, &m)
	if m.Kind == protocol.KindBeats {
		return
	}
	keys[m.Node] = struct{}{}
}

// uplink sends what publish queues until ctx ends.
func (a *Agent) uplink(ctx context.Context) {
	fl := newInFlight()
	stop := context.AfterFunc(ctx, fl.wake)
	defer stop()
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
		if a.oversized(&first) {
			continue
		}
		keys := map[string]struct{}{}
		upKeys(keys, &first)
		rec := protocol.BundleRecord{Topic: first.topic, Payload: first.payload}
		size := protocol.BundleSize(site, rec)
		if size > protocol.MaxBundleBytes/2 {
			// A large message (an inventory) goes on its own.
			if !a.sendUp(ctx, fl, keys, nil, &first) {
				return
			}
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
				if a.oversized(&it) {
					continue
				}
				r := protocol.BundleRecord{Topic: it.topic, Payload: it.payload}
				s := protocol.BundleSize(site, r)
				if size+s > protocol.MaxBundleBytes || s > protocol.MaxBundleBytes/2 {
					carry = &it
					break gather
				}
				upKeys(keys, &it)
				recs = append(recs, r)
				size += s
			}
		}
		timer.Stop()
		if !a.sendUp(ctx, fl, keys, recs, nil) {
			return
		}
	}
}

// oversized drops a message larger than protocol.MaxMessageBytes, which
// the broker would answer by closing the WAN connection (and the
// coordinator would refuse), and takes it out of the outbox, where it
// would be sent again for ever. It should never come: results too large
// are replaced by a failure (send), summaries split.
func (a *Agent) oversized(it *upItem) bool {
	if len(it.payload) <= protocol.MaxMessageBytes {
		return false
	}
	var m struct {
		ID   string `json:"id"`
		Node string `json:"node"`
		Kind string `json:"kind"`
	}
	_ = json.Unmarshal(it.payload, &m)
	a.log.Error("message not sent: larger than a message may be; dropped", "topic", it.topic, "kind", m.Kind, "node", m.Node,
		"bytes", len(it.payload), "limit", protocol.MaxMessageBytes)
	a.ob.Drop(m.ID, len(it.payload))
	return true
}

// sendUp publishes a bundle of recs, or one message alone, in its own
// goroutine once fl lets it go (see Order); false once ctx ended. A
// failed publish is left to the outbox's resend (results, reports) or to
// the ramdisks (hello, heartbeat), as before bundling.
func (a *Agent) sendUp(ctx context.Context, fl *inFlight, keySet map[string]struct{}, recs []protocol.BundleRecord, one *upItem) bool {
	topic := protocol.BMCEvtTopic(a.cfg.Site)
	var payload []byte
	if one != nil {
		topic, payload = one.topic, one.payload
	} else {
		b, err := protocol.EncodeBundle(a.cfg.Site, recs, flate.BestSpeed)
		if err != nil {
			a.log.Error("bundle not made; its messages are sent again later", "messages", len(recs), "err", err)
			return true
		}
		payload = b
	}
	keys := make([]string, 0, len(keySet))
	for k := range keySet {
		keys = append(keys, k)
	}
	if !fl.acquire(ctx, keys) {
		return false
	}
	go func() {
		defer fl.release(keys)
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := a.link.Publish(pctx, topic, payload, false); err != nil {
			a.log.Debug("publish failed; will resend", "topic", topic, "messages", max(len(recs), 1), "err", err)
		}
	}()
	return true
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
