package brokerauth

import (
	"errors"
	"testing"

	"github.com/bmedge/bmedge/lib/mqttbroker"
	"github.com/bmedge/bmedge/protocol"
)

// Each identity connects with its own credential and client ID only, a
// node only during its current boot and never at a site that runs a site
// broker, and each owns its topic subtree.
func TestAuthenticate(t *testing.T) {
	siteBroker := map[string]bool{"far": true}
	b := New([]byte("0123456789abcdef0123456789abcdef"), func(s string) bool { return siteBroker[s] })
	user, pass := b.CoordinatorCredentials()
	if err := b.Authenticate(user, pass, "coordinator.api"); err != nil {
		t.Fatalf("coordinator: %v", err)
	}
	if err := b.Authenticate(user, "x", "coordinator"); !errors.Is(err, mqttbroker.ErrWrongPassword) {
		t.Fatalf("coordinator, wrong password: %v", err)
	}
	b.SetSite("s1", HashPassword("pw"))
	if err := b.Authenticate("site:s1", "pw", SiteClientID("s1")); err != nil {
		t.Fatalf("site: %v", err)
	}
	if err := b.Authenticate("site:s1", "pw", SiteClientID("s2")); !errors.Is(err, mqttbroker.ErrClientID) {
		t.Fatalf("site, another's client ID: %v", err)
	}
	b.DropSite("s1")
	if err := b.Authenticate("site:s1", "pw", SiteClientID("s1")); !errors.Is(err, mqttbroker.ErrUnknownUser) {
		t.Fatalf("deleted site: %v", err)
	}

	if _, _, ok := b.NodeCredentials("n1"); ok {
		t.Fatal("credentials of a node without a boot")
	}
	b.SetNode("n1", "s1", "nonce1")
	u, p, ok := b.NodeCredentials("n1")
	if !ok || u != "node:n1" {
		t.Fatalf("node credentials: %q %v", u, ok)
	}
	if err := b.Authenticate(u, p, NodeClientID("n1")); err != nil {
		t.Fatalf("node: %v", err)
	}
	b.SetNode("n1", "s1", "nonce2")
	if err := b.Authenticate(u, p, NodeClientID("n1")); !errors.Is(err, mqttbroker.ErrWrongPassword) {
		t.Fatalf("an earlier boot's credential: %v", err)
	}
	b.SetNode("n2", "far", "nonce3")
	u2, p2, _ := b.NodeCredentials("n2")
	if err := b.Authenticate(u2, p2, NodeClientID("n2")); !errors.Is(err, mqttbroker.ErrNotHere) {
		t.Fatalf("a node of a site broker's site: %v", err)
	}
	if pre, ok := b.Prefix("node:n1"); !ok || pre != protocol.TopicPrefix+"/site/s1/node/n1/" {
		t.Fatalf("node prefix %q %v", pre, ok)
	}
	b.DropNode("n1")
	if _, ok := b.Prefix("node:n1"); ok {
		t.Fatal("prefix of a deleted node")
	}
}

// A boot command carries the boot's credential and the node's PXE MACs
// on a copy; the stored command keeps only the nonce.
func TestWithCredential(t *testing.T) {
	b := New([]byte("0123456789abcdef0123456789abcdef"), nil)
	b.NotePort("n1", "52:54:00:00:00:01", true, true)
	b.NotePort("n1", "52:54:00:00:00:02", false, true)
	b.NotePort("n1", "52:54:00:00:00:03", true, true)
	b.NotePort("n1", "52:54:00:00:00:03", true, false)
	m := &protocol.Message{Node: "n1", Args: map[string]any{protocol.ArgBootNonce: "nonce"}}
	c := b.WithCredential(m)
	if _, ok := m.Args[protocol.ArgAgentPassword]; ok {
		t.Fatal("the original command was changed")
	}
	if c.Args[protocol.ArgAgentPassword] != b.BootPassword("n1", "nonce") || c.Args[protocol.ArgBootNonce] != nil {
		t.Fatalf("args %v", c.Args)
	}
	macs, _ := c.Args[protocol.ArgBootMACs].([]any)
	if len(macs) != 1 || macs[0] != "52:54:00:00:00:01" {
		t.Fatalf("boot MACs %v", macs)
	}
	if b.WithCredential(&protocol.Message{Node: "n1"}).Args != nil {
		t.Fatal("a command without a nonce was changed")
	}
}
