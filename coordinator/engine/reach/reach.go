// Package reach is what the coordinator knows of its sites'
// reachability: per site when it was last heard and seen, since when it
// is unreachable, its edge agent's outbox depth, whether it runs a site
// broker; and lock-free copies for the broker's goroutines. The engine's
// loop changes the records (and stores them in its batches) and applies
// what a change of reachability means to the nodes; this package holds
// no node and decides nothing of their lifecycle.
package reach

import (
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/bmedge/bmedge/coordinator/store"
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
// Book.SaveEvery while the site is connected, not on every message),
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

// Site is what the coordinator knows of a site's reachability.
type Site struct {
	// LastSeen is when the site was last heard from, or last known
	// connected (at most Book.SaveEvery old while it is connected).
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

	// Heard is when a message of the site was last taken (not stored).
	Heard time.Time `json:"-"`
	// Saved is when the record was last written (not stored).
	Saved time.Time `json:"-"`
}

// Book holds the sites' records. The records are changed only in the
// engine's loop (which holds the registry's lock for writing) or while
// loading, and read under that lock (View); the lock-free copies are
// read anywhere.
type Book struct {
	sites map[string]*Site
	// SaveEvery is how often a connected site's last-seen time is
	// written.
	SaveEvery time.Duration

	// siteBroker holds the sites (name → true) whose agent runs a site
	// broker, up each site's online state as the loop last set it, and
	// marking the sites a broker goroutine has asked the loop to bring
	// back online (one request at a time).
	siteBroker, up, marking sync.Map
}

// New returns an empty book.
func New(saveEvery time.Duration) *Book {
	return &Book{sites: map[string]*Site{}, SaveEvery: saveEvery}
}

// Site returns the site's record, made empty when there is none (loop).
func (b *Book) Site(name string) *Site {
	r, ok := b.sites[name]
	if !ok {
		r = &Site{}
		b.sites[name] = r
	}
	return r
}

// Lookup returns the site's record, nil when there is none.
func (b *Book) Lookup(name string) *Site { return b.sites[name] }

// Delete forgets a deleted site's record.
func (b *Book) Delete(name string) { delete(b.sites, name) }

// Load restores the records at start: no site is online yet, and each
// counts as unreachable since it was last seen.
func (b *Book) Load(rd store.Reader) error {
	return rd.Scan(store.ReachPrefix, func(k string, v []byte) error {
		var r Site
		if err := json.Unmarshal(v, &r); err != nil {
			return fmt.Errorf("corrupt site reachability record %s: %w", k, err)
		}
		if r.OfflineSince.IsZero() {
			r.OfflineSince = r.LastSeen
		}
		r.Saved = r.LastSeen
		name := k[len(store.ReachPrefix):]
		b.sites[name] = &r
		if r.SiteBroker {
			b.siteBroker.Store(name, true)
		}
		return nil
	})
}

// RunsSiteBroker tells whether the site's edge agent said it runs the
// site broker.
func (b *Book) RunsSiteBroker(site string) bool {
	v, _ := b.siteBroker.Load(site)
	return v == true
}

// NoteSiteBroker records what a site's presence says of its site broker
// (an online presence says it; an offline one keeps what the last online
// one said).
func (b *Book) NoteSiteBroker(site string, online, siteBroker bool) {
	switch {
	case online && siteBroker:
		b.siteBroker.Store(site, true)
	case online:
		b.siteBroker.Delete(site)
	}
}

// SetUp records the site's online state as the loop set it; Up reads it.
func (b *Book) SetUp(site string, online bool) { b.up.Store(site, online) }

// Up tells whether the loop last set the site online.
func (b *Book) Up(site string) bool { v, _ := b.up.Load(site); return v == true }

// Mark records that the loop was asked to bring the site back online; it
// reports false when it already was asked. Unmark ends the request.
func (b *Book) Mark(site string) bool { _, asked := b.marking.LoadOrStore(site, true); return !asked }

// Unmark: see Mark.
func (b *Book) Unmark(site string) { b.marking.Delete(site) }

// View is a site's reachability as shown: its last-seen time, since when
// it is unreachable (only while offline), its outbox depth and when that
// was said. Called under the registry's lock.
func (b *Book) View(site string, online bool) (lastSeen, offlineSince *time.Time, queued int, queuedAt *time.Time) {
	r, ok := b.sites[site]
	if !ok {
		return nil, nil, 0, nil
	}
	ptr := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		return &t
	}
	if !online {
		offlineSince = ptr(r.OfflineSince)
	}
	return ptr(r.LastSeen), offlineSince, r.Queued, ptr(r.QueuedAt)
}
