package protocol

import (
	"fmt"
	"net"
	"strings"
)

// Discovery: a site whose operator turned discovery on answers network
// boot for machines that belong to no node and boots them into the
// ramdisk in discovery mode. Such a ramdisk is not a node: it is named
// by the MAC that booted it (DiscoveryNode), its credential lets it
// publish one discovery report on its own node topics of the site
// broker and nothing else, and the edge agent keeps each report in its
// durable outbox and sends it to the coordinator (KindDiscovery on the
// site's bmc/evt topic), which enrolls one node per machine.
const (
	// KindDiscovery is a machine's discovery report: Data holds
	// DataInventory (the inventory the ramdisk read, as inspect_hardware
	// reports it) and DataBootMAC (the MAC that booted). From a ramdisk
	// in discovery mode it names its DiscoveryNode; from the edge agent
	// to the coordinator it names no node.
	KindDiscovery = "discovery"
	// KindDiscoveryConfig is the coordinator's retained message on a
	// site's DiscoveryTopic: whether the site discovers, its bounds, and
	// the MACs that belong to nodes (which are never discovered).
	KindDiscoveryConfig = "discovery_config"
)

// Data keys of a discovery report.
const (
	DataInventory = "inventory"
	DataBootMAC   = "boot_mac"
	// DataProperties are the node properties the ramdisk computed from
	// the inventory (cpus, memory_mb, local_gb, cpu_arch), as
	// inspect_hardware's result gives them.
	DataProperties = "properties"
)

// DiscoveryNodePrefix starts the name of a ramdisk in discovery mode:
// the prefix and the booting MAC's 12 hex digits (never a node's UUID).
const DiscoveryNodePrefix = "discovery-"

// MaxKnownMACs bounds the MACs of a discovery configuration.
const MaxKnownMACs = 40000

// DiscoveryConfig is what a site's discovery configuration says.
type DiscoveryConfig struct {
	// Enabled: the edge agent answers network boot for MACs that are not
	// in KnownMACs.
	Enabled bool `json:"enabled"`
	// Remaining is how many more machines the site may discover before
	// its cap (the cap less its discovered nodes); the agent starts no
	// more discoveries than that until the coordinator says again.
	Remaining int `json:"remaining"`
	// Rate bounds the new discoveries the agent starts per minute.
	Rate int `json:"rate"`
	// KnownMACs are the addresses of the site's nodes' ports.
	KnownMACs []string `json:"known_macs,omitempty"`
}

// DiscoveryTopic holds a site's retained discovery configuration.
func DiscoveryTopic(site string) string { return TopicPrefix + "/site/" + site + "/discovery" }

// DiscoveryNode is the name of the discovery-mode ramdisk booted by mac.
func DiscoveryNode(mac net.HardwareAddr) string {
	return DiscoveryNodePrefix + strings.ReplaceAll(mac.String(), ":", "")
}

// DiscoveryMAC is the MAC of a discovery-mode ramdisk's name (ok false
// for any other name).
func DiscoveryMAC(node string) (net.HardwareAddr, bool) {
	h, ok := strings.CutPrefix(node, DiscoveryNodePrefix)
	if !ok || len(h) != 12 {
		return nil, false
	}
	var b strings.Builder
	for i := 0; i < 12; i += 2 {
		if i > 0 {
			b.WriteByte(':')
		}
		b.WriteString(h[i : i+2])
	}
	m, err := net.ParseMAC(b.String())
	if err != nil || len(m) != 6 || strings.ToLower(h) != h {
		return nil, false
	}
	return m, true
}

// checkDiscovery: a report carries an inventory object with a list of
// interfaces, and a ramdisk's names its discovery node.
func checkDiscovery(m *Message) error {
	if err := m.need(!m.Sent.IsZero(), "sent"); err != nil {
		return err
	}
	inv, ok := m.Data[DataInventory].(map[string]any)
	if !ok {
		return fmt.Errorf("discovery report %q has no inventory object in data.%s", m.ID, DataInventory)
	}
	if _, ok := inv["interfaces"].([]any); !ok {
		return fmt.Errorf("discovery report %q: its inventory lists no interfaces", m.ID)
	}
	if m.Node != "" {
		if _, ok := DiscoveryMAC(m.Node); !ok {
			return fmt.Errorf("discovery report %q names %q, which is not a discovery ramdisk's name (%sHEX)", m.ID, m.Node, DiscoveryNodePrefix)
		}
	}
	return nil
}

// checkDiscoveryConfig: a site's configuration with bounds that make
// sense and MACs that are MACs.
func checkDiscoveryConfig(m *Message) error {
	if err := m.needAll(need{m.Site != "", "site"}, need{m.Discovery != nil, "discovery"}); err != nil {
		return err
	}
	d := m.Discovery
	if d.Remaining < 0 || d.Rate < 0 {
		return fmt.Errorf("discovery configuration %q has remaining %d or rate %d below 0", m.ID, d.Remaining, d.Rate)
	}
	if len(d.KnownMACs) > MaxKnownMACs {
		return fmt.Errorf("discovery configuration %q lists %d MACs; at most %d", m.ID, len(d.KnownMACs), MaxKnownMACs)
	}
	for _, s := range d.KnownMACs {
		if mac, err := net.ParseMAC(s); err != nil || len(mac) != 6 {
			return fmt.Errorf("discovery configuration %q: %q is not an Ethernet MAC", m.ID, s)
		}
	}
	return nil
}
