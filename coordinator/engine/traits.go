package engine

import (
	"errors"
	"slices"
	"strings"

	"github.com/bmedge/bmedge/coordinator/fsm"
)

// Traits returns a node's traits, sorted.
func (e *Engine) Traits(ident string) ([]string, error) {
	var out []string
	err := e.View(ident, func(n *fsm.Node, _ bool) error {
		out = slices.Clone(n.Traits)
		return nil
	})
	return out, err
}

// ChangeTraits sets a node's traits to what fn makes of them (fsm's
// SetTraits, AddTrait or RemoveTrait). As Ironic, traits change in any
// provision state, but not while the node is locked (409); a trait the
// node does not have is NotFound, a bad one Invalid.
func (e *Engine) ChangeTraits(ident string, fn func(ident string, cur []string) ([]string, error)) error {
	return e.do(func(t *tx) error {
		n, err := e.lookup(ident)
		if err != nil {
			return err
		}
		if n.Locked() {
			return lockedError(n)
		}
		next, err := fn(n.UUID, slices.Clone(n.Traits))
		if errors.Is(err, fsm.ErrNoSuchTrait) {
			return errorf(NotFound, "%s", strings.TrimPrefix(err.Error(), fsm.ErrNoSuchTrait.Error()+": "))
		}
		if err != nil {
			return errorf(Invalid, "%v", err)
		}
		if slices.Equal(next, n.Traits) {
			return nil
		}
		if len(next) == 0 {
			next = nil
		}
		n.Traits = next
		n.UpdatedAt = t.now
		t.forget(n.UUID)
		t.dirty[n.UUID] = n
		return nil
	})
}
