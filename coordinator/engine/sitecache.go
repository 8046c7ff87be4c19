package engine

import "github.com/bmedge/bmedge/protocol"

// handleSiteResult takes the result of a site-wide command (cache_image),
// which names no node, and acknowledges it.
func (e *Engine) handleSiteResult(site string, msg *protocol.Message) {
	e.log.Info("site command result", "site", site, "command", msg.CommandID, "ok", msg.OK, "error", msg.Error)
	_ = e.submit(func(t *tx) error {
		ack := protocol.BMCCmdTopic(site)
		t.acks[ack] = append(t.acks[ack], msg.ID)
		return nil
	}, false)
}
