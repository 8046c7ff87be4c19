package inspectrules

import (
	"encoding/json"
	"net"
	"reflect"
	"testing"

	"github.com/bmedge/bmedge/lib/lldp"
)

func lldpInventory(t *testing.T) map[string]any {
	t.Helper()
	chassis, _ := net.ParseMAC("02:00:5e:00:00:01")
	inv := map[string]any{"interfaces": []any{
		map[string]any{"name": "eth0", "mac_address": "52:54:00:AA:00:01", "lldp": lldp.Raw(lldp.Basic(chassis, "Ethernet1/7", "to n1", "sw-01"))},
		map[string]any{"name": "eth1", "mac_address": "52:54:00:aa:00:02", "lldp": [][]any{{1, "zz"}}},
		map[string]any{"name": "eth2", "mac_address": "52:54:00:aa:00:03"},
	}}
	b, _ := json.Marshal(inv)
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestLinkConnections: the inventory's LLDP data become each MAC's
// local_link_connection and the parsed_lldp of Ironic's hooks;
// malformed data are skipped; FillLink adds only missing keys.
func TestLinkConnections(t *testing.T) {
	inv := lldpInventory(t)
	got := LinkConnections(inv)
	want := map[string]map[string]string{"52:54:00:aa:00:01": {"switch_id": "02:00:5e:00:00:01", "port_id": "Ethernet1/7", "switch_info": "sw-01"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("LinkConnections %v", got)
	}
	p := ParsedLLDP(inv)
	if e0, _ := p["eth0"].(map[string]any); len(p) != 1 || e0["switch_port_description"] != "to n1" || e0["switch_chassis_id"] != "02:00:5e:00:00:01" {
		t.Fatalf("ParsedLLDP %v", p)
	}
	cur := map[string]any{"switch_info": "operator's"}
	next, added := FillLink(cur, want["52:54:00:aa:00:01"])
	if !reflect.DeepEqual(added, []string{"port_id", "switch_id"}) || next["switch_info"] != "operator's" || next["port_id"] != "Ethernet1/7" || len(cur) != 1 {
		t.Fatalf("FillLink: %v %v (cur %v)", next, added, cur)
	}
	if again, added := FillLink(next, want["52:54:00:aa:00:01"]); added != nil || !reflect.DeepEqual(again, next) {
		t.Fatalf("FillLink of a full one: %v %v", again, added)
	}
}
