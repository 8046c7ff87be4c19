package drivers

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
)

// Declaration is what the coordinator knows of a driver without asking
// anybody: its name, the driver_info it needs, and its out-of-band steps.
type Declaration struct {
	Name string
	// Aliases are other names accepted on create (Ironic's hardware type names).
	Aliases []string
	// RequiredInfo lists driver_info keys that must be set to manage a node.
	RequiredInfo []string
	// SecretInfo lists driver_info keys that are masked in every output.
	SecretInfo  []string
	CleanSteps  []Step
	DeploySteps []Step
	// NoRamdiskBoot says why the edge agent cannot yet boot this driver's
	// nodes into the ramdisk; empty when it can. Verbs that need the
	// ramdisk are refused for such nodes at once, with this reason.
	NoRamdiskBoot string
	// OOBInspect: the driver's BMCs inspect their system out of band
	// (drivers.Inspector): its nodes may have inspect_interface set to
	// the driver's name (inspectiface.go).
	OOBInspect bool
}

// Registry holds the known drivers.
type Registry struct {
	byName map[string]Declaration
}

// NewRegistry checks every declaration's steps (a load-time error for a
// bad set) and indexes them by name and alias.
func NewRegistry(decls ...Declaration) (*Registry, error) {
	r := &Registry{byName: map[string]Declaration{}}
	for _, d := range decls {
		if err := CheckSet(d.CleanSteps); err != nil {
			return nil, fmt.Errorf("driver %s clean steps: %w", d.Name, err)
		}
		if err := CheckSet(d.DeploySteps); err != nil {
			return nil, fmt.Errorf("driver %s deploy steps: %w", d.Name, err)
		}
		for _, n := range append([]string{d.Name}, d.Aliases...) {
			r.byName[n] = d
		}
	}
	return r, nil
}

// Get returns the driver by name or alias.
func (r *Registry) Get(name string) (Declaration, error) {
	d, ok := r.byName[name]
	if !ok {
		return Declaration{}, fmt.Errorf("unknown driver %q; known drivers: %s", name, strings.Join(r.Names(), ", "))
	}
	return d, nil
}

// Names lists the canonical driver names.
func (r *Registry) Names() []string {
	var out []string
	for n, d := range r.byName {
		if n == d.Name {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// Builtin returns the declarations of the drivers this program ships.
func Builtin() []Declaration {
	return []Declaration{FakeDeclaration(), IPMIDeclaration(), RedfishDeclaration(), QEMUDeclaration()}
}

// QEMUDeclaration is the development driver: the edge agent powers a QEMU
// VM directly (drivers/qemuvm) and boots the real ramdisk in it.
// driver_info: qemu_disk (raw image path on the agent's host),
// qemu_disk_serial, qemu_console (serial log path), qemu_memory_mb,
// qemu_hostfwd (tcp:127.0.0.1:HOSTPORT-:GUESTPORT, a port of this VM
// that other VMs reach at 10.0.2.2:HOSTPORT).
func QEMUDeclaration() Declaration {
	return Declaration{
		Name:         "qemu-dev",
		RequiredInfo: []string{"qemu_disk"},
		DeploySteps:  commonDeploySteps(),
	}
}

// Deploy steps every driver shares, after Ironic's deploy interface: the
// in-band write_image comes from the ramdisk at priority 80; these run out
// of band around it.
func commonDeploySteps() []Step {
	return []Step{
		{Interface: "deploy", Step: "prepare_instance_boot", Priority: 60, ArgsFrom: []ArgSource{FromSecureBoot}},
		{Interface: "deploy", Step: "tear_down_agent", Priority: 40, ArgsFrom: []ArgSource{FromPowerPolicy}},
		{Interface: "deploy", Step: "boot_instance", Priority: 20, ArgsFrom: []ArgSource{FromPowerPolicy}},
	}
}

// FakeDeclaration is the fake driver: fake power and management, and one
// fake out-of-band step, for simulation and tests.
func FakeDeclaration() Declaration {
	return Declaration{
		Name:    "fake",
		Aliases: []string{"fake-hardware"},
		CleanSteps: []Step{
			{Interface: "management", Step: "fake_reset_bmc", Priority: 0, Abortable: false,
				ArgsInfo: map[string]ArgInfo{
					"delay": {Description: "seconds the fake BMC takes to reset", Required: false},
				}},
		},
		// As Ironic's BIOS interfaces: apply_configuration is also a deploy
		// step, off (priority 0) unless a deploy template enables it.
		DeploySteps: append(commonDeploySteps(), Step{Interface: "bios", Step: "apply_configuration", Priority: 0,
			ArgsInfo: map[string]ArgInfo{"settings": {Description: "list of {name, value} BIOS settings; the fake BMC only checks their shape", Required: true}}}),
		SecretInfo: []string{"fake_password"},
	}
}

// IPMIDeclaration is the IPMI driver (go-ipmi on the edge agent). Its
// nodes boot the ramdisk by network boot (PXE, then iPXE over HTTP),
// which the site's edge agent serves when started with --netboot-*
// (docs/netboot.md); an agent without it fails such a boot at once,
// saying which flags it needs.
func IPMIDeclaration() Declaration {
	return Declaration{
		Name:         "ipmi",
		RequiredInfo: []string{"ipmi_address"},
		SecretInfo:   []string{"ipmi_password"},
		CleanSteps: []Step{
			{Interface: "management", Step: "reset_bmc", Priority: 0},
		},
		DeploySteps: commonDeploySteps(),
	}
}

// RedfishDeclaration is the Redfish driver (gofish on the edge agent).
func RedfishDeclaration() Declaration {
	return Declaration{
		Name:         "redfish",
		RequiredInfo: []string{"redfish_address"},
		SecretInfo:   []string{"redfish_password"},
		OOBInspect:   true,
		CleanSteps: append([]Step{
			{Interface: "management", Step: "reset_bmc", Priority: 0},
			{Interface: "bios", Step: "apply_configuration", Priority: 0,
				ArgsInfo: map[string]ArgInfo{"settings": {Description: "list of {name, value} BIOS settings; they apply at the next boot", Required: true}}},
			{Interface: "bios", Step: "factory_reset", Priority: 0},
		}, redfishFirmwareRAIDCleanSteps()...),
		// As Ironic's redfish BIOS interface: both BIOS steps are deploy
		// steps too, off (priority 0) unless a deploy template enables them.
		DeploySteps: append(commonDeploySteps(),
			Step{Interface: "bios", Step: "apply_configuration", Priority: 0,
				ArgsInfo: map[string]ArgInfo{"settings": {Description: "list of {name, value} BIOS settings; they apply at the next boot", Required: true}}},
			Step{Interface: "bios", Step: "factory_reset", Priority: 0},
			redfishRAIDApply(), redfishRAIDDelete()),
	}
}

// InbandCleanSteps are the in-band steps a standard ramdisk offers, used by
// the simulated ramdisk; a real ramdisk reports its own. Each call returns
// a new slice of the same steps (built once: the coordinator asks for them
// on every plan); their ArgsInfo maps are shared and must not be changed.
func InbandCleanSteps() []Step { return slices.Clone(inbandCleanSteps()) }

var inbandCleanSteps = sync.OnceValue(func() []Step {
	return append([]Step{
		{Interface: "deploy", Step: "erase_devices_metadata", Priority: 99, Abortable: true, RequiresRamdisk: true},
		{Interface: "deploy", Step: "erase_devices", Priority: 10, Abortable: true, RequiresRamdisk: true, ArgsFrom: []ArgSource{FromDriverInfo}, ArgsInfo: eraseDeviceArgs},
		{Interface: "deploy", Step: "inspect_hardware", Priority: 0, Abortable: true, RequiresRamdisk: true, ArgsFrom: []ArgSource{FromRootDevice}},
	}, inbandMoreCleanSteps()...)
})

// InbandDeploySteps are the in-band deploy steps of a standard ramdisk.
func InbandDeploySteps() []Step {
	return []Step{
		{Interface: "deploy", Step: "write_image", Priority: 80, Abortable: false, RequiresRamdisk: true, ArgsFrom: []ArgSource{FromImage, FromConfigDrive, FromRootDevice}},
		inbandRAIDApply(),
	}
}
