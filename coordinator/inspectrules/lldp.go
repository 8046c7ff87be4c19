package inspectrules

import (
	"maps"
	"net"
	"sort"

	"github.com/bmedge/bmedge/lib/lldp"
)

// LLDP processing of an inventory, as Ironic's parse_lldp and
// local_link_connection inspection hooks: each interface's "lldp" (the
// raw TLVs of the frame the ramdisk heard, lib/lldp.Raw) says which
// switch port the NIC is cabled to.

// interfacesLLDP calls fn for each interface of inv with valid LLDP
// data: its name, MAC (normalised) and what its frame says. Interfaces
// whose data are malformed are skipped, as Ironic skips them.
func interfacesLLDP(inv map[string]any, fn func(name, mac string, n lldp.Neighbour)) {
	ifaces, _ := inv["interfaces"].([]any)
	for _, x := range ifaces {
		i, _ := x.(map[string]any)
		raw, ok := i["lldp"]
		if !ok || raw == nil {
			continue
		}
		tlvs, err := lldp.FromRaw(raw)
		if err != nil || len(tlvs) == 0 {
			continue
		}
		name, _ := i["name"].(string)
		s, _ := i["mac_address"].(string)
		mac := ""
		if hw, err := net.ParseMAC(s); err == nil && len(hw) == 6 {
			mac = hw.String()
		}
		fn(name, mac, lldp.Decode(tlvs))
	}
}

// ParsedLLDP is the inventory's LLDP data by interface name, in the
// names of Ironic's parse_lldp hook (its plugin_data parsed_lldp):
// switch_chassis_id, switch_port_id, switch_system_name,
// switch_port_description, switch_port_vlans, switch_port_mtu, ...
func ParsedLLDP(inv map[string]any) map[string]any {
	out := map[string]any{}
	interfacesLLDP(inv, func(name, _ string, n lldp.Neighbour) {
		if name != "" {
			out[name] = n.Parsed()
		}
	})
	return out
}

// LinkConnections is what the inventory's LLDP data say of each NIC's
// local_link_connection, by MAC address: switch_id (the chassis ID when
// it is a MAC), port_id, switch_info (the system name).
func LinkConnections(inv map[string]any) map[string]map[string]string {
	out := map[string]map[string]string{}
	interfacesLLDP(inv, func(_, mac string, n lldp.Neighbour) {
		if llc := n.LocalLinkConnection(); mac != "" && len(llc) > 0 {
			out[mac] = llc
		}
	})
	return out
}

// FillLink is a port's local_link_connection cur with the keys of found
// it does not have, as Ironic's local_link_connection hook fills it: a
// key already set (by the operator, or by an earlier inspection) is
// never overwritten. added names the keys added, sorted; none: cur is
// returned as it is.
func FillLink(cur map[string]any, found map[string]string) (next map[string]any, added []string) {
	for k, v := range found {
		if _, ok := cur[k]; !ok && v != "" {
			added = append(added, k)
		}
	}
	if len(added) == 0 {
		return cur, nil
	}
	sort.Strings(added)
	next = maps.Clone(cur)
	if next == nil {
		next = map[string]any{}
	}
	for _, k := range added {
		next[k] = found[k]
	}
	return next, added
}
