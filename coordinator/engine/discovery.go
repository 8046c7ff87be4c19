package engine

import (
	"context"
	"encoding/json"
	"net"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/bmedge/bmedge/coordinator/engine/sites"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/coordinator/store"
	"github.com/bmedge/bmedge/protocol"
)

// Discovery, the engine's side: a site's setting (site set --discovery),
// the configuration each site's edge agent is given (a retained message
// on the site's discovery topic: on or off, how many more nodes it may
// discover, its rate, and the MACs of its nodes, which are never
// discovered), and the reports of discovered machines, which the rules
// of coordinator/fsm (discover.go) turn into nodes.

// SiteDiscoveryChange changes a site's discovery setting; a nil field
// stays as it is.
type SiteDiscoveryChange struct {
	Enabled  *bool
	MaxNodes *int
	Rate     *int
	Driver   *string
}

// SetSiteDiscovery changes a site's discovery setting.
func (e *Engine) SetSiteDiscovery(name string, c SiteDiscoveryChange) error {
	if c.MaxNodes != nil && (*c.MaxNodes < 1 || *c.MaxNodes > sites.MaxDiscoveryMaxNodes) {
		return errorf(Invalid, "discovery's cap of nodes %d is outside 1 to %d", *c.MaxNodes, sites.MaxDiscoveryMaxNodes)
	}
	if c.Rate != nil && (*c.Rate < 1 || *c.Rate > sites.MaxDiscoveryRate) {
		return errorf(Invalid, "discovery's rate %d (new machines per minute) is outside 1 to %d", *c.Rate, sites.MaxDiscoveryRate)
	}
	if c.Driver != nil {
		if _, err := e.cfg.Machine.Drivers.Get(*c.Driver); err != nil {
			return errorf(Invalid, "discovery driver: %v", err)
		}
	}
	err := e.do(func(t *tx) error {
		s, ok := e.sites.Get(name)
		if !ok {
			return errorf(NotFound, "site %s could not be found; 'coordinator site list' shows the sites", name)
		}
		d := s.DiscoveryOf()
		if c.Enabled != nil {
			d.Enabled = *c.Enabled
		}
		if c.MaxNodes != nil {
			d.MaxNodes = *c.MaxNodes
		}
		if c.Rate != nil {
			d.Rate = *c.Rate
		}
		if c.Driver != nil {
			d.Driver = *c.Driver
		}
		if d.Enabled {
			if n := len(e.siteMACs(name)); n > protocol.MaxKnownMACs {
				return errorf(Invalid, "site %s has %d ports; discovery needs the site's edge agent to know them all, at most %d", name, n, protocol.MaxKnownMACs)
			}
		}
		ns := *s
		ns.Discovery = &d
		b, _ := json.Marshal(&ns)
		t.batch.Set(store.SitePrefix+name, b)
		e.sites.Put(&ns)
		return nil
	})
	if err == nil {
		e.discoveryDirty(name)
	}
	return err
}

// DiscoveredNode is a node that discovery enrolled, as site show lists it.
type DiscoveredNode struct {
	UUID           string    `json:"uuid"`
	Name           string    `json:"name,omitempty"`
	ProvisionState string    `json:"provision_state"`
	Driver         string    `json:"driver"`
	CreatedAt      time.Time `json:"created_at"`
	LastError      string    `json:"last_error,omitempty"`
}

// SiteDiscovered lists a site's discovered nodes, oldest first.
func (e *Engine) SiteDiscovered(name string) ([]DiscoveredNode, error) {
	if !e.sites.Has(name) {
		return nil, errorf(NotFound, "site %s could not be found; 'coordinator site list' shows the sites", name)
	}
	e.reg.mu.RLock()
	defer e.reg.mu.RUnlock()
	out := []DiscoveredNode{}
	for _, n := range e.reg.nodes {
		if n.Site == name && n.AutoDiscovered {
			out = append(out, DiscoveredNode{UUID: n.UUID, Name: n.Name, ProvisionState: string(n.ProvisionState), Driver: n.Driver,
				CreatedAt: n.CreatedAt, LastError: n.LastError})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].UUID < out[j].UUID
	})
	return out, nil
}

// siteMACs are the port addresses of a site's nodes. The caller holds
// e.reg.mu.
func (e *Engine) siteMACs(site string) []string {
	var out []string
	for _, p := range e.reg.ports {
		if n := e.reg.nodes[p.NodeUUID]; n != nil && n.Site == site {
			out = append(out, p.Address)
		}
	}
	sort.Strings(out)
	return out
}

// discoveredAt counts a site's discovered nodes, and those of them
// enrolled after since. The caller holds e.reg.mu.
func (e *Engine) discoveredAt(site string, since time.Time) (all, recent int) {
	for _, n := range e.reg.nodes {
		if n.Site == site && n.AutoDiscovered {
			all++
			if n.CreatedAt.After(since) {
				recent++
			}
		}
	}
	return all, recent
}

// discoveryState is the engine's discovery bookkeeping: the sites whose
// configuration is to be published again, and the ids of the reports
// taken lately (a report resent before its ack arrived is acked again,
// not taken as the machine seen again).
type discoveryState struct {
	mu    sync.Mutex
	dirty map[string]bool
	kick  chan struct{}
	seen  map[string]bool
	order []string
}

// maxSeenReports bounds the report ids remembered.
const maxSeenReports = 4096

func (e *Engine) disc() *discoveryState { return e.discSt }

// discoveryDirty marks a site's configuration to be published again.
func (e *Engine) discoveryDirty(site string) {
	d := e.disc()
	d.mu.Lock()
	d.dirty[site] = true
	d.mu.Unlock()
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// discoveryRefresh is how often every site's configuration is published
// again whatever changed (a node moved between sites, say).
const discoveryRefresh = 5 * time.Minute

// discoveryPublisher publishes the dirty sites' configurations, at most
// about twice a second: a thousand ports made one by one cost a few
// publishes, not a thousand.
func (e *Engine) discoveryPublisher() {
	defer e.run.wg.Done()
	d := e.disc()
	tk := time.NewTicker(discoveryRefresh)
	defer tk.Stop()
	for _, s := range e.sites.Names() {
		e.discoveryDirty(s)
	}
	for {
		select {
		case <-e.run.ctx.Done():
			return
		case <-tk.C:
			for _, s := range e.sites.Names() {
				e.discoveryDirty(s)
			}
		case <-d.kick:
		}
		select {
		case <-e.run.ctx.Done():
			return
		case <-time.After(300 * time.Millisecond):
		}
		d.mu.Lock()
		list := make([]string, 0, len(d.dirty))
		for s := range d.dirty {
			list = append(list, s)
		}
		d.dirty = map[string]bool{}
		d.mu.Unlock()
		sort.Strings(list)
		for _, s := range list {
			e.publishDiscovery(s)
		}
	}
}

// DiscoveryConfig is the configuration a site's edge agent is given (ok
// false for a site that is not registered).
func (e *Engine) DiscoveryConfig(site string) (protocol.DiscoveryConfig, bool) {
	s, ok := e.sites.Get(site)
	if !ok {
		return protocol.DiscoveryConfig{}, false
	}
	d := s.DiscoveryOf()
	c := protocol.DiscoveryConfig{Enabled: d.Enabled, Rate: d.Rate}
	if d.Enabled {
		e.reg.mu.RLock()
		c.KnownMACs = e.siteMACs(site)
		all, _ := e.discoveredAt(site, time.Time{})
		c.Remaining = max(0, d.MaxNodes-all)
		e.reg.mu.RUnlock()
	}
	return c, true
}

// publishDiscovery publishes a site's configuration, retained; a site
// that is not registered (deleted) has its retained configuration
// cleared, so that a site registered again under its name starts off.
func (e *Engine) publishDiscovery(site string) {
	if e.run.pub == nil {
		return
	}
	var b []byte
	if c, ok := e.DiscoveryConfig(site); ok {
		m := &protocol.Message{Kind: protocol.KindDiscoveryConfig, ID: randomHex(), Site: site, Sent: e.cfg.Clock.Now(), Discovery: &c}
		var err error
		if b, err = protocol.Encode(m); err != nil {
			e.cfg.Log.Error("discovery configuration not published", "site", site, "err", err)
			return
		}
	}
	ctx, cancel := context.WithTimeout(e.run.ctx, 10*time.Second)
	defer cancel()
	if err := e.run.pub.Publish(ctx, protocol.DiscoveryTopic(site), b, true); err != nil {
		e.cfg.Log.Warn("discovery configuration not published; published again within minutes", "site", site, "err", err)
	}
}

// ackDiscovery acks a site's discovery report with the transaction.
func (e *Engine) ackDiscovery(t *tx, site, id string) {
	topic := protocol.BMCCmdTopic(site)
	t.acks[topic] = append(t.acks[topic], id)
}

// bmcHost is the host of a node's BMC address (ipmi_address,
// redfish_address), "" when none.
func bmcHost(di map[string]any) string {
	for _, k := range []string{"ipmi_address", "redfish_address"} {
		s, _ := di[k].(string)
		if s == "" {
			continue
		}
		if strings.Contains(s, "://") {
			if u, err := url.Parse(s); err == nil {
				s = u.Hostname()
			}
		} else if h, _, err := net.SplitHostPort(s); err == nil {
			s = h
		}
		if ip := net.ParseIP(s); ip != nil {
			return ip.String()
		}
		return strings.ToLower(s)
	}
	return ""
}

// matchMachine is the node a reported machine is already (by a MAC of
// its ports, its serial number or its BMC address), at any site; nil
// when none. The caller holds e.reg.mu.
func (e *Engine) matchMachine(r fsm.DiscoveryReport) *fsm.Node {
	for _, mac := range r.MACs {
		if id, ok := e.reg.macs[mac]; ok {
			if p := e.reg.ports[id]; p != nil {
				if n := e.reg.nodes[p.NodeUUID]; n != nil {
					return n
				}
			}
		}
	}
	if r.Serial == "" && r.BMCAddress == "" {
		return nil
	}
	var found *fsm.Node
	for _, n := range e.reg.nodes {
		if (r.Serial != "" && n.Serial == r.Serial) || (r.BMCAddress != "" && bmcHost(n.DriverInfo) == r.BMCAddress) {
			if found == nil || n.CreatedAt.Before(found.CreatedAt) {
				found = n
			}
		}
	}
	return found
}

// handleDiscovery takes a site's discovery report: it is acknowledged
// whatever becomes of it (a refused one is counted and logged, never
// kept for ever in the agent's outbox).
//
// All but one: a report past the site's rate (fsm.DiscoveryRate) is
// neither acked nor remembered, so that the site's outbox sends it again
// and it is enrolled once the rate allows.
func (e *Engine) handleDiscovery(site string, msg *protocol.Message) {
	rep, rerr := fsm.ReadDiscovery(msg)
	_ = e.submit(func(t *tx) error {
		e.noteSiteHeard(t, site)
		s, ok := e.sites.Get(site)
		if !ok {
			e.ackDiscovery(t, site, msg.ID)
			return nil
		}
		d := e.disc()
		d.mu.Lock()
		dup := d.seen[msg.ID]
		d.mu.Unlock()
		if dup {
			e.ackDiscovery(t, site, msg.ID)
			return nil
		}
		remember := func() {
			e.ackDiscovery(t, site, msg.ID)
			d.mu.Lock()
			d.seen[msg.ID] = true
			d.order = append(d.order, msg.ID)
			if len(d.order) > maxSeenReports {
				delete(d.seen, d.order[0])
				d.order = d.order[1:]
			}
			d.mu.Unlock()
		}
		if rerr != nil {
			remember()
			e.cfg.Metrics.Discovery(site, fsm.DiscoveryInvalid)
			e.rejects.Warn("discovery refused", "discovery report refused", "site", site, "reason", rerr)
			return nil
		}
		set := s.DiscoveryOf()
		dsite := fsm.DiscoverySite{Enabled: set.Enabled, MaxNodes: set.MaxNodes, Driver: set.Driver, Rate: set.Rate}
		matched := e.matchMachine(rep)
		all, recent := e.discoveredAt(site, t.now.Add(-fsm.DiscoveryRateWindow))
		verdict, why := fsm.DecideDiscovery(dsite, all, recent, matched != nil)
		e.cfg.Metrics.Discovery(site, verdict)
		if verdict == fsm.DiscoveryRate {
			// Not acked, not remembered: the site sends it again.
			e.rejects.Warn("discovery deferred", "discovery report deferred", "site", site, "reason", why, "macs", strings.Join(rep.MACs, ","))
			return nil
		}
		remember()
		switch verdict {
		case fsm.DiscoverySeenAgain:
			t.run(matched, func() fsm.Output { return e.m.SeenAgain(matched, rep, t.now) })
		case fsm.DiscoveryEnrolled:
			id := uuid.NewString()
			n := &fsm.Node{UUID: id, Site: site, DriverInfo: map[string]any{}, Properties: map[string]any{}, InstanceInfo: map[string]any{},
				Extra: map[string]any{}, CreatedAt: t.now, UpdatedAt: t.now, ProvisionUpdatedAt: t.now}
			out := e.m.Discovered(n, dsite, rep, t.now)
			e.reg.nodes[id] = n
			e.reg.phaseCount[""]++
			t.dirty[id] = n
			t.apply(n, out)
			e.cfg.Log.Info("node enrolled by discovery", "site", site, "node", id, "driver", n.Driver, "macs", strings.Join(rep.MACs, ","), "bmc_address", rep.BMCAddress)
			e.discoveryDirty(site)
		default:
			e.rejects.Warn("discovery refused", "discovery report refused", "site", site, "outcome", verdict, "reason", why, "macs", strings.Join(rep.MACs, ","))
		}
		return nil
	}, false)
}
