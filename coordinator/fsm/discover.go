package fsm

import (
	"fmt"
	"maps"
	"net"
	"sort"
	"strings"
	"time"

	"github.com/bmedge/bmedge/protocol"
)

// Discovery: a machine that belongs to no node booted the ramdisk at a
// site whose discovery is on, and the site's edge agent sent its
// inventory (protocol.KindDiscovery). The rules of what becomes of such
// a report are here, as a table (discoveryRules); the engine finds the
// node the machine may already be (by MAC, serial or BMC address) and
// counts the site's discovered nodes, then applies the verdict.

// AutoDiscoveredFlag is Ironic's name for a node enrolled by discovery
// (ironic.drivers.modules.inspect_utils.AUTO_DISCOVERED_FLAG): a key of
// the inspection's plugin data, and here also of driver_internal_info.
const AutoDiscoveredFlag = "auto_discovered"

// DiscoverySite is a site's discovery setting, as the rules read it.
type DiscoverySite struct {
	Enabled bool
	// MaxNodes is the cap of the site's discovered nodes.
	MaxNodes int
	// Driver is the driver of a discovered node unless an inspection
	// rule sets another (Ironic's [auto_discovery]driver).
	Driver string
	// Rate bounds the nodes the site's reports enroll in a minute
	// (DiscoveryRateWindow); 0: no bound.
	Rate int
}

// DiscoveryRateWindow is the window of DiscoverySite.Rate.
const DiscoveryRateWindow = time.Minute

// DiscoveryReport is what a discovery report says of its machine.
type DiscoveryReport struct {
	// MACs are its NICs' addresses (lower case), BootMAC the one that
	// booted.
	MACs    []string
	BootMAC string
	// BMCAddress is the BMC address the ramdisk read in band ("" when the
	// machine has none), Serial the system's serial number.
	BMCAddress string
	Serial     string
	Inventory  map[string]any
	// Properties are what the ramdisk computed of the inventory (the
	// keys inspection sets: cpus, memory_mb, local_gb, cpu_arch).
	Properties map[string]any
}

// ReadDiscovery reads a discovery report (a message protocol.Decode
// accepted).
func ReadDiscovery(msg *protocol.Message) (DiscoveryReport, error) {
	inv, _ := msg.Data[protocol.DataInventory].(map[string]any)
	r := DiscoveryReport{Inventory: inv}
	if p, ok := msg.Data[protocol.DataProperties].(map[string]any); ok {
		r.Properties = map[string]any{}
		for _, k := range []string{"cpus", "memory_mb", "local_gb", "cpu_arch"} {
			switch v := p[k].(type) {
			case float64, int, int64:
				r.Properties[k] = v
			case string:
				if len(v) <= 64 {
					r.Properties[k] = v
				}
			}
		}
	}
	seen := map[string]bool{}
	ifaces, _ := inv["interfaces"].([]any)
	for _, x := range ifaces {
		i, _ := x.(map[string]any)
		s, _ := i["mac_address"].(string)
		mac, err := net.ParseMAC(s)
		if err != nil || len(mac) != 6 || seen[mac.String()] {
			continue
		}
		seen[mac.String()] = true
		r.MACs = append(r.MACs, mac.String())
	}
	if s, _ := msg.Data[protocol.DataBootMAC].(string); s != "" {
		if mac, err := net.ParseMAC(s); err == nil && len(mac) == 6 {
			r.BootMAC = mac.String()
			if !seen[r.BootMAC] {
				r.MACs = append(r.MACs, r.BootMAC)
			}
		}
	}
	if len(r.MACs) > maxDiscoveredPorts {
		return r, fmt.Errorf("the inventory lists %d NICs; a discovered node takes at most %d", len(r.MACs), maxDiscoveredPorts)
	}
	if len(r.MACs) == 0 {
		return r, fmt.Errorf("the inventory lists no NIC with a MAC address")
	}
	sort.Strings(r.MACs)
	if a, _ := inv["bmc_address"].(string); a != "" && a != "0.0.0.0" {
		if ip := net.ParseIP(a); ip != nil {
			r.BMCAddress = ip.String()
		}
	}
	if sv, ok := inv["system_vendor"].(map[string]any); ok {
		r.Serial = SerialOf(sv)
	}
	return r, nil
}

// maxDiscoveredPorts bounds the ports a discovered node is given.
const maxDiscoveredPorts = 64

// SerialOf is a system serial number as matching takes it: one a
// machine really has, not a vendor's placeholder.
func SerialOf(systemVendor map[string]any) string {
	s, _ := systemVendor["serial_number"].(string)
	s = strings.TrimSpace(s)
	switch strings.ToLower(s) {
	case "", "unknown", "none", "0", "default string", "to be filled by o.e.m.", "system serial number", "not specified":
		return ""
	}
	if len(s) > 128 {
		return ""
	}
	return s
}

// Discovery verdicts: what becomes of a report. The refusals are the
// outcomes /metrics counts besides enrolled and seen_again.
const (
	DiscoveryEnrolled  = "enrolled"
	DiscoverySeenAgain = "seen_again"
	DiscoveryOff       = "discovery_off"
	DiscoveryCap       = "cap"
	DiscoveryInvalid   = "invalid"
	// DiscoveryRate is a deferral, not a refusal: the site enrolled its
	// rate's worth of nodes in the last minute, so the report is not
	// acknowledged and the site's outbox sends it again later.
	DiscoveryRate = "rate"
)

// discoveryCase is what the rules decide on.
type discoveryCase struct {
	site       DiscoverySite
	discovered int
	// recent is how many of them were enrolled within the last
	// DiscoveryRateWindow.
	recent  int
	matched bool
}

// discoveryRules are the rules, first match wins. A machine that is a
// node already is that node, whatever the site's setting: never a
// second one.
var discoveryRules = []struct {
	verdict string
	when    func(c discoveryCase) bool
	why     func(c discoveryCase) string
}{
	{DiscoverySeenAgain, func(c discoveryCase) bool { return c.matched }, nil},
	{DiscoveryOff, func(c discoveryCase) bool { return !c.site.Enabled },
		func(discoveryCase) string { return "discovery is off at this site" }},
	{DiscoveryCap, func(c discoveryCase) bool { return c.discovered >= c.site.MaxNodes },
		func(c discoveryCase) string {
			return fmt.Sprintf("the site has %d discovered nodes, its cap of %d", c.discovered, c.site.MaxNodes)
		}},
	{DiscoveryRate, func(c discoveryCase) bool { return c.site.Rate > 0 && c.recent >= c.site.Rate },
		func(c discoveryCase) string {
			return fmt.Sprintf("the site enrolled %d nodes in the last minute, its rate of %d a minute; the report waits at the site", c.recent, c.site.Rate)
		}},
	{DiscoveryEnrolled, func(discoveryCase) bool { return true }, nil},
}

// DecideDiscovery is the verdict on a report of site s, which has
// discovered nodes already (recent of them within the last
// DiscoveryRateWindow), for a machine that matched a node or not; why
// says what a refusal is. The agent bounds the machines it answers by
// the same rate; the bound here holds against a site that does not (its
// agent compromised, or a backlog of reports after a WAN outage, which
// then drains at the rate).
func DecideDiscovery(s DiscoverySite, discovered, recent int, matched bool) (verdict, why string) {
	c := discoveryCase{site: s, discovered: discovered, recent: recent, matched: matched}
	for _, r := range discoveryRules {
		if r.when(c) {
			if r.why != nil {
				why = r.why(c)
			}
			return r.verdict, why
		}
	}
	return DiscoveryInvalid, "no rule"
}

// Discovered fills n, a node just made for a discovered machine of
// site (its UUID, site and times set), as Ironic's auto-discovery
// enrolls one: in enroll, the site's default driver, the BMC address in
// its driver_info, a port for each MAC, the inventory stored with
// plugin data auto_discovered, then the inspection rules, which may set
// the driver and more. The machine's ramdisk powers it off once its
// report is kept, so the node is recorded powered off. A rule that fails
// the inspection leaves the node in enroll with its message as
// last_error.
func (m *Machine) Discovered(n *Node, s DiscoverySite, r DiscoveryReport, now time.Time) Output {
	out := Output{Changed: true, Inventory: r.Inventory, Ports: r.MACs,
		PluginData: map[string]any{AutoDiscoveredFlag: true}}
	n.Driver = s.Driver
	n.ProvisionState = Enroll
	n.AutoDiscovered = true
	n.Serial = r.Serial
	n.PowerState = protocol.PowerOff
	if n.DriverInfo == nil {
		n.DriverInfo = map[string]any{}
	}
	if n.Properties == nil {
		n.Properties = map[string]any{}
	}
	if len(r.Properties) > 0 {
		props := maps.Clone(n.Properties)
		maps.Copy(props, r.Properties)
		n.Properties = props
	}
	takeBootMode(n, r.Inventory)
	desc := fmt.Sprintf("node enrolled by discovery at site %s: MACs %s", n.Site, strings.Join(r.MACs, ", "))
	if r.BMCAddress != "" {
		desc += ", BMC address " + r.BMCAddress
	}
	if r.Serial != "" {
		desc += ", serial " + r.Serial
	}
	out.History = append(out.History, HistoryEntry{Time: now, Severity: "INFO", EventType: "discovery", Event: desc, To: Enroll})
	if m.cfg.InspectionRules != nil && r.Inventory != nil {
		h, pd, ports, err := m.cfg.InspectionRules(n, r.Inventory, out.PluginData, out.Ports, now)
		out.History = append(out.History, h...)
		if err != nil {
			n.LastError = err.Error()
			out.History = append(out.History, HistoryEntry{Time: now, Severity: "ERROR", EventType: "discovery", Event: err.Error()})
		} else {
			out.PortChanges = ports
			if pd != nil {
				out.PluginData = maps.Clone(pd)
			}
		}
	}
	out.PluginData[AutoDiscoveredFlag] = true
	if r.BMCAddress != "" {
		// The BMC's address in the key of the node's driver (after the
		// rules, which may have set the driver, or the address itself).
		di := maps.Clone(n.DriverInfo)
		switch n.Driver {
		case "ipmi":
			if _, ok := di["ipmi_address"]; !ok {
				di["ipmi_address"] = r.BMCAddress
			}
		case "redfish":
			if _, ok := di["redfish_address"]; !ok {
				di["redfish_address"] = "https://" + r.BMCAddress
			}
		}
		n.DriverInfo = di
	}
	return out
}

// SeenAgain records that a machine that is node n already reported
// again through discovery: nothing changes but its history.
func (m *Machine) SeenAgain(n *Node, r DiscoveryReport, now time.Time) Output {
	return Output{History: []HistoryEntry{{Time: now, Severity: "INFO", EventType: "discovery",
		Event: fmt.Sprintf("machine seen again by discovery at site %s (MACs %s); it is this node, no node made", n.Site, strings.Join(r.MACs, ", "))}}}
}
