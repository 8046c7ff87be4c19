package api_test

import (
	"slices"
	"strings"
	"testing"
)

// TestRAIDInterfacePatch: raid_interface (API 1.31) is set per node with
// Ironic's own client (baremetal node set --raid-interface) among the
// values the node's driver supports: redfish nodes take redfish, agent
// and no-raid; a fake node refuses redfish with Ironic's 400 naming the
// values it has; a change is 409 in deploy failed (Ironic's conductor
// rule) and passes there in maintenance; changing the driver to one that
// lacks the node's raid_interface is 400; no-raid refuses a
// target_raid_config and RAID clean steps, and redfish a software one.
func TestRAIDInterfacePatch(t *testing.T) {
	requireTool(t, baremetalPath, "python3-ironicclient")
	r := newVersionRig(t)
	base := r.api.Base
	bm := newBMCLI(t, base)
	const ver = "1.31"
	show := func(id string) string {
		t.Helper()
		res, _ := bm.ok("--os-baremetal-api-version", ver, "node", "show", id, "-f", "value", "-c", "raid_interface")
		return strings.TrimSpace(res.stdout)
	}

	// A redfish node (enroll: no BMC needed to patch it).
	var n struct {
		UUID string `json:"uuid"`
	}
	if code := r.api.Do("POST", "/v1/nodes", map[string]any{"name": "rf", "driver": "redfish", "conductor_group": "site1",
		"driver_info": map[string]any{"redfish_address": "http://127.0.0.1:9"}}, &n); code != 201 {
		t.Fatalf("create redfish node: %d", code)
	}
	if got := show(n.UUID); got != "agent" {
		t.Fatalf("a new redfish node has raid_interface %q; want agent (the default)", got)
	}
	bm.ok("--os-baremetal-api-version", ver, "node", "set", n.UUID, "--raid-interface", "redfish")
	if got := show(n.UUID); got != "redfish" {
		t.Fatalf("after set --raid-interface redfish: %q", got)
	}
	d := vcurl(t, base, ver, "GET", "/v1/drivers/redfish", "").obj(t)
	if got, _ := d["enabled_raid_interfaces"].([]any); len(got) != 3 || got[0] != "agent" || got[1] != "redfish" || got[2] != "no-raid" || d["default_raid_interface"] != "agent" {
		t.Errorf("driver redfish: enabled_raid_interfaces %v, default %v", d["enabled_raid_interfaces"], d["default_raid_interface"])
	}
	soft := `{"logical_disks": [{"size_gb": 10, "raid_level": "1", "controller": "software", "is_root_volume": true}]}`
	if a := vcurl(t, base, "1.12", "PUT", "/v1/nodes/"+n.UUID+"/states/raid", soft); a.status != 400 || !strings.Contains(a.body, "raid_interface agent") {
		t.Errorf("software target_raid_config on raid_interface redfish: %d %.300s; want 400", a.status, a.body)
	}
	// The driver cannot change to one without the node's raid_interface.
	if a := vcurl(t, base, ver, "PATCH", "/v1/nodes/"+n.UUID, `[{"op":"replace","path":"/driver","value":"ipmi"},{"op":"add","path":"/driver_info/ipmi_address","value":"127.0.0.1"}]`); a.status != 400 ||
		!strings.Contains(faultstring(t, a.obj(t)), "raid interface implementation 'redfish' is not supported by hardware type ipmi") {
		t.Errorf("driver to ipmi with raid_interface redfish: %d %.300s; want Ironic's 400", a.status, a.body)
	}
	// unset resets to the default.
	bm.ok("--os-baremetal-api-version", ver, "node", "unset", n.UUID, "--raid-interface")
	if got := show(n.UUID); got != "agent" {
		t.Fatalf("after unset --raid-interface: %q", got)
	}

	// A fake node: no hardware RAID.
	m := r.node("site1", "manageable")
	res := bm.run("--os-baremetal-api-version", ver, "node", "set", m, "--raid-interface", "redfish")
	if res.code == 0 || !strings.Contains(res.stderr, "raid interface implementation 'redfish' is not supported by hardware type fake") || !strings.Contains(res.stderr, "agent, no-raid") {
		t.Errorf("fake node set --raid-interface redfish: exit %d, stderr %s; want the 400 naming agent, no-raid", res.code, res.stderr)
	}
	if a := vcurl(t, base, ver, "PATCH", "/v1/nodes/"+m, `[{"op":"replace","path":"/raid_interface","value":7}]`); a.status != 400 {
		t.Errorf("raid_interface 7: %d %.200s; want 400", a.status, a.body)
	}
	if a := vcurl(t, base, "1.30", "PATCH", "/v1/nodes/"+m, `[{"op":"replace","path":"/raid_interface","value":"no-raid"}]`); a.status != 406 {
		t.Errorf("raid_interface at 1.30: %d %.200s; want 406", a.status, a.body)
	}
	bm.ok("--os-baremetal-api-version", ver, "node", "set", m, "--raid-interface", "no-raid")
	if got := show(m); got != "no-raid" {
		t.Fatalf("after set --raid-interface no-raid: %q", got)
	}
	if a := vcurl(t, base, "1.12", "PUT", "/v1/nodes/"+m+"/states/raid", soft); a.status != 400 || !strings.Contains(a.body, "does not support raid") {
		t.Errorf("target_raid_config on no-raid: %d %.300s; want 400", a.status, a.body)
	}
	clean := `{"target": "clean", "clean_steps": [{"interface": "raid", "step": "delete_configuration"}]}`
	if a := vcurl(t, base, ver, "PUT", "/v1/nodes/"+m+"/states/provision", clean); a.status != 400 || !strings.Contains(a.body, "does not support this clean step") {
		t.Errorf("RAID clean step on no-raid: %d %.300s; want 400", a.status, a.body)
	}
	v := vcurl(t, base, ver, "GET", "/v1/nodes/"+m+"/validate", "").obj(t)
	if c, _ := v["raid"].(map[string]any); c["result"] != false || c["reason"] != "Driver fake does not support raid (disabled or not implemented)." {
		t.Errorf("validate raid on no-raid: %v", v["raid"])
	}

	// deploy failed: 409, unless in maintenance.
	f := r.node("faild", "available")
	r.api.MustVerb(f, "active", nil)
	if st := r.settle(f, ""); st.State != "deploy failed" {
		t.Fatalf("node in %q, want deploy failed", st.State)
	}
	set := `[{"op":"replace","path":"/raid_interface","value":"no-raid"}]`
	if a := vcurl(t, base, ver, "PATCH", "/v1/nodes/"+f, set); a.status != 409 || !strings.Contains(faultstring(t, a.obj(t)), "can not have raid_interface updated") {
		t.Errorf("deploy failed: PATCH raid_interface: %d %.300s; want 409", a.status, a.body)
	}
	if a := vcurl(t, base, ver, "PATCH", "/v1/nodes/"+f, `[{"op":"replace","path":"/raid_interface","value":"agent"}]`); a.status != 200 {
		t.Errorf("deploy failed: PATCH raid_interface to its own value: %d %.300s; want 200", a.status, a.body)
	}
	if code := r.api.Do("PUT", "/v1/nodes/"+f+"/maintenance", map[string]any{"reason": "fix"}, nil); code != 202 {
		t.Fatalf("maintenance: %d", code)
	}
	if a := vcurl(t, base, ver, "PATCH", "/v1/nodes/"+f, set); a.status != 200 || a.obj(t)["raid_interface"] != "no-raid" {
		t.Errorf("deploy failed in maintenance: PATCH raid_interface: %d %.300s; want 200", a.status, a.body)
	}
	if got := keysOfRaid(vcurl(t, base, ver, "GET", "/v1/nodes/"+f+"?fields=raid_interface", "").obj(t)); !slices.Equal(got, []string{"links", "raid_interface"}) && !slices.Equal(got, []string{"raid_interface"}) {
		t.Errorf("?fields=raid_interface: %v", got)
	}
}

func keysOfRaid(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
