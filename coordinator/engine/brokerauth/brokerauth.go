// Package brokerauth is the coordinator's broker authorization: who may
// connect to the embedded MQTT broker, under which client ID, and which
// topic subtree each identity owns. It keeps lock-free copies of what it
// needs (site password hashes, each node's site and current boot nonce,
// each node's boot MACs), because the broker asks on its connection
// goroutines for every CONNECT, publish and delivery and must never wait
// on the engine. The engine feeds it after every commit; nothing here
// decides lifecycle rules or touches the database.
package brokerauth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/bmedge/bmedge/lib/mqttbroker"
	"github.com/bmedge/bmedge/protocol"
)

// Client IDs: each identity has its own, so that nobody can resume (take
// over) another identity's session.
const (
	coordinatorClientID = "coordinator"
	edgeClientIDPrefix  = "edge-"
	nodeClientIDPrefix  = "ramdisk-"
)

// SiteClientID is the MQTT client ID of a site's edge agent. A site's
// other clients (tools, a second process) use SiteClientID + "." + suffix.
func SiteClientID(site string) string { return edgeClientIDPrefix + site }

// NodeClientID is the MQTT client ID of a node's ramdisk agent.
func NodeClientID(nodeUUID string) string { return nodeClientIDPrefix + nodeUUID }

// HashPassword is how a site's password is kept (only its hash).
func HashPassword(p string) string {
	s := sha256.Sum256([]byte(p))
	return hex.EncodeToString(s[:])
}

// Book holds the copies Authenticate and Prefix read. Every method is
// safe for concurrent use.
type Book struct {
	secret []byte
	// siteBroker tells whether a site's edge agent runs a site broker,
	// whose ramdisks the coordinator's broker does not admit.
	siteBroker func(site string) bool

	sitePass sync.Map // site → password hash
	nodeSite sync.Map // node UUID → site
	boots    sync.Map // node UUID → nonce of the current ramdisk boot
	// bootMACs holds each node's PXE-enabled port addresses ([]string,
	// replaced, never changed in place), for boot commands: the edge
	// agent answers network boot requests from these MACs only.
	bootMACs sync.Map
	// revoker closes the broker connections of a revoked credential.
	revoker atomic.Pointer[func(user string) int]
}

// New returns a book whose credentials derive from secret; siteBroker
// (nil: never) says whether a site runs a site broker.
func New(secret []byte, siteBroker func(site string) bool) *Book {
	if siteBroker == nil {
		siteBroker = func(string) bool { return false }
	}
	return &Book{secret: secret, siteBroker: siteBroker}
}

// Derive is the secret's HMAC of what: the coordinator's credentials, a
// boot's, a burn-in pair's key.
func (b *Book) Derive(what string) string {
	mac := hmac.New(sha256.New, b.secret)
	mac.Write([]byte(what))
	return hex.EncodeToString(mac.Sum(nil))
}

// Secret is the secret the credentials derive from (for the backup,
// which must restore it); not to be changed.
func (b *Book) Secret() []byte { return b.secret }

// BootPassword derives a boot's credential from its nonce: the nonce is
// random per boot, the secret never leaves the coordinator, so the
// credential is fresh and unguessable, and nothing of it is stored.
func (b *Book) BootPassword(nodeUUID, nonce string) string {
	return b.Derive("boot:" + nodeUUID + ":" + nonce)
}

// CoordinatorCredentials are the coordinator's own MQTT credentials.
func (b *Book) CoordinatorCredentials() (user, password string) {
	return "coordinator", b.Derive("coordinator")
}

// NodeCredentials returns the MQTT credential of the node's current
// ramdisk boot; ok is false when the node is not booting or running one.
func (b *Book) NodeCredentials(nodeUUID string) (user, password string, ok bool) {
	v, ok := b.boots.Load(nodeUUID)
	if !ok {
		return "", "", false
	}
	return "node:" + nodeUUID, b.BootPassword(nodeUUID, v.(string)), true
}

// SetSite keeps a site's password hash; DropSite forgets the site.
func (b *Book) SetSite(site, passwordHash string) { b.sitePass.Store(site, passwordHash) }

// DropSite forgets a deleted site's password.
func (b *Book) DropSite(site string) { b.sitePass.Delete(site) }

// SetNode keeps a node's site and its current boot's nonce ("" for none)
// as committed.
func (b *Book) SetNode(nodeUUID, site, bootNonce string) {
	b.nodeSite.Store(nodeUUID, site)
	if bootNonce == "" {
		b.boots.Delete(nodeUUID)
	} else {
		b.boots.Store(nodeUUID, bootNonce)
	}
}

// DropNode forgets a deleted node.
func (b *Book) DropNode(nodeUUID string) {
	b.nodeSite.Delete(nodeUUID)
	b.boots.Delete(nodeUUID)
}

// NotePort adds a PXE-enabled port's address to its node's boot MACs, or
// removes it; a port without PXE changes nothing.
func (b *Book) NotePort(nodeUUID, address string, pxe, add bool) {
	if !pxe {
		return
	}
	var old []string
	if v, ok := b.bootMACs.Load(nodeUUID); ok {
		old = v.([]string)
	}
	l := make([]string, 0, len(old)+1)
	for _, x := range old {
		if x != address {
			l = append(l, x)
		}
	}
	if add {
		l = append(l, address)
	}
	if len(l) == 0 {
		b.bootMACs.Delete(nodeUUID)
		return
	}
	b.bootMACs.Store(nodeUUID, l)
}

// BootMACs are the node's PXE-enabled port addresses (not to be changed).
func (b *Book) BootMACs(nodeUUID string) []string {
	v, _ := b.bootMACs.Load(nodeUUID)
	l, _ := v.([]string)
	return l
}

// WithCredential replaces a boot command's nonce by the boot's
// credential, on a copy: the stored command keeps only the nonce. It adds
// the node's boot MACs.
func (b *Book) WithCredential(m *protocol.Message) *protocol.Message {
	nonce := protocol.PowerArgsOf(m.Args).BootNonce
	if nonce == "" {
		return m
	}
	c := *m
	c.Args = make(map[string]any, len(m.Args)+1)
	for k, v := range m.Args {
		if k != protocol.ArgBootNonce {
			c.Args[k] = v
		}
	}
	c.Args[protocol.ArgAgentUsername] = "node:" + m.Node
	c.Args[protocol.ArgAgentPassword] = b.BootPassword(m.Node, nonce)
	if l := b.BootMACs(m.Node); l != nil {
		a := make([]any, len(l))
		for i, x := range l {
			a[i] = x
		}
		c.Args[protocol.ArgBootMACs] = a
	}
	return &c
}

// SetRevoker sets what closes the broker connections of a credential.
func (b *Book) SetRevoker(f func(user string) int) { b.revoker.Store(&f) }

// Revoke closes the connections of user (a revoked site credential); it
// returns how many were closed.
func (b *Book) Revoke(user string) int {
	if f := b.revoker.Load(); f != nil {
		return (*f)(user)
	}
	return 0
}

// Authenticate implements broker.Credentials. It reads only the
// lock-free copies. Each refusal wraps its mqttbroker kind, by which the
// broker counts them in its bounded log.
func (b *Book) Authenticate(user, password, clientID string) error {
	switch {
	case user == "coordinator":
		if !hmac.Equal([]byte(password), []byte(b.Derive("coordinator"))) {
			return mqttbroker.ErrWrongPassword
		}
		if clientID != coordinatorClientID && !strings.HasPrefix(clientID, coordinatorClientID+".") {
			return fmt.Errorf("%w: %q does not belong to the coordinator (use %q)", mqttbroker.ErrClientID, clientID, coordinatorClientID)
		}
		return nil
	case strings.HasPrefix(user, "site:"):
		site := strings.TrimPrefix(user, "site:")
		h, ok := b.sitePass.Load(site)
		if !ok {
			return fmt.Errorf("%w: no such site", mqttbroker.ErrUnknownUser)
		}
		if !hmac.Equal([]byte(HashPassword(password)), []byte(h.(string))) {
			return mqttbroker.ErrWrongPassword
		}
		own := SiteClientID(site)
		if clientID != own && !strings.HasPrefix(clientID, own+".") {
			return fmt.Errorf("%w: %q does not belong to site %s (use %q)", mqttbroker.ErrClientID, clientID, site, own)
		}
		return nil
	case strings.HasPrefix(user, "node:"):
		id := strings.TrimPrefix(user, "node:")
		nonce, ok := b.boots.Load(id)
		if !ok {
			return fmt.Errorf("%w: no ramdisk boot of this node is under way (an earlier boot's credential, or an unknown node)", mqttbroker.ErrUnknownUser)
		}
		if !hmac.Equal([]byte(password), []byte(b.BootPassword(id, nonce.(string)))) {
			return fmt.Errorf("%w: not the credential of the node's current boot", mqttbroker.ErrWrongPassword)
		}
		if clientID != NodeClientID(id) {
			return fmt.Errorf("%w: %q does not belong to node %s (use %q)", mqttbroker.ErrClientID, clientID, id, NodeClientID(id))
		}
		if site, ok := b.nodeSite.Load(id); ok && b.siteBroker(site.(string)) {
			return fmt.Errorf("%w: site %s runs a site broker, which its ramdisks use; the coordinator's broker does not admit them", mqttbroker.ErrNotHere, site)
		}
		return nil
	}
	return mqttbroker.ErrUnknownUser
}

// Prefix implements broker.Credentials: the topic subtree of each user.
func (b *Book) Prefix(user string) (string, bool) {
	switch {
	case user == "coordinator":
		return "", true
	case strings.HasPrefix(user, "site:"):
		return protocol.TopicPrefix + "/site/" + strings.TrimPrefix(user, "site:") + "/", true
	case strings.HasPrefix(user, "node:"):
		id := strings.TrimPrefix(user, "node:")
		site, ok := b.nodeSite.Load(id)
		if !ok {
			return "", false
		}
		return protocol.TopicPrefix + "/site/" + site.(string) + "/node/" + id + "/", true
	}
	return "", false
}
