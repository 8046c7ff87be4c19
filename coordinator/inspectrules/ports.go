package inspectrules

import (
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/bmedge/bmedge/coordinator/fsm"
)

// The port actions (Ironic's set-port-attribute, extend-port-attribute,
// del-port-attribute): a rule changes a field of one of the node's
// ports, named by port_id. As in Ironic port_id is the port's UUID; as
// an addition it may be its MAC address too, since a discovered
// machine's ports get their UUIDs only when it is enrolled, in the same
// inspection the rules run on.

// MaxPhysicalNetwork is the longest physical_network of a port
// (Ironic's column); the API bounds it the same.
const MaxPhysicalNetwork = 64

// maxPortText is the longest description of a port, and value of a key
// of its local_link_connection.
const maxPortText = 255

// Port is a port of the inspected node as rules see it: the fields they
// may change, and its UUID and MAC address, which name it. UUID is ""
// for a port the same inspection creates (a MAC it found).
type Port struct {
	UUID, Address       string
	PhysicalNetwork     string
	PXEEnabled          bool
	Description         string
	Extra               map[string]any
	LocalLinkConnection map[string]any
}

// Settable fields of a port: scalars (the field itself) and
// dictionaries (a key below them).
var (
	portScalars = []string{"physical_network", "pxe_enabled", "description"}
	portMaps    = []string{"extra", "local_link_connection"}
	// linkKeys are the keys of a local_link_connection (Ironic's).
	linkKeys = []string{"switch_id", "port_id", "switch_info", "network_type", "hostname"}
)

// portDoc is a port as the rules change it, and what changed it.
type portDoc struct {
	uuid, address string
	fields        map[string]any
	// changes are "field (rule UUID)", in order, once each.
	changes []string
	changed []string
}

func newPortDoc(p Port) *portDoc {
	f := map[string]any{"physical_network": p.PhysicalNetwork, "pxe_enabled": p.PXEEnabled, "description": p.Description,
		"extra": copyMap(p.Extra), "local_link_connection": copyMap(p.LocalLinkConnection)}
	for _, k := range portMaps {
		if f[k] == nil {
			f[k] = map[string]any{}
		}
	}
	return &portDoc{uuid: p.UUID, address: normalMAC(p.Address), fields: f}
}

// change is what the rules left of p: the fields they changed, with
// their values.
func (p *portDoc) change() fsm.PortChange {
	str := func(k string) string { s, _ := p.fields[k].(string); return s }
	mp := func(k string) map[string]any {
		m, _ := p.fields[k].(map[string]any)
		if len(m) == 0 {
			return nil
		}
		return m
	}
	pxe, _ := p.fields["pxe_enabled"].(bool)
	return fsm.PortChange{UUID: p.uuid, Address: p.address, Fields: slices.Clone(p.changed),
		PhysicalNetwork: str("physical_network"), PXEEnabled: pxe, Description: str("description"),
		Extra: mp("extra"), LocalLinkConnection: mp("local_link_connection")}
}

func (p *portDoc) record(field, rule string) {
	if !slices.Contains(p.changed, field) {
		p.changed = append(p.changed, field)
	}
	c := fmt.Sprintf("%s (rule %s)", field, rule)
	if !slices.Contains(p.changes, c) {
		p.changes = append(p.changes, c)
	}
}

func normalMAC(s string) string {
	if hw, err := net.ParseMAC(s); err == nil && len(hw) == 6 {
		return hw.String()
	}
	return strings.ToLower(s)
}

// port is the node's port that id names: by UUID, or by MAC address.
func (d *Doc) port(id string) (*portDoc, error) {
	for _, p := range d.ports {
		if p.uuid != "" && strings.EqualFold(p.uuid, id) {
			return p, nil
		}
	}
	if hw, err := net.ParseMAC(id); err == nil && len(hw) == 6 {
		for _, p := range d.ports {
			if p.address == hw.String() {
				return p, nil
			}
		}
	}
	return nil, fmt.Errorf("Port %s could not be found.", short(id))
}

// SetPorts gives d the node's ports, which the port actions change.
func (d *Doc) SetPorts(ports []Port) {
	d.ports = nil
	for _, p := range ports {
		d.ports = append(d.ports, newPortDoc(p))
	}
}

// PortChanges are the ports the rules changed, in the order given.
func (d *Doc) PortChanges() []fsm.PortChange {
	var out []fsm.PortChange
	for _, p := range d.ports {
		if len(p.changed) > 0 {
			out = append(out, p.change())
		}
	}
	return out
}

// portEvents are the history lines of the ports the rules changed.
func (d *Doc) portEvents() []Event {
	var out []Event
	for _, p := range d.ports {
		if len(p.changes) == 0 {
			continue
		}
		name := p.address
		if p.uuid != "" {
			name = p.uuid + " (" + p.address + ")"
		}
		out = append(out, Event{Severity: "INFO", Text: fmt.Sprintf("port %s changed by inspection rules: %s", name, strings.Join(p.changes, ", "))})
	}
	return out
}

// checkPortPath says why a port attribute path cannot be changed by
// action.
func checkPortPath(parts []string, action string) error {
	if len(parts) == 0 || parts[0] == "" {
		return fmt.Errorf("path is empty")
	}
	for _, p := range parts {
		if p == "" {
			return fmt.Errorf("path %q has an empty part", strings.Join(parts, "/"))
		}
	}
	f := parts[0]
	switch {
	case slices.Contains(portScalars, f):
		if len(parts) > 1 {
			return fmt.Errorf("port field /%s has no keys", f)
		}
		if action == "extend-port-attribute" {
			return fmt.Errorf("port field /%s is not a list", f)
		}
		if f == "pxe_enabled" && action == "del-port-attribute" {
			return fmt.Errorf("port field /pxe_enabled cannot be deleted; set it to true or false")
		}
	case slices.Contains(portMaps, f):
		if len(parts) == 1 {
			return fmt.Errorf("path /%s names the whole dictionary; name a key below it, such as /%s/KEY", f, f)
		}
		if f == "local_link_connection" {
			if len(parts) > 2 {
				return fmt.Errorf("local_link_connection's keys are strings; /%s has no keys", strings.Join(parts[:2], "/"))
			}
			if !slices.Contains(linkKeys, parts[1]) {
				return fmt.Errorf("local_link_connection has no key %q; its keys are %s", short(parts[1]), strings.Join(linkKeys, ", "))
			}
			if action == "extend-port-attribute" {
				return fmt.Errorf("local_link_connection/%s is a string, not a list", parts[1])
			}
		}
	default:
		return fmt.Errorf("port field %q cannot be changed by an inspection rule; rules change a port's %s, and a key below %s",
			short(f), strings.Join(portScalars, ", "), strings.Join(portMaps, ", "))
	}
	return nil
}

// checkPortValue says why value cannot be set at the port path parts (a
// value with a replacement field in it is checked when the rule runs).
func checkPortValue(parts []string, value any) error {
	f := parts[0]
	if s, ok := value.(string); ok && strings.Contains(s, "{") {
		return nil
	}
	switch {
	case f == "physical_network":
		s, ok := value.(string)
		if !ok {
			return fmt.Errorf("physical_network takes a string, not %s", short(text(value)))
		}
		if len(s) > MaxPhysicalNetwork {
			return fmt.Errorf("physical_network is longer than %d characters", MaxPhysicalNetwork)
		}
	case f == "description" || f == "local_link_connection":
		s, ok := value.(string)
		if !ok {
			return fmt.Errorf("%s takes a string, not %s", strings.Join(parts, "/"), short(text(value)))
		}
		if len(s) > maxPortText {
			return fmt.Errorf("%s is longer than %d characters", strings.Join(parts, "/"), maxPortText)
		}
	case f == "pxe_enabled":
		if _, ok := value.(bool); !ok {
			return fmt.Errorf("pxe_enabled takes true or false, not %s", short(text(value)))
		}
	}
	return nil
}

// portAction is a set-, extend- or del-port-attribute on the port id.
func (ev *evaluation) portAction(op, id string, parts []string, value any, unique bool) error {
	p, err := ev.d.port(id)
	if err != nil {
		return err
	}
	if err := checkPortPath(parts, op); err != nil {
		return err
	}
	f := parts[0]
	if op == "set-port-attribute" {
		if err := checkPortValue(parts, value); err != nil {
			return fmt.Errorf("Failed to set attribute %s of port %s: %v", strings.Join(parts, "/"), short(id), err)
		}
	}
	switch {
	case slices.Contains(portScalars, f):
		if op == "del-port-attribute" {
			p.fields[f] = ""
		} else {
			p.fields[f] = value
		}
	default:
		if err := changeDict(p.fields, strings.TrimSuffix(op, "-port-attribute")+"-attribute", parts, value, unique); err != nil {
			return err
		}
	}
	p.record(f, ev.rule.UUID)
	return nil
}
