package engine

import (
	"sync"
	"sync/atomic"

	"github.com/bmedge/bmedge/coordinator/fsm"
)

// Views of nodes for readers (the API). A reader builds what it shows of
// a node under the read lock, finishes it (encodes it) after the lock is
// released, and may let the engine keep the result, so that the next
// reader of an unchanged node copies it instead of building it again: a
// detail list of 1000 unchanged nodes is then mostly byte copying.
//
// A kept view is dropped whenever the engine changes its node: every
// change to a node goes through tx.apply or tx.dirty in the loop, under
// the write lock, and both drop the node's view and move its version on
// (tx.forget). A view finished after the lock was released is kept only
// if its node's version did not move meanwhile. A view is also kept with
// its key (the reader's say: the API's base URL, which its links name)
// and the site's reachability it was built with, and is used again only
// for the same ones.

// viewChunk is how many nodes a reader looks at per hold of the read lock,
// so that the engine loop, waiting for the write lock, is never held up
// by a whole list.
const viewChunk = 64

type keptView struct {
	key    string
	online bool
	v      any
}

// viewCache holds the kept views and the nodes' view versions by UUID.
type viewCache struct {
	mu  sync.Mutex
	m   map[string]keptView
	ver map[string]uint64
	seq uint64
	// subs are the watchers of node changes (SubscribeViews).
	subs map[*ViewSub]struct{}
}

func (c *viewCache) forget(id string) {
	c.mu.Lock()
	if c.m == nil {
		c.m, c.ver = map[string]keptView{}, map[string]uint64{}
	}
	c.seq++
	c.ver[id] = c.seq
	delete(c.m, id)
	for s := range c.subs {
		select {
		case s.c <- id:
		default:
			s.lost.Store(true)
		}
	}
	c.mu.Unlock()
}

// ViewSub receives the UUIDs of nodes as the engine changes them (one
// UUID per change, in order). The engine never waits for a watcher:
// when C is full the UUID is dropped and Lost reports it, so that the
// watcher reads everything it shows again.
type ViewSub struct {
	C    <-chan string
	c    chan string
	lost atomic.Bool
}

// Lost reports, once, that changes were dropped since the last call.
func (s *ViewSub) Lost() bool { return s.lost.Swap(false) }

// SubscribeViews starts a watch of node changes with room for buf UUIDs
// (at least 1); cancel ends it. A node's change is sent when the loop
// makes it, under the write lock: a reader of the node (View, Views)
// after the UUID arrived sees the change.
func (e *Engine) SubscribeViews(buf int) (sub *ViewSub, cancel func()) {
	ch := make(chan string, max(1, buf))
	sub = &ViewSub{C: ch, c: ch}
	e.views.mu.Lock()
	if e.views.subs == nil {
		e.views.subs = map[*ViewSub]struct{}{}
	}
	e.views.subs[sub] = struct{}{}
	e.views.mu.Unlock()
	return sub, func() {
		e.views.mu.Lock()
		delete(e.views.subs, sub)
		e.views.mu.Unlock()
	}
}

// forget drops the kept view of a node the batch changes. The loop holds
// the write lock.
func (t *tx) forget(id string) { t.e.views.forget(id) }

// Views returns, in the order of ids (UUIDs or names), what each node
// looks like to a reader: build runs under the read lock (a few nodes per
// hold) and must not keep n; it may return n's maps and slices, which the
// engine and the state machine replace rather than change in place.
// finish, if not nil, runs on what build returned after the lock is
// released, and its result is what Views returns. A node that does not
// exist gets nil. With keep, the result is kept for the node and returned
// again, without build or finish, until the node changes, or to a call
// with another key, or after the reachability of the node's site changed.
func (e *Engine) Views(ids []string, key string, keep bool, build func(n *fsm.Node, siteOnline bool) any, finish func(any) any) []any {
	out := make([]any, len(ids))
	type miss struct {
		i      int
		id     string
		ver    uint64
		online bool
	}
	var misses []miss
	for start := 0; start < len(ids); start += viewChunk {
		end := min(start+viewChunk, len(ids))
		misses = misses[:0]
		e.reg.mu.RLock()
		e.views.mu.Lock()
		for i := start; i < end; i++ {
			n, err := e.lookup(ids[i])
			if err != nil {
				continue
			}
			online := e.sites.Online(n.Site)
			if kv, ok := e.views.m[n.UUID]; keep && ok && kv.key == key && kv.online == online {
				out[i] = kv.v
				continue
			}
			out[i] = build(n, online)
			misses = append(misses, miss{i: i, id: n.UUID, ver: e.views.ver[n.UUID], online: online})
		}
		if start == 0 && keep {
			e.pruneViews()
		}
		e.views.mu.Unlock()
		e.reg.mu.RUnlock()
		for _, m := range misses {
			if finish != nil {
				out[m.i] = finish(out[m.i])
			}
			if !keep {
				continue
			}
			e.views.mu.Lock()
			if e.views.ver[m.id] == m.ver {
				if e.views.m == nil {
					e.views.m, e.views.ver = map[string]keptView{}, map[string]uint64{}
				}
				e.views.m[m.id] = keptView{key: key, online: m.online, v: out[m.i]}
			}
			e.views.mu.Unlock()
		}
	}
	return out
}

// pruneViews drops the kept views and versions of deleted nodes once
// they are many. The caller holds the read lock and views.mu.
func (e *Engine) pruneViews() {
	if len(e.views.m)+len(e.views.ver) <= 2*len(e.reg.nodes)+512 {
		return
	}
	for id := range e.views.m {
		if _, ok := e.reg.nodes[id]; !ok {
			delete(e.views.m, id)
		}
	}
	for id := range e.views.ver {
		if _, ok := e.reg.nodes[id]; !ok {
			delete(e.views.ver, id)
		}
	}
}
