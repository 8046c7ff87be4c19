package sites

import (
	"strings"
	"testing"
)

// The book keeps the sites, their online state and what their agents
// said; deleting a site forgets all of it, an offline presence keeps
// what the last online one said.
func TestBook(t *testing.T) {
	b := New()
	b.Put(&Site{Name: "b"})
	b.Put(&Site{Name: "a"})
	if got := strings.Join(b.Names(), ","); got != "a,b" {
		t.Fatalf("names %s", got)
	}
	if b.AnyOnline() || b.SetOnline("a", true) || !b.Online("a") || !b.AnyOnline() {
		t.Fatal("online state")
	}
	b.NoteRelay("a", true, true, true)
	b.NoteRelay("a", false, false, false)
	if !b.Relaying("a") || !b.Plans("a") {
		t.Fatal("an offline presence dropped what the agent said")
	}
	b.NoteRelay("a", true, true, false)
	if !b.Relaying("a") || b.Plans("a") {
		t.Fatal("relay without plans")
	}
	b.NoteSoftware("a", true, "agent\x00 1.0"+strings.Repeat("x", 300))
	if s := b.Software("a"); len(s) != MaxSoftwareLen || !strings.HasPrefix(s, "agent 1.0") {
		t.Fatalf("software %q", s)
	}
	b.Delete("a")
	if b.Has("a") || b.Online("a") || b.Relaying("a") || len(b.All()) != 1 {
		t.Fatal("a deleted site is still known")
	}
}
