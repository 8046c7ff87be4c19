package api_test

import (
	"strings"
	"testing"
)

// TestBaremetalCLIPortGroupsAllocations: Debian's baremetal CLI
// (python3-ironicclient) against the coordinator: port group create (with
// mode and a property), port set (address, port group, physical_network), node set
// --no-automated-clean, and allocation create, which binds an available
// node of the class; each read back through the API.
func TestBaremetalCLIPortGroupsAllocations(t *testing.T) {
	requireTool(t, baremetalPath, "python3-ironicclient")
	r := newVersionRig(t)
	bm := newBMCLI(t, r.api.Base)
	id := r.node("site1", "available")
	r.patch(id, 200, op("add", "/resource_class", "baremetal"))

	var pg map[string]any
	if !bm.json(&pg, "port", "group", "create", "--node", id, "--name", "bond0", "--mode", "802.3ad", "--property", "miimon=100", "-f", "json") {
		t.FailNow()
	}
	if pg["mode"] != "802.3ad" || pg["name"] != "bond0" {
		t.Fatalf("port group create printed %v", pg)
	}
	var port map[string]any
	if !bm.json(&port, "port", "create", "52:54:00:12:34:56", "--node", id, "-f", "json") {
		t.FailNow()
	}
	pid, _ := port["uuid"].(string)
	if _, ok := bm.ok("port", "set", pid, "--address", "52:54:00:12:34:57", "--port-group", "bond0"); !ok {
		t.FailNow()
	}
	var got map[string]any
	if code := r.api.Do("GET", "/v1/ports/"+pid, nil, &got); code != 200 || got["address"] != "52:54:00:12:34:57" || got["portgroup_uuid"] != pg["uuid"] {
		t.Fatalf("port after port set: %d %v", code, got)
	}
	if _, ok := bm.ok("port", "set", pid, "--physical-network", "physnet1"); !ok {
		t.FailNow()
	}
	res, ok := bm.ok("port", "show", pid, "-f", "value", "-c", "physical_network")
	if !ok || strings.TrimSpace(res.stdout) != "physnet1" {
		t.Fatalf("port show physical_network: %q, want physnet1", res.stdout)
	}
	if res := bm.run("port", "set", pid, "--physical-network", strings.Repeat("p", 65)); res.code == 0 || !strings.Contains(res.stderr, "HTTP 400") {
		t.Fatalf("port set --physical-network of 65 characters: exit %d, %q; want refused with a 400 (at most 64)", res.code, res.stderr)
	}

	if _, ok := bm.ok("node", "set", id, "--no-automated-clean"); !ok {
		t.FailNow()
	}
	var n map[string]any
	if r.api.Do("GET", "/v1/nodes/"+id, nil, &n); n["automated_clean"] != false {
		t.Fatalf("automated_clean after node set --no-automated-clean: %v", n["automated_clean"])
	}

	var a map[string]any
	if !bm.json(&a, "allocation", "create", "--resource-class", "baremetal", "--name", "alloc1", "-f", "json") {
		t.FailNow()
	}
	if a["state"] != "active" || a["node_uuid"] != id {
		t.Fatalf("allocation create printed %v; want active on %s", a, id)
	}
	res, ok = bm.ok("node", "show", id, "-f", "value", "-c", "allocation_uuid")
	if !ok || strings.TrimSpace(res.stdout) != a["uuid"] {
		t.Fatalf("node show allocation_uuid: %q, want %v", res.stdout, a["uuid"])
	}
	if _, ok := bm.ok("allocation", "delete", "alloc1"); !ok {
		t.FailNow()
	}
}
