package api_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestLLDPLocalLinkConnection: a simulated site whose NICs hear their
// switch's LLDP frames (the inventory's lldp, as the ramdisk records
// them): inspection fills each port's local_link_connection (switch_id
// the chassis MAC, port_id, switch_info the system name) as Ironic's
// local_link_connection hook, and a rule can read the parsed LLDP
// (plugin_data parsed_lldp); a key already there is never overwritten;
// an operator cannot set it (400) but may remove a key, which the next
// inspection fills again.
func TestLLDPLocalLinkConnection(t *testing.T) {
	c := testrig.Coordinator(t, testrig.Options{})
	testrig.Site(t, c, "site1", agent.SimOptions{Nodes: 1, StepDuration: 20 * time.Millisecond, LLDP: true})
	api := testrig.NewClient(t, c)
	base := api.Base
	if a := vcurl(t, base, "1.96", "POST", "/v1/inspection_rules", `{"conditions": [
		{"op": "eq", "args": {"values": ["{plugin_data[parsed_lldp][eth0][switch_system_name]}", "sim-switch-site1"]}}],
		"actions": [{"op": "add-trait", "args": {"name": "CUSTOM_ON_SIM_SWITCH"}}]}`); a.status != 201 {
		t.Fatalf("rule: %d %.200s", a.status, a.body)
	}
	id := api.CreateNode("lldp1", "site1", nil)
	var port map[string]any
	if code := api.Do("POST", "/v1/ports", map[string]any{"node_uuid": id, "address": "52:54:00:77:00:01"}, &port); code != 201 {
		t.Fatalf("port: %d", code)
	}
	pid := port["uuid"].(string)
	if llc, _ := port["local_link_connection"].(map[string]any); llc == nil || len(llc) != 0 {
		t.Fatalf("a new port's local_link_connection: %v, want {}", port["local_link_connection"])
	}
	inspect := func() map[string]any {
		t.Helper()
		api.MustVerb(id, "inspect", nil)
		if n := api.WaitRest(id, 60*time.Second); n.State != "manageable" {
			t.Fatalf("inspection: %s %s", n.State, n.LastError)
		}
		a := vcurl(t, base, "1.96", "GET", "/v1/ports/"+pid, "")
		llc, _ := a.obj(t)["local_link_connection"].(map[string]any)
		return llc
	}
	api.MustVerb(id, "manage", nil)
	api.WaitRest(id, 60*time.Second)
	llc := inspect()
	sw, _ := llc["switch_id"].(string)
	if !strings.HasPrefix(sw, "02:00:5e:") || !strings.HasPrefix(llc["port_id"].(string), "Ethernet1/") || llc["switch_info"] != "sim-switch-site1" || len(llc) != 3 {
		t.Fatalf("local_link_connection after inspection: %v", llc)
	}
	var traits struct {
		Traits []string `json:"traits"`
	}
	api.Do("GET", "/v1/nodes/"+id+"/traits", nil, &traits)
	if !slices.Contains(traits.Traits, "CUSTOM_ON_SIM_SWITCH") {
		t.Fatalf("the rule on parsed_lldp did not match: traits %v", traits.Traits)
	}
	var inv map[string]any
	api.Do("GET", "/v1/nodes/"+id+"/inventory", nil, &inv)
	if pd, _ := inv["plugin_data"].(map[string]any); pd == nil || pd["parsed_lldp"] == nil {
		t.Fatalf("inventory's plugin_data has no parsed_lldp: %v", inv["plugin_data"])
	}

	// Not set by hand; removable, and filled again.
	for _, body := range []string{`[{"op": "add", "path": "/local_link_connection/switch_info", "value": "mine"}]`,
		`[{"op": "replace", "path": "/local_link_connection/port_id", "value": "Ethernet9/9"}]`} {
		if a := vcurl(t, base, "1.96", "PATCH", "/v1/ports/"+pid, body); a.status != 400 || !strings.Contains(fault(a.body), "inspection fills it from the LLDP") {
			t.Fatalf("PATCH %s: %d %.200s, want 400", body, a.status, a.body)
		}
	}
	if a := vcurl(t, base, "1.18", "PATCH", "/v1/ports/"+pid, `[{"op": "remove", "path": "/local_link_connection/switch_info"}]`); a.status != 400 {
		t.Fatalf("PATCH of local_link_connection at 1.18: %d, want 400", a.status)
	}
	a := vcurl(t, base, "1.96", "PATCH", "/v1/ports/"+pid, `[{"op": "remove", "path": "/local_link_connection/switch_info"}]`)
	if got, _ := a.obj(t)["local_link_connection"].(map[string]any); a.status != 200 || len(got) != 2 || got["switch_id"] != sw {
		t.Fatalf("PATCH remove: %d %.300s", a.status, a.body)
	}
	if again := inspect(); again["switch_info"] != "sim-switch-site1" || again["port_id"] != llc["port_id"] || again["switch_id"] != sw {
		t.Fatalf("after a second inspection: %v", again)
	}
	if h := (&compatRig{t: t, api: api}).historyText(id); !strings.Contains(h, "local_link_connection switch_info=sim-switch-site1 from LLDP") {
		t.Fatalf("history does not say what LLDP filled:\n%s", h)
	}
}
