package inspectrules

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/drivers"
)

func inventory() map[string]any {
	return doc(nil, `{"cpu": {"count": 8, "architecture": "x86_64", "model_name": "Intel(R) Xeon(R) Gold"},
		"memory": {"total": 68719476736, "physical_mb": 65536},
		"bmc_address": "192.0.2.17", "bmc_password": "hunter2",
		"interfaces": [{"name": "eno1", "mac_address": "52:54:00:12:34:56", "vendor": "0x8086", "product": "0x1572"},
		               {"name": "eno2", "mac_address": "52:54:00:12:34:57", "vendor": "0x15b3", "product": "0x1017"}],
		"system_vendor": {"manufacturer": "Dell Inc.", "product_name": "PowerEdge R650", "serial_number": "ABC123"},
		"boot": {"current_boot_mode": "uefi"}}`)
}

func rule(t *testing.T, s string) Rule {
	t.Helper()
	r, err := Parse(doc(t, s), false)
	if err != nil {
		t.Fatalf("rule %s: %v", s, err)
	}
	if r.UUID == "" {
		r.UUID = fmt.Sprintf("rule-%d", len(s))
	}
	return r
}

// TestOperators: each of Ironic's condition operators, and its inverse,
// on the inventory.
func TestOperators(t *testing.T) {
	cases := []struct {
		cond string
		want bool
	}{
		{`{"op": "eq", "args": {"values": ["{inventory[cpu][architecture]}", "x86_64"]}}`, true},
		{`{"op": "eq", "args": {"values": ["{inventory[memory][physical_mb]}", 65536]}}`, true},
		{`{"op": "eq", "args": {"values": ["{inventory[memory][physical_mb]}", "65536"]}}`, true},
		{`{"op": "eq", "args": {"values": [1, 1, 2]}}`, false},
		{`{"op": "eq", "args": {"values": [1]}}`, true},
		{`{"op": "!eq", "args": {"values": ["{inventory[cpu][architecture]}", "aarch64"]}}`, true},
		{`{"op": "lt", "args": ["{inventory[cpu][count]}", 4]}`, false},
		{`{"op": "!lt", "args": [["{inventory[memory][physical_mb]}", 65536]]}`, true},
		{`{"op": "gt", "args": {"values": ["{inventory[memory][physical_mb]}", 32768, 16]}}`, true},
		{`{"op": "gt", "args": {"values": ["b", "a"]}}`, true},
		{`{"op": "eq", "args": {"values": ["{inventory[memory][physical_mb]}", 1], "force_strings": true}}`, false},
		{`{"op": "is-empty", "args": {"value": "{inventory[nothing]}"}}`, true},
		{`{"op": "is-empty", "args": {"value": "{inventory[interfaces]}"}}`, false},
		{`{"op": "is-empty", "args": {"value": ""}}`, true},
		{`{"op": "in-net", "args": {"address": "{inventory[bmc_address]}", "subnet": "192.0.2.0/24"}}`, true},
		{`{"op": "in-net", "args": {"address": "{inventory[bmc_address]}", "subnet": "198.51.100.0/24"}}`, false},
		{`{"op": "matches", "args": {"value": "{inventory[system_vendor][manufacturer]}", "regex": "Dell.*"}}`, true},
		{`{"op": "matches", "args": {"value": "{inventory[system_vendor][manufacturer]}", "regex": "Dell"}}`, false},
		{`{"op": "contains", "args": {"value": "{inventory[system_vendor][manufacturer]}", "regex": "(?i)dell"}}`, true},
		{`{"op": "contains", "args": {"value": "{inventory[interfaces]}", "regex": "0x15b3"}}`, true},
		{`{"op": "one-of", "args": {"value": "{inventory[system_vendor][product_name]}", "values": ["PowerEdge R650", "PowerEdge R750"]}}`, true},
		{`{"op": "one-of", "args": {"value": "{inventory[cpu][count]}", "values": [4, 16]}}`, false},
		{`{"op": "is-none", "args": {"value": null}}`, true},
		{`{"op": "is-none", "args": {"value": "{inventory[cpu][count]}"}}`, false},
		{`{"op": "is-true", "args": {"value": "Yes"}}`, true},
		{`{"op": "is-true", "args": {"value": 0}}`, false},
		{`{"op": "is-false", "args": {"value": "false"}}`, true},
		{`{"op": "is-false", "args": {"value": null}}`, true},
		{`{"op": "!is-false", "args": {"value": true}}`, true},
		// Loops: over a list given, and over the inventory's interfaces.
		{`{"op": "eq", "args": {"values": ["{item}", "{inventory[cpu][count]}"]}, "loop": [2, 8], "multiple": "any"}`, true},
		{`{"op": "eq", "args": {"values": ["{item}", "{inventory[cpu][count]}"]}, "loop": [2, 8], "multiple": "all"}`, false},
		{`{"op": "eq", "args": {"values": ["{item}", "{inventory[cpu][count]}"]}, "loop": [2, 8], "multiple": "last"}`, true},
		{`{"op": "eq", "args": {"values": ["{item[vendor]}", "0x15b3"]}, "loop": "{inventory[interfaces]}"}`, true},
		{`{"op": "eq", "args": {"values": ["{item[vendor]}", "0x14e4"]}, "loop": "{inventory[interfaces]}"}`, false},
	}
	for _, c := range cases {
		r := rule(t, `{"conditions": [`+c.cond+`], "actions": [{"op": "add-trait", "args": {"name": "CUSTOM_HIT"}}]}`)
		d := &Doc{Fields: map[string]any{"uuid": "n1"}}
		_, err := Apply([]Rule{r}, d, inventory(), nil, nil)
		if err != nil {
			t.Errorf("%s: %v", c.cond, err)
			continue
		}
		if got := len(d.Traits) == 1; got != c.want {
			t.Errorf("%s: %v, want %v", c.cond, got, c.want)
		}
	}
}

// TestConditionErrors: a condition that cannot be checked fails the
// inspection, as in Ironic, saying which rule and why.
func TestConditionErrors(t *testing.T) {
	for cond, want := range map[string]string{
		`{"op": "lt", "args": {"values": ["abc", 3]}}`:                                   "cannot compare",
		`{"op": "in-net", "args": {"address": "not-ip", "subnet": "10.0.0.0/8"}}`:        "is not an IP address",
		`{"op": "lt", "args": {"values": "{inventory[cpu][model_name]}"}}`:               "Expected list",
		`{"op": "matches", "args": {"value": "x", "regex": "{inventory[cpu][count]}("}}`: "invalid regular expression",
	} {
		r := rule(t, `{"uuid": "11111111-2222-3333-4444-555555555555", "conditions": [`+cond+`], "actions": [{"op": "add-trait", "args": {"name": "CUSTOM_HIT"}}]}`)
		_, err := Apply([]Rule{r}, &Doc{Fields: map[string]any{}}, inventory(), nil, nil)
		var f *Failure
		if !errors.As(err, &f) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "11111111-2222-3333-4444-555555555555") {
			t.Errorf("%s: %v, want a failure saying %q", cond, err, want)
		}
	}
}

func testNode() *fsm.Node {
	return &fsm.Node{UUID: "8a1d3b0e-0000-4000-8000-000000000001", Name: "r650-1", Driver: "ipmi", Site: "lab",
		DriverInfo: map[string]any{"ipmi_address": "192.0.2.17", "ipmi_password": "secret-pw"},
		Properties: map[string]any{"memory_mb": float64(65536), "cpus": float64(8), "capabilities": "boot_mode:uefi"},
		Traits:     []string{"CUSTOM_OLD"}}
}

func hook(rules ...Rule) func(n *fsm.Node, inv, pd map[string]any, now time.Time) ([]fsm.HistoryEntry, map[string]any, error) {
	reg, err := drivers.NewRegistry(drivers.Builtin()...)
	if err != nil {
		panic(err)
	}
	h := Hook(func() []Rule { return rules }, reg, nil)
	return func(n *fsm.Node, inv, pd map[string]any, now time.Time) ([]fsm.HistoryEntry, map[string]any, error) {
		hist, pd, ports, err := h(n, inv, pd, nil, now)
		if len(ports) > 0 {
			panic("port changes with no ports")
		}
		return hist, pd, err
	}
}

// TestScenarioMemoryAndNICVendor: a rule on the node's memory_mb and the
// inventory's NIC vendor adds a trait, sets a property and a capability
// and a driver_info key; a rule whose conditions fail changes nothing.
func TestScenarioMemoryAndNICVendor(t *testing.T) {
	big := rule(t, `{"uuid": "aaaaaaaa-0000-4000-8000-000000000001", "description": "big Mellanox nodes", "priority": 10,
		"conditions": [
			{"op": "!lt", "args": {"values": ["{node.properties[memory_mb]}", 32768]}},
			{"op": "eq", "args": {"values": ["{item[vendor]}", "0x15b3"]}, "loop": "{inventory[interfaces]}", "multiple": "any"}],
		"actions": [
			{"op": "add-trait", "args": {"name": "CUSTOM_MELLANOX"}},
			{"op": "set-attribute", "args": {"path": "/properties/nic_vendor", "value": "mellanox"}},
			{"op": "set-capability", "args": {"name": "memory_class", "value": "high"}},
			{"op": "set-attribute", "args": {"path": "driver_info.redfish_address", "value": "https://{inventory[bmc_address]}"}},
			{"op": "remove-trait", "args": {"name": "CUSTOM_OLD"}},
			{"op": "log", "args": {"msg": "{node.name} has {inventory[memory][physical_mb]} MiB", "level": "warning"}}]}`)
	small := rule(t, `{"uuid": "aaaaaaaa-0000-4000-8000-000000000002",
		"conditions": [{"op": "lt", "args": {"values": ["{node.properties[memory_mb]}", 32768]}}],
		"actions": [{"op": "add-trait", "args": {"name": "CUSTOM_SMALL"}}]}`)
	n := testNode()
	oldProps := n.Properties
	hist, _, err := hook(big, small)(n, inventory(), nil, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(n.Traits, ",") != "CUSTOM_MELLANOX" {
		t.Errorf("traits %v", n.Traits)
	}
	if n.Properties["nic_vendor"] != "mellanox" || n.Properties["capabilities"] != "boot_mode:uefi,memory_class:high" {
		t.Errorf("properties %v", n.Properties)
	}
	if _, changed := oldProps["nic_vendor"]; changed {
		t.Error("the node's old properties map was changed in place")
	}
	if n.DriverInfo["redfish_address"] != "https://192.0.2.17" || n.DriverInfo["ipmi_password"] != "secret-pw" {
		t.Errorf("driver_info %v", n.DriverInfo)
	}
	var saw []string
	for _, h := range hist {
		saw = append(saw, h.Severity+" "+h.Event)
	}
	all := strings.Join(saw, "\n")
	if !strings.Contains(all, "INFO inspection rule aaaaaaaa-0000-4000-8000-000000000001 (big Mellanox nodes) matched") ||
		!strings.Contains(all, "WARNING inspection rule aaaaaaaa-0000-4000-8000-000000000001: r650-1 has 65536 MiB") ||
		strings.Contains(all, "000000000002") {
		t.Errorf("history:\n%s", all)
	}
}

// TestScenarioFail: a fail action fails the inspection with its
// message, and the node keeps what it had (no rule's change applies).
func TestScenarioFail(t *testing.T) {
	first := rule(t, `{"uuid": "bbbbbbbb-0000-4000-8000-000000000001", "priority": 90,
		"actions": [{"op": "add-trait", "args": {"name": "CUSTOM_SEEN"}}]}`)
	fail := rule(t, `{"uuid": "bbbbbbbb-0000-4000-8000-000000000002", "priority": 50,
		"conditions": [{"op": "lt", "args": ["{inventory[cpu][count]}", 16]}],
		"actions": [{"op": "fail", "args": {"msg": "Node has insufficient CPU cores (minimum 16 required)"}}]}`)
	never := rule(t, `{"uuid": "bbbbbbbb-0000-4000-8000-000000000003", "priority": 10,
		"actions": [{"op": "add-trait", "args": {"name": "CUSTOM_AFTER"}}]}`)
	n := testNode()
	_, _, err := hook(never, fail, first)(n, inventory(), nil, time.Unix(0, 0))
	if err == nil || err.Error() != "Failed to inspect hardware. Reason: Node has insufficient CPU cores (minimum 16 required)" {
		t.Fatalf("error %v", err)
	}
	if strings.Join(n.Traits, ",") != "CUSTOM_OLD" {
		t.Errorf("a failed inspection changed the node's traits: %v", n.Traits)
	}
}

// TestScenarioDriverAndInterfaces: set-attribute sets the driver and an
// interface, checked against the driver as a PATCH is; a wrong one fails
// the inspection.
func TestScenarioDriverAndInterfaces(t *testing.T) {
	ok := rule(t, `{"conditions": [{"op": "contains", "args": {"value": "{inventory[system_vendor][manufacturer]}", "regex": "(?i)dell"}}],
		"actions": [{"op": "set-attribute", "args": {"path": "/driver", "value": "redfish"}},
			{"op": "set-attribute", "args": {"path": "/deploy_interface", "value": "ramdisk"}},
			{"op": "set-attribute", "args": {"path": "/resource_class", "value": "baremetal-{inventory[cpu][count]}cpu"}},
			{"op": "extend-attribute", "args": {"path": "/extra/tags", "value": "dell", "unique": true}},
			{"op": "extend-attribute", "args": {"path": "/extra/tags", "value": "dell", "unique": true}}]}`)
	n := testNode()
	if _, _, err := hook(ok)(n, inventory(), nil, time.Unix(0, 0)); err != nil {
		t.Fatal(err)
	}
	if n.Driver != "redfish" || n.DeployInterface != "ramdisk" || n.ResourceClass != "baremetal-8cpu" || fmt.Sprint(n.Extra["tags"]) != "[dell]" {
		t.Errorf("node %s %s %s %v", n.Driver, n.DeployInterface, n.ResourceClass, n.Extra)
	}
	for body, want := range map[string]string{
		`{"actions": [{"op": "set-attribute", "args": {"path": "/driver", "value": "nosuch"}}]}`:               "nosuch",
		`{"actions": [{"op": "set-attribute", "args": {"path": "/boot_interface", "value": "http-ipxe"}}]}`:    "not supported by hardware type redfish",
		`{"actions": [{"op": "set-attribute", "args": {"path": "/driver", "value": 5}}]}`:                      "takes a string",
		`{"actions": [{"op": "del-attribute", "args": {"path": "/extra/none"}}]}`:                              "no such key",
		`{"actions": [{"op": "add-trait", "args": {"name": "{inventory[cpu][model_name]}"}}]}`:                 "Invalid trait",
		`{"actions": [{"op": "set-attribute", "args": {"path": "{inventory[cpu][model_name]}", "value": 1}}]}`: "cannot be changed by an inspection rule",
	} {
		n := testNode()
		n.Driver = "redfish"
		_, _, err := hook(rule(t, body))(n, inventory(), nil, time.Unix(0, 0))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", body, err, want)
		}
	}
}

// TestScenarioSecrets: inventory secrets are masked for every rule, the
// node's driver_info secrets for all but a sensitive rule.
func TestScenarioSecrets(t *testing.T) {
	leak := `{"actions": [{"op": "set-attribute", "args": {"path": "/extra/a", "value": "{inventory[bmc_password]}"}},
		{"op": "set-attribute", "args": {"path": "/extra/b", "value": "{node.driver_info[ipmi_password]}"}}]`
	n := testNode()
	if _, _, err := hook(rule(t, leak+`}`))(n, inventory(), nil, time.Unix(0, 0)); err != nil {
		t.Fatal(err)
	}
	if n.Extra["a"] != "***" || n.Extra["b"] != "******" {
		t.Errorf("plain rule saw %v", n.Extra)
	}
	n = testNode()
	if _, _, err := hook(rule(t, leak+`, "sensitive": true}`))(n, inventory(), nil, time.Unix(0, 0)); err != nil {
		t.Fatal(err)
	}
	if n.Extra["a"] != "***" || n.Extra["b"] != "secret-pw" {
		t.Errorf("sensitive rule saw %v", n.Extra)
	}
}

// TestScenarioPriorityAndPluginData: rules run highest priority first
// (so a later rule sees an earlier one's change), plugin data actions
// change the plugin data returned.
func TestScenarioPriorityAndPluginData(t *testing.T) {
	low := rule(t, `{"uuid": "cccccccc-0000-4000-8000-000000000001", "priority": 1,
		"conditions": [{"op": "eq", "args": {"values": ["{node.extra[stage]}", "one"]}}],
		"actions": [{"op": "set-attribute", "args": {"path": "/extra/stage", "value": "two"}},
			{"op": "set-plugin-data", "args": {"path": "classify.stage", "value": "{node.extra[stage]}"}},
			{"op": "extend-plugin-data", "args": {"path": "classify.seen", "value": "low"}},
			{"op": "unset-plugin-data", "args": {"path": "drop"}}]}`)
	high := rule(t, `{"uuid": "cccccccc-0000-4000-8000-000000000002", "priority": 100,
		"actions": [{"op": "set-attribute", "args": {"path": "/extra/stage", "value": "one"}}]}`)
	n := testNode()
	_, pd, err := hook(low, high)(n, inventory(), map[string]any{"drop": 1, "keep": 2}, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if n.Extra["stage"] != "two" {
		t.Errorf("extra %v", n.Extra)
	}
	if fmt.Sprint(pd) != "map[classify:map[seen:[low] stage:two] keep:2]" {
		t.Errorf("plugin data %v", pd)
	}
}

// TestScenarioActionLoop: an action's loop runs it once per item.
func TestScenarioActionLoop(t *testing.T) {
	r := rule(t, `{"actions": [{"op": "set-attribute", "args": {"path": "{item[path]}", "value": "{item[value]}"},
		"loop": [{"path": "driver_info/ipmi_address", "value": "{inventory[bmc_address]}"}, {"path": "extra/serial", "value": "{inventory[system_vendor][serial_number]}"}]},
		{"op": "add-trait", "args": {"name": "{item}"}, "loop": ["CUSTOM_A", "CUSTOM_B"]}]}`)
	n := testNode()
	n.DriverInfo["ipmi_address"] = "old"
	if _, _, err := hook(r)(n, inventory(), nil, time.Unix(0, 0)); err != nil {
		t.Fatal(err)
	}
	if n.DriverInfo["ipmi_address"] != "192.0.2.17" || n.Extra["serial"] != "ABC123" || strings.Join(n.Traits, ",") != "CUSTOM_A,CUSTOM_B,CUSTOM_OLD" {
		t.Errorf("node %v %v %v", n.DriverInfo, n.Extra, n.Traits)
	}
}

// TestParseBuiltIn: built-in rules get Ironic's synthetic UUIDs and may
// have any priority.
func TestParseBuiltIn(t *testing.T) {
	rules, err := ParseBuiltIn([]byte(`[{"priority": -1, "actions": [{"op": "log", "args": {"msg": "a"}}]},
		{"uuid": "dddddddd-0000-4000-8000-000000000001", "actions": [{"op": "log", "args": {"msg": "b"}}]},
		{"actions": [{"op": "log", "args": {"msg": "c"}}]}]`))
	if err != nil {
		t.Fatal(err)
	}
	if len(rules) != 3 || rules[0].UUID != "00000000-0000-0000-0000-000000000000" || rules[2].UUID != "00000000-0000-0000-0000-000000000001" || !rules[1].BuiltIn {
		t.Fatalf("%+v", rules)
	}
	if _, err := ParseBuiltIn([]byte(`[{"actions": [{"op": "nope", "args": {}}]}]`)); err == nil || !strings.Contains(err.Error(), "built-in inspection rule 1") {
		t.Fatalf("bad built-in rule: %v", err)
	}
}
