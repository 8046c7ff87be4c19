package engine

import (
	"encoding/json"
	"net"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/coordinator/store"
)

// This file keeps Ironic's port groups (API 1.23, mode and properties
// 1.26), port updates, and allocations (API 1.52): a node's ports bonded
// into a group (the config drive's network_data shows a group as a bond
// of its ports), and the choice of an available node by resource class,
// traits and candidate nodes.

// PortGroup is a group of a node's ports (Ironic's portgroup): a bond.
type PortGroup struct {
	UUID     string `json:"uuid"`
	Name     string `json:"name,omitempty"`
	NodeUUID string `json:"node_uuid"`
	// Address is the bond's MAC address, "" when not given.
	Address string `json:"address,omitempty"`
	// Mode is the bond mode (Linux bonding: balance-rr, active-backup,
	// 802.3ad, ...); "" is Ironic's default_portgroup_mode, active-backup.
	Mode string `json:"mode,omitempty"`
	// Properties are the bond's options (miimon, xmit_hash_policy, ...).
	Properties map[string]any `json:"properties,omitempty"`
	// StandalonePortsSupported is Ironic's standalone_ports_supported.
	StandalonePortsSupported bool `json:"standalone_ports_supported"`
	// PhysicalNetwork (API 1.102) and Category (1.103) are the
	// operator's, kept and shown as given.
	PhysicalNetwork string         `json:"physical_network,omitempty"`
	Category        string         `json:"category,omitempty"`
	Extra           map[string]any `json:"extra,omitempty"`
	CreatedAt       time.Time      `json:"created_at"`
	UpdatedAt       *time.Time     `json:"updated_at"`
}

// DefaultBondMode is Ironic's [DEFAULT]default_portgroup_mode.
const DefaultBondMode = "active-backup"

// BondModes are the modes of Linux bonding (and of network_data.json's
// bond_mode), the values a port group's mode may take.
var BondModes = []string{"balance-rr", "active-backup", "balance-xor", "broadcast", "802.3ad", "balance-tlb", "balance-alb"}

// Allocation is a request for a node (Ironic's allocation).
type Allocation struct {
	UUID           string         `json:"uuid"`
	Name           string         `json:"name,omitempty"`
	ResourceClass  string         `json:"resource_class"`
	Traits         []string       `json:"traits,omitempty"`
	CandidateNodes []string       `json:"candidate_nodes,omitempty"`
	NodeUUID       string         `json:"node_uuid,omitempty"`
	State          string         `json:"state"`
	LastError      string         `json:"last_error,omitempty"`
	Owner          string         `json:"owner,omitempty"`
	Extra          map[string]any `json:"extra,omitempty"`
	CreatedAt      time.Time      `json:"created_at"`
	UpdatedAt      *time.Time     `json:"updated_at"`
}

// Allocation states, as Ironic's.
const (
	AllocActive = "active"
	AllocError  = "error"
)

// AllocationSpec is what a client gives to create an allocation.
type AllocationSpec struct {
	UUID, Name, ResourceClass, Owner string
	Traits, CandidateNodes           []string
	Extra                            map[string]any
}

func (e *Engine) loadResources() error {
	if err := loadRecords(e, store.PortGroupPrefix, func(g *PortGroup) { e.pgroups[g.UUID] = g }); err != nil {
		return err
	}
	return loadRecords(e, store.AllocationPrefix, func(a *Allocation) { e.allocs[a.UUID] = a })
}

// loadRecords reads the records of type T under prefix at start, each
// one to keep.
func loadRecords[T any](e *Engine, prefix string, keep func(*T)) error {
	return e.st.Scan(prefix, func(_ string, v []byte) error {
		var x T
		if err := json.Unmarshal(v, &x); err != nil {
			return err
		}
		keep(&x)
		return nil
	})
}

func (t *tx) putJSON(key string, v any) {
	b, _ := json.Marshal(v)
	t.batch.Set(key, b)
}

func (t *tx) putPortGroup(g *PortGroup)   { t.putJSON(store.PortGroupPrefix+g.UUID, g) }
func (t *tx) putAllocation(a *Allocation) { t.putJSON(store.AllocationPrefix+a.UUID, a) }
func (t *tx) putPort(p *Port)             { t.putJSON(store.PortPrefix+p.UUID, p) }

// lookupNamed finds a record of all by UUID or, when ident is not one,
// by name (nameOf); what names the kind in the NotFound error. The
// caller holds e.mu.
func lookupNamed[T any](all map[string]*T, ident string, nameOf func(*T) string, what string) (*T, error) {
	if x, ok := all[ident]; ok {
		return x, nil
	}
	if ident != "" {
		for _, x := range all {
			if nameOf(x) == ident {
				return x, nil
			}
		}
	}
	return nil, errorf(NotFound, "%s %s could not be found.", what, ident)
}

// getRecord returns a copy of the record lookup finds for ident.
func getRecord[T any](e *Engine, ident string, lookup func(string) (*T, error)) (T, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	x, err := lookup(ident)
	if err != nil {
		var zero T
		return zero, err
	}
	return *x, nil
}

// listRecords lists copies of the records of all, of one node when
// nodeIdent is set (of gives a record's node and creation time), oldest
// first.
func listRecords[T any](e *Engine, nodeIdent string, all map[string]*T, of func(*T) (node string, created time.Time)) ([]T, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	var nodeID string
	if nodeIdent != "" {
		n, err := e.lookup(nodeIdent)
		if err != nil {
			return nil, err
		}
		nodeID = n.UUID
	}
	out := []T{}
	for _, x := range all {
		if node, _ := of(x); nodeID == "" || node == nodeID {
			out = append(out, *x)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		_, a := of(&out[i])
		_, b := of(&out[j])
		return a.Before(b)
	})
	return out, nil
}

func pgOf(g *PortGroup) (string, time.Time)     { return g.NodeUUID, g.CreatedAt }
func allocOf(a *Allocation) (string, time.Time) { return a.NodeUUID, a.CreatedAt }
func portOf(p *Port) (string, time.Time)        { return p.NodeUUID, p.CreatedAt }

// pgLookup finds a port group by UUID or name. The caller holds e.mu.
func (e *Engine) pgLookup(ident string) (*PortGroup, error) {
	return lookupNamed(e.pgroups, ident, func(g *PortGroup) string { return g.Name }, "Portgroup")
}

// checkPortGroup checks a port group's fields (as a create or an update
// leaves them) against the others. The caller holds e.mu.
func (e *Engine) checkPortGroup(g *PortGroup) error {
	if g.Name != "" {
		if !nameRE.MatchString(g.Name) || uuid.Validate(g.Name) == nil {
			return errorf(Invalid, "Portgroup name %q is not valid: use letters, digits, '.', '_', '~' or '-', not a UUID", g.Name)
		}
		for _, o := range e.pgroups {
			if o.UUID != g.UUID && o.Name == g.Name {
				return errorf(Conflict, "A portgroup with name %s already exists.", g.Name)
			}
		}
	}
	if g.Address != "" {
		mac, err := net.ParseMAC(g.Address)
		if err != nil || len(mac) != 6 {
			return errorf(Invalid, "Expected a MAC address but received %s.", g.Address)
		}
		g.Address = mac.String()
		for _, o := range e.pgroups {
			if o.UUID != g.UUID && o.Address == g.Address {
				return errorf(Conflict, "A portgroup with MAC address %s already exists.", g.Address)
			}
		}
	}
	if g.Mode != "" && !slices.Contains(BondModes, g.Mode) {
		return errorf(Invalid, "Invalid portgroup mode %q: use one of %s (Linux bonding modes)", g.Mode, strings.Join(BondModes, ", "))
	}
	if _, ok := e.nodes[g.NodeUUID]; !ok {
		return errorf(Invalid, "Node %s could not be found.", g.NodeUUID)
	}
	return nil
}

// CreatePortGroup adds a port group to a node.
func (e *Engine) CreatePortGroup(g PortGroup, nodeIdent string) (*PortGroup, error) {
	var out *PortGroup
	err := e.do(func(t *tx) error {
		n, err := e.lookup(nodeIdent)
		if err != nil {
			return errorf(Invalid, "%v", err)
		}
		g.NodeUUID = n.UUID
		if g.UUID == "" {
			g.UUID = uuid.NewString()
		} else if uuid.Validate(g.UUID) != nil {
			return errorf(Invalid, "uuid %q is not a valid UUID", g.UUID)
		} else if _, ok := e.pgroups[g.UUID]; ok {
			return errorf(Conflict, "A portgroup with UUID %s already exists.", g.UUID)
		}
		if err := e.checkPortGroup(&g); err != nil {
			return err
		}
		g.Extra, g.Properties = orEmpty(g.Extra), orEmpty(g.Properties)
		g.CreatedAt = t.now
		out = &g
		e.pgroups[g.UUID] = out
		t.putPortGroup(out)
		return nil
	})
	return out, err
}

// PortGroups lists port groups, of one node when nodeIdent is set.
func (e *Engine) PortGroups(nodeIdent string) ([]PortGroup, error) {
	return listRecords(e, nodeIdent, e.pgroups, pgOf)
}

// PortGroup returns one port group by UUID or name.
func (e *Engine) PortGroup(ident string) (PortGroup, error) {
	return getRecord(e, ident, e.pgLookup)
}

// UpdatePortGroup changes a port group through fn, on a copy checked
// before it replaces the group.
func (e *Engine) UpdatePortGroup(ident string, fn func(g *PortGroup) error) (*PortGroup, error) {
	var out *PortGroup
	err := e.do(func(t *tx) error {
		g, err := e.pgLookup(ident)
		if err != nil {
			return err
		}
		c := *g
		c.Extra, c.Properties = cloneMap(g.Extra), cloneMap(g.Properties)
		if err := fn(&c); err != nil {
			return err
		}
		if c.UUID != g.UUID {
			return errorf(Invalid, "/uuid cannot be changed")
		}
		if c.NodeUUID != g.NodeUUID {
			n, err := e.lookup(c.NodeUUID)
			if err != nil {
				return errorf(Invalid, "%v", err)
			}
			c.NodeUUID = n.UUID
			for _, p := range e.ports {
				if p.PortGroupUUID == g.UUID {
					return errorf(Conflict, "Portgroup %s has ports; a portgroup with ports cannot move to another node: remove its ports from it first", g.UUID)
				}
			}
		}
		if err := e.checkPortGroup(&c); err != nil {
			return err
		}
		now := t.now
		c.UpdatedAt = &now
		*g = c
		t.putPortGroup(g)
		t.forget(g.NodeUUID)
		out = g
		return nil
	})
	return out, err
}

// DeletePortGroup removes a port group that has no ports.
func (e *Engine) DeletePortGroup(ident string) error {
	return e.do(func(t *tx) error {
		g, err := e.pgLookup(ident)
		if err != nil {
			return err
		}
		for _, p := range e.ports {
			if p.PortGroupUUID == g.UUID {
				return errorf(Invalid, "Port group %s still has ports. Port group cannot be removed until all its ports are removed: take them out ('baremetal port unset --port-group PORT') or delete them first.", g.UUID)
			}
		}
		delete(e.pgroups, g.UUID)
		t.batch.Delete(store.PortGroupPrefix + g.UUID)
		t.forget(g.NodeUUID)
		return nil
	})
}

// dropNodeResources removes the port groups of a deleted node and its
// allocation. The caller holds e.mu, in the loop.
func (e *Engine) dropNodeResources(t *tx, n *fsm.Node) {
	for id, g := range e.pgroups {
		if g.NodeUUID == n.UUID {
			delete(e.pgroups, id)
			t.batch.Delete(store.PortGroupPrefix + id)
		}
	}
	if a, ok := e.allocs[n.AllocationUUID]; ok {
		delete(e.allocs, a.UUID)
		t.batch.Delete(store.AllocationPrefix + a.UUID)
	}
}

// UpdatePort changes a port through fn, on a copy that is checked (MAC
// address, node, port group) before it replaces the port.
func (e *Engine) UpdatePort(ident string, fn func(p *Port) error) (*Port, error) {
	var out *Port
	err := e.do(func(t *tx) error {
		p, ok := e.ports[ident]
		if !ok {
			if id, byMAC := e.macs[strings.ToLower(ident)]; byMAC {
				p, ok = e.ports[id]
			}
		}
		if !ok {
			return errorf(NotFound, "Port %s could not be found.", ident)
		}
		c := *p
		c.Extra = cloneMap(p.Extra)
		c.LocalLinkConnection = cloneMap(p.LocalLinkConnection)
		if err := fn(&c); err != nil {
			return err
		}
		if c.UUID != p.UUID {
			return errorf(Invalid, "/uuid cannot be changed")
		}
		mac, err := net.ParseMAC(c.Address)
		if err != nil || len(mac) != 6 {
			return errorf(Invalid, "Expected a MAC address but received %s.", c.Address)
		}
		c.Address = mac.String()
		if id, taken := e.macs[c.Address]; taken && id != p.UUID {
			return errorf(Conflict, "A port with MAC address %s already exists.", c.Address)
		}
		n, err := e.lookup(c.NodeUUID)
		if err != nil {
			return errorf(Invalid, "%v", err)
		}
		c.NodeUUID = n.UUID
		if n.Locked() {
			return lockedError(n)
		}
		if c.PortGroupUUID != "" {
			g, err := e.pgLookup(c.PortGroupUUID)
			if err != nil {
				return errorf(Invalid, "%v", err)
			}
			if g.NodeUUID != c.NodeUUID {
				return errorf(Invalid, "Port group %s and port %s are not on the same node: a port joins a group of its own node's", g.UUID, c.UUID)
			}
			c.PortGroupUUID = g.UUID
		}
		now := t.now
		c.UpdatedAt = &now
		e.notePort(p, false)
		delete(e.macs, p.Address)
		old := p.NodeUUID
		*p = c
		e.macs[p.Address] = p.UUID
		e.notePort(p, true)
		t.putPort(p)
		t.forget(old)
		t.forget(p.NodeUUID)
		out = p
		return nil
	})
	return out, err
}

func cloneMap(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	b, _ := json.Marshal(m)
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return out
}

// allocLookup finds an allocation by UUID or name. The caller holds e.mu.
func (e *Engine) allocLookup(ident string) (*Allocation, error) {
	return lookupNamed(e.allocs, ident, func(a *Allocation) string { return a.Name }, "Allocation")
}

// CreateAllocation makes an allocation and processes it at once, as
// Ironic's conductor does: among the available nodes of its resource
// class that are not in maintenance, have a power state, hold no
// instance and have every trait asked for (and are among the candidate
// nodes, when given), the first in UUID order gets it: the node's
// allocation_uuid and instance_uuid become the allocation's UUID and the
// allocation is active. With no such node the allocation is in state
// error with Ironic's last_error.
func (e *Engine) CreateAllocation(spec AllocationSpec) (*Allocation, error) {
	var out *Allocation
	err := e.do(func(t *tx) error {
		a := &Allocation{UUID: spec.UUID, Name: spec.Name, ResourceClass: spec.ResourceClass, Owner: spec.Owner,
			Traits: spec.Traits, Extra: orEmpty(spec.Extra), CreatedAt: t.now}
		if a.UUID == "" {
			a.UUID = uuid.NewString()
		} else if uuid.Validate(a.UUID) != nil {
			return errorf(Invalid, "uuid %q is not a valid UUID", a.UUID)
		}
		if _, ok := e.allocs[a.UUID]; ok {
			return errorf(Conflict, "An allocation with UUID %s already exists.", a.UUID)
		}
		if e.instanceNode(a.UUID) != "" {
			return errorf(Conflict, "Instance %s is already associated with a node.", a.UUID)
		}
		if a.Name != "" {
			if !nameRE.MatchString(a.Name) || uuid.Validate(a.Name) == nil {
				return errorf(Invalid, "Allocation name %q is not valid: use letters, digits, '.', '_', '~' or '-', not a UUID", a.Name)
			}
			if _, err := e.allocLookup(a.Name); err == nil {
				return errorf(Conflict, "An allocation with name %s already exists.", a.Name)
			}
		}
		for _, c := range spec.CandidateNodes {
			n, err := e.lookup(c)
			if err != nil {
				return errorf(Invalid, "Candidate node %s could not be found.", c)
			}
			a.CandidateNodes = append(a.CandidateNodes, n.UUID)
		}
		e.allocate(t, a)
		e.allocs[a.UUID] = a
		t.putAllocation(a)
		out = a
		return nil
	})
	return out, err
}

// allocate picks a node for a (CreateAllocation). The caller holds e.mu.
func (e *Engine) allocate(t *tx, a *Allocation) {
	var nodes []*fsm.Node
	for _, n := range e.nodes {
		if n.ProvisionState != fsm.Available || n.Maintenance || n.PowerState == "" || n.InstanceUUID != "" ||
			n.AllocationUUID != "" || n.ResourceClass != a.ResourceClass || n.Locked() {
			continue
		}
		if len(a.CandidateNodes) > 0 && !slices.Contains(a.CandidateNodes, n.UUID) {
			continue
		}
		if a.Owner != "" && n.Owner != a.Owner {
			continue
		}
		nodes = append(nodes, n)
	}
	fail := func(msg string) {
		a.State, a.LastError = AllocError, "Failed to process allocation "+a.UUID+": "+msg+"."
	}
	if len(nodes) == 0 {
		if len(a.CandidateNodes) > 0 {
			fail("none of the requested nodes are available and match the resource class " + a.ResourceClass)
		} else {
			fail("no available nodes match the resource class " + a.ResourceClass)
		}
		return
	}
	keep := nodes[:0]
	for _, n := range nodes {
		ok := true
		for _, tr := range a.Traits {
			if !slices.Contains(n.Traits, tr) {
				ok = false
				break
			}
		}
		if ok {
			keep = append(keep, n)
		}
	}
	if len(keep) == 0 {
		fail("no suitable nodes have the requested traits " + strings.Join(a.Traits, ", "))
		return
	}
	sort.Slice(keep, func(i, j int) bool { return keep[i].UUID < keep[j].UUID })
	n := keep[0]
	n.AllocationUUID, n.InstanceUUID = a.UUID, a.UUID
	n.UpdatedAt = t.now
	t.dirty[n.UUID] = n
	a.State, a.NodeUUID = AllocActive, n.UUID
}

// Allocations lists the allocations (of one node when nodeIdent is
// set), oldest first.
func (e *Engine) Allocations(nodeIdent string) ([]Allocation, error) {
	return listRecords(e, nodeIdent, e.allocs, allocOf)
}

// Allocation returns one allocation by UUID or name.
func (e *Engine) Allocation(ident string) (Allocation, error) {
	return getRecord(e, ident, e.allocLookup)
}

// UpdateAllocation changes an allocation's name and extra (Ironic's
// PATCH, API 1.57; owner 1.60) through fn.
func (e *Engine) UpdateAllocation(ident string, fn func(a *Allocation) error) (*Allocation, error) {
	var out *Allocation
	err := e.do(func(t *tx) error {
		a, err := e.allocLookup(ident)
		if err != nil {
			return err
		}
		c := *a
		c.Extra = cloneMap(a.Extra)
		if err := fn(&c); err != nil {
			return err
		}
		if c.Name != a.Name && c.Name != "" {
			if !nameRE.MatchString(c.Name) || uuid.Validate(c.Name) == nil {
				return errorf(Invalid, "Allocation name %q is not valid: use letters, digits, '.', '_', '~' or '-', not a UUID", c.Name)
			}
			if o, err := e.allocLookup(c.Name); err == nil && o.UUID != a.UUID {
				return errorf(Conflict, "An allocation with name %s already exists.", c.Name)
			}
		}
		now := t.now
		c.UpdatedAt = &now
		*a = c
		t.putAllocation(a)
		out = a
		return nil
	})
	return out, err
}

// DeleteAllocation removes an allocation and releases its node (its
// allocation_uuid and instance_uuid are cleared), as Ironic's
// verify_node_for_deallocation allows: always in maintenance, otherwise
// not while the node is active or in a transition.
func (e *Engine) DeleteAllocation(ident string) error {
	return e.do(func(t *tx) error {
		a, err := e.allocLookup(ident)
		if err != nil {
			return err
		}
		if n, ok := e.nodes[a.NodeUUID]; ok && n.AllocationUUID == a.UUID {
			if !n.Maintenance {
				if n.Locked() || (n.TargetProvisionState != "" && !fsm.UpdateAllowed(n.ProvisionState)) {
					return errorf(Conflict, "Cannot remove allocation %s for node %s, because the node is in state %s where updates are not allowed.", a.UUID, n.UUID, n.ProvisionState)
				}
				if n.ProvisionState == fsm.Active {
					return errorf(Conflict, "Cannot remove allocation %s for node %s, because the node is in state active: undeploy it (its allocation goes with it), or set maintenance first.", a.UUID, n.UUID)
				}
			}
			e.release(t, n)
			return nil
		}
		delete(e.allocs, a.UUID)
		t.batch.Delete(store.AllocationPrefix + a.UUID)
		return nil
	})
}

// release deletes node n's allocation and clears its allocation_uuid and
// instance_uuid (Ironic's Allocation.destroy). The caller holds e.mu, in
// the loop.
func (e *Engine) release(t *tx, n *fsm.Node) {
	if n.AllocationUUID == "" {
		return
	}
	delete(e.allocs, n.AllocationUUID)
	t.batch.Delete(store.AllocationPrefix + n.AllocationUUID)
	n.AllocationUUID, n.InstanceUUID = "", ""
	n.UpdatedAt = t.now
	t.dirty[n.UUID] = n
}
