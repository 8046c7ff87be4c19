package drivers

import "context"

// Out-of-band inspection (Ironic's inspect_interface "redfish"): what a BMC
// tells of its system without booting the ramdisk. The shapes follow the
// ramdisk's inventory (ramdisk/inventory, itself IPA's names) so that the
// coordinator stores and shows both the same way.

// OOBInventory is one out-of-band reading of a system. A field the BMC did
// not give is zero; what could not be read is named in Warnings and costs
// only that field, never the reading.
type OOBInventory struct {
	CPU          OOBCPU          `json:"cpu"`
	Memory       OOBMemory       `json:"memory"`
	Disks        []OOBDisk       `json:"disks"`
	Interfaces   []OOBInterface  `json:"interfaces"`
	SystemVendor OOBSystemVendor `json:"system_vendor"`
	Boot         OOBBoot         `json:"boot"`
	// RAIDVolumes are the volumes the system's storage has now, in
	// raid_config's shape (added for existing volumes at inspection).
	RAIDVolumes []Volume `json:"raid_volumes,omitempty"`
	// Warnings names each sub-resource that could not be read, with the
	// URL and the BMC's answer.
	Warnings []string `json:"warnings,omitempty"`
}

// OOBCPU summarises the processors as the BMC counts them.
type OOBCPU struct {
	ModelName string `json:"model_name,omitempty"`
	// Count is the number of logical CPUs (threads), Ironic's "cpus".
	Count   int `json:"count"`
	Cores   int `json:"cores,omitempty"`
	Sockets int `json:"sockets,omitempty"`
	// Architecture is Ironic's cpu_arch: x86_64, aarch64, ...
	Architecture string `json:"architecture,omitempty"`
}

// OOBMemory is the installed memory.
type OOBMemory struct {
	PhysicalMB uint64 `json:"physical_mb"`
}

// OOBDisk is one physical drive (Storage/Drives or SimpleStorage).
type OOBDisk struct {
	Name       string `json:"name"`
	Size       uint64 `json:"size"`
	Rotational bool   `json:"rotational"`
	Serial     string `json:"serial,omitempty"`
	Model      string `json:"model,omitempty"`
	Vendor     string `json:"vendor,omitempty"`
	WWN        string `json:"wwn,omitempty"`
}

// OOBInterface is one of the system's EthernetInterfaces.
type OOBInterface struct {
	Name       string `json:"name"`
	MACAddress string `json:"mac_address"`
	HasCarrier bool   `json:"has_carrier"`
	SpeedMbps  int    `json:"speed_mbps,omitempty"`
	// Enabled is false when the BMC reports the interface disabled or
	// absent (Status.State); Ironic creates ports only of enabled ones.
	Enabled bool `json:"enabled"`
}

// OOBSystemVendor is the system's identity.
type OOBSystemVendor struct {
	Manufacturer string `json:"manufacturer,omitempty"`
	ProductName  string `json:"product_name,omitempty"`
	SerialNumber string `json:"serial_number,omitempty"`
}

// OOBBoot is the boot mode as the BMC reports it.
type OOBBoot struct {
	// CurrentBootMode is "uefi" or "bios" ("" when the BMC does not say).
	CurrentBootMode string `json:"current_boot_mode,omitempty"`
	// SecureBoot is the SecureBoot resource's enable state; nil when the
	// BMC has none.
	SecureBoot *bool `json:"secure_boot,omitempty"`
}

// Inspector is a BMC that can inspect its system out of band.
type Inspector interface {
	InspectOOB(ctx context.Context) (OOBInventory, error)
}
