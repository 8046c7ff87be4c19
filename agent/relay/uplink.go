package relay

import (
	"compress/flate"
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bmedge/bmedge/lib/clock"
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

// Item is a message queued for the coordinator.
type Item struct {
	Topic   string
	Payload []byte
	// At is when Publish queued it (the uplink's clock).
	At time.Time
}

// UplinkConfig configures the uplink.
type UplinkConfig struct {
	Site string
	Log  *slog.Logger
	// Publish publishes on the WAN link (once Run runs).
	Publish func(ctx context.Context, topic string, payload []byte) error
	// Drop takes a message that can never be sent out of the outbox.
	Drop func(id string, size int)
	// Clock is the clock of the bundles' gather timer (default
	// clock.Real).
	Clock clock.Clock
	// Observe, when set, is told each publish's two times: waiting,
	// from the queueing of its oldest message to the publish (the
	// gathering, and the wait for a place among the bundles in flight
	// and behind the same nodes' bundles); acknowledged, from the
	// publish to the broker's ack (failed publishes are not told).
	Observe func(waiting, acknowledged time.Duration)
}

// Uplink is the way to the coordinator: a queue and its sender.
type Uplink struct {
	cfg UplinkConfig
	log *slog.Logger
	q   chan Item
	// flying counts the publishes awaiting the broker's ack.
	flying atomic.Int32
}

// InFlight is how many publishes await the broker's ack now.
func (u *Uplink) InFlight() int { return int(u.flying.Load()) }

// NewUplink returns an uplink with an empty queue.
func NewUplink(cfg UplinkConfig) *Uplink {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Drop == nil {
		cfg.Drop = func(string, int) {}
	}
	cfg.Clock = clock.Or(cfg.Clock)
	return &Uplink{cfg: cfg, log: cfg.Log, q: make(chan Item, 1024)}
}

// Queue is the uplink's queue (tests fill and drain it).
func (u *Uplink) Queue() chan Item { return u.q }

// Publish queues a message for the coordinator; Run sends it, in order,
// bundled with what is queued about the same time. It waits while the
// queue is full (at most 10 s, or until ctx ends: what is in the outbox
// is sent again later, and ramdisks repeat their hellos and heartbeats).
func (u *Uplink) Publish(ctx context.Context, topic string, payload []byte) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	select {
	case u.q <- Item{Topic: topic, Payload: payload, At: u.cfg.Clock.Now()}:
	case <-ctx.Done():
		u.log.Debug("publish queue full; will resend", "topic", topic)
	}
}

// Order: the coordinator must get each node's messages in the order the
// agent produced them (a result before the heartbeat of the next step,
// a resent outbox in its order). Bundles are made in queue order and
// published once no bundle in flight holds a message of one of their
// nodes. A bundle that must wait for one of its nodes does not hold up
// the bundles made after it: those of other nodes pass it and go, up to
// uplinkInFlight awaiting the broker's ack, while a later bundle that
// shares a node with a waiting one waits behind it. So a node's
// messages reach the broker one bundle after the other, in order, and a
// node whose ack is slow delays only its own messages. A message naming
// no node (a site-wide result) is ordered with the other such messages;
// a heartbeat summary is not ordered (upKeys says why).

// uplinkPending is how many made bundles may wait for their turn; Run
// stops taking from the queue while that many wait.
const uplinkPending = 4 * uplinkInFlight

// inFlight admits the bundles: it tracks those awaiting the broker's
// ack, by node, and keeps in order those that wait for their turn.
type inFlight struct {
	mu   sync.Mutex
	cond *sync.Cond
	// n is how many bundles are in flight; nodes, how many of them
	// hold each node.
	n     int
	nodes map[string]int
	// pending are the bundles waiting for their turn, in the order
	// they were made.
	pending []*pendingBundle
	// waits counts the times a bundle was held back (its tests see
	// that a bundle was refused and waits).
	waits int
	// closed: the uplink's context ended; nothing more starts.
	closed bool
}

// pendingBundle is a bundle waiting for its turn: its nodes, and what
// sends it.
type pendingBundle struct {
	keys    []string
	send    func()
	counted bool
}

func newInFlight() *inFlight {
	f := &inFlight{nodes: map[string]int{}}
	f.cond = sync.NewCond(&f.mu)
	return f
}

// submit queues a bundle of keys; send runs in its own goroutine once
// the bundle's turn has come (a slot is free, none of its nodes is in
// flight or held by a bundle made before it still waiting), and the
// bundle's place is given back when send returns. submit waits only
// while uplinkPending bundles wait already; false once ctx ended (and
// then nothing more is sent: what was pending is the outbox's to send
// again).
func (f *inFlight) submit(ctx context.Context, keys []string, send func()) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(f.pending) >= uplinkPending && ctx.Err() == nil {
		f.cond.Wait()
	}
	if ctx.Err() != nil || f.closed {
		return false
	}
	f.pending = append(f.pending, &pendingBundle{keys: keys, send: send})
	f.dispatch()
	return true
}

// dispatch starts, in order, every pending bundle whose turn has come;
// f.mu is held.
func (f *inFlight) dispatch() {
	if f.closed {
		return
	}
	var blocked map[string]bool // nodes of earlier bundles still pending
	kept := f.pending[:0]
	for _, b := range f.pending {
		free := f.n < uplinkInFlight
		for _, k := range b.keys {
			free = free && f.nodes[k] == 0 && !blocked[k]
		}
		if !free {
			if !b.counted {
				b.counted = true
				f.waits++
			}
			if blocked == nil {
				blocked = map[string]bool{}
			}
			for _, k := range b.keys {
				blocked[k] = true
			}
			kept = append(kept, b)
			continue
		}
		f.n++
		for _, k := range b.keys {
			f.nodes[k]++
		}
		go func() {
			defer f.release(b.keys)
			b.send()
		}()
	}
	clear(f.pending[len(kept):])
	f.pending = kept
}

func (f *inFlight) release(keys []string) {
	f.mu.Lock()
	f.n--
	for _, k := range keys {
		if f.nodes[k]--; f.nodes[k] <= 0 {
			delete(f.nodes, k)
		}
	}
	f.dispatch()
	f.mu.Unlock()
	f.cond.Broadcast()
}

// close is called once the uplink's context ended: the pending bundles
// are dropped (the outbox sends their messages again), nothing more
// starts, and a waiting submit returns.
func (f *inFlight) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed, f.pending = true, nil
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
func upKeys(keys map[string]struct{}, it *Item) {
	if _, node, _, err := protocol.ParseTopic(it.Topic); err == nil && node != "" {
		keys[node] = struct{}{}
		return
	}
	var m struct {
		Kind string `json:"kind"`
		Node string `json:"node"`
	}
	_ = json.Unmarshal(it.Payload, &m)
	if m.Kind == protocol.KindBeats || m.Kind == protocol.KindHealth {
		// Nor does a health report: the coordinator applies a node's
		// reports by the time they were read and keeps each event once,
		// whatever their order, and a node's results need not wait
		// behind its sensor readings.
		return
	}
	keys[m.Node] = struct{}{}
}

// Run sends what Publish queues until ctx ends.
func (u *Uplink) Run(ctx context.Context) {
	fl := newInFlight()
	stop := context.AfterFunc(ctx, fl.close)
	defer stop()
	site := u.cfg.Site
	var carry *Item
	for {
		var first Item
		if carry != nil {
			first, carry = *carry, nil
		} else {
			select {
			case <-ctx.Done():
				return
			case first = <-u.q:
			}
		}
		if u.oversized(&first) {
			continue
		}
		keys := map[string]struct{}{}
		upKeys(keys, &first)
		rec := protocol.BundleRecord{Topic: first.Topic, Payload: first.Payload}
		size := protocol.BundleSize(site, rec)
		if size > protocol.MaxBundleBytes/2 {
			// A large message (an inventory) goes on its own.
			if !u.sendUp(ctx, fl, keys, nil, &first, first.At) {
				return
			}
			continue
		}
		recs := []protocol.BundleRecord{rec}
		timer := u.cfg.Clock.NewTimer(uplinkGather)
	gather:
		for len(recs) < protocol.MaxBundleRecords {
			select {
			case <-ctx.Done():
				timer.Stop()
				return
			case <-timer.C():
				break gather
			case it := <-u.q:
				if u.oversized(&it) {
					continue
				}
				r := protocol.BundleRecord{Topic: it.Topic, Payload: it.Payload}
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
		if !u.sendUp(ctx, fl, keys, recs, nil, first.At) {
			return
		}
	}
}

// oversized drops a message larger than protocol.MaxMessageBytes, which
// the broker would answer by closing the WAN connection (and the
// coordinator would refuse), and takes it out of the outbox, where it
// would be sent again for ever. It should never come: results too large
// are replaced by a failure (send), summaries split.
func (u *Uplink) oversized(it *Item) bool {
	if len(it.Payload) <= protocol.MaxMessageBytes {
		return false
	}
	var m struct {
		ID   string `json:"id"`
		Node string `json:"node"`
		Kind string `json:"kind"`
	}
	_ = json.Unmarshal(it.Payload, &m)
	u.log.Error("message not sent: larger than a message may be; dropped", "topic", it.Topic, "kind", m.Kind, "node", m.Node,
		"bytes", len(it.Payload), "limit", protocol.MaxMessageBytes)
	u.cfg.Drop(m.ID, len(it.Payload))
	return true
}

// sendUp publishes a bundle of recs, or one message alone, in its own
// goroutine once its turn comes (see Order); false once ctx ended. A
// failed publish is left to the outbox's resend (results, reports) or to
// the ramdisks (hello, heartbeat), as before bundling.
func (u *Uplink) sendUp(ctx context.Context, fl *inFlight, keySet map[string]struct{}, recs []protocol.BundleRecord, one *Item, queued time.Time) bool {
	topic := protocol.BMCEvtTopic(u.cfg.Site)
	var payload []byte
	if one != nil {
		topic, payload = one.Topic, one.Payload
	} else {
		b, err := protocol.EncodeBundle(u.cfg.Site, recs, flate.BestSpeed)
		if err != nil {
			u.log.Error("bundle not made; its messages are sent again later", "messages", len(recs), "err", err)
			return true
		}
		payload = b
	}
	keys := make([]string, 0, len(keySet))
	for k := range keySet {
		keys = append(keys, k)
	}
	return fl.submit(ctx, keys, func() {
		u.flying.Add(1)
		defer u.flying.Add(-1)
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		start := u.cfg.Clock.Now()
		if err := u.cfg.Publish(pctx, topic, payload); err != nil {
			u.log.Debug("publish failed; will resend", "topic", topic, "messages", max(len(recs), 1), "err", err)
		} else if u.cfg.Observe != nil && !queued.IsZero() {
			u.cfg.Observe(start.Sub(queued), u.cfg.Clock.Now().Sub(start))
		}
	})
}
