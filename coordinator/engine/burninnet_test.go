package engine

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bmedge/bmedge/coordinator/fsm"
)

// TestBurninPairKey: both nodes of a pair get one key, HMAC-SHA256 of the
// engine's secret over "burnin_network:" and the two UUIDs sorted (what
// scripts/systest's TestBurninNetworkPairing searches the outputs
// for); another pair gets another key; the partner is resolved by name
// or UUID and must be another node of the same site.
func TestBurninPairKey(t *testing.T) {
	e, _ := newEngine(t, Config{})
	if _, _, err := e.AddSite("s2"); err != nil {
		t.Fatal(err)
	}
	a, _ := e.CreateNode(NodeSpec{Name: "a", Driver: "fake", Site: "s1"})
	b, _ := e.CreateNode(NodeSpec{Name: "b", Driver: "fake", Site: "s1"})
	c, _ := e.CreateNode(NodeSpec{Name: "c", Driver: "fake", Site: "s1"})
	e.CreateNode(NodeSpec{Name: "d", Driver: "fake", Site: "s2"})
	secret, err := os.ReadFile(filepath.Join(e.cfg.DataDir, "secret"))
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := min(a.UUID, b.UUID), max(a.UUID, b.UUID)
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("burnin_network:" + lo + ":" + hi))
	want := hex.EncodeToString(m.Sum(nil))
	node := func(id string) *fsm.Node { return e.reg.nodes[id] }
	pa, ka, err := e.burninPair(node(a.UUID), "b")
	if err != nil || pa != b.UUID || ka != want {
		t.Fatalf("a with b: %s %s %v; want %s %s", pa, ka, err, b.UUID, want)
	}
	pb, kb, err := e.burninPair(node(b.UUID), a.UUID)
	if err != nil || pb != a.UUID || kb != want {
		t.Fatalf("b with a: %s %s %v; want the same key", pb, kb, err)
	}
	if _, kc, err := e.burninPair(node(c.UUID), "a"); err != nil || kc == want {
		t.Fatalf("c with a: %v, key equal to a-b's: %v", err, kc == want)
	}
	for ident, msg := range map[string]string{"a": "is node a itself", "d": "is in site s2, node a in site s1", "zz": `"zz" is no node of this coordinator`} {
		if _, _, err := e.burninPair(node(a.UUID), ident); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("a with %s: %v, want %q", ident, err, msg)
		}
	}
}
