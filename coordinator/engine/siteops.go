package engine

import (
	"context"
	"encoding/json"
	"regexp"
	"sort"
	"time"

	"github.com/bmedge/bmedge/coordinator/engine/brokerauth"
	"github.com/bmedge/bmedge/coordinator/store"
	"github.com/bmedge/bmedge/protocol"
)

// The sites' register and credentials, the engine's side: the register
// is package sites', the broker's copies of the credentials brokerauth's.

// AddSite registers a site and returns its edge agent's MQTT credentials.
// The password is shown once; only its hash is kept.
func (e *Engine) AddSite(name string) (user, password string, err error) {
	if !regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`).MatchString(name) {
		return "", "", errorf(Invalid, "site name %q is not valid: use 1-63 lowercase letters, digits and '-'", name)
	}
	password = randomHex()
	err = e.do(func(t *tx) error {
		if e.sites.Has(name) {
			return errorf(Conflict, "site %s already exists", name)
		}
		s := &Site{Name: name, PasswordHash: brokerauth.HashPassword(password), CreatedAt: t.now}
		b, _ := json.Marshal(s)
		t.batch.Set(store.SitePrefix+name, b)
		e.sites.Put(s)
		e.auth.SetSite(name, s.PasswordHash)
		return nil
	})
	return "site:" + name, password, err
}

// RotateSite gives a registered site a new edge agent credential and
// returns it; like AddSite's, the password is shown once and only its
// hash is kept. The old one stops working at once: the embedded broker
// asks again on every publish and delivery, and the connections that
// used it are closed (SetRevoker). An edge agent needs the new
// credentials file to connect again.
func (e *Engine) RotateSite(name string) (user, password string, err error) {
	password = randomHex()
	err = e.do(func(t *tx) error {
		s, ok := e.sites.Get(name)
		if !ok {
			return errorf(NotFound, "site %s could not be found; 'coordinator site list' shows the sites", name)
		}
		ns := *s
		ns.PasswordHash = brokerauth.HashPassword(password)
		b, _ := json.Marshal(&ns)
		t.batch.Set(store.SitePrefix+name, b)
		e.sites.Put(&ns)
		e.auth.SetSite(name, ns.PasswordHash)
		return nil
	})
	if err != nil {
		return "", "", err
	}
	e.revoke("site:" + name)
	e.siteGone(name, false)
	e.cfg.Log.Info("site credential replaced; connections with the old one closed", "site", name)
	return "site:" + name, password, nil
}

// DeleteSite removes a site that has no nodes: its credential stops
// working at once (its edge agent's connections are closed) and what the
// coordinator knew of its reachability is forgotten.
func (e *Engine) DeleteSite(name string) error {
	err := e.do(func(t *tx) error {
		if !e.sites.Has(name) {
			return errorf(NotFound, "site %s could not be found; 'coordinator site list' shows the sites", name)
		}
		nodes := 0
		for _, n := range e.reg.nodes {
			if n.Site == name {
				nodes++
			}
		}
		if nodes > 0 {
			return errorf(Conflict, "site %s still has %d node(s); delete them, or move them to another site (coordinator node set NODE --site SITE, or baremetal node set NODE --conductor-group SITE), first", name, nodes)
		}
		e.sites.Delete(name)
		e.auth.DropSite(name)
		e.reach().Delete(name)
		t.batch.Delete(store.SitePrefix + name)
		t.batch.Delete(store.ReachPrefix + name)
		return nil
	})
	if err != nil {
		return err
	}
	e.revoke("site:" + name)
	e.siteGone(name, true)
	e.discoveryDirty(name)
	e.cfg.Log.Info("site deleted; its edge agent's connections closed", "site", name)
	return nil
}

// SetRevoker sets what closes the broker connections of a revoked
// credential (the embedded broker's Disconnect). Without it (an external
// broker), a revoked credential still fails at that broker only as its
// own authentication decides.
func (e *Engine) SetRevoker(f func(user string) int) { e.auth.SetRevoker(f) }

func (e *Engine) revoke(user string) {
	if n := e.auth.Revoke(user); n > 0 {
		e.cfg.Log.Info("connections of a revoked credential closed", "user", user, "connections", n)
	}
}

// siteGone says, as the site's retained presence, that its edge agent is
// offline: the broker drops the last will of a revoked credential, so the
// coordinator says it, for itself now (its own subscription takes the
// message) and for after a restart (the retained presence would still say
// online). A deleted site's retained presence is cleared instead.
func (e *Engine) siteGone(site string, deleted bool) {
	if e.run.pub == nil {
		return
	}
	var b []byte
	if !deleted {
		b, _ = protocol.Encode(&protocol.Message{Kind: protocol.KindPresence, Site: site, Online: false, Sent: e.cfg.Clock.Now()})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.run.pub.Publish(ctx, protocol.SitePresenceTopic(site), b, true); err != nil {
		e.cfg.Log.Warn("site presence not updated after its credential was revoked", "site", site, "err", err)
	}
}

// SiteInfo is a site as the API shows it.
type SiteInfo struct {
	Name   string `json:"name"`
	Online bool   `json:"online"`
	// LastSeen is when the site was last heard from or known connected
	// (null if never); OfflineSince is when it became unreachable (null
	// while it is reachable). After a restart of the coordinator every
	// site is unreachable since it was last seen, until it connects.
	LastSeen     *time.Time `json:"last_seen"`
	OfflineSince *time.Time `json:"offline_since"`
	// Queued is the number of results and reports waiting in the site's
	// edge agent for the coordinator's ack, as of its last heartbeat
	// summary (QueuedAt; null if none came).
	Queued    int        `json:"queued"`
	QueuedAt  *time.Time `json:"queued_at"`
	Nodes     int        `json:"nodes"`
	CreatedAt time.Time  `json:"created_at"`
	// Discovery is whether the site discovers machines that belong to
	// no node; DiscoveryMaxNodes its cap of discovered nodes,
	// DiscoveryRate the new machines per minute its edge agent starts
	// discovering, DiscoveryDriver a discovered node's driver unless a
	// rule sets one; Discovered counts its discovered nodes.
	Discovery         bool   `json:"discovery"`
	DiscoveryMaxNodes int    `json:"discovery_max_nodes"`
	DiscoveryRate     int    `json:"discovery_rate"`
	DiscoveryDriver   string `json:"discovery_driver"`
	Discovered        int    `json:"discovered"`
}

// Sites lists the registered sites.
func (e *Engine) Sites() []SiteInfo {
	e.reg.mu.RLock()
	defer e.reg.mu.RUnlock()
	count, found := map[string]int{}, map[string]int{}
	for _, n := range e.reg.nodes {
		count[n.Site]++
		if n.AutoDiscovered {
			found[n.Site]++
		}
	}
	var out []SiteInfo
	for _, s := range e.sites.All() {
		d := s.DiscoveryOf()
		i := SiteInfo{Name: s.Name, Online: e.sites.Online(s.Name), Nodes: count[s.Name], CreatedAt: s.CreatedAt,
			Discovery: d.Enabled, DiscoveryMaxNodes: d.MaxNodes, DiscoveryRate: d.Rate, DiscoveryDriver: d.Driver, Discovered: found[s.Name]}
		i.LastSeen, i.OfflineSince, i.Queued, i.QueuedAt = e.siteReachView(s.Name)
		out = append(out, i)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// SiteOnline tells whether a site's edge agent is connected.
func (e *Engine) SiteOnline(site string) bool {
	return e.sites.Online(site)
}
