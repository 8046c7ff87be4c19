package engine

import "github.com/bmedge/bmedge/protocol"

// noteSiteSummary records what a site's heartbeat summary says of the
// site itself (its outbox depth). Runs in the engine's loop.
func (e *Engine) noteSiteSummary(t *tx, site string, msg *protocol.Message) {}
