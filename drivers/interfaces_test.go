package drivers

import (
	"strings"
	"testing"
)

// TestInterfacesPerHardwareType: the defaults are Ironic's for what each
// driver does (ipmi: ipxe and ipmitool; redfish: virtual media;
// fake-hardware: Ironic's fake boot and deploy; ramdisk deploy on
// redfish), and an implementation Ironic has that is not built here is
// refused with its reason.
func TestInterfacesPerHardwareType(t *testing.T) {
	for _, c := range []struct {
		decl                 Declaration
		name                 string
		boot, deploy, power  string
		otherBoot, otherDepl string
	}{
		{IPMIDeclaration(), "ipmi", BootIPXE, DeployDirect, "ipmitool", BootPXE, ""},
		{RedfishDeclaration(), "redfish", BootVirtualMedia, DeployDirect, "redfish", BootIPXE, DeployRamdisk},
		{RedfishDeclaration(), "idrac", BootIDRACVirtualMedia, DeployDirect, IDRACRedfish, BootPXE, DeployRamdisk},
		{FakeDeclaration(), "fake-hardware", BootFake, DeployFake, "fake", BootPXE, DeployDirect},
		{FakeDeclaration(), "fake", BootPXE, DeployDirect, "fake", BootFake, DeployFake},
		{QEMUDeclaration(), "qemu-dev", BootPXE, DeployDirect, "qemu-dev", "", ""},
	} {
		i := c.decl.InterfacesFor(c.name)
		if i.Default("boot") != c.boot || i.Default("deploy") != c.deploy || i.Default("power") != c.power || i.Default("management") != c.power {
			t.Errorf("%s: boot %q deploy %q power %q management %q; want %s, %s, %s", c.name, i.Default("boot"), i.Default("deploy"),
				i.Default("power"), i.Default("management"), c.boot, c.deploy, c.power)
		}
		if c.otherBoot != "" && c.decl.CheckImpl(c.name, "boot", c.otherBoot) != nil {
			t.Errorf("%s: boot %s refused", c.name, c.otherBoot)
		}
		if c.otherDepl != "" && c.decl.CheckImpl(c.name, "deploy", c.otherDepl) != nil {
			t.Errorf("%s: deploy %s refused", c.name, c.otherDepl)
		}
		if c.name == "redfish" || c.name == DriverIDRAC {
			continue
		}
		// Ramdisk deploy boots an ISO from virtual media: redfish only.
		err := c.decl.CheckImpl(c.name, "deploy", DeployRamdisk)
		if err == nil || !strings.Contains(err.Error(), "needs a Redfish BMC") || !strings.Contains(err.Error(), "is not supported by hardware type "+c.name) {
			t.Errorf("%s: deploy ramdisk: %v; want refused with the reason", c.name, err)
		}
	}
	// UEFI HTTP boot on redfish and idrac (as Ironic's redfish-https).
	for _, d := range []string{"redfish", DriverIDRAC} {
		if err := RedfishDeclaration().CheckImpl(d, "boot", "redfish-https"); err != nil {
			t.Errorf("%s boot redfish-https: %v", d, err)
		}
	}
	// Ironic's idrac hardware type: its interface names, redfish's
	// refused on it (as Ironic's idrac lists no redfish-virtual-media).
	i := RedfishDeclaration().InterfacesFor(DriverIDRAC)
	for _, k := range []string{"bios", "management", "power", "vendor"} {
		if l := i[k]; len(l) != 1 || l[0] != IDRACRedfish {
			t.Errorf("idrac %s: %v; want [idrac-redfish]", k, l)
		}
	}
	if got := strings.Join(i["raid"], " "); got != "agent idrac-redfish no-raid" || i.Default("firmware") != "redfish" {
		t.Errorf("idrac raid %q firmware %q; want agent idrac-redfish no-raid, redfish", got, i.Default("firmware"))
	}
	if RedfishDeclaration().CheckImpl(DriverIDRAC, "boot", BootVirtualMedia) == nil || RedfishDeclaration().CheckImpl("redfish", "boot", BootIDRACVirtualMedia) == nil {
		t.Error("redfish-virtual-media taken on idrac, or idrac-redfish-virtual-media on redfish")
	}
	if KeptImpl(DriverIDRAC, "raid", IDRACRedfish) != "redfish" || ShownImpl(DriverIDRAC, "raid", "redfish") != IDRACRedfish || ShownImpl("redfish", "raid", "redfish") != "redfish" {
		t.Error("idrac's RAID name is not kept as redfish's and shown as idrac-redfish")
	}
	if err := IPMIDeclaration().CheckImpl("ipmi", "boot", BootVirtualMedia); err == nil || !strings.Contains(err.Error(), "Redfish BMC") {
		t.Errorf("ipmi boot redfish-virtual-media: %v", err)
	}
}
