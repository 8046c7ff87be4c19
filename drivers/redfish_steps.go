package drivers

import (
	"fmt"
	"strings"
)

// The Redfish driver's firmware and hardware RAID steps, with Ironic's
// names and argsinfo. The driver (drivers/redfish) carries them out.
// firmware.update runs through the edge agent (agent/bmc), which serves
// each image to the BMC from the site's image cache (one WAN transfer
// per site, checksum verified first) and reports the versions back.
// The hardware RAID steps (raid.create_configuration,
// raid.apply_configuration, raid.delete_configuration) run out of band
// through the edge agent for a node whose raid_interface is redfish
// (drivers/raidiface.go); the resulting raid_config comes back in the
// command's result and is stored on the node.

var raidFlagArgs = map[string]ArgInfo{
	ArgRaidCreateRoot:    {Description: "false: do not create the root volume (is_root_volume) of the configuration; default true"},
	ArgRaidCreateNonroot: {Description: "false: do not create the volumes that are not the root volume; default true"},
}

func redfishFirmwareRAIDCleanSteps() []Step {
	return []Step{
		{Interface: "firmware", Step: "update", Priority: 0, Abortable: false,
			ArgsInfo: map[string]ArgInfo{"settings": {Required: true,
				Description: "A list of dicts with firmware components to be updated: {\"component\": \"bios\"|\"bmc\"|\"nic:<id>\", \"url\": image URL, \"checksum\": \"sha256:<hex>\" (sha512 and md5 too; required at the edge), \"wait\": seconds to pause after it (optional)}"}},
			Doc: "Updates firmware components in the order given through Redfish UpdateService. The edge agent first fetches every image into the site's image cache (one WAN transfer per site) and verifies its checksum there; " +
				"the BMC then gets it from the cache (SimpleUpdate with the cache's URL when the BMC offers it, else a multipart push), never the origin's URL. The driver waits for the BMC's task, " +
				"performs the reset the component needs (a BMC reset for bmc, a system restart for bios and nic, leaving the power as it was) and fails unless the component then reports a different version; " +
				"the versions read back are the node's firmware list (GET /v1/nodes/{node}/firmware). Needs the site's image cache (agent --image-cache-dir).",
			NeedsBMC: "Redfish UpdateService (SimpleUpdate or MultipartHttpPushUri), TaskService tasks, FirmwareInventory or BiosVersion/FirmwareVersion"},
		redfishRAIDApply(), redfishRAIDCreate(), redfishRAIDDelete(),
	}
}

func redfishRAIDApply() Step {
	return Step{Interface: "raid", Step: "apply_configuration", Priority: 0, Abortable: false,
		ArgsInfo: map[string]ArgInfo{
			ArgRaidConfig:        {Description: "The RAID configuration to apply: {\"logical_disks\": [...]} in target_raid_config's schema.", Required: true},
			ArgRaidCreateRoot:    raidFlagArgs[ArgRaidCreateRoot],
			ArgRaidCreateNonroot: raidFlagArgs[ArgRaidCreateNonroot],
			ArgDeleteExisting:    {Description: "true: delete every existing volume first; default true"},
		},
		Doc: "Hardware RAID (raid_interface redfish): creates the raid_config argument (target_raid_config's schema) as Redfish volumes: raid_level 0, 1, 5, 6, 1+0, 5+0, 6+0 as RAIDType, size_gb in GiB or \"MAX\" (needs physical_disks), " +
			"physical_disks as drive Ids (else free drives are chosen, honouring number_of_physical_disks, disk_type and interface_type), controller as the storage Id; the root volume first. " +
			"The volumes read back from the BMC become the node's raid_config. A clean and a deploy step (off unless a deploy template names it).",
		NeedsBMC: redfishRAIDNeeds}
}

// The hardware RAID steps run out of band on the edge agent, for a node
// whose raid_interface is redfish (Ironic's RedfishRAID); a node with
// raid_interface agent has the ramdisk's software RAID steps of the same
// names instead, and one with no-raid neither (drivers/raidiface.go).
// Each reads the system's volumes back afterwards: they are the node's
// raid_config, as Ironic's redfish update_raid_config.

const redfishRAIDNeeds = "Redfish Storage with Drives and a Volumes collection that takes POST and DELETE"

func redfishRAIDCreate() Step {
	return Step{Interface: "raid", Step: "create_configuration", Priority: 0, Abortable: false, ArgsFrom: []ArgSource{FromTargetRAID},
		ArgsInfo: map[string]ArgInfo{
			ArgRaidCreateRoot:    {Description: "false: do not create the root volume (the logical disk with is_root_volume) of target_raid_config; default true"},
			ArgRaidCreateNonroot: {Description: "false: create only the root volume of target_raid_config; default true"},
			ArgDeleteExisting:    {Description: "true: delete every existing volume of the system first; default false (Ironic's)"},
		},
		Doc: "Hardware RAID (raid_interface redfish): creates the node's target_raid_config as Redfish volumes on the BMC's storage controller, without booting the ramdisk " +
			"(levels, sizes, drives and controller as raid.apply_configuration). The volumes read back from the BMC, the root volume marked is_root_volume, become the node's raid_config.",
		NeedsBMC: redfishRAIDNeeds}
}

func redfishRAIDDelete() Step {
	return Step{Interface: "raid", Step: "delete_configuration", Priority: 0, Abortable: false,
		Doc: "Hardware RAID (raid_interface redfish): deletes every Redfish volume of the system (waiting for the BMC's task when it answers 202), without booting the ramdisk; " +
			"the node's raid_config becomes empty. A clean and a deploy step.",
		NeedsBMC: redfishRAIDNeeds}
}

// CheckDriverRefused fails a step list of kind "clean", "service" (both
// checked against the clean steps) or "deploy" that names a step the
// driver declares as Refused (not available yet), saying why.
func CheckDriverRefused(d Declaration, kind string, list []map[string]any) error {
	decls := d.CleanSteps
	if kind == "deploy" {
		decls = d.DeploySteps
	}
	for i, raw := range list {
		iface, _ := raw["interface"].(string)
		name, _ := raw["step"].(string)
		if s, ok := Find(decls, iface, name); ok && s.Refused != "" {
			return fmt.Errorf("Invalid %s step %d (%s.%s): %s", kind, i+1, iface, name, strings.TrimSpace(s.Refused))
		}
	}
	return nil
}

// RefusedSteps is CheckDriverRefused for the named driver; nil for an
// unknown driver (refused elsewhere) or a nil registry.
func (r *Registry) RefusedSteps(driver, kind string, list []map[string]any) error {
	if r == nil {
		return nil
	}
	d, err := r.Get(driver)
	if err != nil {
		return nil
	}
	return CheckDriverRefused(d, kind, list)
}
