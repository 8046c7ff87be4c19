package sim

import (
	"fmt"
	"net"

	"github.com/bmedge/bmedge/protocol"
)

// Unknown machines (agent --simulate-unknown N): simulated machines that
// belong to no node, for discovery. Each has a MAC, a serial number and
// a BMC address of its own, stable per site and index; when the site
// discovers, the agent boots them as it would a real machine's network
// boot (the same gate, the same report through the relay).

// UnknownMAC is the NIC of the site's unknown machine i (locally
// administered, 02:b3:..., never one of the simulated nodes').
func (s *Sim) UnknownMAC(i int) net.HardwareAddr {
	h := 0
	for _, c := range s.cfg.Site {
		h = h*31 + int(c)
	}
	return net.HardwareAddr{0x02, 0xb3, byte(h >> 8), byte(h), byte(i >> 8), byte(i)}
}

// UnknownReport is what the discovery ramdisk of unknown machine i
// reports, as the real ramdisk's inspect_hardware does: the inventory
// (with the BMC address it reads in band, and LLDP with Options.LLDP)
// and the properties computed of it.
func (s *Sim) UnknownReport(i int) map[string]any {
	name := fmt.Sprintf("unknown-%s-%d", s.cfg.Site, i)
	opts := s.cfg.Opts
	opts.MACs = []string{s.UnknownMAC(i).String()}
	r := &simRunner{s: s, node: name, opts: opts}
	rep := r.inventory()
	inv := rep["inventory"].(map[string]any)
	inv["system_vendor"] = map[string]any{"manufacturer": "bmedge", "product_name": "simulated machine", "serial_number": fmt.Sprintf("SIMU-%s-%d", s.cfg.Site, i)}
	inv["bmc_address"] = fmt.Sprintf("10.254.%d.%d", (i>>8)&0xff, i&0xff)
	return map[string]any{protocol.DataInventory: inv, protocol.DataProperties: rep["properties"]}
}
