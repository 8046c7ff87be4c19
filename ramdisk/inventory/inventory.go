// Package inventory collects the node's hardware inventory (CPUs, memory,
// disks, NICs, DMI identity, boot mode) with ghw and derives Ironic's
// scheduling properties from it; it only reads, and must never write to the
// machine, run external tools, or reach the network (no PCI database
// download).
package inventory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/jaypipes/ghw"
	"golang.org/x/sys/unix"

	"github.com/bmedge/bmedge/ramdisk/disk"
	"github.com/bmedge/bmedge/ramdisk/image"
)

// Inventory is the node's hardware as sent to the coordinator. Field names
// follow Ironic Python Agent's inventory where it has one, so that
// inspection data looks familiar to Ironic tooling.
type Inventory struct {
	CPU          CPU          `json:"cpu"`
	Memory       Memory       `json:"memory"`
	Disks        []Disk       `json:"disks"`
	Interfaces   []Interface  `json:"interfaces"`
	SystemVendor SystemVendor `json:"system_vendor"`
	Boot         Boot         `json:"boot"`
	// BMCAddress is the BMC's IPv4 address as the BMC itself gives it in
	// band (ramdisk/bmcaddr), Ironic Python Agent's bmc_address; empty
	// without a BMC or an address.
	BMCAddress string `json:"bmc_address,omitempty"`
	// Warnings lists parts that could not be collected; the rest of the
	// inventory is still valid.
	Warnings []string `json:"warnings,omitempty"`
}

// CPU summarises the processors.
type CPU struct {
	ModelName string `json:"model_name"`
	// Count is the number of logical CPUs (hardware threads), which is
	// what Ironic's "cpus" property counts.
	Count   int `json:"count"`
	Cores   int `json:"cores"`
	Sockets int `json:"sockets"`
	// Architecture is the kernel's machine name: x86_64, aarch64, ...
	Architecture string `json:"architecture"`
}

// Memory sizes.
type Memory struct {
	// Total is the memory usable by the kernel, in bytes.
	Total uint64 `json:"total"`
	// PhysicalMB is the installed memory in MiB (from memory blocks when
	// the kernel exposes them, else the usable total).
	PhysicalMB uint64 `json:"physical_mb"`
}

// Disk is one whole-disk block device.
type Disk struct {
	// Name is the device path, e.g. /dev/sda.
	Name         string `json:"name"`
	Size         uint64 `json:"size"`
	Rotational   bool   `json:"rotational"`
	Serial       string `json:"serial,omitempty"`
	Model        string `json:"model,omitempty"`
	Vendor       string `json:"vendor,omitempty"`
	WWN          string `json:"wwn,omitempty"`
	ReadOnly     bool   `json:"read_only"`
	Removable    bool   `json:"removable"`
	VirtualMedia bool   `json:"virtual_media"`
}

// Interface is one network interface other than loopback.
type Interface struct {
	Name       string `json:"name"`
	MACAddress string `json:"mac_address"`
	// HasCarrier is true when the link is up (sysfs carrier = 1).
	HasCarrier bool `json:"has_carrier"`
	// Virtual is true for software interfaces (bridges, ifb, veth, ...).
	Virtual bool `json:"virtual"`
	// Vendor and Product are the NIC's PCI (or USB) IDs, "0x8086" and
	// "0x1572", as Ironic Python Agent reports them; empty for a
	// virtual interface.
	Vendor  string `json:"vendor,omitempty"`
	Product string `json:"product,omitempty"`
	// LLDP is the first LLDP frame heard on the interface during
	// inspection, as Ironic Python Agent's: its TLVs as [type, "hex
	// value"] pairs (lib/lldp.Raw); absent when none was heard.
	LLDP [][]any `json:"lldp,omitempty"`
}

// SystemVendor is the machine's DMI identity.
type SystemVendor struct {
	Manufacturer string `json:"manufacturer"`
	ProductName  string `json:"product_name"`
	SerialNumber string `json:"serial_number"`
}

// Boot describes how the node booted.
type Boot struct {
	// CurrentBootMode is "uefi" or "bios".
	CurrentBootMode string `json:"current_boot_mode"`
	// SecureBoot is true when the firmware booted with UEFI Secure Boot
	// on (its SecureBoot variable is 1), false when off or on a BIOS
	// boot; nil when the UEFI variables cannot be read (a warning says
	// why).
	SecureBoot *bool `json:"secure_boot,omitempty"`
}

// SecureBootVar is the UEFI global variable SecureBoot in efivarfs: four
// bytes of attributes, then one byte, 1 when Secure Boot is on.
const SecureBootVar = "sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"

// ReadSecureBoot reads the SecureBoot variable under root (efivarfs must
// be mounted: the ramdisk mounts it read-only at start).
func ReadSecureBoot(root string) (bool, error) {
	b, err := os.ReadFile(filepath.Join(root, SecureBootVar))
	if errors.Is(err, os.ErrNotExist) {
		if _, err := os.Stat(filepath.Join(root, "sys/firmware/efi/efivars")); err != nil {
			return false, fmt.Errorf("no UEFI variables at %s: %w", filepath.Join(root, "sys/firmware/efi/efivars"), err)
		}
		if ents, _ := os.ReadDir(filepath.Join(root, "sys/firmware/efi/efivars")); len(ents) == 0 {
			return false, fmt.Errorf("no UEFI variables in %s: efivarfs is not mounted", filepath.Join(root, "sys/firmware/efi/efivars"))
		}
		return false, nil // a firmware without Secure Boot support
	}
	if err != nil {
		return false, fmt.Errorf("UEFI variable SecureBoot: %w", err)
	}
	if len(b) != 5 {
		return false, fmt.Errorf("UEFI variable SecureBoot has %d bytes, want 5 (attributes and a value)", len(b))
	}
	return b[4] == 1, nil
}

// Options parameterises Collect.
type Options struct {
	// Root is the directory under which /proc and /sys are read; "" means
	// "/". Tests point it at a fixture tree.
	Root string
	// Logger receives ghw's warnings; nil discards them.
	Logger *slog.Logger
}

// Collect gathers the inventory. CPUs, memory and the disk list are
// required and their failure is an error; NIC and DMI problems become
// Warnings because a node without DMI (some VMs, some ARM boards) is still
// usable. ghw is called only for CPU, memory, block, network and product
// data: none of these loads the PCI database, so nothing is downloaded,
// and external tools (ethtool) are disabled.
func Collect(ctx context.Context, opts Options) (Inventory, error) {
	root := opts.Root
	if root == "" {
		root = "/"
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	ghwOpts := []any{ghw.WithChroot(root), ghw.WithDisableTools(), ghw.WithLogger(logger)}
	var inv Inventory
	if err := ctx.Err(); err != nil {
		return inv, fmt.Errorf("inventory cancelled: %w", err)
	}

	cpu, err := ghw.CPU(ghwOpts...)
	if err != nil {
		return inv, fmt.Errorf("cannot read CPU information under %s: %w; is /proc mounted?", root, err)
	}
	if cpu.TotalHardwareThreads == 0 {
		return inv, fmt.Errorf("no CPUs found in %s and %s; mount /proc and /sys", filepath.Join(root, "proc/cpuinfo"), filepath.Join(root, "sys/devices/system/cpu"))
	}
	inv.CPU = CPU{
		Count:        int(cpu.TotalHardwareThreads),
		Cores:        int(cpu.TotalCores),
		Sockets:      len(cpu.Processors),
		Architecture: machineArch(),
	}
	if len(cpu.Processors) > 0 {
		inv.CPU.ModelName = known(cpu.Processors[0].Model)
	}

	mem, err := ghw.Memory(ghwOpts...)
	if err != nil {
		return inv, fmt.Errorf("cannot read memory size under %s: %w; is /proc mounted?", root, err)
	}
	if mem.TotalUsableBytes <= 0 {
		return inv, fmt.Errorf("memory size not found in %s; mount /proc", filepath.Join(root, "proc/meminfo"))
	}
	inv.Memory.Total = uint64(mem.TotalUsableBytes)
	phys := mem.TotalPhysicalBytes
	if phys < mem.TotalUsableBytes {
		phys = mem.TotalUsableBytes
	}
	inv.Memory.PhysicalMB = uint64(phys) >> 20

	if err := ctx.Err(); err != nil {
		return inv, fmt.Errorf("inventory cancelled: %w", err)
	}
	disks, warn, err := collectDisks(root, ghwOpts)
	if err != nil {
		return inv, err
	}
	inv.Disks = disks
	inv.Warnings = append(inv.Warnings, warn...)

	nics, err := ghw.Network(ghwOpts...)
	if err != nil {
		inv.Warnings = append(inv.Warnings, "network interfaces: "+err.Error())
	} else {
		for _, n := range nics.NICs {
			dir := filepath.Join(root, "sys/class/net", n.Name)
			mac := n.MACAddress
			if mac == "" {
				// ghw hides addresses the kernel did not read from the
				// hardware (addr_assign_type != 0); report them anyway
				// rather than an interface without a MAC.
				mac = readAttr(filepath.Join(dir, "address"))
			}
			inv.Interfaces = append(inv.Interfaces, Interface{
				Name:       n.Name,
				MACAddress: mac,
				HasCarrier: readAttr(filepath.Join(dir, "carrier")) == "1",
				Virtual:    n.IsVirtual,
				Vendor:     readAttr(filepath.Join(dir, "device/vendor")),
				Product:    readAttr(filepath.Join(dir, "device/device")),
			})
		}
	}

	prod, err := ghw.Product(ghwOpts...)
	if err != nil {
		inv.Warnings = append(inv.Warnings, "system vendor (DMI): "+err.Error())
	} else {
		inv.SystemVendor = SystemVendor{
			Manufacturer: known(prod.Vendor),
			ProductName:  known(prod.Name),
			SerialNumber: known(prod.SerialNumber),
		}
		if inv.SystemVendor == (SystemVendor{}) {
			inv.Warnings = append(inv.Warnings, "system vendor (DMI): no DMI data in "+filepath.Join(root, "sys/class/dmi/id"))
		}
	}

	inv.Boot.CurrentBootMode = "bios"
	off := false
	inv.Boot.SecureBoot = &off
	if _, err := os.Stat(filepath.Join(root, "sys/firmware/efi")); err == nil {
		inv.Boot.CurrentBootMode = "uefi"
		if on, err := ReadSecureBoot(root); err != nil {
			inv.Boot.SecureBoot = nil
			inv.Warnings = append(inv.Warnings, "secure boot: "+err.Error())
		} else {
			inv.Boot.SecureBoot = &on
		}
	}
	return inv, nil
}

// collectDisks lists whole disks with ghw and completes them from sysfs
// through the disk package: without udev (as in the ramdisk) ghw reports
// serial, model and WWN as unknown, and it never reports read-only or
// virtual media, which root-disk selection needs.
func collectDisks(root string, ghwOpts []any) ([]Disk, []string, error) {
	var warnings []string
	sysDevs, sysErr := disk.List(disk.ListOptions{SysRoot: filepath.Join(root, "sys")})
	bySys := map[string]disk.Device{}
	for _, d := range sysDevs {
		bySys[d.Name] = d
	}
	block, err := ghw.Block(ghwOpts...)
	if err != nil {
		if sysErr != nil {
			return nil, nil, fmt.Errorf("cannot list disks: ghw: %w; sysfs: %w", err, sysErr)
		}
		warnings = append(warnings, "disks: ghw failed, using sysfs only: "+err.Error())
		block = &ghw.BlockInfo{}
		for _, d := range sysDevs {
			block.Disks = append(block.Disks, &ghw.Disk{Name: d.Name, SizeBytes: d.SizeBytes})
		}
	} else if sysErr != nil {
		warnings = append(warnings, "disks: sysfs details unavailable: "+sysErr.Error())
	}
	disks := []Disk{}
	for _, g := range block.Disks {
		// Same selection as disk.List, so that inventory, erase and
		// root-disk choice all see the same set of disks.
		if disk.IgnoredName(g.Name) || strings.HasPrefix(g.Name, "loop") {
			continue
		}
		d := Disk{
			Name:       "/dev/" + g.Name,
			Size:       g.SizeBytes,
			Rotational: g.DriveType == ghw.DriveTypeHDD,
			Removable:  g.IsRemovable,
			Serial:     known(g.SerialNumber),
			Model:      known(g.Model),
			Vendor:     known(g.Vendor),
			WWN:        known(g.WWN),
		}
		if s, ok := bySys[g.Name]; ok {
			d.ReadOnly, d.VirtualMedia, d.Rotational = s.ReadOnly, s.VirtualMedia, s.Rotational
			d.Removable = d.Removable || s.Removable
			d.Serial = firstKnown(d.Serial, s.Serial)
			d.Model = firstKnown(d.Model, s.Model)
			d.Vendor = firstKnown(d.Vendor, s.Vendor)
			d.WWN = firstKnown(d.WWN, s.WWN)
			if d.Size == 0 {
				d.Size = s.SizeBytes
			}
		} else if g.DriveType == ghw.DriveTypeODD {
			d.VirtualMedia = true
		}
		disks = append(disks, d)
	}
	return disks, warnings, nil
}

// NodeProperties are Ironic's scheduling properties derived from an
// inventory, as Ironic inspection sets them.
type NodeProperties struct {
	CPUs     int    `json:"cpus"`
	MemoryMB uint64 `json:"memory_mb"`
	// LocalGB is the root disk's size in GiB, rounded down, with nothing
	// subtracted; 0 when the node has no suitable disk (diskless).
	LocalGB uint64 `json:"local_gb"`
	CPUArch string `json:"cpu_arch"`
	// RootDisk is the disk LocalGB was taken from.
	RootDisk string `json:"root_disk,omitempty"`
}

// Properties computes NodeProperties with the default root-disk choice
// (no hints). See PropertiesWithHints.
func Properties(inv Inventory) (NodeProperties, error) {
	return PropertiesWithHints(inv, image.RootDeviceHints{})
}

// PropertiesWithHints computes NodeProperties, choosing the root disk with
// image.SelectRoot, i.e. exactly as the deploy will. Without hints a node
// with no suitable disk gets local_gb 0 (as Ironic inspection treats a
// diskless node); with hints that match nothing it is an error, because
// the operator asked for a disk that is not there.
func PropertiesWithHints(inv Inventory, hints image.RootDeviceHints) (NodeProperties, error) {
	p := NodeProperties{CPUs: inv.CPU.Count, MemoryMB: inv.Memory.PhysicalMB, CPUArch: inv.CPU.Architecture}
	if p.MemoryMB == 0 {
		p.MemoryMB = inv.Memory.Total >> 20
	}
	var devs []disk.Device
	for _, d := range inv.Disks {
		devs = append(devs, disk.Device{
			Name:         strings.TrimPrefix(d.Name, "/dev/"),
			Path:         d.Name,
			SizeBytes:    d.Size,
			Rotational:   d.Rotational,
			ReadOnly:     d.ReadOnly,
			Removable:    d.Removable,
			VirtualMedia: d.VirtualMedia,
			Serial:       d.Serial,
			Model:        d.Model,
			Vendor:       d.Vendor,
			WWN:          d.WWN,
		})
	}
	root, err := image.SelectRoot(devs, hints)
	if err != nil {
		if hints.IsZero() {
			return p, nil
		}
		return p, fmt.Errorf("cannot compute local_gb: %w", err)
	}
	p.LocalGB = root.SizeBytes >> 30
	p.RootDisk = root.Path
	return p, nil
}

// machineArch returns the kernel's machine name (uname -m), which is what
// Ironic's cpu_arch holds (x86_64, aarch64).
func machineArch() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Machine[:])
}

// known maps ghw's "unknown" placeholder to "".
func known(s string) string {
	s = strings.TrimSpace(s)
	if strings.EqualFold(s, "unknown") {
		return ""
	}
	return s
}

func firstKnown(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func readAttr(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// ErrNoCPU is never returned; kept out. (placeholder removed)
var _ = errors.New
