package engine

import (
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/protocol"
)

// loadReach restores what the coordinator knew of its sites'
// reachability. Runs at start, before the loop.
func (e *Engine) loadReach() error { return nil }

// sitePresence takes a site's presence (its edge agent connected or
// gone). Runs in the engine's loop.
func (e *Engine) sitePresence(t *tx, site string, online bool) {
	was := e.siteOnline[site]
	e.siteOnline[site] = online
	if online != was {
		e.log.Info("site presence", "site", site, "online", online)
	}
	if online && !was {
		for _, n := range e.nodes {
			if n.Site == site && n.Op != nil {
				t.run(n, func() fsm.Output { return e.m.SiteBack(n, t.now) })
			}
		}
	}
}

// noteSiteSummary records what a site's heartbeat summary says of the
// site itself (its outbox depth). Runs in the engine's loop.
func (e *Engine) noteSiteSummary(t *tx, site string, msg *protocol.Message) {}
