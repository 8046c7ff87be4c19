package fsm

import (
	"fmt"
	"maps"
	"net"
	"sort"
	"strings"
	"time"

	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/protocol"
)

// Inspection by the node's inspect_interface (drivers/inspectiface.go):
// agent boots the ramdisk, whose deploy.inspect_hardware reads the
// hardware in band; the driver's own (redfish) has the edge agent read
// it from the BMC as the out-of-band step inspect.inspect_hardware, with
// no ramdisk boot and no power action. Both end in stepDone, which takes
// the inventory and the properties; the out-of-band one also gives the
// capabilities' boot_mode and the MACs the engine makes ports of.

// inspectsOOB tells whether the node's inspection is its BMC's.
func (m *Machine) inspectsOOB(n *Node) bool {
	d, err := m.cfg.Drivers.Get(n.Driver)
	if err != nil {
		return false
	}
	iface := drivers.InspectInterfaceOf(n.InspectInterface)
	return iface != drivers.InspectAgent && iface == d.OOBInspectName()
}

// checkInspectInterface says why the node's inspect_interface cannot
// inspect it (a driver changed since it was set), or nil.
func (m *Machine) checkInspectInterface(n *Node) error {
	d, err := m.cfg.Drivers.Get(n.Driver)
	if err != nil {
		return nil // the driver's own refusal says it
	}
	iface := drivers.InspectInterfaceOf(n.InspectInterface)
	for _, ok := range d.InspectInterfaces() {
		if iface == ok {
			return nil
		}
	}
	return fmt.Errorf("Cannot inspect node %s: its inspect_interface %q is not supported by hardware type %s (it supports %s); set it with baremetal node set %s --inspect-interface agent",
		n.Ident(), iface, d.Name, strings.Join(d.InspectInterfaces(), ", "), n.Ident())
}

// oobInspect is the out-of-band inspection step, with the node's root
// device hints (Ironic keeps them in properties/root_device): local_gb
// is the size of the disk they choose, as the ramdisk's inspection and
// the deploy choose it.
func oobInspect(n *Node) Action {
	var args map[string]any
	if rd, ok := n.Properties["root_device"]; ok {
		args = map[string]any{"root_device": rd}
	}
	return Action{Kind: ActStep, Step: &StepRun{Interface: drivers.OOBInspectInterface, Step: drivers.OOBInspectStep, Args: args}}
}

// takeOOBInspection applies what an out-of-band inspection's result
// carries besides the inventory and the properties (stepDone): the boot
// mode into the capabilities, the MACs of the inventory's interfaces as
// the ports to make, and the plugin data that says where the inventory
// came from; with the BMC's hardware RAID as the node's raid_interface,
// the volumes it has as raid_config.
func (m *Machine) takeOOBInspection(n *Node, msg *protocol.Message, now time.Time, out *Output) {
	if d, err := m.cfg.Drivers.Get(n.Driver); err == nil && d.HardwareRAID() != "" && drivers.RAIDInterfaceOf(n.RaidInterface) == d.HardwareRAID() {
		// The BMC's volumes as they are (made before enrollment, or by
		// hand): the hardware RAID interface's raid_config, as after a
		// RAID step.
		if _, ok := msg.Data["raid_config"].(map[string]any); ok {
			if err := raidDone(n, "create_configuration", msg.Data, now); err != nil {
				out.History = append(out.History, HistoryEntry{Time: now, Severity: "ERROR", EventType: eventType(n.Op), Event: err.Error()})
			}
		}
	}
	if caps, ok := msg.Data["capabilities"].(map[string]any); ok && len(caps) > 0 {
		props := maps.Clone(n.Properties)
		if props == nil {
			props = map[string]any{}
		}
		cur, _ := props["capabilities"].(string)
		props["capabilities"] = mergeCapabilities(cur, caps)
		n.Properties = props
	}
	if inv, ok := msg.Data["inventory"].(map[string]any); ok {
		ifaces, _ := inv["interfaces"].([]any)
		seen := map[string]bool{}
		for _, x := range ifaces {
			i, _ := x.(map[string]any)
			if on, ok := i["enabled"].(bool); ok && !on {
				continue // as Ironic: ports of the enabled interfaces only
			}
			s, _ := i["mac_address"].(string)
			mac, err := net.ParseMAC(s)
			if err != nil || len(mac) != 6 || seen[mac.String()] {
				continue
			}
			seen[mac.String()] = true
			out.Ports = append(out.Ports, mac.String())
		}
	}
	if pd, ok := msg.Data["plugin_data"].(map[string]any); ok {
		out.PluginData = pd
	}
}

// mergeCapabilities sets keys of Ironic's capabilities string
// ("k1:v1,k2:v2") to the values in set, keeping the others in order;
// new keys are added sorted.
func mergeCapabilities(cur string, set map[string]any) string {
	var parts []string
	done := map[string]bool{}
	for _, kv := range strings.Split(cur, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, _, _ := strings.Cut(kv, ":")
		if v, ok := set[k]; ok {
			if !done[k] {
				parts = append(parts, k+":"+fmt.Sprint(v))
				done[k] = true
			}
			continue
		}
		parts = append(parts, kv)
	}
	keys := make([]string, 0, len(set))
	for k := range set {
		if !done[k] {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		parts = append(parts, k+":"+fmt.Sprint(set[k]))
	}
	return strings.Join(parts, ",")
}
