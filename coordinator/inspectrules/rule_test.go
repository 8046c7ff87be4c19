package inspectrules

import (
	"encoding/json"
	"strings"
	"testing"
)

func doc(t testing.TB, s string) map[string]any {
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		if t == nil {
			panic(err)
		}
		t.Fatal(err)
	}
	return m
}

// TestParseRefusals: every malformed rule is refused with a message
// that names what is wrong (the API's 400).
func TestParseRefusals(t *testing.T) {
	cases := []struct{ name, body, want string }{
		{"no actions", `{"conditions": []}`, "'actions' is a required property"},
		{"empty actions", `{"actions": []}`, "at least one action"},
		{"unknown field", `{"actions": [{"op": "log", "args": {"msg": "x"}}], "scope": "x"}`, `additional property "scope"`},
		{"bad uuid", `{"uuid": "nope", "actions": [{"op": "log", "args": {"msg": "x"}}]}`, "is not a UUID"},
		{"negative priority", `{"priority": -1, "actions": [{"op": "log", "args": {"msg": "x"}}]}`, "Priority cannot be negative"},
		{"priority too high", `{"priority": 10000, "actions": [{"op": "log", "args": {"msg": "x"}}]}`, "between 0 and 9999"},
		{"fractional priority", `{"priority": 1.5, "actions": [{"op": "log", "args": {"msg": "x"}}]}`, "priority must be an integer"},
		{"phase", `{"phase": "early", "actions": [{"op": "log", "args": {"msg": "x"}}]}`, "Invalid phase: early"},
		{"long description", `{"description": "` + strings.Repeat("d", 256) + `", "actions": [{"op": "log", "args": {"msg": "x"}}]}`, "longer than 255"},
		{"unknown operator", `{"conditions": [{"op": "le", "args": {"values": [1, 2]}}], "actions": [{"op": "log", "args": {"msg": "x"}}]}`, "Unsupported operator 'le'"},
		{"double bang", `{"conditions": [{"op": "!!eq", "args": {"values": [1, 2]}}], "actions": [{"op": "log", "args": {"msg": "x"}}]}`, "Multiple exclamation marks"},
		{"unknown action", `{"actions": [{"op": "reboot", "args": {}}]}`, "Unsupported action 'reboot'"},
		{"refused action", `{"actions": [{"op": "api-call", "args": {"url": "http://x"}}]}`, "api-call is not supported by this coordinator"},
		{"port field unsettable", `{"actions": [{"op": "set-port-attribute", "args": {"port_id": "x", "path": "address", "value": "52:54:00:00:00:01"}}]}`, `port field "address" cannot be changed`},
		{"port physnet not a string", `{"actions": [{"op": "set-port-attribute", "args": {"port_id": "x", "path": "physical_network", "value": 5}}]}`, "physical_network takes a string"},
		{"port physnet too long", `{"actions": [{"op": "set-port-attribute", "args": {"port_id": "x", "path": "/physical_network", "value": "` + strings.Repeat("p", 65) + `"}}]}`, "longer than 64"},
		{"port pxe not a bool", `{"actions": [{"op": "set-port-attribute", "args": {"port_id": "x", "path": "pxe_enabled", "value": "yes"}}]}`, "pxe_enabled takes true or false"},
		{"port pxe deleted", `{"actions": [{"op": "del-port-attribute", "args": {"port_id": "x", "path": "pxe_enabled"}}]}`, "cannot be deleted"},
		{"port whole extra", `{"actions": [{"op": "set-port-attribute", "args": {"port_id": "x", "path": "extra", "value": {}}}]}`, "names the whole dictionary"},
		{"port link key", `{"actions": [{"op": "set-port-attribute", "args": {"port_id": "x", "path": "local_link_connection/vlan", "value": "5"}}]}`, `local_link_connection has no key "vlan"`},
		{"port extend scalar", `{"actions": [{"op": "extend-port-attribute", "args": {"port_id": "x", "path": "physical_network", "value": "a"}}]}`, "is not a list"},
		{"port_id missing", `{"actions": [{"op": "set-port-attribute", "args": {"path": "physical_network", "value": "a"}}]}`, "missing required argument(s): port_id"},
		{"port_id not a string", `{"actions": [{"op": "set-port-attribute", "args": {"port_id": 5, "path": "physical_network", "value": "a"}}]}`, "port_id must be a port's UUID or MAC address"},
		{"missing arg", `{"actions": [{"op": "set-attribute", "args": {"path": "/extra/a"}}]}`, "missing required argument(s): value"},
		{"unexpected arg", `{"actions": [{"op": "add-trait", "args": {"name": "CUSTOM_A", "trait": "CUSTOM_A"}}]}`, "unexpected argument(s): trait"},
		{"few positional", `{"conditions": [{"op": "matches", "args": ["x"]}], "actions": [{"op": "log", "args": {"msg": "x"}}]}`, "Missing: regex"},
		{"no args", `{"actions": [{"op": "fail"}]}`, "'args' is a required property"},
		{"args scalar", `{"actions": [{"op": "fail", "args": "boom"}]}`, "args must be an object"},
		{"bad regex", `{"conditions": [{"op": "matches", "args": {"value": "{inventory[cpu][model_name]}", "regex": "(["}}], "actions": [{"op": "log", "args": {"msg": "x"}}]}`, "invalid regular expression"},
		{"bad subnet", `{"conditions": [{"op": "in-net", "args": {"address": "{inventory[bmc_address]}", "subnet": "10.0.0.0/99"}}], "actions": [{"op": "log", "args": {"msg": "x"}}]}`, "is not a network"},
		{"bad level", `{"actions": [{"op": "log", "args": {"msg": "x", "level": "loud"}}]}`, "Invalid log level: loud"},
		{"bad trait", `{"actions": [{"op": "add-trait", "args": {"name": "fast"}}]}`, "Invalid trait"},
		{"unsettable field", `{"actions": [{"op": "set-attribute", "args": {"path": "/provision_state", "value": "active"}}]}`, `node field "provision_state" cannot be changed`},
		{"string field with key", `{"actions": [{"op": "set-attribute", "args": {"path": "/driver/x", "value": "ipmi"}}]}`, "is a string field"},
		{"whole dictionary", `{"actions": [{"op": "set-attribute", "args": {"path": "/driver_info", "value": {}}}]}`, "names the whole dictionary"},
		{"capabilities by path", `{"actions": [{"op": "set-attribute", "args": {"path": "properties/capabilities", "value": "a:b"}}]}`, "set-capability"},
		{"multiple without loop", `{"conditions": [{"op": "eq", "args": {"values": [1, 1]}, "multiple": "all"}], "actions": [{"op": "log", "args": {"msg": "x"}}]}`, "multiple applies to a loop"},
		{"bad multiple", `{"conditions": [{"op": "eq", "args": {"values": [1, 1]}, "loop": [1], "multiple": "most"}], "actions": [{"op": "log", "args": {"msg": "x"}}]}`, "multiple must be one of"},
		{"unknown op key", `{"actions": [{"op": "log", "args": {"msg": "x"}, "when": "now"}]}`, `unknown key "when"`},
		{"loop string not a field", `{"actions": [{"op": "log", "args": {"msg": "x"}, "loop": "abc"}]}`, "loop must be a list"},
		{"two errors", `{"phase": "x", "priority": 10001, "actions": [{"op": "log", "args": {"msg": "x"}}]}`, "Multiple validation errors occurred"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(doc(t, c.body), false)
			if err == nil {
				t.Fatalf("accepted %s", c.body)
			}
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error %T, want *Error", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q, want it to say %q", err, c.want)
			}
		})
	}
}

// TestParseAccepts: Ironic's shapes (named and positional args, loops,
// inverted operators) are taken, with defaults filled in.
func TestParseAccepts(t *testing.T) {
	r, err := Parse(doc(t, `{"description": "big", "priority": 50, "sensitive": true,
		"conditions": [{"op": "! lt", "args": ["{inventory[memory][physical_mb]}", 65536]},
			{"op": "eq", "args": {"values": ["{item}", "x"]}, "loop": ["x", "y"], "multiple": "all"}],
		"actions": [{"op": "add-trait", "args": {"name": "CUSTOM_BIG"}}, {"op": "set-capability", "args": ["memory_class", "high"]}]}`), false)
	if err != nil {
		t.Fatal(err)
	}
	if r.Phase != "main" || r.Priority != 50 || !r.Sensitive || len(r.Conditions) != 2 || len(r.Actions) != 2 || r.Conditions[1].Multiple != "all" {
		t.Fatalf("parsed %+v", r)
	}
	if _, err := Parse(doc(t, `{"priority": -5, "actions": [{"op": "log", "args": {"msg": "x"}}]}`), true); err != nil {
		t.Fatalf("a built-in rule may have a negative priority: %v", err)
	}
	r, err = Parse(doc(t, `{"uuid": "7C4B1E1C-2F55-4A7E-9B61-7B2E0B5D3A10", "actions": [{"op": "log", "args": {"msg": "x"}}]}`), false)
	if err != nil || r.UUID != "7c4b1e1c-2f55-4a7e-9b61-7b2e0b5d3a10" {
		t.Fatalf("uuid %q %v", r.UUID, err)
	}
}

// TestFormat: replacement fields as Python's str.format reads them, and
// a lone field keeps its value's type.
func TestFormat(t *testing.T) {
	ctx := map[string]any{
		"inventory": map[string]any{"memory": map[string]any{"physical_mb": float64(4096)},
			"interfaces": []any{map[string]any{"name": "eth0", "vendor": "0x8086"}}},
		"node": map[string]any{"driver": "ipmi", "driver_info": map[string]any{"ipmi_address": "10.0.0.1"}},
	}
	cases := []struct {
		in   string
		want any
		ok   bool
	}{
		{"{inventory[memory][physical_mb]}", float64(4096), true},
		{"{inventory.memory.physical_mb}", float64(4096), true},
		{"mem {inventory[memory][physical_mb]} MiB", "mem 4096 MiB", true},
		{"{inventory[interfaces][0][vendor]}", "0x8086", true},
		{"https://{node.driver_info[ipmi_address]}/x", "https://10.0.0.1/x", true},
		{"{{literal}} {node.driver}", "{literal} ipmi", true},
		{"{inventory[nope]}", "{inventory[nope]}", false},
		{"{inventory[interfaces][5]}", "{inventory[interfaces][5]}", false},
		{"{node.driver!r}", "{node.driver!r}", false},
		{"plain", "plain", true},
	}
	for _, c := range cases {
		got, ok := formatString(c.in, ctx)
		if ok != c.ok || text(got) != text(c.want) {
			t.Errorf("format(%q) = %v, %v; want %v, %v", c.in, got, ok, c.want, c.ok)
		}
	}
	if v := interpolate("{inventory[nope]}", ctx, true); v != nil {
		t.Errorf("is-empty of a missing field: %v, want null", v)
	}
}
