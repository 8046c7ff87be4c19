package drivers

import (
	"context"
	"slices"
)

// A node's RAID interface (Ironic's raid_interface) chooses which RAID
// steps it has:
//
//   - "agent" (the default here): the ramdisk's software RAID steps
//     (in-band, Linux md), Ironic's AgentRAID;
//   - the driver's own name, for a driver that declares out-of-band RAID
//     steps (redfish): the BMC's hardware RAID, run by the edge agent
//     without booting the ramdisk, Ironic's RedfishRAID;
//   - "no-raid": no RAID step at all, Ironic's NoRAID.
//
// Ironic's redfish hardware type defaults to "redfish" and its generic
// ones (ipmi) to "no-raid" because IPA images lack RAID tools; this
// project's ramdisk has them, so every node starts with "agent", as
// before raid_interface could be changed.
const (
	RAIDAgent   = "agent"
	RAIDNone    = "no-raid"
	RAIDDefault = RAIDAgent
)

// HardwareRAID is the name of the driver's own RAID interface: the
// driver's name when it declares out-of-band RAID steps, else "".
func (d Declaration) HardwareRAID() string {
	for _, s := range slices.Concat(d.CleanSteps, d.DeploySteps) {
		if s.Interface == "raid" && !s.RequiresRamdisk {
			return d.Name
		}
	}
	return ""
}

// RAIDInterfaces lists the raid_interface values a node of the driver
// may have, the default first.
func (d Declaration) RAIDInterfaces() []string {
	out := []string{RAIDAgent}
	if hw := d.HardwareRAID(); hw != "" {
		out = append(out, hw)
	}
	return append(out, RAIDNone)
}

// RAIDInterfaceOf is a node's raid_interface: its own, or the default
// when it has none.
func RAIDInterfaceOf(nodeValue string) string {
	if nodeValue == "" {
		return RAIDDefault
	}
	return nodeValue
}

// ForRAIDInterface is the declaration as a node with raid_interface
// iface sees it: the driver's out-of-band RAID steps only when iface is
// the driver's hardware RAID.
func (d Declaration) ForRAIDInterface(iface string) Declaration {
	if iface = RAIDInterfaceOf(iface); iface == d.HardwareRAID() {
		return d
	}
	keep := func(steps []Step) []Step {
		out := make([]Step, 0, len(steps))
		for _, s := range steps {
			if s.Interface != "raid" || s.RequiresRamdisk {
				out = append(out, s)
			}
		}
		return out
	}
	d.CleanSteps, d.DeploySteps = keep(d.CleanSteps), keep(d.DeploySteps)
	return d
}

// InbandForRAID is the in-band steps (offered by a ramdisk, or the
// standard ones) a node with raid_interface iface may run: the RAID
// ones only with "agent".
func InbandForRAID(steps []Step, iface string) []Step {
	if RAIDInterfaceOf(iface) == RAIDAgent {
		return steps
	}
	out := make([]Step, 0, len(steps))
	for _, s := range steps {
		if s.Interface != "raid" {
			out = append(out, s)
		}
	}
	return out
}

// RAIDStepper is a BMC that runs the hardware RAID steps
// (raid.create_configuration, raid.apply_configuration,
// raid.delete_configuration) and reports the resulting raid_config in
// Ironic's shape: {"logical_disks": [...]}, every volume of the system
// as read back from the BMC, the root volume created marked
// is_root_volume.
type RAIDStepper interface {
	RunRAIDStep(ctx context.Context, step string, args map[string]any) (map[string]any, error)
}

// MaxRAIDVolumes and MaxRAIDConfigBytes bound a raid_config reported by
// a step (hardware or software) before the coordinator stores it.
const (
	MaxRAIDVolumes     = 64
	MaxRAIDConfigBytes = 64 << 10
)
