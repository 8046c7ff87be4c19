package api_test

import (
	"strings"
	"testing"
)

// TestAllocationsBindAndRelease: an allocation (API 1.52) takes an
// available node of its resource class that has its traits and is among
// its candidates: the node's allocation_uuid and instance_uuid become the
// allocation's UUID; a second one finds none and is in state error with
// Ironic's last_error; deleting the first releases the node. instance_uuid
// PATCH follows Ironic's rules (409 over another instance).
func TestAllocationsBindAndRelease(t *testing.T) {
	r := newVersionRig(t)
	id := r.node("site1", "available")
	other := r.node("site1", "available")
	r.patch(id, 200, op("add", "/resource_class", "gold"))
	r.patch(other, 200, op("add", "/resource_class", "gold"))
	if code := r.api.Do("PUT", "/v1/nodes/"+id+"/traits/CUSTOM_GPU", nil, nil); code != 204 {
		t.Fatalf("trait: %d", code)
	}
	var a map[string]any
	if code := r.api.Do("POST", "/v1/allocations", map[string]any{"name": "job1", "resource_class": "gold", "traits": []string{"CUSTOM_GPU"}}, &a); code != 201 {
		t.Fatalf("allocation create: %d %v", code, a)
	}
	if a["state"] != "active" || a["node_uuid"] != id {
		t.Fatalf("allocation: %v; want active on %s (the only gold node with CUSTOM_GPU)", a, id)
	}
	n := r.get(id)
	var raw map[string]any
	r.api.Do("GET", "/v1/nodes/"+id, nil, &raw)
	if raw["allocation_uuid"] != a["uuid"] || raw["instance_uuid"] != a["uuid"] {
		t.Fatalf("node %s after the allocation: allocation_uuid %v instance_uuid %v; want %v", n.Name, raw["allocation_uuid"], raw["instance_uuid"], a["uuid"])
	}
	var na map[string]any
	if code := r.api.Do("GET", "/v1/nodes/"+id+"/allocation", nil, &na); code != 200 || na["uuid"] != a["uuid"] {
		t.Fatalf("GET node allocation: %d %v", code, na)
	}
	// Candidates that hold no gold node with the trait: error.
	var b map[string]any
	r.api.Do("POST", "/v1/allocations", map[string]any{"resource_class": "gold", "traits": []string{"CUSTOM_GPU"}}, &b)
	if b["state"] != "error" || !strings.Contains(b["last_error"].(string), "no suitable nodes have the requested traits CUSTOM_GPU") {
		t.Fatalf("second allocation: %v; want error naming the trait", b)
	}
	var c map[string]any
	r.api.Do("POST", "/v1/allocations", map[string]any{"resource_class": "gold", "candidate_nodes": []string{other}}, &c)
	if c["state"] != "active" || c["node_uuid"] != other {
		t.Fatalf("allocation with candidate %s: %v", other, c)
	}
	var list struct {
		Allocations []map[string]any `json:"allocations"`
	}
	if r.api.Do("GET", "/v1/allocations?state=active", nil, &list); len(list.Allocations) != 2 {
		t.Fatalf("active allocations: %v", list.Allocations)
	}
	// instance_uuid over another instance: 409.
	if code := r.api.Do("PATCH", "/v1/nodes/"+id, []map[string]any{op("replace", "/instance_uuid", "0b7d7a3e-1c1e-4c43-9b1a-6a2f3b4c5d6e")}, nil); code != 409 {
		t.Fatalf("instance_uuid over the allocation's: %d, want 409", code)
	}
	if code := r.api.Do("DELETE", "/v1/allocations/job1", nil, nil); code != 204 {
		t.Fatalf("allocation delete: %d", code)
	}
	r.api.Do("GET", "/v1/nodes/"+id, nil, &raw)
	if raw["allocation_uuid"] != nil || raw["instance_uuid"] != nil {
		t.Fatalf("node after the allocation's delete: allocation_uuid %v instance_uuid %v; want null", raw["allocation_uuid"], raw["instance_uuid"])
	}
	// Removing instance_uuid of a node with an allocation removes it.
	r.patch(other, 200, op("remove", "/instance_uuid", nil))
	if code := r.api.Do("GET", "/v1/allocations/"+c["uuid"].(string), nil, nil); code != 404 {
		t.Fatalf("allocation after its node's instance_uuid was removed: %d, want 404", code)
	}
	r.patch(id, 200, op("add", "/instance_uuid", "0b7d7a3e-1c1e-4c43-9b1a-6a2f3b4c5d6e"))
	if code := r.api.Do("PATCH", "/v1/nodes/"+other, []map[string]any{op("add", "/instance_uuid", "0b7d7a3e-1c1e-4c43-9b1a-6a2f3b4c5d6e")}, nil); code != 409 {
		t.Fatalf("a second node with the same instance_uuid: %d, want 409", code)
	}
	// Below 1.52 allocations do not exist.
	if a := vcurl(t, r.api.Base, "1.51", "GET", "/v1/allocations", ""); a.status != 404 {
		t.Fatalf("allocations at 1.51: %d", a.status)
	}
}

// TestPortGroupsAndPortPatch: port groups (1.23; mode and properties
// 1.26) of a node, ports moved into one by PATCH /v1/ports/{id}, a group
// with ports kept from deletion, and the version gates.
func TestPortGroupsAndPortPatch(t *testing.T) {
	r := newVersionRig(t)
	id := r.node("site1", "manageable")
	base := r.api.Base
	if a := vcurl(t, base, "1.22", "GET", "/v1/portgroups", ""); a.status != 404 {
		t.Fatalf("portgroups at 1.22: %d", a.status)
	}
	if a := vcurl(t, base, "1.25", "POST", "/v1/portgroups", `{"node_uuid":"`+id+`","mode":"802.3ad"}`); a.status != 406 {
		t.Fatalf("portgroup mode at 1.25: %d %.200s, want 406", a.status, a.body)
	}
	if a := vcurl(t, base, "1.26", "POST", "/v1/portgroups", `{"node_uuid":"`+id+`","mode":"bonding-of-sorts"}`); a.status != 400 || !strings.Contains(a.body, "active-backup") {
		t.Fatalf("portgroup with an unknown mode: %d %.200s, want 400 naming the modes", a.status, a.body)
	}
	pg := vcurl(t, base, "1.26", "POST", "/v1/portgroups", `{"node_uuid":"`+id+`","name":"bond0","mode":"802.3ad","properties":{"miimon":"100","xmit_hash_policy":"layer3+4"},"address":"52:54:00:aa:bb:01"}`)
	if pg.status != 201 {
		t.Fatalf("portgroup create: %d %.300s", pg.status, pg.body)
	}
	g := pg.obj(t)
	if g["mode"] != "802.3ad" || g["name"] != "bond0" {
		t.Fatalf("portgroup: %v", g)
	}
	gid := g["uuid"].(string)
	if l := vcurl(t, base, "1.26", "GET", "/v1/nodes/"+id+"/portgroups/detail", "").obj(t); len(l["portgroups"].([]any)) != 1 {
		t.Fatalf("node portgroups: %v", l)
	}
	var port map[string]any
	if code := r.api.Do("POST", "/v1/ports", map[string]any{"node_uuid": id, "address": "52:54:00:aa:bb:02"}, &port); code != 201 {
		t.Fatalf("port create: %d %v", code, port)
	}
	pid := port["uuid"].(string)
	p := vcurl(t, base, "1.53", "PATCH", "/v1/ports/"+pid, `[{"op":"replace","path":"/portgroup_uuid","value":"`+gid+`"},{"op":"replace","path":"/address","value":"52:54:00:AA:BB:03"},{"op":"add","path":"/extra/rack","value":"r1"}]`)
	if p.status != 200 {
		t.Fatalf("port PATCH: %d %.300s", p.status, p.body)
	}
	if o := p.obj(t); o["portgroup_uuid"] != gid || o["address"] != "52:54:00:aa:bb:03" || o["extra"].(map[string]any)["rack"] != "r1" {
		t.Fatalf("port after PATCH: %v", o)
	}
	if a := vcurl(t, base, "1.53", "PATCH", "/v1/ports/"+pid, `[{"op":"add","path":"/local_link_connection/switch_id","value":"x"}]`); a.status != 400 {
		t.Fatalf("port PATCH of local_link_connection: %d, want 400", a.status)
	}
	if l := vcurl(t, base, "1.26", "GET", "/v1/portgroups/"+gid+"/ports", "").obj(t); len(l["ports"].([]any)) != 1 {
		t.Fatalf("portgroup ports: %v", l)
	}
	if a := vcurl(t, base, "1.26", "DELETE", "/v1/portgroups/"+gid, ""); a.status != 400 || !strings.Contains(a.body, "still has ports") {
		t.Fatalf("delete of a portgroup with ports: %d %.200s, want 400", a.status, a.body)
	}
	if a := vcurl(t, base, "1.26", "PATCH", "/v1/portgroups/bond0", `[{"op":"replace","path":"/mode","value":"balance-rr"}]`); a.status != 200 || a.obj(t)["mode"] != "balance-rr" {
		t.Fatalf("portgroup PATCH mode: %d %.200s", a.status, a.body)
	}
	if a := vcurl(t, base, "1.53", "PATCH", "/v1/ports/"+pid, `[{"op":"remove","path":"/portgroup_uuid"}]`); a.status != 200 {
		t.Fatalf("port out of its group: %d %.200s", a.status, a.body)
	}
	if a := vcurl(t, base, "1.26", "DELETE", "/v1/portgroups/"+gid, ""); a.status != 204 {
		t.Fatalf("delete of an empty portgroup: %d %.200s", a.status, a.body)
	}
}

// TestFakeHardwareAndNodeFields: fake-hardware is Ironic's, with its name
// kept and its fake boot and deploy, which deploy and undeploy at once
// with no ramdisk; automated_clean false skips cleaning on provide;
// disable_power_off (1.95) is false by default and true is taken: a power
// off of such a node is Ironic's 409; a node without conductor_group among several
// sites is refused naming serve --default-site.
func TestFakeHardwareAndNodeFields(t *testing.T) {
	r := newVersionRig(t)
	base := r.api.Base
	var n map[string]any
	if code := r.api.Do("POST", "/v1/nodes", map[string]any{"driver": "fake-hardware", "name": "fk1", "conductor_group": "site1"}, &n); code != 201 {
		t.Fatalf("create fake-hardware: %d %v", code, n)
	}
	if n["driver"] != "fake-hardware" || n["boot_interface"] != "fake" || n["deploy_interface"] != "fake" || n["power_interface"] != "fake" {
		t.Fatalf("fake-hardware node: driver %v boot %v deploy %v power %v", n["driver"], n["boot_interface"], n["deploy_interface"], n["power_interface"])
	}
	id := n["uuid"].(string)
	for _, v := range []struct{ verb, state string }{{"manage", "manageable"}, {"provide", "available"}, {"active", "active"}, {"deleted", "available"}} {
		r.api.MustVerb(id, v.verb, nil)
		if got := r.settle(id, ""); got.State != v.state {
			t.Fatalf("fake-hardware %s: %s (%v), want %s", v.verb, got.State, got.LastErr, v.state)
		}
	}
	var hist struct {
		History []struct {
			Event string `json:"event"`
		} `json:"history"`
	}
	r.api.Do("GET", "/v1/nodes/"+id+"/history?detail=True", nil, &hist)
	for _, h := range hist.History {
		if strings.Contains(h.Event, "write_image") || strings.Contains(h.Event, "erase_devices") {
			t.Fatalf("a fake deploy ran a ramdisk step: %q", h.Event)
		}
	}
	// A fake node (this project's simulated machine) may take Ironic's
	// fake deploy too, and back.
	sim := r.node("site1", "manageable")
	r.patch(sim, 200, op("replace", "/deploy_interface", "fake"), op("replace", "/boot_interface", "fake"))
	r.patch(sim, 200, op("remove", "/deploy_interface", nil))
	var raw map[string]any
	r.api.Do("GET", "/v1/nodes/"+sim, nil, &raw)
	if raw["driver"] != "fake" || raw["deploy_interface"] != "direct" || raw["boot_interface"] != "fake" {
		t.Fatalf("after reset: deploy %v boot %v", raw["deploy_interface"], raw["boot_interface"])
	}
	if a := vcurl(t, base, "1.95", "PATCH", "/v1/nodes/"+sim, `[{"op":"replace","path":"/deploy_interface","value":"ramdisk"}]`); a.status != 400 || !strings.Contains(a.body, "needs a Redfish BMC") {
		t.Fatalf("deploy_interface ramdisk: %d %.300s, want 400 saying why", a.status, a.body)
	}

	// automated_clean false: provide cleans nothing.
	r.patch(sim, 200, op("add", "/automated_clean", false))
	r.api.MustVerb(sim, "provide", nil)
	if got := r.settle(sim, ""); got.State != "available" {
		t.Fatalf("provide with automated_clean false: %s", got.State)
	}
	r.api.Do("GET", "/v1/nodes/"+sim+"/history?detail=True", nil, &hist)
	for _, h := range hist.History {
		if strings.Contains(h.Event, "erase_devices") {
			t.Fatalf("automated_clean false, yet cleaning ran: %q", h.Event)
		}
	}
	r.api.Do("GET", "/v1/nodes/"+sim, nil, &raw)
	if raw["automated_clean"] != false {
		t.Fatalf("automated_clean %v", raw["automated_clean"])
	}

	// disable_power_off.
	if a := vcurl(t, base, "1.94", "POST", "/v1/nodes", `{"driver":"fake","conductor_group":"site1","disable_power_off":false}`); a.status != 406 {
		t.Fatalf("disable_power_off at 1.94: %d, want 406", a.status)
	}
	if a := vcurl(t, base, "1.95", "POST", "/v1/nodes", `{"driver":"fake","conductor_group":"site1","disable_power_off":true}`); a.status != 201 || !strings.Contains(a.body, `"disable_power_off":true`) {
		t.Fatalf("disable_power_off true at create: %d %.200s, want 201 showing it", a.status, a.body)
	}
	if a := vcurl(t, base, "1.95", "PATCH", "/v1/nodes/"+sim, `[{"op":"replace","path":"/disable_power_off","value":"True"}]`); a.status != 200 || !strings.Contains(a.body, `"disable_power_off":true`) {
		t.Fatalf("PATCH disable_power_off true: %d %.200s, want 200 showing it", a.status, a.body)
	}
	// Such a node is never powered off: Ironic's PowerStateFailure (409).
	for _, target := range []string{"power off", "soft power off"} {
		if a := vcurl(t, base, "1.95", "PUT", "/v1/nodes/"+sim+"/states/power", `{"target":"`+target+`"}`); a.status != 409 || !strings.Contains(a.body, "Failed to set node power state to "+target+".") {
			t.Fatalf("%s of a disable_power_off node: %d %.300s, want Ironic's 409", target, a.status, a.body)
		}
	}
	if a := vcurl(t, base, "1.95", "PATCH", "/v1/nodes/"+sim, `[{"op":"remove","path":"/disable_power_off"}]`); a.status != 200 || !strings.Contains(a.body, `"disable_power_off":false`) {
		t.Fatalf("PATCH remove disable_power_off: %d %.200s, want 200 and false", a.status, a.body)
	}
	if a := vcurl(t, base, "1.95", "PUT", "/v1/nodes/"+sim+"/states/power", `{"target":"power off"}`); a.status != 202 {
		t.Fatalf("power off once disable_power_off is removed: %d %.300s, want 202", a.status, a.body)
	}
	if a := vcurl(t, base, "1.94", "PATCH", "/v1/nodes/"+sim, `[{"op":"replace","path":"/disable_power_off","value":false}]`); a.status != 406 {
		t.Fatalf("PATCH disable_power_off at 1.94: %d, want 406", a.status)
	}
	if a := vcurl(t, base, "1.94", "GET", "/v1/nodes/"+sim, ""); strings.Contains(a.body, "disable_power_off") {
		t.Fatalf("disable_power_off shown at 1.94")
	}
	// Two sites, no conductor_group: the 400 names the flag.
	if a := vcurl(t, base, "1.95", "POST", "/v1/nodes", `{"driver":"fake"}`); a.status != 400 || !strings.Contains(a.body, "--default-site") {
		t.Fatalf("create without a site among two: %d %.300s, want 400 naming --default-site", a.status, a.body)
	}
}

// TestPartitionImageRefused: a partition image (image_type partition, or
// kernel and ramdisk in instance_info, as Ironic reads them) is refused at
// the deploy with a 400 naming the field, never deployed as a whole disk.
func TestPartitionImageRefused(t *testing.T) {
	r := newVersionRig(t)
	id := r.node("site1", "available")
	for _, c := range []struct {
		ops  []map[string]any
		want string
	}{
		{[]map[string]any{op("add", "/instance_info/image_type", "partition")}, "instance_info/image_type"},
		{[]map[string]any{op("remove", "/instance_info/image_type", nil), op("add", "/instance_info/kernel", "http://127.0.0.1:1/vmlinuz"),
			op("add", "/instance_info/ramdisk", "http://127.0.0.1:1/initrd")}, "instance_info/kernel"},
	} {
		r.patch(id, 200, c.ops...)
		code, msg := r.api.Verb(id, "active", nil)
		if code != 400 || !strings.Contains(msg, c.want) {
			t.Fatalf("deploy of a partition image (%v): %d %q, want 400 naming %s", c.ops, code, msg, c.want)
		}
	}
	if got := r.get(id); got.State != "available" {
		t.Fatalf("node after the refusals: %s", got.State)
	}
	// An unknown target: Ironic's InvalidStateRequested words, then the
	// targets there are.
	code, msg := r.api.Verb(id, "teleport", nil)
	if want := `The requested action "teleport" can not be performed on node "` + id + `" while it is in state "available".`; code != 400 || !strings.HasPrefix(msg, want) || !strings.Contains(msg, "valid targets: manage") {
		t.Fatalf("target teleport: %d %q, want 400 beginning %q", code, msg, want)
	}
}

// TestVersions96To110: what API 1.96 to 1.110 brought, each from its
// version (406 or hidden below): port description (1.97), vendor (1.100)
// and category (1.101); the conductor_group filter of port and portgroup
// lists (1.99); portgroup physical_network (1.102) and category (1.103);
// instance_name (1.104); the shard filter of portgroups (1.106, no node
// has a shard); a request id on every answer (1.107); health (1.109,
// null); inspection rules (1.96, TestInspectionRulesAPI).
func TestVersions96To110(t *testing.T) {
	r := newVersionRig(t)
	base := r.api.Base
	id := r.node("site1", "manageable")
	if a := vcurl(t, base, "1.96", "POST", "/v1/ports", `{"node_uuid":"`+id+`","address":"52:54:00:01:02:03","description":"uplink"}`); a.status != 406 {
		t.Fatalf("port description at 1.96: %d, want 406", a.status)
	}
	p := vcurl(t, base, "1.101", "POST", "/v1/ports", `{"node_uuid":"`+id+`","address":"52:54:00:01:02:03","description":"uplink","vendor":"acme","category":"data"}`)
	if o := p.obj(t); p.status != 201 || o["description"] != "uplink" || o["vendor"] != "acme" || o["category"] != "data" {
		t.Fatalf("port with description, vendor, category: %d %.300s", p.status, p.body)
	}
	if strings.Contains(vcurl(t, base, "1.96", "GET", "/v1/ports/52:54:00:01:02:03", "").body, "uplink") {
		t.Fatalf("port description shown at 1.96")
	}
	if a := vcurl(t, base, "1.101", "PATCH", "/v1/ports/52:54:00:01:02:03", `[{"op":"replace","path":"/vendor","value":"other"}]`); a.status != 200 || a.obj(t)["vendor"] != "other" {
		t.Fatalf("port vendor PATCH: %d %.200s", a.status, a.body)
	}
	if a := vcurl(t, base, "1.98", "GET", "/v1/ports?conductor_group=site1", ""); a.status != 406 {
		t.Fatalf("conductor_group filter at 1.98: %d, want 406", a.status)
	}
	if l := vcurl(t, base, "1.99", "GET", "/v1/ports?conductor_group=faild", "").obj(t); len(l["ports"].([]any)) != 0 {
		t.Fatalf("ports of site faild: %v", l)
	}
	if l := vcurl(t, base, "1.99", "GET", "/v1/ports?conductor_group=site1", "").obj(t); len(l["ports"].([]any)) != 1 {
		t.Fatalf("ports of site1: %v", l)
	}
	if a := vcurl(t, base, "1.101", "POST", "/v1/portgroups", `{"node_uuid":"`+id+`","physical_network":"physnet1"}`); a.status != 406 {
		t.Fatalf("portgroup physical_network at 1.101: %d, want 406", a.status)
	}
	g := vcurl(t, base, "1.103", "POST", "/v1/portgroups", `{"node_uuid":"`+id+`","name":"pg1","physical_network":"physnet1","category":"storage"}`)
	if o := g.obj(t); g.status != 201 || o["physical_network"] != "physnet1" || o["category"] != "storage" {
		t.Fatalf("portgroup with physical_network and category: %d %.300s", g.status, g.body)
	}
	if a := vcurl(t, base, "1.105", "GET", "/v1/portgroups?shard=s1", ""); a.status != 406 {
		t.Fatalf("portgroup shard filter at 1.105: %d, want 406", a.status)
	}
	if l := vcurl(t, base, "1.106", "GET", "/v1/portgroups?shard=s1", "").obj(t); len(l["portgroups"].([]any)) != 0 {
		t.Fatalf("portgroups of shard s1: %v", l)
	}
	if a := vcurl(t, base, "1.103", "PATCH", "/v1/nodes/"+id, `[{"op":"add","path":"/instance_name","value":"web-1"}]`); a.status != 406 {
		t.Fatalf("instance_name at 1.103: %d, want 406", a.status)
	}
	n := vcurl(t, base, "1.109", "PATCH", "/v1/nodes/"+id, `[{"op":"add","path":"/instance_name","value":"web-1"}]`)
	if o := n.obj(t); n.status != 200 || o["instance_name"] != "web-1" {
		t.Fatalf("instance_name at 1.109: %d %.200s", n.status, n.body)
	}
	if o := n.obj(t); o["health"] != nil {
		t.Fatalf("health %v; want null", o["health"])
	} else if _, ok := o["health"]; !ok {
		t.Fatalf("health not shown at 1.109")
	}
	if _, ok := vcurl(t, base, "1.108", "GET", "/v1/nodes/"+id, "").obj(t)["health"]; ok {
		t.Fatalf("health shown at 1.108")
	}
	if n.header["x-openstack-request-id"] == "" {
		t.Fatalf("no X-OpenStack-Request-Id on the answer")
	}
	if a := vcurl(t, base, "1.110", "GET", "/v1/inspection_rules", ""); a.status != 200 {
		t.Fatalf("inspection rules at 1.110: %d, want 200 (served from 1.96: TestInspectionRulesAPI)", a.status)
	}
	if a := vcurl(t, base, "1.95", "GET", "/v1/inspection_rules", ""); a.status != 404 {
		t.Fatalf("inspection rules at 1.95: %d, want 404", a.status)
	}
}

// TestPortPhysicalNetwork: a port's physical_network (1.34): refused
// with 406 at create and PATCH below 1.34 and absent from the port
// there; null when unset; set at create and by PATCH, removed by a
// PATCH remove; longer than 64 characters or not a string a 400.
func TestPortPhysicalNetwork(t *testing.T) {
	r := newVersionRig(t)
	base := r.api.Base
	id := r.node("site1", "manageable")
	if a := vcurl(t, base, "1.33", "POST", "/v1/ports", `{"node_uuid":"`+id+`","address":"52:54:00:01:02:03","physical_network":"physnet1"}`); a.status != 406 {
		t.Fatalf("port physical_network at 1.33: %d %.200s, want 406", a.status, a.body)
	}
	if a := vcurl(t, base, "1.34", "POST", "/v1/ports", `{"node_uuid":"`+id+`","address":"52:54:00:01:02:03","physical_network":"`+strings.Repeat("p", 65)+`"}`); a.status != 400 || !strings.Contains(a.body, "physical_network") {
		t.Fatalf("port physical_network of 65 characters: %d %.200s, want 400", a.status, a.body)
	}
	if l := vcurl(t, base, "1.34", "GET", "/v1/ports/detail", "").obj(t); len(l["ports"].([]any)) != 0 {
		t.Fatalf("a refused create left a port: %v", l)
	}
	p := vcurl(t, base, "1.34", "POST", "/v1/ports", `{"node_uuid":"`+id+`","address":"52:54:00:01:02:03","physical_network":"physnet1"}`)
	if o := p.obj(t); p.status != 201 || o["physical_network"] != "physnet1" {
		t.Fatalf("port with physical_network: %d %.300s", p.status, p.body)
	}
	old := vcurl(t, base, "1.33", "GET", "/v1/ports/52:54:00:01:02:03", "").obj(t)
	if _, shown := old["physical_network"]; shown {
		t.Fatalf("physical_network shown at 1.33: %v", old)
	}
	if a := vcurl(t, base, "1.33", "PATCH", "/v1/ports/52:54:00:01:02:03", `[{"op":"replace","path":"/physical_network","value":"physnet2"}]`); a.status != 406 {
		t.Fatalf("port physical_network PATCH at 1.33: %d %.200s, want 406", a.status, a.body)
	}
	for _, bad := range []string{`"` + strings.Repeat("p", 65) + `"`, `5`} {
		if a := vcurl(t, base, "1.34", "PATCH", "/v1/ports/52:54:00:01:02:03", `[{"op":"replace","path":"/physical_network","value":`+bad+`}]`); a.status != 400 || !strings.Contains(a.body, "physical_network") {
			t.Fatalf("port physical_network PATCH to %.20s: %d %.200s, want 400", bad, a.status, a.body)
		}
	}
	if a := vcurl(t, base, "1.34", "PATCH", "/v1/ports/52:54:00:01:02:03", `[{"op":"replace","path":"/physical_network","value":"physnet2"}]`); a.status != 200 || a.obj(t)["physical_network"] != "physnet2" {
		t.Fatalf("port physical_network PATCH: %d %.200s", a.status, a.body)
	}
	l := vcurl(t, base, "1.34", "GET", "/v1/ports/detail", "").obj(t)
	if ps := l["ports"].([]any); len(ps) != 1 || ps[0].(map[string]any)["physical_network"] != "physnet2" {
		t.Fatalf("port list: %v", l)
	}
	a := vcurl(t, base, "1.34", "PATCH", "/v1/ports/52:54:00:01:02:03", `[{"op":"remove","path":"/physical_network"}]`)
	if o := a.obj(t); a.status != 200 || o["physical_network"] != nil {
		t.Fatalf("port physical_network removed: %d %.200s", a.status, a.body)
	} else if _, shown := o["physical_network"]; !shown {
		t.Fatalf("an unset physical_network is not shown as null at 1.34: %v", o)
	}
}
