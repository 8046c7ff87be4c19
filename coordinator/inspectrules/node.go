package inspectrules

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/drivers"
)

// DocOf is n as rules see it (Ironic's field names; a copy).
func DocOf(n *fsm.Node) *Doc {
	f := map[string]any{
		"uuid": n.UUID, "name": n.Name, "driver": n.Driver, "conductor_group": n.Site,
		"driver_info": copyMap(n.DriverInfo), "properties": copyMap(n.Properties), "extra": copyMap(n.Extra),
		"instance_info":  copyMap(n.InstanceInfo),
		"boot_interface": n.BootInterface, "deploy_interface": n.DeployInterface, "inspect_interface": n.InspectInterface,
		"raid_interface": n.RaidInterface, "resource_class": n.ResourceClass, "description": n.Description, "owner": n.Owner,
		"provision_state": string(n.ProvisionState), "maintenance": n.Maintenance,
		"boot_mode": n.BootMode,
	}
	for _, k := range settableMaps {
		if f[k] == nil {
			f[k] = map[string]any{}
		}
	}
	return &Doc{Fields: f, Traits: slices.Clone(n.Traits)}
}

// applyTo writes what rules may change of d back into n (new maps, never
// the old ones changed in place: the API's readers may be encoding
// them).
func (d *Doc) applyTo(n *fsm.Node) {
	str := func(k string) string { s, _ := d.Fields[k].(string); return s }
	mp := func(k string) map[string]any {
		m, _ := d.Fields[k].(map[string]any)
		if len(m) == 0 {
			return nil
		}
		return m
	}
	n.DriverInfo, n.Properties, n.Extra, n.InstanceInfo = mp("driver_info"), mp("properties"), mp("extra"), mp("instance_info")
	n.Driver = str("driver")
	n.BootInterface, n.DeployInterface, n.InspectInterface, n.RaidInterface = str("boot_interface"), str("deploy_interface"), str("inspect_interface"), str("raid_interface")
	n.ResourceClass, n.Description, n.Owner = str("resource_class"), str("description"), str("owner")
	n.Traits = slices.Clone(d.Traits)
	if len(n.Traits) == 0 {
		n.Traits = nil
	}
}

// DriverCheck checks a driver or interface a rule set: the driver must
// be one reg has, each interface one the node's driver supports (the
// checks of a PATCH of the node).
func DriverCheck(reg *drivers.Registry) Check {
	return func(d *Doc, field string) error {
		if reg == nil {
			return nil
		}
		name, _ := d.Fields["driver"].(string)
		decl, err := reg.Get(name)
		if err != nil {
			return fmt.Errorf("driver %q: %v", short(name), err)
		}
		impl, _ := d.Fields[field].(string)
		if impl == "" || field == "driver" {
			return nil
		}
		iface := strings.TrimSuffix(field, "_interface")
		switch iface {
		case "inspect":
			if !slices.Contains(decl.InspectInterfaces(), drivers.InspectInterfaceOf(impl)) {
				return fmt.Errorf("inspect_interface %q is not supported by hardware type %s (it supports %s)", short(impl), name, strings.Join(decl.InspectInterfaces(), ", "))
			}
			return nil
		case "raid":
			if !slices.Contains(decl.RAIDInterfaces(), drivers.RAIDInterfaceOf(impl)) {
				return fmt.Errorf("raid_interface %q is not supported by hardware type %s (it supports %s)", short(impl), name, strings.Join(decl.RAIDInterfaces(), ", "))
			}
			return nil
		}
		return decl.CheckImpl(name, iface, impl)
	}
}

// Hook is the state machine's inspection hook (fsm.Config's
// InspectionRules): it runs the rules that rules gives on node n and the
// inventory its inspection just applied, changes n as their actions
// say, and returns the history to record, the plugin data as the rules
// left it, the node's ports the port actions changed, and the failure
// that fails the inspection. ports gives the node's ports (the ones it
// has, and one for each MAC of newPorts the same inspection creates,
// with no UUID yet); each is shown to the rules with its
// local_link_connection as the inspection's LLDP data will leave it
// (FillLink). n is changed, and port changes returned, only when every
// rule ran: a failed inspection keeps the node and its ports as they
// were.
func Hook(rules func() []Rule, reg *drivers.Registry, ports func(n *fsm.Node, newPorts []string) []Port) func(n *fsm.Node, inventory, pluginData map[string]any, newPorts []string, now time.Time) ([]fsm.HistoryEntry, map[string]any, []fsm.PortChange, error) {
	return func(n *fsm.Node, inventory, pluginData map[string]any, newPorts []string, now time.Time) ([]fsm.HistoryEntry, map[string]any, []fsm.PortChange, error) {
		// Ironic's parse_lldp hook runs before the rules, which may read
		// its plugin_data parsed_lldp.
		if parsed := ParsedLLDP(inventory); len(parsed) > 0 {
			pluginData = maps.Clone(pluginData)
			if pluginData == nil {
				pluginData = map[string]any{}
			}
			pluginData["parsed_lldp"] = parsed
		}
		list := rules()
		if len(list) == 0 {
			return nil, pluginData, nil, nil
		}
		d := DocOf(n)
		if ports != nil {
			found := LinkConnections(inventory)
			pl := ports(n, newPorts)
			for i, p := range pl {
				pl[i].LocalLinkConnection, _ = FillLink(p.LocalLinkConnection, found[normalMAC(p.Address)])
			}
			d.SetPorts(pl)
		}
		res, err := Apply(list, d, inventory, pluginData, DriverCheck(reg))
		var hist []fsm.HistoryEntry
		event := func(ev Event) {
			hist = append(hist, fsm.HistoryEntry{Time: now, Severity: ev.Severity, EventType: "inspection", Event: fsm.BoundText(ev.Text, 0)})
		}
		for _, ev := range res.Events {
			event(ev)
		}
		if err != nil {
			return hist, pluginData, nil, err
		}
		for _, ev := range d.portEvents() {
			event(ev)
		}
		d.applyTo(n)
		pd := res.PluginData
		if len(pd) == 0 && pluginData == nil {
			pd = nil
		}
		return hist, maps.Clone(pd), d.PortChanges(), nil
	}
}
