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
// raid.apply_configuration needs the resulting raid_config stored: until
// then it carries Refused, and the coordinator refuses a clean or deploy
// that names it at once (400) instead of failing it at the edge.
// raid.create_configuration and raid.delete_configuration are not
// declared here: the standard ramdisk's software RAID steps of the same
// names serve every driver; the driver's hardware RAID variants
// (RunStep) wait for a per-node raid_interface choosing them, as Ironic's
// raid_interface "redfish" does.

const notYetAtEdge = " is not yet available at the edge: the Redfish driver can run it, but the edge agent does not pass it on yet (%s); it is listed so that clients see Ironic's catalogue"

func refusedAtEdge(step, what string) string {
	return step + fmt.Sprintf(notYetAtEdge, what)
}

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
		redfishRAIDApply(),
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
		Refused: refusedAtEdge("raid.apply_configuration", "storing the resulting raid_config"),
		Doc: "Creates the raid_config argument (target_raid_config's schema) as Redfish volumes: raid_level 0, 1, 5, 6, 1+0, 5+0, 6+0 as RAIDType, size_gb in GiB or \"MAX\" (needs physical_disks), " +
			"physical_disks as drive Ids (else free drives are chosen, honouring number_of_physical_disks, disk_type and interface_type), controller as the storage Id; the root volume first. A clean and a deploy step (off unless a deploy template names it).",
		NeedsBMC: "Redfish Storage with Drives and a Volumes collection that takes POST and DELETE"}
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
