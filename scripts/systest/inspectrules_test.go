package systest

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/drivers/redfish/recorded"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestInspectionRulesOutOfBand: inspection rules run on an out-of-band
// inspection too (a redfish node, inspect_interface redfish, behind the
// recorded BMC of DMTF's public-rackmount1 tree, through the edge agent
// in real mode): a rule on the read memory_mb and the manufacturer adds a
// trait, sets a capability and a driver_info key; a rule that fails the
// inspection fails it with its message, and the node keeps its traits.
func TestInspectionRulesOutOfBand(t *testing.T) {
	s, err := recorded.Start(recorded.Options{Fixture: "dmtf-public-rackmount1", Username: "admin", Password: "pa55word",
		Quirks: recorded.Quirks{PatchMedia: true, InsertedRequired: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	c := testrig.Coordinator(t, testrig.Options{})
	cl := testrig.NewClient(t, c)
	var creds agent.Credentials
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "rack1"}, &creds); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	testrig.StartAgentConfig(t, creds, agent.Config{})
	rule := func(body string) string {
		t.Helper()
		var r map[string]any
		if code := cl.Do("POST", "/v1/inspection_rules", jsonDoc(t, body), &r); code != 201 {
			t.Fatalf("rule: %d %v", code, r)
		}
		return r["uuid"].(string)
	}
	rule(`{"priority": 10, "conditions": [
		{"op": "!lt", "args": {"values": ["{node.properties[memory_mb]}", 65536]}},
		{"op": "contains", "args": {"value": "{inventory[system_vendor][manufacturer]}", "regex": "(?i)contoso"}}],
		"actions": [{"op": "add-trait", "args": {"name": "CUSTOM_CONTOSO_BIG"}},
			{"op": "set-capability", "args": {"name": "memory_class", "value": "big"}},
			{"op": "set-attribute", "args": {"path": "/driver_info/inspected_serial", "value": "{inventory[system_vendor][serial_number]}"}}]}`)

	var n testrig.Node
	body := map[string]any{"name": "dmtf", "driver": "redfish", "conductor_group": "rack1", "inspect_interface": "redfish",
		"driver_info": map[string]any{"redfish_address": s.URL, "redfish_username": "admin", "redfish_password": "pa55word"}}
	if code := cl.Do("POST", "/v1/nodes", body, &n); code != 201 {
		t.Fatalf("create: %d", code)
	}
	id := n.UUID
	cl.MustVerb(id, "manage", nil)
	if got := cl.WaitRest(id, 60*time.Second); got.State != "manageable" {
		t.Fatalf("manage: %q %q", got.State, got.LastError)
	}
	cl.MustVerb(id, "inspect", nil)
	got := cl.WaitRest(id, 60*time.Second)
	if got.State != "manageable" || got.LastError != "" {
		t.Fatalf("inspect: %q %q", got.State, got.LastError)
	}
	var traits struct {
		Traits []string `json:"traits"`
	}
	cl.Do("GET", "/v1/nodes/"+id+"/traits", nil, &traits)
	if !slices.Contains(traits.Traits, "CUSTOM_CONTOSO_BIG") || !strings.Contains(got.Properties["capabilities"].(string), "memory_class:big") ||
		got.DriverInfo["inspected_serial"] == nil || got.DriverInfo["inspected_serial"] == "" {
		t.Fatalf("after the out-of-band inspection: traits %v, properties %v, driver_info %v", traits.Traits, got.Properties, got.DriverInfo)
	}

	rule(`{"priority": 5, "conditions": [{"op": "gt", "args": {"values": ["{inventory[cpu][count]}", 8]}}],
		"actions": [{"op": "fail", "args": {"msg": "more than 8 CPUs need a licence"}}]}`)
	cl.MustVerb(id, "inspect", nil)
	got = cl.WaitRest(id, 60*time.Second)
	if got.State != "inspect failed" || got.LastError != "Failed to inspect hardware. Reason: more than 8 CPUs need a licence" {
		t.Fatalf("inspection failed by a rule: %q %q", got.State, got.LastError)
	}
}

func jsonDoc(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}
