package bmc

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/lib/roothints"
)

// Out-of-band inspection (inspect_interface redfish): the step
// inspect.inspect_hardware reads the system from its BMC
// (drivers.Inspector) and leaves in the result what the ramdisk's
// deploy.inspect_hardware leaves: the inventory (the ramdisk's shape,
// IPA's names) and the properties cpus, memory_mb, local_gb and
// cpu_arch, the root disk chosen as the ramdisk chooses it (the node's
// root_device hints, else the smallest disk of at least 4 GiB); besides,
// the capabilities' boot_mode and plugin data that names the inspection
// and what it could not read, and the firmware and BIOS readings. Each warning of a partial reading also
// goes to the node's history (drivers.Warn). No power action, no media.

// maxOOBItems bounds the disks and the interfaces an inspection reports.
const maxOOBItems = 256

func (set *Set) inspectOOB(ctx context.Context, node string, b drivers.BMC, args map[string]any) error {
	ib, ok := b.(drivers.Inspector)
	if !ok {
		return errors.New("this node's BMC driver cannot inspect out of band; set the node's inspect_interface to agent (the ramdisk reads the hardware)")
	}
	hints, err := roothints.FromValue(args["root_device"])
	if err != nil {
		return fmt.Errorf("properties/root_device: %w", err)
	}
	inv, err := ib.InspectOOB(ctx)
	if err != nil {
		return err
	}
	for _, w := range inv.Warnings {
		drivers.Warn(ctx, "out-of-band inspection: "+w)
	}
	props := map[string]any{}
	if inv.CPU.Count > 0 {
		props["cpus"] = inv.CPU.Count
	}
	if inv.Memory.PhysicalMB > 0 {
		props["memory_mb"] = inv.Memory.PhysicalMB
	}
	if inv.CPU.Architecture != "" {
		props["cpu_arch"] = inv.CPU.Architecture
	}
	root, err := selectRoot(inv.Disks, hints)
	switch {
	case err != nil && !hints.IsZero():
		return fmt.Errorf("cannot compute local_gb: %w", err)
	case err != nil:
		props["local_gb"] = 0 // diskless, as Ironic's inspection takes it
	default:
		props["local_gb"] = root.Size >> 30
	}
	out := inv
	out.Warnings = nil
	// Bounded, as every result is (a BMC that lists thousands of drives
	// would not make a message the protocol takes).
	out.Disks = out.Disks[:min(len(out.Disks), maxOOBItems)]
	out.Interfaces = out.Interfaces[:min(len(out.Interfaces), maxOOBItems)]
	putData(ctx, "inventory", out)
	putData(ctx, "properties", props)
	if len(inv.RAIDVolumes) > 0 {
		// The volumes the system has now (existing before enrollment,
		// say): the node's raid_config when its raid_interface is the
		// BMC's (the coordinator decides).
		putData(ctx, "raid_config", map[string]any{"logical_disks": inv.RAIDVolumes[:min(len(inv.RAIDVolumes), drivers.MaxRAIDVolumes)]})
	}
	if inv.Boot.CurrentBootMode != "" {
		putData(ctx, "capabilities", map[string]any{"boot_mode": inv.Boot.CurrentBootMode})
	}
	set.mu.Lock()
	iface := set.kind[node]
	set.mu.Unlock()
	pd := map[string]any{"inspect_interface": iface, "source": "bmc"}
	if e, ok := b.(interface{ Endpoint() string }); ok {
		pd["bmc"] = e.Endpoint()
	}
	if root.Name != "" {
		pd["root_disk"] = root.Name
	}
	if len(inv.Warnings) > 0 {
		pd["warnings"] = inv.Warnings
	}
	putData(ctx, "plugin_data", pd)
	// As the agent inspection's boot does (and Ironic at inspection):
	// the firmware versions and BIOS settings are read again.
	set.readHardware(ctx, node, b)
	set.log.Info("out-of-band inspection done", "node", node, "cpus", inv.CPU.Count, "memory_mb", inv.Memory.PhysicalMB,
		"disks", len(inv.Disks), "interfaces", len(inv.Interfaces), "warnings", len(inv.Warnings))
	return nil
}

// oobWords name the disks a BMC reports in selectRoot's errors.
var oobWords = roothints.Words{
	Floor:   "no disk",
	NoMatch: "no disk matches the root device hints",
	Seen:    "disks the BMC reports",
	None:    "the BMC reports no disks",
}

// selectRoot chooses the root disk as the ramdisk does (the rule of
// lib/roothints, which ramdisk/image.SelectRoot applies): with no
// hints the smallest disk of at least 4 GiB, else the first (by name)
// that matches every hint. Hints the BMC cannot give (hctl, by_path, wwn
// extensions) are errors, never ignored.
func selectRoot(disks []drivers.OOBDisk, h roothints.Hints) (drivers.OOBDisk, error) {
	sorted := append([]drivers.OOBDisk(nil), disks...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	ds := make([]roothints.Disk, len(sorted))
	for i, d := range sorted {
		ds[i] = roothints.Disk{Name: d.Name, SizeBytes: d.Size, Rotational: d.Rotational, Serial: d.Serial, WWN: d.WWN, Model: d.Model, Vendor: d.Vendor}
	}
	i, err := roothints.Select(ds, h, oobWords)
	if err != nil {
		return drivers.OOBDisk{}, err
	}
	return sorted[i], nil
}
