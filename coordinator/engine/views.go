package engine

import (
	"maps"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/bmedge/bmedge/coordinator/fsm"
)

// Views of nodes for readers (the API, the web view). Readers never take
// the registry's lock and never wait on the loop: after each commit the
// loop publishes a snapshot of every node the batch touched (tx.forget),
// and readers read the snapshots, lock-free. A snapshot is a copy of the
// node as committed, never changed afterwards; it shares the node's maps
// and slices, which the engine and the state machine replace rather than
// change in place, and copies what they change in place (the operation,
// the step runs, the pending command). A reader therefore sees only
// committed states, and a caller told its change is done (the loop
// answers after publishing) reads it back.
//
// A reader may let the engine keep what it made of a snapshot (Views with
// keep), so that the next reader of an unchanged node copies it instead
// of building it again: a detail list of 1000 unchanged nodes is then
// mostly byte copying. A kept view is used again only for the same
// snapshot, the same key (the reader's say: the API's base URL, which its
// links name) and the same reachability of the node's site.

type keptView struct {
	snap   *fsm.Node
	key    string
	online bool
	v      any
}

// viewCache holds the published snapshots and the kept views.
type viewCache struct {
	byID  sync.Map // UUID → *fsm.Node (snapshot)
	names sync.Map // name → UUID
	// order is every published node's UUID, in the order of Each
	// (created_at, then UUID); replaced, never changed in place.
	order atomic.Pointer[[]string]
	kept  sync.Map // UUID → keptView

	// gen moves on after every publication (ViewsGen).
	gen atomic.Uint64

	mu sync.Mutex
	// subs are the watchers of node changes (SubscribeViews).
	subs map[*ViewSub]struct{}
}

// snapshotOf copies n for readers; see the rules above.
func snapshotOf(n *fsm.Node) *fsm.Node {
	c := *n
	if n.Op != nil {
		op := *n.Op
		op.Plan = append([]fsm.Action(nil), n.Op.Plan...)
		for i := range op.Plan {
			if s := op.Plan[i].Step; s != nil {
				cp := *s
				op.Plan[i].Step = &cp
			}
		}
		if sp := n.Op.SitePlan; sp != nil {
			cp := *sp
			cp.Cmds = append([]fsm.PlannedCmd(nil), sp.Cmds...)
			cp.Early = maps.Clone(sp.Early)
			op.SitePlan = &cp
		}
		c.Op = &op
	}
	c.CleanStep, c.DeployStep, c.ServiceStep = copyPtr(n.CleanStep), copyPtr(n.DeployStep), copyPtr(n.ServiceStep)
	c.Pending, c.Held, c.PlanStop = copyPtr(n.Pending), copyPtr(n.Held), copyPtr(n.PlanStop)
	c.InspectionStartedAt, c.InspectionFinishedAt = copyPtr(n.InspectionStartedAt), copyPtr(n.InspectionFinishedAt)
	c.AutomatedClean, c.SecureBoot = copyPtr(n.AutomatedClean), copyPtr(n.SecureBoot)
	return &c
}

func copyPtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	c := *p
	return &c
}

// publishAll publishes every node (at start, before the loop runs).
func (c *viewCache) publishAll(nodes map[string]*fsm.Node) {
	for id, n := range nodes {
		c.put(id, snapshotOf(n))
	}
	c.reorder(nodes)
	c.gen.Add(1)
}

// ViewsGen is a number that grows whenever what readers see of the nodes
// may have changed: a node's published snapshot, the nodes' order (Each)
// or the reachability of a site (which views show). While it stays the
// same, View, Views and Each give the same as before. A reader reads it
// before it reads the views, so that what it makes of them is current
// for the number it read.
func (e *Engine) ViewsGen() uint64 { return e.views.gen.Load() + e.sites.OnlineGen() }

// publish publishes the snapshots of the touched nodes as nodes now has
// them (a touched node no longer in nodes was deleted), then tells the
// watchers. The loop calls it after the batch's commit, before it sends
// or answers anything.
func (c *viewCache) publish(nodes map[string]*fsm.Node, touched map[string]struct{}) {
	if len(touched) == 0 {
		return
	}
	var added []string
	removed := false
	for id := range touched {
		n := nodes[id]
		if n == nil {
			if old, ok := c.byID.LoadAndDelete(id); ok {
				c.dropName(old.(*fsm.Node).Name, id)
				removed = true
			}
			c.kept.Delete(id)
			continue
		}
		if c.put(id, snapshotOf(n)) {
			added = append(added, id)
		}
	}
	switch {
	case removed:
		c.reorder(nodes)
	case len(added) > 0:
		c.appendOrder(nodes, added)
	}
	c.gen.Add(1)
	c.mu.Lock()
	for id := range touched {
		for s := range c.subs {
			select {
			case s.c <- id:
			default:
				s.lost.Store(true)
			}
		}
	}
	c.mu.Unlock()
}

// put stores a snapshot and keeps the name index; it reports whether the
// node is new.
func (c *viewCache) put(id string, snap *fsm.Node) (added bool) {
	old, had := c.byID.Swap(id, snap)
	if had {
		if o := old.(*fsm.Node); o.Name != snap.Name {
			c.dropName(o.Name, id)
		}
	}
	if snap.Name != "" {
		c.names.Store(snap.Name, id)
	}
	return !had
}

func (c *viewCache) dropName(name, id string) {
	if name != "" {
		c.names.CompareAndDelete(name, id)
	}
}

func less(a, b *fsm.Node) bool {
	if !a.CreatedAt.Equal(b.CreatedAt) {
		return a.CreatedAt.Before(b.CreatedAt)
	}
	return a.UUID < b.UUID
}

// reorder makes the order again from nodes.
func (c *viewCache) reorder(nodes map[string]*fsm.Node) {
	all := make([]*fsm.Node, 0, len(nodes))
	for _, n := range nodes {
		all = append(all, n)
	}
	sort.Slice(all, func(i, j int) bool { return less(all[i], all[j]) })
	ids := make([]string, len(all))
	for i, n := range all {
		ids[i] = n.UUID
	}
	c.order.Store(&ids)
}

// appendOrder adds new nodes: at the end when they sort after every
// other (nodes are created in time order), else by making it again.
func (c *viewCache) appendOrder(nodes map[string]*fsm.Node, added []string) {
	sort.Slice(added, func(i, j int) bool { return less(nodes[added[i]], nodes[added[j]]) })
	var cur []string
	if p := c.order.Load(); p != nil {
		cur = *p
	}
	if len(cur) > 0 {
		last := nodes[cur[len(cur)-1]]
		if last == nil || !less(last, nodes[added[0]]) {
			c.reorder(nodes)
			return
		}
	}
	ids := make([]string, 0, len(cur)+len(added))
	ids = append(append(ids, cur...), added...)
	c.order.Store(&ids)
}

// get finds a node's snapshot by UUID or name.
func (c *viewCache) get(ident string) *fsm.Node {
	if v, ok := c.byID.Load(ident); ok {
		return v.(*fsm.Node)
	}
	if id, ok := c.names.Load(ident); ok {
		if v, ok := c.byID.Load(id); ok {
			return v.(*fsm.Node)
		}
	}
	return nil
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
// (at least 1); cancel ends it. A node's change is sent once it is
// published: a reader of the node (View, Views) after the UUID arrived
// sees the change.
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

// forget marks a node the batch touches: its snapshot is published again
// (and its kept view dropped) after the commit. The loop holds the write
// lock.
func (t *tx) forget(id string) { t.touched[id] = struct{}{} }

// View runs fn on the node's published snapshot. fn must not keep or
// change n.
func (e *Engine) View(ident string, fn func(n *fsm.Node, siteOnline bool) error) error {
	n := e.views.get(ident)
	if n == nil {
		return errorf(NotFound, "Node %s could not be found.", ident)
	}
	return fn(n, e.sites.Online(n.Site))
}

// Each calls fn for every node's published snapshot, oldest first, until
// fn returns false. fn must not keep or change n.
func (e *Engine) Each(fn func(n *fsm.Node) bool) {
	p := e.views.order.Load()
	if p == nil {
		return
	}
	for _, id := range *p {
		v, ok := e.views.byID.Load(id)
		if !ok {
			continue
		}
		if !fn(v.(*fsm.Node)) {
			return
		}
	}
}

// Views returns, in the order of ids (UUIDs or names), what each node
// looks like to a reader: build runs on the node's snapshot and must not
// keep or change n; it may return n's maps and slices. finish, if not
// nil, runs on what build returned, and its result is what Views returns.
// A node that does not exist gets nil. With keep, the result is kept for
// the node and returned again, without build or finish, until the node
// changes, or to a call with another key, or after the reachability of
// the node's site changed.
func (e *Engine) Views(ids []string, key string, keep bool, build func(n *fsm.Node, siteOnline bool) any, finish func(any) any) []any {
	out := make([]any, len(ids))
	for i, ident := range ids {
		n := e.views.get(ident)
		if n == nil {
			continue
		}
		online := e.sites.Online(n.Site)
		if keep {
			if v, ok := e.views.kept.Load(n.UUID); ok {
				if kv := v.(keptView); kv.snap == n && kv.key == key && kv.online == online {
					out[i] = kv.v
					continue
				}
			}
		}
		out[i] = build(n, online)
		if finish != nil {
			out[i] = finish(out[i])
		}
		if keep {
			e.views.kept.Store(n.UUID, keptView{snap: n, key: key, online: online, v: out[i]})
		}
	}
	return out
}
