package engine

import (
	"slices"
	"sort"
	"strings"

	"github.com/google/uuid"

	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/coordinator/store"
)

// allocLookup finds an allocation by UUID or name. The caller holds e.reg.mu.
func (e *Engine) allocLookup(ident string) (*Allocation, error) {
	return lookupNamed(e.reg.allocs, ident, func(a *Allocation) string { return a.Name }, "Allocation")
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
		if _, ok := e.reg.allocs[a.UUID]; ok {
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
		e.reg.allocs[a.UUID] = a
		t.putAllocation(a)
		out = a
		return nil
	})
	return out, err
}

// allocate picks a node for a (CreateAllocation). The caller holds e.reg.mu.
func (e *Engine) allocate(t *tx, a *Allocation) {
	var nodes []*fsm.Node
	for _, n := range e.reg.nodes {
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
	return listRecords(e, nodeIdent, e.reg.allocs, allocOf)
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
		if n, ok := e.reg.nodes[a.NodeUUID]; ok && n.AllocationUUID == a.UUID {
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
		delete(e.reg.allocs, a.UUID)
		t.batch.Delete(store.AllocationPrefix + a.UUID)
		return nil
	})
}

// release deletes node n's allocation and clears its allocation_uuid and
// instance_uuid (Ironic's Allocation.destroy). The caller holds e.reg.mu, in
// the loop.
func (e *Engine) release(t *tx, n *fsm.Node) {
	if n.AllocationUUID == "" {
		return
	}
	delete(e.reg.allocs, n.AllocationUUID)
	t.batch.Delete(store.AllocationPrefix + n.AllocationUUID)
	n.AllocationUUID, n.InstanceUUID = "", ""
	n.UpdatedAt = t.now
	t.dirty[n.UUID] = n
}
