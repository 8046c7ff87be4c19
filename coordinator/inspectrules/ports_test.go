package inspectrules

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/drivers"
)

const portUUID = "0f000000-0000-4000-8000-000000000001"

// portHook runs rules on testNode with two ports: one it has (UUID,
// eth0's MAC, which LLDP data name a switch port of) and one the
// inspection creates (eth2's MAC, no UUID).
func portHook(t *testing.T, rules ...Rule) (*fsm.Node, []fsm.HistoryEntry, []fsm.PortChange, error) {
	t.Helper()
	reg, err := drivers.NewRegistry(drivers.Builtin()...)
	if err != nil {
		t.Fatal(err)
	}
	var gotNew []string
	ports := func(n *fsm.Node, newPorts []string) []Port {
		gotNew = newPorts
		return []Port{
			{UUID: portUUID, Address: "52:54:00:aa:00:01", PXEEnabled: true, Extra: map[string]any{"rack": "r1", "tags": []any{"a"}},
				LocalLinkConnection: map[string]any{"switch_info": "operator's"}},
			{Address: "52:54:00:aa:00:03", PXEEnabled: true},
		}
	}
	n := testNode()
	hist, _, changes, err := Hook(func() []Rule { return rules }, reg, ports)(n, lldpInventory(t), nil, []string{"52:54:00:aa:00:03"}, time.Unix(0, 0))
	if !reflect.DeepEqual(gotNew, []string{"52:54:00:aa:00:03"}) {
		t.Fatalf("the ports function got new ports %v", gotNew)
	}
	return n, hist, changes, err
}

func action(t *testing.T, actions string) Rule {
	t.Helper()
	return rule(t, `{"uuid": "cccccccc-0000-4000-8000-000000000001", "actions": [`+actions+`]}`)
}

// TestPortActions: each port action on a port named by UUID or by MAC
// address (in any case, and the port the inspection creates): the
// change comes back with the fields it changed, and one history line
// per changed port names the rule and the fields; the
// local_link_connection the rules saw and return is LLDP's filled one.
func TestPortActions(t *testing.T) {
	cases := []struct {
		name, actions string
		want          []fsm.PortChange
	}{
		{"physical_network by UUID", `{"op": "set-port-attribute", "args": {"port_id": "` + portUUID + `", "path": "physical_network", "value": "physnet-{inventory[interfaces][0][name]}"}}`,
			[]fsm.PortChange{{UUID: portUUID, Address: "52:54:00:aa:00:01", Fields: []string{"physical_network"}, PhysicalNetwork: "physnet-eth0", PXEEnabled: true}}},
		{"by MAC, upper case", `{"op": "set-port-attribute", "args": {"port_id": "52:54:00:AA:00:01", "path": "/pxe_enabled", "value": false}}`,
			[]fsm.PortChange{{UUID: portUUID, Address: "52:54:00:aa:00:01", Fields: []string{"pxe_enabled"}}}},
		{"a port the inspection creates", `{"op": "set-port-attribute", "args": {"port_id": "52:54:00:aa:00:03", "path": "description", "value": "data NIC"}}`,
			[]fsm.PortChange{{Address: "52:54:00:aa:00:03", Fields: []string{"description"}, Description: "data NIC", PXEEnabled: true}}},
		{"extra key, nested", `{"op": "set-port-attribute", "args": {"port_id": "` + portUUID + `", "path": "extra/net/vlan", "value": 12}}`,
			[]fsm.PortChange{{UUID: portUUID, Address: "52:54:00:aa:00:01", Fields: []string{"extra"}, PXEEnabled: true,
				Extra: map[string]any{"rack": "r1", "tags": []any{"a"}, "net": map[string]any{"vlan": float64(12)}}}}},
		{"extend extra, unique", `{"op": "extend-port-attribute", "args": {"port_id": "` + portUUID + `", "path": "extra/tags", "value": "a", "unique": true}},
			{"op": "extend-port-attribute", "args": {"port_id": "` + portUUID + `", "path": "extra.tags", "value": "b"}}`,
			[]fsm.PortChange{{UUID: portUUID, Address: "52:54:00:aa:00:01", Fields: []string{"extra"}, PXEEnabled: true,
				Extra: map[string]any{"rack": "r1", "tags": []any{"a", "b"}}}}},
		{"delete an extra key", `{"op": "del-port-attribute", "args": {"port_id": "` + portUUID + `", "path": "extra/rack"}}`,
			[]fsm.PortChange{{UUID: portUUID, Address: "52:54:00:aa:00:01", Fields: []string{"extra"}, PXEEnabled: true, Extra: map[string]any{"tags": []any{"a"}}}}},
		{"local_link_connection keeps LLDP's keys", `{"op": "set-port-attribute", "args": {"port_id": "` + portUUID + `", "path": "local_link_connection/switch_info", "value": "{plugin_data[parsed_lldp][eth0][switch_system_name]}"}}`,
			[]fsm.PortChange{{UUID: portUUID, Address: "52:54:00:aa:00:01", Fields: []string{"local_link_connection"}, PXEEnabled: true,
				Extra:               map[string]any{"rack": "r1", "tags": []any{"a"}},
				LocalLinkConnection: map[string]any{"switch_info": "sw-01", "switch_id": "02:00:5e:00:00:01", "port_id": "Ethernet1/7"}}}},
		{"delete physical_network", `{"op": "set-port-attribute", "args": {"port_id": "` + portUUID + `", "path": "physical_network", "value": "x"}},
			{"op": "del-port-attribute", "args": {"port_id": "` + portUUID + `", "path": "physical_network"}}`,
			[]fsm.PortChange{{UUID: portUUID, Address: "52:54:00:aa:00:01", Fields: []string{"physical_network"}, PXEEnabled: true}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, hist, changes, err := portHook(t, action(t, c.actions))
			if err != nil {
				t.Fatal(err)
			}
			for i := range c.want {
				// Fields the case does not name are the port's as it was.
				w := &c.want[i]
				if w.UUID != "" && w.Extra == nil && !hasString(w.Fields, "extra") {
					w.Extra = map[string]any{"rack": "r1", "tags": []any{"a"}}
				}
				if w.UUID != "" && w.LocalLinkConnection == nil {
					w.LocalLinkConnection = map[string]any{"switch_info": "operator's", "switch_id": "02:00:5e:00:00:01", "port_id": "Ethernet1/7"}
				}
			}
			if !reflect.DeepEqual(changes, c.want) {
				t.Fatalf("changes\n%+v\nwant\n%+v", changes, c.want)
			}
			var lines []string
			for _, h := range hist {
				if strings.HasPrefix(h.Event, "port ") {
					lines = append(lines, h.Event)
				}
			}
			if len(lines) != 1 || !strings.Contains(lines[0], "rule cccccccc-0000-4000-8000-000000000001") || !strings.Contains(lines[0], c.want[0].Fields[0]) ||
				!strings.Contains(lines[0], c.want[0].Address) {
				t.Fatalf("history %v; want one line naming the port, the field and the rule", lines)
			}
		})
	}
}

func hasString(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// TestPortActionFailures: a port no port_id names fails the rule with
// Ironic's message; a value that is the wrong type once formatted, a
// path formed in a loop that names no settable field, a delete of a key
// the port lacks, each fail the rule too; and then nothing the rules did
// is kept (no port change, the node as it was), even what an earlier
// rule did.
func TestPortActionFailures(t *testing.T) {
	earlier := rule(t, `{"uuid": "bbbbbbbb-0000-4000-8000-000000000001", "priority": 50, "actions": [
		{"op": "set-port-attribute", "args": {"port_id": "`+portUUID+`", "path": "physical_network", "value": "physnet1"}},
		{"op": "add-trait", "args": {"name": "CUSTOM_EARLIER"}}]}`)
	for _, c := range []struct{ name, actions, want string }{
		{"no such port", `{"op": "set-port-attribute", "args": {"port_id": "52:54:00:ff:ff:ff", "path": "physical_network", "value": "p"}}`, "Port 52:54:00:ff:ff:ff could not be found."},
		{"no such UUID", `{"op": "del-port-attribute", "args": {"port_id": "0f000000-0000-4000-8000-00000000dead", "path": "extra/rack"}}`, "Port 0f000000-0000-4000-8000-00000000dead could not be found."},
		{"number for physical_network", `{"op": "set-port-attribute", "args": {"port_id": "` + portUUID + `", "path": "physical_network", "value": "{inventory[interfaces]}"}}`, "physical_network takes a string"},
		{"path from a loop", `{"op": "set-port-attribute", "args": {"port_id": "` + portUUID + `", "path": "{item}", "value": "x"}, "loop": ["node_uuid"]}`, `port field "node_uuid" cannot be changed`},
		{"delete a missing key", `{"op": "del-port-attribute", "args": {"port_id": "` + portUUID + `", "path": "extra/nope"}}`, "no such key"},
	} {
		t.Run(c.name, func(t *testing.T) {
			n, _, changes, err := portHook(t, earlier, action(t, c.actions))
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "cccccccc-0000-4000-8000-000000000001") {
				t.Fatalf("error %v; want a failure of rule cccccccc... saying %q", err, c.want)
			}
			if len(changes) != 0 || hasString(n.Traits, "CUSTOM_EARLIER") {
				t.Fatalf("a failed inspection kept port changes %+v, traits %v", changes, n.Traits)
			}
		})
	}
}
