package engine

import (
	"strings"
	"testing"
)

// TestDefaultSite: a node created without a site goes to the only site;
// with several sites it is refused, naming serve --default-site, unless
// the default site is set, where it goes then. Port groups and
// allocations survive a restart (they are stored).
func TestDefaultSite(t *testing.T) {
	e, _ := newEngine(t, Config{})
	n, err := e.CreateNode(NodeSpec{Driver: "fake"})
	if err != nil || n.Site != "s1" {
		t.Fatalf("one site: %v %v", n, err)
	}
	if _, _, err := e.AddSite("s2"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.CreateNode(NodeSpec{Driver: "fake"}); err == nil || !strings.Contains(err.Error(), "--default-site") {
		t.Fatalf("two sites, no default: %v; want a refusal naming --default-site", err)
	}
	e.cfg.DefaultSite = "s2"
	if n, err := e.CreateNode(NodeSpec{Driver: "fake-hardware"}); err != nil || n.Site != "s2" || n.Driver != "fake-hardware" {
		t.Fatalf("default site s2: %+v %v", n, err)
	}
	e.cfg.DefaultSite = "nosuch"
	if _, err := e.CreateNode(NodeSpec{Driver: "fake"}); err == nil || !strings.Contains(err.Error(), "not registered") {
		t.Fatalf("unregistered default site: %v", err)
	}
}

// TestResourcesReloaded: port groups, a port's group and allocations are
// read back from the store by a new engine on the same folder.
func TestResourcesReloaded(t *testing.T) {
	e, _ := newEngine(t, Config{})
	n, err := e.CreateNode(NodeSpec{Driver: "fake", Name: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	g, err := e.CreatePortGroup(PortGroup{Name: "bond0", Mode: "802.3ad"}, "n1")
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.CreatePort("52:54:00:00:00:09", "n1", nil, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.UpdatePort(p.UUID, func(p *Port) error { p.PortGroupUUID = "bond0"; return nil }); err != nil {
		t.Fatal(err)
	}
	a, err := e.CreateAllocation(AllocationSpec{ResourceClass: "none-such"})
	if err != nil || a.State != AllocError {
		t.Fatalf("allocation: %+v %v", a, err)
	}
	dir := e.cfg.DataDir
	e.Close()
	e2, err := New(Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer e2.Close()
	if got, err := e2.PortGroup("bond0"); err != nil || got.UUID != g.UUID || got.NodeUUID != n.UUID || got.Mode != "802.3ad" {
		t.Fatalf("port group after a restart: %+v %v", got, err)
	}
	if got, err := e2.Port(p.UUID); err != nil || got.PortGroupUUID != g.UUID {
		t.Fatalf("port after a restart: %+v %v", got, err)
	}
	if got, err := e2.Allocation(a.UUID); err != nil || got.State != AllocError || !strings.Contains(got.LastError, "none-such") {
		t.Fatalf("allocation after a restart: %+v %v", got, err)
	}
}
