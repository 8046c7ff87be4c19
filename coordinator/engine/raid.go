package engine

import (
	"maps"
)

// SetTargetRaidConfig stores a node's target_raid_config (PUT
// /v1/nodes/{id}/states/raid), validated by the caller; an empty config
// unsets it. As Ironic's set_target_raid_config it works in any
// provision state, but not while the node is locked (409).
func (e *Engine) SetTargetRaidConfig(ident string, cfg map[string]any) error {
	return e.do(func(t *tx) error {
		n, err := e.lookup(ident)
		if err != nil {
			return err
		}
		if n.Locked() {
			return lockedError(n)
		}
		if len(cfg) == 0 {
			cfg = nil
		}
		n.TargetRaidConfig = maps.Clone(cfg)
		n.UpdatedAt = t.now
		t.forget(n.UUID)
		t.dirty[n.UUID] = n
		return nil
	})
}
