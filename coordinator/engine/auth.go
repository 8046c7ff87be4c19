package engine

import (
	"github.com/bmedge/bmedge/coordinator/engine/brokerauth"
	"github.com/bmedge/bmedge/coordinator/fsm"
)

// The broker's authorization is brokerauth's; these are its doors for
// the coordinator's server, which hands the engine to the broker.

// NodeCredentials returns the MQTT credential of the node's current
// ramdisk boot; ok is false when the node is not booting or running one.
func (e *Engine) NodeCredentials(nodeUUID string) (user, password string, ok bool) {
	return e.auth.NodeCredentials(nodeUUID)
}

// CoordinatorCredentials are the coordinator's own MQTT credentials.
func (e *Engine) CoordinatorCredentials() (user, password string) {
	return e.auth.CoordinatorCredentials()
}

// SiteClientID is the MQTT client ID of a site's edge agent. A site's
// other clients (tools, a second process) use SiteClientID + "." + suffix.
func SiteClientID(site string) string { return brokerauth.SiteClientID(site) }

// NodeClientID is the MQTT client ID of a node's ramdisk agent.
func NodeClientID(nodeUUID string) string { return brokerauth.NodeClientID(nodeUUID) }

// Authenticate implements broker.Credentials (brokerauth.Book): it runs
// on the broker's goroutines and never waits on the engine.
func (e *Engine) Authenticate(user, password, clientID string) error {
	return e.auth.Authenticate(user, password, clientID)
}

// Prefix implements broker.Credentials: the topic subtree of each user.
func (e *Engine) Prefix(user string) (string, bool) { return e.auth.Prefix(user) }

// publishAuth keeps the broker's copies in step with a node as
// committed: its site and its current boot's nonce.
func (e *Engine) publishAuth(n *fsm.Node) { e.auth.SetNode(n.UUID, n.Site, n.BootNonce) }

// notePort adds a PXE-enabled port's address to its node's boot MACs, or
// removes it.
func (e *Engine) notePort(p *Port, add bool) {
	e.auth.NotePort(p.NodeUUID, p.Address, p.PXE, add)
	// The site's edge agent must know its nodes' MACs, which discovery
	// never answers.
	if n := e.reg.nodes[p.NodeUUID]; n != nil {
		e.discoveryDirty(n.Site)
	}
}
