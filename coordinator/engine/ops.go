package engine

import (
	"encoding/json"
	"net"
	"regexp"
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
	BootInterface string `json:"-"`
	// ConsoleInterface is the node's console_interface ("": no-console).
	ConsoleInterface string `json:"-"`
	DeployInterface  string `json:"-"`
	AutomatedClean   *bool  `json:"-"`
	DisablePowerOff  bool   `json:"-"`
	InstanceUUID     string `json:"-"`
	InstanceName     string `json:"-"`
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
			if _, ok := e.reg.names[spec.Name]; ok {
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
		if _, ok := e.reg.nodes[id]; ok {
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
			BootInterface: spec.BootInterface, DeployInterface: spec.DeployInterface, ConsoleInterface: spec.ConsoleInterface,
			AutomatedClean: spec.AutomatedClean, DisablePowerOff: spec.DisablePowerOff, InstanceUUID: spec.InstanceUUID, InstanceName: spec.InstanceName,
			DriverInfo: orEmpty(spec.DriverInfo), Properties: orEmpty(spec.Properties),
			InstanceInfo: orEmpty(spec.InstanceInfo), Extra: orEmpty(spec.Extra),
			ResourceClass: spec.ResourceClass, Description: spec.Description, Owner: spec.Owner, RaidInterface: spec.RaidInterface, InspectInterface: spec.InspectInterface,
			ProvisionState: fsm.Enroll, PowerState: "", CreatedAt: t.now, UpdatedAt: t.now, ProvisionUpdatedAt: t.now}
		e.reg.nodes[id] = n
		if n.Name != "" {
			e.reg.names[n.Name] = id
		}
		e.reg.phaseCount[""]++
		t.dirty[id] = n
		t.apply(n, fsm.Output{History: []fsm.HistoryEntry{{Time: t.now, Severity: "INFO", EventType: "enrollment", Event: "node created in enroll", To: fsm.Enroll}}})
		created = n
		return nil
	})
	return created, err
}

// instanceNode is the UUID of the node whose instance_uuid is id, "" when
// none. The caller holds e.reg.mu.
func (e *Engine) instanceNode(id string) string {
	for _, n := range e.reg.nodes {
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
		if !e.sites.Has(site) {
			return "", errorf(Invalid, "site (conductor_group) %q is not registered; register it with 'coordinator site add %s --credentials-file FILE'", site, site)
		}
		return site, nil
	}
	if d := e.cfg.DefaultSite; d != "" {
		if !e.sites.Has(d) {
			return "", errorf(Invalid, "the node names no site (conductor_group) and the default site %q (serve --default-site) is not registered; register it with 'coordinator site add %s --credentials-file FILE', or name a site", d, d)
		}
		return d, nil
	}
	names := e.sites.Names()
	if len(names) == 1 {
		return names[0], nil
	}
	if len(names) == 0 {
		return "", errorf(Invalid, "no site is registered; register one with 'coordinator site add NAME --credentials-file FILE' first")
	}
	return "", errorf(Invalid, "the node's site (conductor_group) is required: one of %s; or start the coordinator with 'serve --default-site NAME' for the nodes created without one (as gophercloud and Metal3 create them)", strings.Join(names, ", "))
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
	err := e.do(func(t *tx) (err error) {
		id, err = e.deleteNode(t, ident)
		return err
	})
	if err == nil {
		var b store.Batch
		_ = e.st.Scan(store.HistoryPrefix+id+"/", func(k string, _ []byte) error { b.Delete(k); return nil })
		_ = e.write(&b)
	}
	return err
}

// deleteNode is DeleteNode's change in t: it returns the node's UUID.
func (e *Engine) deleteNode(t *tx, ident string) (string, error) {
	n, err := e.lookup(ident)
	if err != nil {
		return "", err
	}
	if r := fsm.CheckDelete(n); r != nil {
		return "", refused(r)
	}
	t.sends = append(t.sends, e.m.Deleted(n, t.now).Send...)
	e.auth.DropNode(n.UUID)
	e.dropConsole(n.UUID)
	t.forget(n.UUID)
	// A change earlier in this batch must not write it back.
	delete(t.dirty, n.UUID)
	delete(e.reg.nodes, n.UUID)
	delete(e.reg.names, n.Name)
	e.reg.phaseCount[phaseOf(n)]--
	for pid, p := range e.reg.ports {
		if p.NodeUUID == n.UUID {
			delete(e.reg.ports, pid)
			delete(e.reg.macs, p.Address)
			e.notePort(p, false)
			t.batch.Delete(store.PortPrefix + pid)
		}
	}
	e.dropNodeResources(t, n)
	// Its MACs and its place under the cap are free again.
	e.discoveryDirty(n.Site)
	t.batch.Delete(store.NodePrefix + n.UUID)
	e.reg.plans.dropNode(t, n.UUID)
	t.batch.Delete(store.InventoryPrefix + n.UUID)
	t.batch.Delete(store.FirmwarePrefix + n.UUID)
	t.batch.Delete(store.BIOSPrefix + n.UUID)
	t.batch.Delete(store.SensorsPrefix + n.UUID)
	t.batch.Delete(store.EventsPrefix + n.UUID)
	delete(e.reg.hist, n.UUID)
	return n.UUID, nil
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
		// its clients retry); the limits are the state machine's
		// capacity check, the engine hands it the phase counts.
		if msg, ok := fsm.Capacity(req.Verb, func(p fsm.Phase) int { return e.reg.phaseCount[string(p)] },
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

// VMedia attaches or detaches a node's virtual media (API 1.89) through
// its site's edge agent.
func (e *Engine) VMedia(ident string, args protocol.VMediaArgs) error {
	return e.request(ident, func(n *fsm.Node, now time.Time) (fsm.Output, *fsm.Refusal) {
		return e.m.VMediaRequest(n, args, now)
	})
}

// VirtualMedia is a node's virtual media devices as last read (API 1.93).
func (e *Engine) VirtualMedia(ident string) ([]map[string]any, error) {
	var out []map[string]any
	err := e.View(ident, func(n *fsm.Node, _ bool) error {
		l, r := e.m.VirtualMediaRead(n)
		if r != nil {
			return refused(r)
		}
		out = l
		return nil
	})
	return out, err
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
		if _, ok := e.reg.macs[addr]; ok {
			return errorf(Conflict, "A port with MAC address %s already exists.", addr)
		}
		p = &Port{UUID: uuid.NewString(), Address: addr, NodeUUID: n.UUID, Extra: orEmpty(extra), PXE: pxe, CreatedAt: t.now}
		e.addPort(t, p)
		return nil
	})
	return p, err
}

// addPort keeps and stores a new port. The caller holds e.reg.mu, in the
// loop.
func (e *Engine) addPort(t *tx, p *Port) {
	t.putPort(p)
	e.reg.ports[p.UUID] = p
	e.reg.macs[p.Address] = p.UUID
	e.notePort(p, true)
}

// Ports lists ports, of one node when nodeIdent is set.
func (e *Engine) Ports(nodeIdent string) ([]Port, error) {
	return listRecords(e, nodeIdent, e.reg.ports, portOf)
}

// Port returns one port by UUID or MAC address.
func (e *Engine) Port(ident string) (Port, error) {
	e.reg.mu.RLock()
	defer e.reg.mu.RUnlock()
	if p, ok := e.reg.ports[ident]; ok {
		return *p, nil
	}
	if id, ok := e.reg.macs[strings.ToLower(ident)]; ok {
		return *e.reg.ports[id], nil
	}
	return Port{}, errorf(NotFound, "Port %s could not be found.", ident)
}

// DeletePort removes a port.
func (e *Engine) DeletePort(ident string) error {
	return e.do(func(t *tx) error {
		p, ok := e.reg.ports[ident]
		if !ok {
			return errorf(NotFound, "Port %s could not be found.", ident)
		}
		delete(e.reg.ports, p.UUID)
		delete(e.reg.macs, p.Address)
		e.notePort(p, false)
		t.batch.Delete(store.PortPrefix + p.UUID)
		return nil
	})
}

// CleanSteps returns the clean steps of a node for the steps API.
func (e *Engine) CleanSteps(ident string, minPriority int) (steps []drivers.Step, known bool, err error) {
	err = e.View(ident, func(n *fsm.Node, _ bool) error {
		steps, known, err = e.m.SortedStepsView(n, minPriority)
		return err
	})
	return steps, known, err
}
