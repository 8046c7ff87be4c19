package engine

import (
	"compress/flate"
	"context"
	"hash/fnv"
	"strings"
	"time"

	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/lib/clock"
	"github.com/bmedge/bmedge/protocol"
)

// This file holds the way out: the send queues, and the publishers that
// bundle a site's messages (protocol.EncodeBundle) when its edge agent
// relays its ramdisks.

func (e *Engine) enqueue(o fsm.Outgoing, urgent bool) {
	// One queue per site keeps a node's messages in order, and puts a
	// site's messages of one batch together, to be bundled.
	h := fnv.New32a()
	h.Write([]byte(topicSite(o.Topic)))
	sq := e.run.sendq[int(h.Sum32())%len(e.run.sendq)]
	q := sq.normal
	if urgent {
		q = sq.urgent
	}
	select {
	case q <- o:
	default:
		// A full queue means the broker is far behind; the resend loop
		// delivers the command later, so dropping here loses nothing.
		e.cfg.Log.Warn("send queue full; message left to the resend loop", "topic", o.Topic)
	}
}

// topicSite is the site a topic of this protocol belongs to ("" if none).
func topicSite(topic string) string {
	rest, ok := strings.CutPrefix(topic, protocol.TopicPrefix+"/site/")
	if !ok {
		return ""
	}
	site, _, _ := strings.Cut(rest, "/")
	return site
}

// sitePlans is fsm.Config.SitePlans: whether the site's edge agent runs
// plans, as its last online presence said.
func (e *Engine) sitePlans(site string) bool { return e.sites.Plans(site) }

// maxOut is the most queued messages a publisher takes at once, and
// publishGather how long it waits for more after the first.
const (
	maxOut        = 1024
	publishGather = 10 * time.Millisecond
)

// publisher sends what the batches queued, in order. What is queued at
// once for a site whose edge agent relays its ramdisks goes as bundles
// on the site's bmc/cmd topic; everything else goes on its own topic.
func (e *Engine) publisher(q sendQueue) {
	defer e.run.wg.Done()
	var batch []fsm.Outgoing
	for {
		batch = batch[:0]
		urgent := false
		select {
		case o := <-q.urgent:
			batch, urgent = append(batch, o), true
		default:
			select {
			case <-e.run.stopped:
				return
			case o := <-q.urgent:
				batch, urgent = append(batch, o), true
			case o := <-q.normal:
				batch = append(batch, o)
			}
		}
		// What follows within publishGather goes in the same bundles:
		// a batch's answers to one bundle of results come in a few
		// batches, and on a lossy WAN every extra packet in a round of
		// exchanges is one more chance of a retransmission stall. A
		// verb's first command (urgent: an operator waits) does not
		// wait; it takes what is queued already.
		var gather <-chan time.Time
		var timer clock.Timer
		if !urgent && len(q.urgent) == 0 {
			timer = e.cfg.Clock.NewTimer(publishGather)
			gather = timer.C()
		}
	drain:
		for len(batch) < maxOut {
			select {
			case o := <-q.urgent:
				// An urgent message ends the gathering.
				batch, gather = append(batch, o), nil
				continue
			default:
			}
			if gather == nil {
				select {
				case o := <-q.normal:
					batch = append(batch, o)
				default:
					break drain
				}
				continue
			}
			select {
			case o := <-q.urgent:
				batch, gather = append(batch, o), nil
			case o := <-q.normal:
				batch = append(batch, o)
			case <-gather:
				break drain
			case <-e.run.stopped:
				break drain
			}
		}
		if timer != nil {
			timer.Stop()
		}
		e.publishBatch(batch)
	}
}

// termed is m with the cluster's current term (a copy: the pending
// command m may be stays as it was), or m itself outside a cluster.
func (e *Engine) termed(m *protocol.Message) *protocol.Message {
	if e.cfg.Term == nil {
		return m
	}
	t := e.cfg.Term()
	if t == 0 || m.Term == t {
		return m
	}
	c := *m
	c.Term = t
	return &c
}

// pendingBundle is what is gathered for one site's next bundle.
type pendingBundle struct {
	recs  []protocol.BundleRecord
	msgs  []*protocol.Message
	bytes int
}

func (e *Engine) publishBatch(batch []fsm.Outgoing) {
	pending := map[string]*pendingBundle{}
	var order []string
	for _, o := range batch {
		b, err := protocol.Encode(e.termed(e.auth.WithCredential(o.Msg)))
		if err != nil {
			e.cfg.Log.Error("not sending invalid message", "topic", o.Topic, "err", err)
			continue
		}
		site := topicSite(o.Topic)
		rec := protocol.BundleRecord{Topic: o.Topic, Payload: b}
		size := protocol.BundleSize(site, rec)
		if !e.sites.Relaying(site) || size > protocol.MaxBundleBytes/2 {
			// In order: what is gathered for the site goes first.
			if p := pending[site]; p != nil {
				e.publishBundle(site, p)
			}
			e.publishOne(o.Topic, b, o.Msg)
			continue
		}
		p := pending[site]
		if p == nil {
			p = &pendingBundle{}
			pending[site] = p
			order = append(order, site)
		} else if p.bytes+size > protocol.MaxBundleBytes || len(p.recs) == protocol.MaxBundleRecords {
			e.publishBundle(site, p)
		}
		p.recs = append(p.recs, rec)
		p.msgs = append(p.msgs, o.Msg)
		p.bytes += size
	}
	for _, site := range order {
		e.publishBundle(site, pending[site])
	}
}

func (e *Engine) publishOne(topic string, b []byte, m *protocol.Message) {
	ctx, cancel := context.WithTimeout(e.run.ctx, 10*time.Second)
	defer cancel()
	err := e.run.pub.Publish(ctx, topic, b, false)
	if err != nil {
		e.cfg.Log.Debug("publish failed; the resend loop will retry", "topic", topic, "err", err)
	}
	e.cfg.Metrics.Published(m, err)
}

// publishBundle sends what p gathered, and empties it.
func (e *Engine) publishBundle(site string, p *pendingBundle) {
	if len(p.recs) == 0 {
		return
	}
	defer func() { p.recs, p.msgs, p.bytes = p.recs[:0], p.msgs[:0], 0 }()
	b, err := protocol.EncodeBundle(site, p.recs, flate.BestSpeed)
	if err != nil {
		// Not for what publishBatch gathers; sent one by one all the same.
		e.cfg.Log.Error("bundle not made; sending its messages one by one", "site", site, "err", err)
		for i, r := range p.recs {
			e.publishOne(r.Topic, r.Payload, p.msgs[i])
		}
		return
	}
	ctx, cancel := context.WithTimeout(e.run.ctx, 10*time.Second)
	defer cancel()
	topic := protocol.BMCCmdTopic(site)
	err = e.run.pub.Publish(ctx, topic, b, false)
	if err != nil {
		e.cfg.Log.Debug("publish failed; the resend loop will retry", "topic", topic, "messages", len(p.recs), "err", err)
	}
	for _, m := range p.msgs {
		e.cfg.Metrics.Published(m, err)
	}
}

// handleBundle takes a bundle an edge agent sent on its site's bmc/evt
// topic: each message is handled as if it had come on its own topic.
// Only event topics may be in it (a presence is retained, so it comes
// on its own).
func (e *Engine) handleBundle(site string, payload []byte) {
	recs, err := protocol.DecodeBundle(site, payload)
	if err != nil {
		e.cfg.Log.Warn("bundle rejected", "site", site, "reason", err)
		return
	}
	for _, r := range recs {
		if !strings.HasSuffix(r.Topic, "/evt") {
			e.rejects.Warn("message rejected", "message rejected", "topic", r.Topic, "reason", "only event topics may be in an edge agent's bundle")
			continue
		}
		e.HandleMessage(r.Topic, r.Payload)
	}
}
