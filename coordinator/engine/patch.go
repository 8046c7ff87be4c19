package engine

import (
	"errors"

	"github.com/google/uuid"

	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/coordinator/store"
)

// PatchAttempts is how many times PatchNode applies a change to a fresh
// snapshot of the node when the node changed while the change was being
// applied, before it gives up with a Conflict.
const PatchAttempts = 3

// errNodeChanged is PatchNode's signal, from the loop, that the node
// changed since its snapshot was taken.
var errNodeChanged = errors.New("the node changed since its snapshot")

// PatchNode changes a resting node's fields through fn, like UpdateNode,
// but fn runs outside the engine loop, on a private copy of the node (a
// copy of its published snapshot), so that however long fn takes
// (a JSON Patch of many operations) the loop serves every other request
// and agent message meanwhile. The copy is then committed in the loop
// only if the node did not change since the snapshot: its view version
// (views.go), which every change of the node moves on, is the same and
// no earlier request of the same batch changed it. The checks that
// depend on the node's state or on other nodes (locked, the state rules
// of fsm.CheckUpdate, name taken, driver and site known) run there, in
// the loop, against the node as it is then; they are cheap. What fn
// checks of the copy itself (sizes) needs no second look: the copy is
// fn's own and nobody else changes it. If the node changed, fn runs
// again on a new snapshot, up to PatchAttempts times; then the answer
// is a Conflict that says to send the change again. It returns the
// node's UUID (the change may rename it).
func (e *Engine) PatchNode(ident string, fn func(c *fsm.Node) error) (string, error) {
	id := ""
	for attempt := 0; attempt < PatchAttempts; attempt++ {
		c, ver, err := e.snapshot(ident)
		if err != nil {
			return id, err
		}
		id = c.UUID
		if err := fn(c); err != nil {
			return id, err
		}
		err = e.do(func(t *tx) error {
			n, ok := e.reg.nodes[id]
			if !ok {
				return errorf(NotFound, "Node %s could not be found.", ident)
			}
			_, busy := t.dirty[id]
			if _, touched := t.touched[id]; busy || touched || e.viewVersion(id) != ver {
				return errNodeChanged
			}
			if n.Locked() {
				return lockedError(n)
			}
			return e.replaceNode(t, n, c)
		})
		if !errors.Is(err, errNodeChanged) {
			return id, err
		}
	}
	return id, errorf(Conflict, "Node %s was changed by other requests while this change was being applied, %d times in a row; nothing was changed: send the request again.", ident, PatchAttempts)
}

// snapshot returns a deep copy of the node's published snapshot and the
// snapshot itself as its view version. A locked node is refused at once
// (the loop checks again at commit).
func (e *Engine) snapshot(ident string) (*fsm.Node, *fsm.Node, error) {
	n := e.views.get(ident)
	if n == nil {
		return nil, nil, errorf(NotFound, "Node %s could not be found.", ident)
	}
	if n.Locked() {
		return nil, nil, lockedError(n)
	}
	return clone(n), n, nil
}

// viewVersion is the node's view version: its published snapshot, which
// every change of the node (tx.forget) replaces after the commit.
func (e *Engine) viewVersion(id string) *fsm.Node { return e.views.get(id) }

func lockedError(n *fsm.Node) error {
	return errorf(Conflict, "Node %s is locked by host %s, please retry after the current operation is completed.", n.Ident(), n.Reservation)
}

// replaceNode makes c, a changed copy of the resting node n, the node, if
// the change is one a PATCH may make; it runs in the loop.
func (e *Engine) replaceNode(t *tx, n, c *fsm.Node) error {
	if c.UUID != n.UUID || c.ProvisionState != n.ProvisionState {
		return errorf(Invalid, "uuid and provision_state cannot be changed by PATCH; use the provision verbs")
	}
	if c.Name != n.Name {
		if c.Name != "" && (!nameRE.MatchString(c.Name) || uuid.Validate(c.Name) == nil) {
			return errorf(Invalid, "Node name %q is not valid", c.Name)
		}
		if _, ok := e.reg.names[c.Name]; ok && c.Name != "" {
			return errorf(Conflict, "A node with name %s already exists.", c.Name)
		}
	}
	if c.Driver != n.Driver {
		// The node keeps the name it is given (an alias too).
		if _, err := e.cfg.Machine.Drivers.Get(c.Driver); err != nil {
			return errorf(Invalid, "%v", err)
		}
	}
	if c.Site != n.Site {
		if !e.sites.Has(c.Site) {
			return errorf(Invalid, "site (conductor_group) %q is not registered", c.Site)
		}
	}
	if r := fsm.CheckUpdate(n, c); r != nil {
		return refused(r)
	}
	if c.InstanceUUID != n.InstanceUUID {
		switch {
		case c.InstanceUUID != "" && n.InstanceUUID != "":
			return errorf(Conflict, "Node %s is associated with instance %s.", n.UUID, n.InstanceUUID)
		case c.InstanceUUID != "":
			if uuid.Validate(c.InstanceUUID) != nil {
				return errorf(Invalid, "Invalid input for field/attribute instance_uuid. Value: %q. Expected a UUID", c.InstanceUUID)
			}
			if other := e.instanceNode(c.InstanceUUID); other != "" {
				return errorf(Conflict, "Instance %s is already associated with a node (%s).", c.InstanceUUID, other)
			}
		case n.AllocationUUID != "":
			// Ironic's update_node: removing the instance_uuid of a node
			// with an allocation removes the allocation.
			if !n.Maintenance && !idleState(n.ProvisionState) {
				return errorf(Conflict, "Node %s with an allocation can not have instance_uuid removed unless it is in one of allowed (enroll, inspecting, inspect wait, manageable, available) states or in maintenance mode. Current state is '%s'.", n.UUID, n.ProvisionState)
			}
			delete(e.reg.allocs, n.AllocationUUID)
			t.batch.Delete(store.AllocationPrefix + n.AllocationUUID)
			c.AllocationUUID = ""
		}
	}
	if c.Maintenance != n.Maintenance {
		on, reason := c.Maintenance, c.MaintenanceReason
		c.Maintenance, c.MaintenanceReason = n.Maintenance, n.MaintenanceReason
		t.apply(c, e.m.SetMaintenance(c, on, reason, t.now))
	}
	c.UpdatedAt = t.now
	if c.Name != n.Name {
		delete(e.reg.names, n.Name)
		if c.Name != "" {
			e.reg.names[c.Name] = c.UUID
		}
	}
	*n = *c
	t.dirty[n.UUID] = n
	return nil
}

// idleState tells whether s is one of the states where Ironic's conductor
// lets a node's interfaces change and its allocation go (enroll,
// inspecting, inspect wait, manageable, available).
func idleState(s fsm.State) bool {
	switch s {
	case fsm.Enroll, fsm.Inspecting, fsm.InspectWait, fsm.Manageable, fsm.Available:
		return true
	}
	return false
}
