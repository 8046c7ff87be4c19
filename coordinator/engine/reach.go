package engine

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/coordinator/store"
	"github.com/bmedge/bmedge/protocol"
)

// Reachability of the sites.
//
// A site is reachable while its edge agent's presence says online (the
// broker holds its connection). When the offline presence comes (the
// agent's last will: the broker noticed the dead connection), the site
// is unreachable since it was last heard (fsm.OutageStart); while it is,
// fsm.Tick fails none of its nodes for silence. When it connects again,
// fsm.SiteReturned moves each busy node's deadline by the outage, so that
// a timeout counts only the time the site was reachable.
//
// What the coordinator knows of each site is stored (store.ReachPrefix):
// when it was last seen (written on every change of presence, and every
// reachSaveInterval while the site is connected, not on every message),
// since when it is unreachable, and the depth of its edge agent's outbox
// as the last heartbeat summary gave it. A restarted coordinator has
// heard nobody: every site counts as unreachable since it was last seen,
// until it connects again, so that the coordinator's own downtime is not
// counted against the nodes either.
//
// Only the site's edge agent speaks for the site: the broker takes its
// presence (and last will) from the agent's own client ID only
// (PresenceClient), not from the site's other clients, and any message
// from that client while the site counts as offline brings it back
// (Published): the agent is connected, whatever an earlier connection's
// will said.

// reachSaveInterval is how often a connected site's last-seen time is
// written.
var reachSaveInterval = 15 * time.Second

// siteReach is what the coordinator knows of a site's reachability.
type siteReach struct {
	// LastSeen is when the site was last heard from, or last known
	// connected (at most reachSaveInterval old while it is connected).
	LastSeen time.Time `json:"last_seen,omitzero"`
	// OfflineSince is when the site became unreachable; zero while it is
	// reachable, or if it was never seen.
	OfflineSince time.Time `json:"offline_since,omitzero"`
	// Queued is its edge agent's outbox depth (results and reports the
	// coordinator has not acknowledged) in the last heartbeat summary,
	// at QueuedAt.
	Queued   int       `json:"queued,omitempty"`
	QueuedAt time.Time `json:"queued_at,omitzero"`
	// SiteBroker is what the agent's last online presence said: it runs
	// the site broker, so the coordinator's broker refuses the site's
	// ramdisks. Stored, so that a restarted coordinator refuses them
	// before the agent connects again.
	SiteBroker bool `json:"site_broker,omitempty"`

	// heard is when a message of the site was last taken (not stored).
	heard time.Time
	// saved is when the record was last written.
	saved time.Time
}

// reachBook holds an engine's siteReach records. It is changed only in
// the engine's loop (which holds e.reg.mu for writing) or while loading, and
// read under e.reg.mu.
type reachBook struct {
	sites map[string]*siteReach
	// saveEvery is reachSaveInterval as the engine started.
	saveEvery time.Duration

	// Lock-free copies for the broker's goroutines (Authenticate,
	// Published): siteBroker holds the sites (name → true) whose agent
	// runs a site broker, up each site's online state as the loop last
	// set it, and marking the sites a Published has asked the loop to
	// bring back online (one request at a time).
	siteBroker, up, marking sync.Map
}

// runsSiteBroker tells whether the site's edge agent said it runs the
// site broker.
func (b *reachBook) runsSiteBroker(site string) bool {
	v, _ := b.siteBroker.Load(site)
	return v == true
}

func (e *Engine) reach() *reachBook { return e.reachBk }

func (b *reachBook) site(name string) *siteReach {
	r, ok := b.sites[name]
	if !ok {
		r = &siteReach{}
		b.sites[name] = r
	}
	return r
}

// loadReach restores what the coordinator knew of its sites'
// reachability. Runs at start, before the loop: no site is online yet,
// and each counts as unreachable since it was last seen.
func (e *Engine) loadReach() error {
	b := e.reach()
	err := e.st.Scan(store.ReachPrefix, func(k string, v []byte) error {
		var r siteReach
		if err := json.Unmarshal(v, &r); err != nil {
			return fmt.Errorf("corrupt site reachability record %s: %w", k, err)
		}
		if r.OfflineSince.IsZero() {
			r.OfflineSince = r.LastSeen
		}
		r.saved = r.LastSeen
		b.sites[k[len(store.ReachPrefix):]] = &r
		if r.SiteBroker {
			b.siteBroker.Store(k[len(store.ReachPrefix):], true)
		}
		return nil
	})
	return err
}

// reachSaver writes the last-seen time of the connected sites every
// interval, through the loop, until the engine stops (started by Start).
func (e *Engine) reachSaver(interval time.Duration) {
	defer e.run.wg.Done()
	tk := time.NewTicker(interval)
	defer tk.Stop()
	for {
		select {
		case <-e.run.stopped:
			return
		case <-tk.C:
		}
		if !e.anySiteOnline() {
			continue
		}
		_ = e.submit(func(t *tx) error {
			b := e.reach()
			for site, online := range e.sites.OnlineSites() {
				if online {
					r := b.site(site)
					r.LastSeen = t.now
					e.saveReach(t, site, r)
				}
			}
			return nil
		}, false)
	}
}

func (e *Engine) anySiteOnline() bool { return e.sites.AnyOnline() }

func (e *Engine) saveReach(t *tx, site string, r *siteReach) {
	v, err := json.Marshal(r)
	if err != nil {
		e.log.Error("site reachability not stored", "site", site, "err", err)
		return
	}
	t.batch.Set(store.ReachPrefix+site, v)
	r.saved = t.now
}

// noteSiteHeard records that a message of the site was taken: the site
// is heard, and when it becomes unreachable its outage begins no earlier.
// Cheap: nothing is written (the saver and presence changes write).
// Runs in the engine's loop.
func (e *Engine) noteSiteHeard(t *tx, site string) {
	r := e.reach().site(site)
	if t.now.After(r.heard) {
		r.heard = t.now
	}
	if e.sites.Online(site) && t.now.After(r.LastSeen) {
		r.LastSeen = t.now
	}
}

// sitePresence takes a site's presence (its edge agent connected or
// gone). Runs in the engine's loop.
func (e *Engine) sitePresence(t *tx, site string, online bool) {
	if !e.sites.Has(site) {
		// A deleted site's last will, or a retained presence it left.
		return
	}
	r := e.reach().site(site)
	was := e.sites.SetOnline(site, online)
	e.reach().up.Store(site, online)
	sb := online && e.reach().runsSiteBroker(site)
	if online && sb != r.SiteBroker {
		r.SiteBroker = sb
		e.saveReach(t, site, r)
	}
	switch {
	case online && !was:
		since := r.OfflineSince
		busy := 0
		for _, n := range e.reg.nodes {
			if n.Site == site && (n.Op != nil || n.PlanStop != nil) {
				if n.Op != nil {
					busy++
				}
				t.run(n, func() fsm.Output { return e.m.SiteReturned(n, since, t.now) })
			}
		}
		if since.IsZero() {
			e.log.Info("site reachable", "site", site, "busy_nodes", busy)
		} else {
			e.log.Info("site reachable again: its busy nodes' deadlines move by the time it was unreachable", "site", site,
				"unreachable_since", since.UTC().Format(time.RFC3339), "unreachable_for", t.now.Sub(since).Round(time.Second).String(), "busy_nodes", busy)
		}
		r.OfflineSince = time.Time{}
		r.LastSeen, r.heard = t.now, t.now
		e.saveReach(t, site, r)
	case !online && was:
		heard := r.heard
		busy := 0
		for _, n := range e.reg.nodes {
			if n.Site != site {
				continue
			}
			if n.LastHeartbeat.After(heard) {
				heard = n.LastHeartbeat
			}
			if n.Op != nil {
				busy++
			}
		}
		since := fsm.OutageStart(heard, t.now)
		r.OfflineSince, r.LastSeen = since, since
		e.log.Warn("site unreachable: its nodes do not time out until it returns", "site", site,
			"last_heard", since.UTC().Format(time.RFC3339), "busy_nodes", busy, "queued_at_site", r.Queued)
		e.saveReach(t, site, r)
	case online:
		e.noteSiteHeard(t, site)
	}
}

// noteSiteSummary records what a site's heartbeat summary says of the
// site itself (its outbox depth). Runs in the engine's loop.
//
// A summary comes only over a live connection of the site's edge agent,
// after any last will of an earlier connection (a broker publishes a
// connection's will after everything it read from it). So a summary while
// the site counts as offline means the agent is connected again, and the
// site is taken as reachable: its online presence may have come before
// the old connection's will (an agent that reconnects before the broker
// noticed the dead connection takes its session over, and the broker
// then sends the old connection's will), which would otherwise leave a
// connected site offline, its commands never resent.
func (e *Engine) noteSiteSummary(t *tx, site string, msg *protocol.Message) {
	if e.sites.Has(site) && !e.sites.Online(site) {
		e.log.Info("heartbeat summary from a site counted offline: its edge agent is connected again", "site", site)
		e.sitePresence(t, site, true)
	}
	e.noteSiteHeard(t, site)
	r := e.reach().site(site)
	r.Queued, r.QueuedAt = msg.Queued, t.now
	if t.now.Sub(r.saved) >= e.reach().saveEvery {
		e.saveReach(t, site, r)
	}
}

// siteReachView is a site's reachability for Sites; e.reg.mu is held.
func (e *Engine) siteReachView(site string) (lastSeen, offlineSince *time.Time, queued int, queuedAt *time.Time) {
	r, ok := e.reach().sites[site]
	if !ok {
		return nil, nil, 0, nil
	}
	ptr := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		return &t
	}
	if !e.sites.Online(site) {
		offlineSince = ptr(r.OfflineSince)
	}
	return ptr(r.LastSeen), offlineSince, r.Queued, ptr(r.QueuedAt)
}

// NoteSiteBroker records what a site's presence says of its site broker
// (an online presence says it; an offline one keeps what the last online
// one said: the agent's ramdisks still use its site broker). Called
// before the presence goes to the loop, for the broker's
// Authenticate; the loop stores it (sitePresence).
func (e *Engine) NoteSiteBroker(site string, online, siteBroker bool) {
	switch {
	case online && siteBroker:
		e.reach().siteBroker.Store(site, true)
	case online:
		e.reach().siteBroker.Delete(site)
	}
}

// PresenceClient implements mqttbroker.PresenceOwner: a site's presence
// is its edge agent's (client ID SiteClientID), not any other client's
// with the site's credential; a node's is its ramdisk's.
func (e *Engine) PresenceClient(user string) string {
	if site, ok := strings.CutPrefix(user, "site:"); ok {
		return SiteClientID(site)
	}
	if node, ok := strings.CutPrefix(user, "node:"); ok {
		return NodeClientID(node)
	}
	return ""
}

// Published implements mqttbroker.PublishObserver: a message from a
// site's edge agent (its own client ID) while the site counts as offline
// means the agent is connected, and the site is brought back online, as
// a heartbeat summary does (noteSiteSummary). An offline presence that
// came from an earlier connection's will, after the agent had connected
// again, is so undone by the agent's next message. Runs on the broker's
// goroutines, before the message is delivered; it reads only lock-free
// copies and asks the loop only when the site counts as offline.
func (e *Engine) Published(user, clientID, topic string) {
	site, ok := strings.CutPrefix(user, "site:")
	if !ok || clientID != SiteClientID(site) || topic == protocol.SitePresenceTopic(site) {
		return
	}
	b := e.reach()
	if v, _ := b.up.Load(site); v == true {
		return
	}
	if _, asked := b.marking.LoadOrStore(site, true); asked {
		return
	}
	err := e.submit(func(t *tx) error {
		b.marking.Delete(site)
		if e.sites.Has(site) && !e.sites.Online(site) {
			e.log.Info("message from the edge agent of a site counted offline: it is connected", "site", site)
			e.sitePresence(t, site, true)
		}
		return nil
	}, false)
	if err != nil {
		b.marking.Delete(site)
	}
}
