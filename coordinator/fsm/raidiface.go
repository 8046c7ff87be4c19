package fsm

import (
	"fmt"

	"github.com/bmedge/bmedge/drivers"
)

// Step routing by the node's raid_interface (drivers/raidiface.go): the
// driver's declaration as the node sees it (its out-of-band RAID steps
// only with the driver's hardware RAID) and the in-band steps it may run
// (the ramdisk's RAID steps only with agent). A RAID step's declaration,
// out of band or in band, says whether it needs the ramdisk.

// nodeDriver is the node's driver declaration for its raid_interface.
func (m *Machine) nodeDriver(n *Node) (drivers.Declaration, error) {
	d, err := m.cfg.Drivers.Get(n.Driver)
	if err != nil {
		return d, err
	}
	return d.ForRAIDInterface(n.RaidInterface), nil
}

// raidInband is the in-band steps (cached from the ramdisk, or the
// standard ones) the node may run for its raid_interface.
func raidInband(n *Node, steps []drivers.Step) []drivers.Step {
	return drivers.InbandForRAID(steps, n.RaidInterface)
}

// refusedSteps refuses a clean, deploy or service list naming a step
// the driver declares refused, or a RAID step on a node whose
// raid_interface is no-raid (Ironic: the node does not support it).
func (m *Machine) refusedSteps(n *Node, kind string, list []map[string]any) error {
	if err := m.cfg.Drivers.RefusedSteps(n.Driver, kind, list); err != nil {
		return err
	}
	if drivers.RAIDInterfaceOf(n.RaidInterface) != drivers.RAIDNone {
		return nil
	}
	for i, s := range list {
		if iface, _ := s["interface"].(string); iface == "raid" {
			name, _ := s["step"].(string)
			return fmt.Errorf("Invalid %s step %d (raid.%s): node %s does not support this %s step: its raid_interface is %s (Driver %s does not support raid); "+
				"set raid_interface to agent (software RAID, in the ramdisk) or to one its driver has (baremetal node set %s --raid-interface agent)",
				kind, i+1, name, n.Ident(), kind, drivers.RAIDNone, n.Driver, n.Ident())
		}
	}
	return nil
}

// noRAID says whether the node's raid_interface is no-raid.
func noRAID(n *Node) bool { return drivers.RAIDInterfaceOf(n.RaidInterface) == drivers.RAIDNone }
