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
	if err := loadRecords(e, store.PortGroupPrefix, func(g *PortGroup) { e.reg.pgroups[g.UUID] = g }); err != nil {
		return err
	}
	return loadRecords(e, store.AllocationPrefix, func(a *Allocation) { e.reg.allocs[a.UUID] = a })
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
// caller holds e.reg.mu.
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
	e.reg.mu.RLock()
	defer e.reg.mu.RUnlock()
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
	e.reg.mu.RLock()
	defer e.reg.mu.RUnlock()
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

// pgLookup finds a port group by UUID or name. The caller holds e.reg.mu.
func (e *Engine) pgLookup(ident string) (*PortGroup, error) {
	return lookupNamed(e.reg.pgroups, ident, func(g *PortGroup) string { return g.Name }, "Portgroup")
}

// checkPortGroup checks a port group's fields (as a create or an update
// leaves them) against the others. The caller holds e.reg.mu.
func (e *Engine) checkPortGroup(g *PortGroup) error {
	if g.Name != "" {
		if !nameRE.MatchString(g.Name) || uuid.Validate(g.Name) == nil {
			return errorf(Invalid, "Portgroup name %q is not valid: use letters, digits, '.', '_', '~' or '-', not a UUID", g.Name)
		}
		for _, o := range e.reg.pgroups {
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
		for _, o := range e.reg.pgroups {
			if o.UUID != g.UUID && o.Address == g.Address {
				return errorf(Conflict, "A portgroup with MAC address %s already exists.", g.Address)
			}
		}
	}
	if g.Mode != "" && !slices.Contains(BondModes, g.Mode) {
		return errorf(Invalid, "Invalid portgroup mode %q: use one of %s (Linux bonding modes)", g.Mode, strings.Join(BondModes, ", "))
	}
	if _, ok := e.reg.nodes[g.NodeUUID]; !ok {
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
		} else if _, ok := e.reg.pgroups[g.UUID]; ok {
			return errorf(Conflict, "A portgroup with UUID %s already exists.", g.UUID)
		}
		if err := e.checkPortGroup(&g); err != nil {
			return err
		}
		g.Extra, g.Properties = orEmpty(g.Extra), orEmpty(g.Properties)
		g.CreatedAt = t.now
		out = &g
		e.reg.pgroups[g.UUID] = out
		t.putPortGroup(out)
		return nil
	})
	return out, err
}

// PortGroups lists port groups, of one node when nodeIdent is set.
func (e *Engine) PortGroups(nodeIdent string) ([]PortGroup, error) {
	return listRecords(e, nodeIdent, e.reg.pgroups, pgOf)
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
			for _, p := range e.reg.ports {
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
		for _, p := range e.reg.ports {
			if p.PortGroupUUID == g.UUID {
				return errorf(Invalid, "Port group %s still has ports. Port group cannot be removed until all its ports are removed: take them out ('baremetal port unset --port-group PORT') or delete them first.", g.UUID)
			}
		}
		delete(e.reg.pgroups, g.UUID)
		t.batch.Delete(store.PortGroupPrefix + g.UUID)
		t.forget(g.NodeUUID)
		return nil
	})
}

// dropNodeResources removes the port groups of a deleted node and its
// allocation. The caller holds e.reg.mu, in the loop.
func (e *Engine) dropNodeResources(t *tx, n *fsm.Node) {
	for id, g := range e.reg.pgroups {
		if g.NodeUUID == n.UUID {
			delete(e.reg.pgroups, id)
			t.batch.Delete(store.PortGroupPrefix + id)
		}
	}
	if a, ok := e.reg.allocs[n.AllocationUUID]; ok {
		delete(e.reg.allocs, a.UUID)
		t.batch.Delete(store.AllocationPrefix + a.UUID)
	}
}

// UpdatePort changes a port through fn, on a copy that is checked (MAC
// address, node, port group) before it replaces the port.
func (e *Engine) UpdatePort(ident string, fn func(p *Port) error) (*Port, error) {
	var out *Port
	err := e.do(func(t *tx) error {
		p, ok := e.reg.ports[ident]
		if !ok {
			if id, byMAC := e.reg.macs[strings.ToLower(ident)]; byMAC {
				p, ok = e.reg.ports[id]
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
		if id, taken := e.reg.macs[c.Address]; taken && id != p.UUID {
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
		delete(e.reg.macs, p.Address)
		old := p.NodeUUID
		*p = c
		e.reg.macs[p.Address] = p.UUID
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

// Allocation returns one allocation by UUID or name.
func (e *Engine) Allocation(ident string) (Allocation, error) {
	return getRecord(e, ident, e.allocLookup)
}
