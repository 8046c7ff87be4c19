package drivers

import (
	"fmt"
	"slices"
	"strings"
)

// Hardware interface implementations, in Ironic's names, that a node's
// boot_interface and deploy_interface may name (the other interfaces
// have one implementation per hardware type here, raid aside:
// raidiface.go).
const (
	// BootIPXE and BootPXE: network boot, served by the site's edge agent
	// (PXE firmware → Debian's iPXE → HTTP; docs/netboot.md). Ironic's
	// pxe interface hands the kernel over TFTP instead of HTTP; here both
	// names take the same chain, the one Ironic's ipxe interface takes.
	BootIPXE = "ipxe"
	BootPXE  = "pxe"
	// BootVirtualMedia: the ramdisk ISO inserted as the BMC's virtual CD
	// (Ironic's redfish-virtual-media).
	BootVirtualMedia = "redfish-virtual-media"
	// BootHTTPS: Ironic's redfish-https, UEFI HTTP boot: the BMC's boot
	// source override UefiHttp with HttpBootUri the URL of a per-boot
	// ramdisk ISO the edge agent serves (no virtual media). UEFI only;
	// a BMC that does not offer UefiHttp and HttpBootUri is refused.
	BootHTTPS = "redfish-https"
	// BootFake: Ironic's fake boot, a no-op (a simulated node boots its
	// simulated ramdisk by itself whatever the boot interface).
	BootFake = "fake"
	// BootIDRACVirtualMedia: redfish-virtual-media as Ironic's idrac
	// hardware type names it (Dell's iDRAC).
	BootIDRACVirtualMedia = "idrac-redfish-virtual-media"
	// IDRACRedfish: Ironic's idrac-redfish, the name of the idrac
	// hardware type's management, power, BIOS, RAID and vendor
	// interfaces (the redfish ones here).
	IDRACRedfish = "idrac-redfish"
	// DeployDirect: the ramdisk writes the image (Ironic's direct).
	DeployDirect = "direct"
	// DeployRamdisk: Ironic's ramdisk deploy: the node boots the ISO of
	// instance_info boot_iso from its BMC's virtual CD and is active,
	// with nothing written to its disks (Metal3's live ISO). Redfish
	// nodes only (virtual media).
	DeployRamdisk = "ramdisk"
	// DeployFake: Ironic's fake deploy: deploy, undeploy and cleaning end
	// at once, with no ramdisk boot, no power change and no image.
	DeployFake = "fake"
)

// DriverIDRAC is Ironic's idrac hardware type: an alias of the redfish
// driver whose nodes keep the name and see Ironic's idrac interface
// names.
const DriverIDRAC = "idrac"

// VirtualMediaBoot tells whether a boot interface is Redfish virtual
// media (redfish-virtual-media, or idrac-redfish-virtual-media).
func VirtualMediaBoot(impl string) bool {
	return impl == BootVirtualMedia || impl == BootIDRACVirtualMedia
}

// ShownImpl is how a node of the driver named name shows an
// implementation kept under the canonical driver's name: an idrac node's
// hardware RAID (kept as redfish) is idrac-redfish.
func ShownImpl(name, iface, impl string) string {
	if name == DriverIDRAC && iface == "raid" && impl == "redfish" {
		return IDRACRedfish
	}
	return impl
}

// KeptImpl is the inverse of ShownImpl: what a node keeps of an
// implementation named in a request.
func KeptImpl(name, iface, impl string) string {
	if name == DriverIDRAC && iface == "raid" && impl == IDRACRedfish {
		return "redfish"
	}
	return impl
}

// Ifaces are the interface implementations a node of one hardware type
// may have, per interface ("boot", "deploy", ...), the default first, as
// Ironic computes defaults: the first implementation of the hardware
// type's supported list (in Ironic's order) that is enabled.
type Ifaces map[string][]string

// Default is the default implementation of iface.
func (i Ifaces) Default(iface string) string {
	if l := i[iface]; len(l) > 0 {
		return l[0]
	}
	return ""
}

// Has tells whether impl is an implementation of iface.
func (i Ifaces) Has(iface, impl string) bool { return slices.Contains(i[iface], impl) }

// Refused says why an implementation Ironic has for the hardware type
// is not served here (empty when there is no reason on record).
func Refused(iface, impl string) string {
	switch iface + "/" + impl {
	case "deploy/" + DeployRamdisk:
		return "the ramdisk deploy interface boots instance_info boot_iso (or an ISO the edge agent builds of instance_info kernel and ramdisk) from the BMC's virtual media, which needs a Redfish BMC (driver redfish); booting a kernel and ramdisk by network boot is not built; use direct (the ramdisk writes the image)"
	case "boot/" + BootHTTPS:
		return "UEFI HTTP boot needs a Redfish BMC; use driver redfish or idrac"
	case "boot/" + BootVirtualMedia, "boot/" + BootIDRACVirtualMedia:
		return "virtual media boot needs a Redfish BMC; use driver redfish (idrac-redfish-virtual-media: driver idrac)"
	case "deploy/anaconda", "deploy/custom-agent", "deploy/ansible", "deploy/bootc", "deploy/autodetect":
		return "only direct deploy (the ramdisk writes a whole-disk image) and, on redfish, ramdisk deploy (a live ISO from virtual media) are built"
	}
	return ""
}

// Console interfaces: Ironic's ipmitool-socat (the BMC's IPMI
// Serial-over-LAN) and fake; redfish-serial-ssh, the BMC's serial console
// over SSH (this project's). The edge agent opens them (agent/console).
const (
	ConsoleIPMISOL    = "ipmitool-socat"
	ConsoleRedfishSSH = "redfish-serial-ssh"
	ConsoleFake       = "fake"
)

// InterfacesFor is the implementations of every hardware interface of a
// node whose driver is named name (d's name or one of its aliases: the
// fake driver's alias fake-hardware is Ironic's fake-hardware type, with
// Ironic's fake implementations first).
func (d Declaration) InterfacesFor(name string) Ifaces {
	mgmt := d.Name
	switch d.Name {
	case "ipmi":
		mgmt = "ipmitool" // Ironic's ipmi hardware type: ipmitool power and management
	}
	i := Ifaces{"bios": {"no-bios"}, "boot": {BootPXE}, "console": {"no-console"}, "deploy": {DeployDirect},
		"firmware": {"no-firmware"}, "inspect": {"agent"}, "management": {mgmt}, "network": {"noop"}, "power": {mgmt},
		"raid": d.RAIDInterfaces(), "rescue": {"agent"}, "storage": {"noop"}, "vendor": {"no-vendor"}}
	for _, st := range d.CleanSteps {
		switch st.Interface {
		case "bios", "firmware":
			i[st.Interface] = []string{d.Name}
		}
	}
	// The serial console, relayed by the site (docs/console.md):
	// no-console first, the default, as Ironic's enabled_console_interfaces.
	switch d.Name {
	case "ipmi":
		i["console"] = []string{"no-console", ConsoleIPMISOL}
	case "redfish":
		i["console"] = []string{"no-console", ConsoleRedfishSSH}
	case "fake":
		i["console"] = []string{"no-console", ConsoleFake}
	}
	switch d.Name {
	case "ipmi":
		// Ironic's generic boot list: ipxe first.
		i["boot"] = []string{BootIPXE, BootPXE}
	case "redfish":
		// Virtual media first (Ironic's redfish lists ipxe and pxe
		// first): the edge agent serves network boot only when started
		// with --netboot-*, virtual media whenever it has the ramdisk ISO.
		i["boot"] = []string{BootVirtualMedia, BootIPXE, BootPXE, BootHTTPS}
		i["deploy"] = []string{DeployDirect, DeployRamdisk}
		if name == DriverIDRAC {
			// Ironic's idrac: idrac-redfish for management, power, BIOS,
			// RAID and vendor; its virtual media boot in the place of
			// redfish's; firmware stays redfish.
			i["boot"] = []string{BootIDRACVirtualMedia, BootIPXE, BootPXE, BootHTTPS}
			for _, k := range []string{"management", "power", "bios", "vendor"} {
				i[k] = []string{IDRACRedfish}
			}
			for j, r := range i["raid"] {
				i["raid"][j] = ShownImpl(name, "raid", r)
			}
		}
	case "fake":
		if name == "fake-hardware" {
			// Ironic's fake-hardware: the fake implementations first.
			i["boot"] = []string{BootFake, BootIPXE, BootPXE}
			i["deploy"] = []string{DeployFake, DeployDirect}
		} else {
			// This project's simulated machine: boots its ramdisk and is
			// deployed by it; Ironic's fake ones are there too.
			i["boot"] = []string{BootPXE, BootIPXE, BootFake}
			i["deploy"] = []string{DeployDirect, DeployFake}
		}
	}
	return i
}

// CheckImpl checks that impl is an implementation of iface for a node of
// the driver named name, and says what to do otherwise.
func (d Declaration) CheckImpl(name, iface, impl string) error {
	i := d.InterfacesFor(name)
	l, known := i[iface]
	shown := impl
	if len(shown) > 64 {
		shown = shown[:64] + "..."
	}
	if !known || slices.Contains(l, impl) {
		return nil
	}
	msg := fmt.Sprintf("%s interface implementation '%s' is not supported by hardware type %s. It supports %s", iface, shown, name, strings.Join(l, ", "))
	if why := Refused(iface, impl); why != "" {
		msg += " (" + why + ")"
	}
	return fmt.Errorf("%s", msg)
}
