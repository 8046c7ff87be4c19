package engine

import (
	"context"
	"sync"
	"time"

	"github.com/bmedge/bmedge/coordinator/engine/readings"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/coordinator/store"
	"github.com/bmedge/bmedge/protocol"
)

// loopState is the loop's machinery: its queue of requests, the send
// queues and their publisher, and how it stops.
type loopState struct {
	pub      Publisher
	reqs     chan *request
	sendq    []sendQueue
	stopped  chan struct{}
	stopOnce sync.Once
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	// fatal is the database failure that stopped the engine
	// (storefail.go).
	fatal fatalState
}

type request struct {
	fn   func(tx *tx) error
	done chan error
}

// tx is one batch of work: what changed, what to send, whom to ack.
type tx struct {
	e     *Engine
	now   time.Time
	batch store.Batch
	dirty map[string]*fsm.Node
	// touched are the nodes whose readers' snapshots are published
	// again after the commit (tx.forget).
	touched map[string]struct{}
	sends   []fsm.Outgoing
	// urgent are the first commands of verbs on idle nodes: they go out
	// ahead of the stream of other nodes' step commands, so a verb's
	// latency does not depend on how busy the site is.
	urgent []fsm.Outgoing
	acks   map[string][]string
	// histNew are the history keys this batch adds, per node.
	histNew map[string][]string
	// events are the event-log records this batch wrote, per node, so
	// that a second health report of a node in the batch adds to them
	// (health.go).
	events map[string]readings.Events
}

// sendQueue is one publisher's queue; urgent messages go first.
type sendQueue struct {
	urgent, normal chan fsm.Outgoing
}

func (e *Engine) newTx() *tx {
	return &tx{e: e, now: e.cfg.Clock.Now(), dirty: map[string]*fsm.Node{}, touched: map[string]struct{}{}, acks: map[string][]string{}}
}

func phaseOf(n *fsm.Node) string {
	if n.Op == nil {
		return ""
	}
	return string(n.Op.Phase)
}

// apply records the machine's output for n in the batch. Every change to
// a node goes through apply or t.dirty: both drop the readers' kept view
// of the node.
func (t *tx) apply(n *fsm.Node, out fsm.Output) {
	t.forget(n.UUID)
	switch {
	case out.Reject != "" && out.Late:
		t.e.rejects.Info("message ignored", "message ignored", "node", n.Ident(), "reason", out.Reject)
	case out.Reject != "":
		t.e.rejects.Warn("message rejected", "message rejected", "node", n.Ident(), "reason", out.Reject)
	}
	if out.Changed {
		t.dirty[n.UUID] = n
		// What a node keeps of a site's text stays bounded, whatever
		// the machine made of it (fsm.MaxText).
		n.LastError, n.MaintenanceReason = fsm.BoundText(n.LastError, 0), fsm.BoundText(n.MaintenanceReason, 0)
	}
	for _, h := range out.History {
		h.Event = fsm.BoundText(h.Event, 0)
		t.addHistory(n, h)
		t.e.cfg.Metrics.History(h)
		if h.Severity == "ERROR" {
			t.e.cfg.Log.Warn("node error", "node", n.Ident(), "event", h.Event)
		} else {
			t.e.cfg.Log.Debug("node event", "node", n.Ident(), "event", h.Event)
		}
	}
	if out.BMCWarnings > 0 {
		et := "power"
		for _, h := range out.History {
			if h.Severity == "WARNING" {
				et = h.EventType
				break
			}
		}
		t.e.cfg.Metrics.BMCWarnings(et, out.BMCWarnings)
	}
	if out.Inventory != nil {
		t.storeInventory(n, out)
	}
	if len(out.Ports) > 0 {
		t.inspectedPorts(n, out.Ports)
	}
	if out.Inventory != nil {
		t.linkPorts(n, out.Inventory)
	}
	if len(out.PortChanges) > 0 {
		t.changePorts(n, out.PortChanges)
	}
	t.sends = append(t.sends, out.Send...)
}

// run applies fn to n while accounting for phase changes (for the
// concurrency caps).
func (t *tx) run(n *fsm.Node, fn func() fsm.Output) { t.runKeeping(n, fn, false) }

// runQuiet is run for a call that leaves the node as it is unless its
// output says otherwise (the machine's Tick: most ticks of a busy node
// find nothing to do): a quiet output is not applied, so that the node's
// published view, and what readers made of it, stay.
func (t *tx) runQuiet(n *fsm.Node, fn func() fsm.Output) { t.runKeeping(n, fn, true) }

// runKeeping is run and runQuiet: with keepQuiet, a quiet output that
// changed no phase is not applied.
func (t *tx) runKeeping(n *fsm.Node, fn func() fsm.Output, keepQuiet bool) {
	before := phaseOf(n)
	out := fn()
	t.e.cfg.Metrics.Node(n, t.now)
	after := phaseOf(n)
	if before != after {
		t.e.reg.phaseCount[before]--
		t.e.reg.phaseCount[after]++
	}
	if !keepQuiet || !quiet(&out) || before != after {
		t.apply(n, out)
	}
}

// quiet tells whether an output has nothing in it.
func quiet(o *fsm.Output) bool {
	return !o.Changed && len(o.Send) == 0 && len(o.History) == 0 && o.Inventory == nil && o.Reject == "" && !o.Late &&
		o.BMCWarnings == 0 && len(o.Ports) == 0 && o.PluginData == nil && len(o.PortChanges) == 0
}

func (e *Engine) commit(t *tx) error {
	for _, n := range t.dirty {
		t.forget(n.UUID)
		b, err := e.encodeNode(t, n)
		if err != nil {
			return err
		}
		t.batch.Set(store.NodePrefix+n.UUID, b)
	}
	start := time.Now()
	if err := e.write(&t.batch); err != nil {
		e.fail(err)
		return err
	}
	e.cfg.Metrics.Committed(time.Since(start), t.batch.Size())
	for _, n := range t.dirty {
		e.publishAuth(n)
	}
	e.views.publish(e.reg.nodes, t.touched)
	for _, o := range t.urgent {
		e.enqueue(o, true)
	}
	for _, o := range t.sends {
		e.enqueue(o, false)
	}
	for topic, ids := range t.acks {
		e.enqueue(fsm.Outgoing{Topic: topic, Msg: &protocol.Message{V: protocol.Version, Kind: protocol.KindAck, ID: "ack", Sent: t.now, AckIDs: ids}}, false)
	}
	return nil
}

// maxBatch is the most requests one batch takes; callerBatchOthers is
// the most requests without a waiting caller (agent messages, ticks) that
// a batch with waiting callers takes.
const (
	maxBatch          = 1024
	callerBatchOthers = 64
)

func (e *Engine) loop() {
	defer e.run.wg.Done()
	var held []*request
	for {
		batch := held
		held = nil
		if len(batch) == 0 {
			select {
			case <-e.run.stopped:
				return
			case r := <-e.run.reqs:
				batch = append(batch, r)
			}
		}
	more:
		for len(batch) < maxBatch {
			select {
			case r := <-e.run.reqs:
				batch = append(batch, r)
			default:
				break more
			}
		}
		batch, held = callersFirst(batch)
		if e.Err() != nil {
			// Stopped for a database failure: no more work, and
			// callers hear why at once.
			for _, r := range append(batch, held...) {
				if r.done != nil {
					r.done <- e.stoppedError()
				}
			}
			held = nil
			continue
		}
		e.reg.mu.Lock()
		t := e.newTx()
		errs := make([]error, len(batch))
		for i, r := range batch {
			errs[i] = e.runHeld(r.fn, t)
		}
		err := e.commit(t)
		e.reg.mu.Unlock()
		if err == nil && t.batch.Len() == 0 && e.answerConfirmed(batch, errs) {
			continue
		}
		for i, r := range batch {
			if r.done == nil {
				continue
			}
			switch {
			case err != nil && e.Err() != nil:
				r.done <- e.stoppedError()
			case err != nil:
				r.done <- errorf(Unavailable, "the coordinator could not store the change: %v", err)
			default:
				r.done <- errs[i]
			}
		}
	}
}

// callersFirst splits a batch that holds waiting callers (API requests)
// and more than callerBatchOthers other requests: the callers and the
// first callerBatchOthers others go now, the other others (in their
// order) first in the next batch. A batch's synced commit takes longer
// the more it writes (while nodes clean, a batch of agent messages
// rewrites a hundred node records), and a caller waits for the commit in
// flight and then for its own: its own is now a small one. Callers keep
// their order, and so do the others; a caller's request may go ahead of
// agent messages queued before it, as if it had come first (agent
// messages are handled asynchronously: nobody waits on their order with
// a caller's).
func callersFirst(batch []*request) (now, later []*request) {
	callers := 0
	for _, r := range batch {
		if r.done != nil {
			callers++
		}
	}
	if callers == 0 || len(batch)-callers <= callerBatchOthers {
		return batch, nil
	}
	now = make([]*request, 0, callers+callerBatchOthers)
	others := 0
	for _, r := range batch {
		switch {
		case r.done != nil:
			now = append(now, r)
		case others < callerBatchOthers:
			now = append(now, r)
			others++
		default:
			later = append(later, r)
		}
	}
	return now, later
}

func (e *Engine) ticker() {
	defer e.run.wg.Done()
	tk := e.cfg.Clock.NewTicker(e.cfg.TickInterval)
	defer tk.Stop()
	for {
		select {
		case <-e.run.stopped:
			return
		case <-tk.C():
			_ = e.tick(false)
		}
	}
}

// tick submits one clock tick of every node with an operation (or a
// ramdisk kept for fast track): timeouts, resends; with wait it returns
// once the tick is committed.
func (e *Engine) tick(wait bool) error {
	return e.submit(func(t *tx) error {
		for _, n := range e.reg.nodes {
			// A resting node is ticked only while it keeps its
			// ramdisk for fast track (powered off at the timeout).
			if n.Op == nil && n.FastTrackUntil.IsZero() {
				continue
			}
			online := e.sites.Online(n.Site)
			t.runQuiet(n, func() fsm.Output { out := e.m.Tick(n, t.now, online); e.cfg.Metrics.Resent(len(out.Send)); return out })
		}
		return nil
	}, wait)
}

// submit queues fn for the loop; with wait it returns fn's error after
// the batch is durably committed.
func (e *Engine) submit(fn func(t *tx) error, wait bool) error {
	if e.Err() != nil {
		return e.stoppedError()
	}
	r := &request{fn: fn}
	if wait {
		r.done = make(chan error, 1)
	}
	select {
	case e.run.reqs <- r:
	case <-e.run.stopped:
		return errorf(Unavailable, "the coordinator is shutting down")
	case <-e.run.fatal.failed:
		return e.stoppedError()
	}
	if !wait {
		return nil
	}
	select {
	case err := <-r.done:
		return err
	case <-e.run.stopped:
		return errorf(Unavailable, "the coordinator is shutting down")
	case <-e.run.fatal.failed:
		// The loop may be stuck in the database that failed.
		return e.stoppedError()
	}
}

// Do runs fn in the loop and waits for its commit.
func (e *Engine) do(fn func(t *tx) error) error { return e.submit(fn, true) }

// Settle returns once the loop has run and committed every request
// submitted before the call: the agent messages handed to HandleMessage
// (and the broker's notes of who published) and the ticks. Agent
// messages keep their order among themselves, and a waiting caller's
// request may go ahead of them, so Settle's marker goes as one of them,
// then waits for a commit after it.
func (e *Engine) Settle() error {
	ran := make(chan struct{})
	if err := e.submit(func(*tx) error { close(ran); return nil }, false); err != nil {
		return err
	}
	select {
	case <-ran:
	case <-e.run.stopped:
		return errorf(Unavailable, "the coordinator is shutting down")
	case <-e.run.fatal.failed:
		return e.stoppedError()
	}
	return e.do(func(*tx) error { return nil })
}

// write hands a batch to the committer: every write of the engine goes
// here, the loop's batches and the few made outside it (loading,
// catalog entries, a deleted node's history).
func (e *Engine) write(b *store.Batch) error {
	ctx := e.run.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	return e.commits.Commit(ctx, b)
}
