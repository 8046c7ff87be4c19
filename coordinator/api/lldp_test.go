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

// TestInspectionRulePortPhysicalNetwork: inspection rules on a simulated
// node's LLDP data (plugin_data parsed_lldp) set its port's
// physical_network (port_id its UUID) and a key of its extra (port_id
// its MAC address) during inspection, kept beside the
// local_link_connection LLDP filled, and each changed port is in the
// node's history; then a rule that names a port the node does not have
// fails the inspection, and nothing the rules did in it is kept: not
// the port's new physical_network, not the node's trait.
func TestInspectionRulePortPhysicalNetwork(t *testing.T) {
	c := testrig.Coordinator(t, testrig.Options{})
	testrig.Site(t, c, "site1", agent.SimOptions{Nodes: 1, StepDuration: 20 * time.Millisecond, LLDP: true})
	api := testrig.NewClient(t, c)
	base := api.Base
	id := api.CreateNode("lldp1", "site1", nil)
	var port map[string]any
	if code := api.Do("POST", "/v1/ports", map[string]any{"node_uuid": id, "address": "52:54:00:77:00:01"}, &port); code != 201 {
		t.Fatalf("port: %d", code)
	}
	pid := port["uuid"].(string)
	rule := func(body string) string {
		t.Helper()
		a := vcurl(t, base, "1.96", "POST", "/v1/inspection_rules", body)
		if a.status != 201 {
			t.Fatalf("rule: %d %.300s", a.status, a.body)
		}
		return a.obj(t)["uuid"].(string)
	}
	if a := vcurl(t, base, "1.96", "POST", "/v1/inspection_rules", `{"actions": [{"op": "set-port-attribute", "args": {"port_id": "x", "path": "address", "value": "52:54:00:00:00:09"}}]}`); a.status != 400 || !strings.Contains(fault(a.body), `port field "address" cannot be changed`) {
		t.Fatalf("a rule setting a port's address: %d %.300s, want 400", a.status, a.body)
	}
	physnet := rule(`{"description": "physnet from LLDP", "priority": 50, "conditions": [
		{"op": "eq", "args": {"values": ["{plugin_data[parsed_lldp][eth0][switch_system_name]}", "sim-switch-site1"]}}],
		"actions": [
		{"op": "set-port-attribute", "args": {"port_id": "` + pid + `", "path": "physical_network", "value": "physnet-{plugin_data[parsed_lldp][eth0][switch_system_name]}"}},
		{"op": "set-port-attribute", "args": {"port_id": "52:54:00:77:00:01", "path": "/extra/switch_port", "value": "{plugin_data[parsed_lldp][eth0][switch_port_id]}"}}]}`)
	inspect := func(want string) map[string]any {
		t.Helper()
		api.MustVerb(id, "inspect", nil)
		if n := api.WaitRest(id, 60*time.Second); n.State != want {
			t.Fatalf("inspection: %s %s, want %s", n.State, n.LastError, want)
		}
		return vcurl(t, base, "1.96", "GET", "/v1/ports/"+pid, "").obj(t)
	}
	api.MustVerb(id, "manage", nil)
	api.WaitRest(id, 60*time.Second)
	p := inspect("manageable")
	llc, _ := p["local_link_connection"].(map[string]any)
	extra, _ := p["extra"].(map[string]any)
	if p["physical_network"] != "physnet-sim-switch-site1" || llc["switch_info"] != "sim-switch-site1" || len(llc) != 3 ||
		extra["switch_port"] != llc["port_id"] || !strings.HasPrefix(llc["port_id"].(string), "Ethernet1/") {
		t.Fatalf("port after inspection: physical_network %v, local_link_connection %v, extra %v", p["physical_network"], llc, extra)
	}
	if h := (&compatRig{t: t, api: api}).historyText(id); !strings.Contains(h, "port "+pid+" (52:54:00:77:00:01) changed by inspection rules: physical_network (rule "+physnet+"), extra (rule "+physnet+")") {
		t.Fatalf("history does not say what the rule changed:\n%s", h)
	}

	// A failing rule: nothing of the inspection's rules is kept.
	if a := vcurl(t, base, "1.96", "PATCH", "/v1/inspection_rules/"+physnet, `[{"op": "replace", "path": "/actions", "value": [
		{"op": "set-port-attribute", "args": {"port_id": "`+pid+`", "path": "physical_network", "value": "physnet-changed"}},
		{"op": "add-trait", "args": {"name": "CUSTOM_FAILED_RULES"}}]}]`); a.status != 200 {
		t.Fatalf("rule PATCH: %d %.300s", a.status, a.body)
	}
	rule(`{"priority": 10, "actions": [{"op": "set-port-attribute", "args": {"port_id": "52:54:00:77:00:99", "path": "physical_network", "value": "p"}}]}`)
	p = inspect("inspect failed")
	if p["physical_network"] != "physnet-sim-switch-site1" {
		t.Fatalf("a failed inspection changed the port's physical_network: %v", p["physical_network"])
	}
	var n map[string]any
	api.Do("GET", "/v1/nodes/"+id, nil, &n)
	if le, _ := n["last_error"].(string); !strings.Contains(le, "Port 52:54:00:77:00:99 could not be found.") {
		t.Fatalf("last_error %q", le)
	}
	var traits struct {
		Traits []string `json:"traits"`
	}
	api.Do("GET", "/v1/nodes/"+id+"/traits", nil, &traits)
	if slices.Contains(traits.Traits, "CUSTOM_FAILED_RULES") {
		t.Fatalf("a failed inspection kept a rule's trait: %v", traits.Traits)
	}
}
