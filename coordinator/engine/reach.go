package engine

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/bmedge/bmedge/coordinator/engine/reach"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/coordinator/store"
	"github.com/bmedge/bmedge/protocol"
)

// The sites' reachability is package reach's; this is the loop's side:
// what a change of reachability means to the nodes, and the records'
// writes in the batch. reach's package comment says how reachability is
// counted.

// reachSaveInterval is how often a connected site's last-seen time is
// written.
var reachSaveInterval = 15 * time.Second

func (e *Engine) reach() *reach.Book { return e.siteSt.reach }

// siteState is what the engine keeps of its sites beside the register
// (sites.Book): their reachability (reach.go) and their image pre-seeds
// (sitecache.go), each behind its own lock.
type siteState struct {
	reach *reach.Book
	cache *cacheBook
}

// reachSaver writes the last-seen time of the connected sites every
// interval, through the loop, until the engine stops (started by Start).
func (e *Engine) reachSaver(interval time.Duration) {
	defer e.run.wg.Done()
	tk := e.cfg.Clock.NewTicker(interval)
	defer tk.Stop()
	for {
		select {
		case <-e.run.stopped:
			return
		case <-tk.C():
		}
		if !e.anySiteOnline() {
			continue
		}
		_ = e.submit(func(t *tx) error {
			b := e.reach()
			for site, online := range e.sites.OnlineSites() {
				if online {
					r := b.Site(site)
					r.LastSeen = t.now
					e.saveReach(t, site, r)
				}
			}
			return nil
		}, false)
	}
}

func (e *Engine) anySiteOnline() bool { return e.sites.AnyOnline() }

func (e *Engine) saveReach(t *tx, site string, r *reach.Site) {
	v, err := json.Marshal(r)
	if err != nil {
		e.cfg.Log.Error("site reachability not stored", "site", site, "err", err)
		return
	}
	t.batch.Set(store.ReachPrefix+site, v)
	r.Saved = t.now
}

// noteSiteHeard records that a message of the site was taken: the site
// is heard, and when it becomes unreachable its outage begins no earlier.
// Cheap: nothing is written (the saver and presence changes write).
// Runs in the engine's loop.
func (e *Engine) noteSiteHeard(t *tx, site string) {
	r := e.reach().Site(site)
	if t.now.After(r.Heard) {
		r.Heard = t.now
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
	r := e.reach().Site(site)
	was := e.sites.SetOnline(site, online)
	e.reach().SetUp(site, online)
	sb := online && e.reach().RunsSiteBroker(site)
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
			e.cfg.Log.Info("site reachable", "site", site, "busy_nodes", busy)
		} else {
			e.cfg.Log.Info("site reachable again: its busy nodes' deadlines move by the time it was unreachable", "site", site,
				"unreachable_since", since.UTC().Format(time.RFC3339), "unreachable_for", t.now.Sub(since).Round(time.Second).String(), "busy_nodes", busy)
		}
		r.OfflineSince = time.Time{}
		r.LastSeen, r.Heard = t.now, t.now
		e.saveReach(t, site, r)
	case !online && was:
		heard := r.Heard
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
		e.cfg.Log.Warn("site unreachable: its nodes do not time out until it returns", "site", site,
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
		e.cfg.Log.Info("heartbeat summary from a site counted offline: its edge agent is connected again", "site", site)
		e.sitePresence(t, site, true)
	}
	e.noteSiteHeard(t, site)
	r := e.reach().Site(site)
	r.Queued, r.QueuedAt = msg.Queued, t.now
	if t.now.Sub(r.Saved) >= e.reach().SaveEvery {
		e.saveReach(t, site, r)
	}
}

// siteReachView is a site's reachability for Sites; e.reg.mu is held.
func (e *Engine) siteReachView(site string) (lastSeen, offlineSince *time.Time, queued int, queuedAt *time.Time) {
	return e.reach().View(site, e.sites.Online(site))
}

// NoteSiteBroker records what a site's presence says of its site broker
// (an online presence says it; an offline one keeps what the last online
// one said: the agent's ramdisks still use its site broker). Called
// before the presence goes to the loop, for the broker's
// Authenticate; the loop stores it (sitePresence).
func (e *Engine) NoteSiteBroker(site string, online, siteBroker bool) {
	e.reach().NoteSiteBroker(site, online, siteBroker)
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
	if b.Up(site) || !b.Mark(site) {
		return
	}
	err := e.submit(func(t *tx) error {
		b.Unmark(site)
		if e.sites.Has(site) && !e.sites.Online(site) {
			e.cfg.Log.Info("message from the edge agent of a site counted offline: it is connected", "site", site)
			e.sitePresence(t, site, true)
		}
		return nil
	}, false)
	if err != nil {
		b.Unmark(site)
	}
}
