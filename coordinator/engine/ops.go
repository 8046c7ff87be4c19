package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/coordinator/store"
	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/protocol"
)

// NodeSpec is what creating a node takes.
type NodeSpec struct {
	UUID         string         `json:"uuid"`
	Name         string         `json:"name"`
	Driver       string         `json:"driver"`
	Site         string         `json:"conductor_group"`
	DriverInfo   map[string]any `json:"driver_info"`
	Properties   map[string]any `json:"properties"`
	InstanceInfo map[string]any `json:"instance_info"`
	Extra        map[string]any `json:"extra"`
	// Kept and shown as given.
	ResourceClass string `json:"resource_class"`
	Description   string `json:"description"`
	Owner         string `json:"owner"`
	// RaidInterface is the node's raid_interface when not the default
	// (checked by the API against the driver).
	RaidInterface string `json:"-"`
	// InspectInterface is the node's inspect_interface when not the
	// default (checked by the API against the driver).
	InspectInterface string `json:"-"`
	// BootInterface and DeployInterface are the node's when given
	// (checked by the API against the driver); AutomatedClean,
	// InstanceUUID as given.
	BootInterface   string `json:"-"`
	DeployInterface string `json:"-"`
	AutomatedClean  *bool  `json:"-"`
	InstanceUUID    string `json:"-"`
	InstanceName    string `json:"-"`
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._~-]{0,254}$`)

// CreateNode enrolls a node.
func (e *Engine) CreateNode(spec NodeSpec) (*fsm.Node, error) {
	var created *fsm.Node
	err := e.do(func(t *tx) error {
		if _, err := e.cfg.Machine.Drivers.Get(spec.Driver); err != nil {
			return errorf(Invalid, "%v", err)
		}
		if spec.Name != "" {
			if !nameRE.MatchString(spec.Name) || uuid.Validate(spec.Name) == nil {
				return errorf(Invalid, "Node name %q is not valid: use letters, digits, '.', '_', '~' or '-', not a UUID", spec.Name)
			}
			if _, ok := e.names[spec.Name]; ok {
				return errorf(Conflict, "A node with name %s already exists.", spec.Name)
			}
		}
		site, err := e.pickSite(spec.Site)
		if err != nil {
			return err
		}
		id := spec.UUID
		if id == "" {
			id = uuid.NewString()
		} else if uuid.Validate(id) != nil {
			return errorf(Invalid, "uuid %q is not a valid UUID", id)
		}
		if _, ok := e.nodes[id]; ok {
			return errorf(Conflict, "A node with UUID %s already exists.", id)
		}
		if spec.InstanceUUID != "" {
			if other := e.instanceNode(spec.InstanceUUID); other != "" {
				return errorf(Conflict, "Instance %s is already associated with a node (%s).", spec.InstanceUUID, other)
			}
		}
		// The node keeps the driver name it was given (an alias such as
		// fake-hardware too), as Ironic shows it.
		n := &fsm.Node{UUID: id, Name: spec.Name, Driver: spec.Driver, Site: site,
			BootInterface: spec.BootInterface, DeployInterface: spec.DeployInterface,
			AutomatedClean: spec.AutomatedClean, InstanceUUID: spec.InstanceUUID, InstanceName: spec.InstanceName,
			DriverInfo: orEmpty(spec.DriverInfo), Properties: orEmpty(spec.Properties),
			InstanceInfo: orEmpty(spec.InstanceInfo), Extra: orEmpty(spec.Extra),
			ResourceClass: spec.ResourceClass, Description: spec.Description, Owner: spec.Owner, RaidInterface: spec.RaidInterface, InspectInterface: spec.InspectInterface,
			ProvisionState: fsm.Enroll, PowerState: "", CreatedAt: t.now, UpdatedAt: t.now, ProvisionUpdatedAt: t.now}
		e.nodes[id] = n
		if n.Name != "" {
			e.names[n.Name] = id
		}
		e.phaseCount[""]++
		t.dirty[id] = n
		t.apply(n, fsm.Output{History: []fsm.HistoryEntry{{Time: t.now, Severity: "INFO", EventType: "enrollment", Event: "node created in enroll", To: fsm.Enroll}}})
		created = n
		return nil
	})
	return created, err
}

// instanceNode is the UUID of the node whose instance_uuid is id, "" when
// none. The caller holds e.mu.
func (e *Engine) instanceNode(id string) string {
	for _, n := range e.nodes {
		if n.InstanceUUID == id {
			return n.UUID
		}
	}
	return ""
}

func orEmpty(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}

func (e *Engine) pickSite(site string) (string, error) {
	if site != "" {
		if _, ok := e.sites[site]; !ok {
			return "", errorf(Invalid, "site (conductor_group) %q is not registered; register it with 'coordinator site add %s --credentials-file FILE'", site, site)
		}
		return site, nil
	}
	if d := e.cfg.DefaultSite; d != "" {
		if _, ok := e.sites[d]; !ok {
			return "", errorf(Invalid, "the node names no site (conductor_group) and the default site %q (serve --default-site) is not registered; register it with 'coordinator site add %s --credentials-file FILE', or name a site", d, d)
		}
		return d, nil
	}
	if len(e.sites) == 1 {
		for s := range e.sites {
			return s, nil
		}
	}
	names := make([]string, 0, len(e.sites))
	for s := range e.sites {
		names = append(names, s)
	}
	sort.Strings(names)
	if len(names) == 0 {
		return "", errorf(Invalid, "no site is registered; register one with 'coordinator site add NAME --credentials-file FILE' first")
	}
	return "", errorf(Invalid, "the node's site (conductor_group) is required: one of %s; or start the coordinator with 'serve --default-site NAME' for the nodes created without one (as gophercloud and Metal3 create them)", strings.Join(names, ", "))
}

// View runs fn on the node under the read lock. fn must not keep n.
func (e *Engine) View(ident string, fn func(n *fsm.Node, siteOnline bool) error) error {
	e.mu.RLock()
	defer e.mu.RUnlock()
	n, err := e.lookup(ident)
	if err != nil {
		return err
	}
	return fn(n, e.siteOnline[n.Site])
}

// Each calls fn for every node in creation order under the read lock.
func (e *Engine) Each(fn func(n *fsm.Node) bool) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	all := make([]*fsm.Node, 0, len(e.nodes))
	for _, n := range e.nodes {
		all = append(all, n)
	}
	sort.Slice(all, func(i, j int) bool {
		if !all[i].CreatedAt.Equal(all[j].CreatedAt) {
			return all[i].CreatedAt.Before(all[j].CreatedAt)
		}
		return all[i].UUID < all[j].UUID
	})
	for _, n := range all {
		if !fn(n) {
			return
		}
	}
}

func clone(n *fsm.Node) *fsm.Node {
	// The ramdisk's step lists are never changed in place (stepcat.go):
	// the copy shares them instead of copying them through JSON.
	s := *n
	s.CachedCleanSteps, s.CachedDeploySteps = nil, nil
	b, _ := json.Marshal(&s)
	var c fsm.Node
	_ = json.Unmarshal(b, &c)
	c.CachedCleanSteps, c.CachedDeploySteps = n.CachedCleanSteps, n.CachedDeploySteps
	return &c
}

// UpdateNode changes a resting node's fields through fn on a copy; the
// copy replaces the node only if it passes validation (replaceNode). fn
// runs in the loop: it must be quick (PatchNode runs a long one outside).
func (e *Engine) UpdateNode(ident string, fn func(n *fsm.Node) error) error {
	return e.do(func(t *tx) error {
		n, err := e.lookup(ident)
		if err != nil {
			return err
		}
		if n.Locked() {
			return lockedError(n)
		}
		c := clone(n)
		if err := fn(c); err != nil {
			return err
		}
		return e.replaceNode(t, n, c)
	})
}

// DeleteNode removes a node, its ports, history and inventory.
func (e *Engine) DeleteNode(ident string) error {
	var id string
	err := e.do(func(t *tx) error {
		n, err := e.lookup(ident)
		if err != nil {
			return err
		}
		if r := fsm.CheckDelete(n); r != nil {
			return refused(r)
		}
		id = n.UUID
		t.sends = append(t.sends, e.m.Deleted(n, t.now).Send...)
		e.forgetAuth(n.UUID)
		delete(e.nodes, n.UUID)
		delete(e.names, n.Name)
		e.phaseCount[phaseOf(n)]--
		for pid, p := range e.ports {
			if p.NodeUUID == n.UUID {
				delete(e.ports, pid)
				delete(e.macs, p.Address)
				e.notePort(p, false)
				t.batch.Delete(store.PortPrefix + pid)
			}
		}
		e.dropNodeResources(t, n)
		t.batch.Delete(store.NodePrefix + n.UUID)
		t.batch.Delete(store.InventoryPrefix + n.UUID)
		t.batch.Delete(store.FirmwarePrefix + n.UUID)
		t.batch.Delete(store.BIOSPrefix + n.UUID)
		delete(e.hist, n.UUID)
		return nil
	})
	if err == nil {
		var b store.Batch
		_ = e.st.Scan(store.HistoryPrefix+id+"/", func(k string, _ []byte) error { b.Delete(k); return nil })
		_ = e.st.Commit(&b)
	}
	return err
}

// Verb starts a provision verb.
func (e *Engine) Verb(ident string, req fsm.VerbRequest) (err error) {
	defer e.verbDone(req.Verb, time.Now(), &err)
	return e.do(func(t *tx) error {
		n, err := e.lookup(ident)
		if err != nil {
			return err
		}
		if req.Verb == fsm.Deploy || req.Verb == fsm.Rebuild {
			// The deploy templates its instance_info traits name.
			req.Templates = e.templatesNamed(fsm.InstanceTraits(n))
		}
		if r := e.m.CheckVerb(n, req); r != nil { // the one check of the request
			return refused(r)
		}
		if req.Verb == fsm.Clean {
			if err := e.checkBurninNetwork(n, req.CleanSteps); err != nil {
				return err
			}
		}
		// Ironic's concurrent action limits: a 500 (not a 503, which
		// its clients retry).
		if msg, ok := fsm.Capacity(req.Verb, func(p fsm.Phase) int { return e.phaseCount[string(p)] },
			fsm.Limits{MaxConcurrentClean: e.cfg.MaxConcurrentClean, MaxConcurrentDeploy: e.cfg.MaxConcurrentDeploy}); !ok {
			return errorf(Internal, "%s", msg)
		}
		idle, from := n.Op == nil, len(t.sends)
		t.run(n, func() fsm.Output { return e.m.Start(n, req, t.now) })
		if req.Verb == fsm.Undeploy {
			// As Ironic's tear down: the node's allocation goes, and
			// its instance_uuid with it.
			e.release(t, n)
		}
		if idle {
			// Nothing of this node's can be waiting in the queues but
			// acks, so its first commands may overtake other nodes'.
			t.urgent = append(t.urgent, t.sends[from:]...)
			t.sends = t.sends[:from]
		}
		return nil
	})
}

// Power changes a node's power state out of any provision operation.
func (e *Engine) Power(ident, target string) error {
	return e.request(ident, func(n *fsm.Node, now time.Time) (fsm.Output, *fsm.Refusal) {
		return e.m.PowerRequest(n, target, now)
	})
}

// BootDevice sets a node's boot device out of any provision operation.
func (e *Engine) BootDevice(ident, device string) error {
	return e.request(ident, func(n *fsm.Node, now time.Time) (fsm.Output, *fsm.Refusal) {
		return e.m.BootDeviceRequest(n, device, now)
	})
}

// request runs an out-of-band request of the state machine on a node and
// turns its refusal into an API error.
func (e *Engine) request(ident string, req func(n *fsm.Node, now time.Time) (fsm.Output, *fsm.Refusal)) error {
	return e.do(func(t *tx) error {
		n, err := e.lookup(ident)
		if err != nil {
			return err
		}
		var refusal *fsm.Refusal
		t.run(n, func() fsm.Output {
			out, r := req(n, t.now)
			refusal = r
			return out
		})
		if refusal != nil {
			return refused(refusal)
		}
		return nil
	})
}

// SetMaintenance pauses (on) or resumes a node. It works on locked nodes:
// maintenance is how an operator stops a node from moving.
func (e *Engine) SetMaintenance(ident string, on bool, reason string) error {
	return e.do(func(t *tx) error {
		n, err := e.lookup(ident)
		if err != nil {
			return err
		}
		t.run(n, func() fsm.Output { return e.m.SetMaintenance(n, on, reason, t.now) })
		return nil
	})
}

// History returns a node's history, oldest first.
func (e *Engine) History(ident string) ([]fsm.HistoryEntry, error) {
	var id string
	if err := e.View(ident, func(n *fsm.Node, _ bool) error { id = n.UUID; return nil }); err != nil {
		return nil, err
	}
	var out []fsm.HistoryEntry
	err := e.st.Scan(store.HistoryPrefix+id+"/", func(k string, v []byte) error {
		var h fsm.HistoryEntry
		if err := json.Unmarshal(v, &h); err != nil {
			return err
		}
		out = append(out, h)
		return nil
	})
	return out, err
}

// Inventory returns a node's last reported hardware inventory.
func (e *Engine) Inventory(ident string) (map[string]any, error) {
	var id string
	if err := e.View(ident, func(n *fsm.Node, _ bool) error { id = n.UUID; return nil }); err != nil {
		return nil, err
	}
	b, found, err := e.st.Get(store.InventoryPrefix + id)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, errorf(NotFound, "Node %s has no inventory yet; run 'node inspect %s'", ident, ident)
	}
	var inv map[string]any
	err = json.Unmarshal(b, &inv)
	return inv, err
}

// CreatePort adds a port (MAC address) to a node.
func (e *Engine) CreatePort(address, nodeIdent string, extra map[string]any, pxe bool) (*Port, error) {
	var p *Port
	err := e.do(func(t *tx) error {
		mac, err := net.ParseMAC(address)
		if err != nil || len(mac) != 6 {
			return errorf(Invalid, "Expected a MAC address but received %s.", address)
		}
		n, err := e.lookup(nodeIdent)
		if err != nil {
			return errorf(Invalid, "%v", err)
		}
		addr := mac.String()
		if _, ok := e.macs[addr]; ok {
			return errorf(Conflict, "A port with MAC address %s already exists.", addr)
		}
		p = &Port{UUID: uuid.NewString(), Address: addr, NodeUUID: n.UUID, Extra: orEmpty(extra), PXE: pxe, CreatedAt: t.now}
		e.addPort(t, p)
		return nil
	})
	return p, err
}

// addPort keeps and stores a new port. The caller holds e.mu, in the
// loop.
func (e *Engine) addPort(t *tx, p *Port) {
	t.putPort(p)
	e.ports[p.UUID] = p
	e.macs[p.Address] = p.UUID
	e.notePort(p, true)
}

// Ports lists ports, of one node when nodeIdent is set.
func (e *Engine) Ports(nodeIdent string) ([]Port, error) {
	return listRecords(e, nodeIdent, e.ports, portOf)
}

// Port returns one port by UUID or MAC address.
func (e *Engine) Port(ident string) (Port, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if p, ok := e.ports[ident]; ok {
		return *p, nil
	}
	if id, ok := e.macs[strings.ToLower(ident)]; ok {
		return *e.ports[id], nil
	}
	return Port{}, errorf(NotFound, "Port %s could not be found.", ident)
}

// DeletePort removes a port.
func (e *Engine) DeletePort(ident string) error {
	return e.do(func(t *tx) error {
		p, ok := e.ports[ident]
		if !ok {
			return errorf(NotFound, "Port %s could not be found.", ident)
		}
		delete(e.ports, p.UUID)
		delete(e.macs, p.Address)
		e.notePort(p, false)
		t.batch.Delete(store.PortPrefix + p.UUID)
		return nil
	})
}

// AddSite registers a site and returns its edge agent's MQTT credentials.
// The password is shown once; only its hash is kept.
func (e *Engine) AddSite(name string) (user, password string, err error) {
	if !regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`).MatchString(name) {
		return "", "", errorf(Invalid, "site name %q is not valid: use 1-63 lowercase letters, digits and '-'", name)
	}
	password = randomHex()
	err = e.do(func(t *tx) error {
		if _, ok := e.sites[name]; ok {
			return errorf(Conflict, "site %s already exists", name)
		}
		s := &Site{Name: name, PasswordHash: hashPassword(password), CreatedAt: t.now}
		b, _ := json.Marshal(s)
		t.batch.Set(store.SitePrefix+name, b)
		e.sites[name] = s
		e.sitePass.Store(name, s.PasswordHash)
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
		s, ok := e.sites[name]
		if !ok {
			return errorf(NotFound, "site %s could not be found; 'coordinator site list' shows the sites", name)
		}
		ns := *s
		ns.PasswordHash = hashPassword(password)
		b, _ := json.Marshal(&ns)
		t.batch.Set(store.SitePrefix+name, b)
		e.sites[name] = &ns
		e.sitePass.Store(name, ns.PasswordHash)
		return nil
	})
	if err != nil {
		return "", "", err
	}
	e.revoke("site:" + name)
	e.siteGone(name, false)
	e.log.Info("site credential replaced; connections with the old one closed", "site", name)
	return "site:" + name, password, nil
}

// DeleteSite removes a site that has no nodes: its credential stops
// working at once (its edge agent's connections are closed) and what the
// coordinator knew of its reachability is forgotten.
func (e *Engine) DeleteSite(name string) error {
	err := e.do(func(t *tx) error {
		if _, ok := e.sites[name]; !ok {
			return errorf(NotFound, "site %s could not be found; 'coordinator site list' shows the sites", name)
		}
		nodes := 0
		for _, n := range e.nodes {
			if n.Site == name {
				nodes++
			}
		}
		if nodes > 0 {
			return errorf(Conflict, "site %s still has %d node(s); delete them, or move them to another site (coordinator node set NODE --site SITE, or baremetal node set NODE --conductor-group SITE), first", name, nodes)
		}
		delete(e.sites, name)
		e.sitePass.Delete(name)
		delete(e.siteOnline, name)
		delete(e.reach().sites, name)
		e.relaying.Delete(name)
		t.batch.Delete(store.SitePrefix + name)
		t.batch.Delete(store.ReachPrefix + name)
		return nil
	})
	if err != nil {
		return err
	}
	e.revoke("site:" + name)
	e.siteGone(name, true)
	e.log.Info("site deleted; its edge agent's connections closed", "site", name)
	return nil
}

// SetRevoker sets what closes the broker connections of a revoked
// credential (the embedded broker's Disconnect). Without it (an external
// broker), a revoked credential still fails at that broker only as its
// own authentication decides.
func (e *Engine) SetRevoker(f func(user string) int) { e.revoker.Store(&f) }

func (e *Engine) revoke(user string) {
	if f := e.revoker.Load(); f != nil {
		if n := (*f)(user); n > 0 {
			e.log.Info("connections of a revoked credential closed", "user", user, "connections", n)
		}
	}
}

// siteGone says, as the site's retained presence, that its edge agent is
// offline: the broker drops the last will of a revoked credential, so the
// coordinator says it, for itself now (its own subscription takes the
// message) and for after a restart (the retained presence would still say
// online). A deleted site's retained presence is cleared instead.
func (e *Engine) siteGone(site string, deleted bool) {
	if e.pub == nil {
		return
	}
	var b []byte
	if !deleted {
		b, _ = protocol.Encode(&protocol.Message{Kind: protocol.KindPresence, Site: site, Online: false, Sent: time.Now()})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.pub.Publish(ctx, protocol.SitePresenceTopic(site), b, true); err != nil {
		e.log.Warn("site presence not updated after its credential was revoked", "site", site, "err", err)
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
}

// Sites lists the registered sites.
func (e *Engine) Sites() []SiteInfo {
	e.mu.RLock()
	defer e.mu.RUnlock()
	count := map[string]int{}
	for _, n := range e.nodes {
		count[n.Site]++
	}
	var out []SiteInfo
	for _, s := range e.sites {
		i := SiteInfo{Name: s.Name, Online: e.siteOnline[s.Name], Nodes: count[s.Name], CreatedAt: s.CreatedAt}
		i.LastSeen, i.OfflineSince, i.Queued, i.QueuedAt = e.siteReachView(s.Name)
		out = append(out, i)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// CleanSteps returns the clean steps of a node for the steps API.
func (e *Engine) CleanSteps(ident string, minPriority int) (steps []drivers.Step, known bool, err error) {
	err = e.View(ident, func(n *fsm.Node, _ bool) error {
		steps, known, err = e.m.SortedStepsView(n, minPriority)
		return err
	})
	return steps, known, err
}

// HandleMessage takes one MQTT message from an agent. Malformed or
// unauthorised messages are logged with the reason and dropped.
func (e *Engine) HandleMessage(topic string, payload []byte) {
	site, nodeID, leaf, err := protocol.ParseTopic(topic)
	if err != nil {
		e.rejects.Warn("message rejected", "message rejected", "topic", topic, "reason", err)
		return
	}
	if leaf == "cmd" || leaf == "bmc/cmd" {
		return
	}
	if leaf == "bmc/evt" && protocol.IsBundle(payload) {
		e.handleBundle(site, payload)
		return
	}
	if leaf == "presence" && len(payload) == 0 {
		return // a retained presence cleared (a deleted site)
	}
	msg, err := protocol.Decode(payload)
	if err != nil {
		e.rejects.Warn("message rejected", "message rejected", "topic", topic, "reason", err)
		return
	}
	// A site's, a ramdisk's or a BMC's text is bounded before anything
	// keeps it (fsm.MaxRemoteText).
	msg.Error, msg.Detail = fsm.BoundText(msg.Error, fsm.MaxRemoteText), fsm.BoundText(msg.Detail, fsm.MaxRemoteText)
	for i := range msg.Beats {
		b := &msg.Beats[i]
		b.Error, b.Detail = fsm.BoundText(b.Error, fsm.MaxRemoteText), fsm.BoundText(b.Detail, fsm.MaxRemoteText)
	}
	if leaf == "presence" {
		if nodeID != "" {
			return
		}
		e.noteRelay(site, msg.Online, msg.Relay, msg.Plans)
		e.NoteSiteBroker(site, msg.Online, msg.SiteBroker)
		e.noteSiteSoftware(site, msg.Online, msg.Software)
		_ = e.submit(func(t *tx) error {
			e.sitePresence(t, site, msg.Online)
			return nil
		}, false)
		return
	}
	if leaf == "bmc/evt" && msg.Kind == protocol.KindBeats {
		e.handleBeats(site, msg)
		return
	}
	if leaf == "bmc/evt" && msg.Kind == protocol.KindResult && msg.Node == "" {
		e.handleSiteResult(site, msg)
		return
	}
	if leaf == "evt" && (msg.Node != nodeID || msg.Node == "") {
		e.rejects.Warn("message rejected", "message rejected", "topic", topic, "reason", fmt.Sprintf("message names node %q but came on node %q's topic", msg.Node, nodeID))
		return
	}
	var oob *oobReport // firmware and BIOS read by the edge agent (firmware.go)
	if leaf == "bmc/evt" {
		oob = readOOBReport(msg)
	}
	_ = e.submit(func(t *tx) error {
		e.noteSiteHeard(t, site)
		n, ok := e.nodes[msg.Node]
		if !ok || n.Site != site {
			e.rejects.Warn("message rejected", "message rejected", "topic", topic, "reason", fmt.Sprintf("node %q is not a node of site %q", msg.Node, site))
			switch {
			case (msg.Kind == protocol.KindPower || msg.Kind == protocol.KindResult) && leaf == "bmc/evt":
				// The agent polls a deleted node's BMC until it restarts,
				// and may hold a result for a node deleted meanwhile:
				// acked, they leave its (durable) outbox instead of being
				// resent forever.
				t.acks[protocol.BMCCmdTopic(site)] = append(t.acks[protocol.BMCCmdTopic(site)], msg.ID)
			case msg.Kind == protocol.KindResult && leaf == "evt":
				// So does a ramdisk's result the agent relays (or the
				// ramdisk's own outbox): acked on the node's cmd topic,
				// as a known node's is.
				ackTopic := protocol.NodeCmdTopic(site, msg.Node)
				t.acks[ackTopic] = append(t.acks[ackTopic], msg.ID)
			}
			return nil
		}
		ackTopic := protocol.BMCCmdTopic(site)
		if leaf == "evt" {
			ackTopic = protocol.NodeCmdTopic(site, n.UUID)
		}
		switch msg.Kind {
		case protocol.KindResult:
			// An out-of-band step's readings count for the step pending, or
			// a later step of the site's plan (the site ran ahead).
			fresh := oob != nil && ((n.Pending != nil && !n.Pending.InBand && msg.CommandID == n.Pending.ID) ||
				(n.Op != nil && n.Op.SitePlan.Holds(msg.CommandID) && (n.Pending == nil || msg.CommandID != n.Pending.ID)))
			t.run(n, func() fsm.Output { return e.m.Result(n, msg, t.now) })
			if fresh {
				t.keepOOBReport(n, oob)
			}
			t.acks[ackTopic] = append(t.acks[ackTopic], msg.ID)
			e.cfg.Metrics.Acked()
		case protocol.KindPower:
			if leaf != "bmc/evt" {
				e.rejects.Warn("message rejected", "message rejected", "topic", topic, "reason", "power reports come from the edge agent on the site's bmc/evt topic")
				return nil
			}
			t.run(n, func() fsm.Output { return e.m.PowerReport(n, msg, t.now) })
			t.acks[ackTopic] = append(t.acks[ackTopic], msg.ID)
		case protocol.KindHello:
			if leaf != "evt" {
				return nil
			}
			t.run(n, func() fsm.Output { return e.m.Hello(n, msg, t.now) })
		case protocol.KindHeartbeat:
			if leaf != "evt" {
				return nil
			}
			t.run(n, func() fsm.Output { return e.m.Heartbeat(n, msg, t.now) })
		default:
			e.rejects.Warn("message rejected", "message rejected", "topic", topic, "reason", fmt.Sprintf("kind %q is not accepted from agents", msg.Kind))
		}
		return nil
	}, false)
}

// SiteOnline tells whether a site's edge agent is connected.
func (e *Engine) SiteOnline(site string) bool {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.siteOnline[site]
}
