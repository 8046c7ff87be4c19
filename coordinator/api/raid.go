package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strings"

	"github.com/bmedge/bmedge/coordinator/engine"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/drivers"
)

// PUT /v1/nodes/{id}/states/raid (API 1.12) sets a node's
// target_raid_config, as Ironic's NodeStatesController.raid: the body is
// the configuration itself, validated against Ironic's RAID schema
// (raid_config_schema.json) and, for software RAID (controller
// "software"), against what the ramdisk can build (IPA's
// validate_configuration); an empty object unsets it. 204 on success; 406
// below 1.12; 409 while the node is locked. raid.create_configuration
// (a manual clean step) then builds it and raid_config shows the result.

// minorRaid is the API version of target_raid_config and states/raid.
const minorRaid = 12

func (s *Server) setRaid(w http.ResponseWriter, r *http.Request) {
	if minor := apiMinor(r); minor < minorRaid {
		writeError(w, http.StatusNotAcceptable, fmt.Sprintf("Request not acceptable: PUT /v1/nodes/<node>/states/raid is in API version 1.%d and later, and this request asked for 1.%d; send X-OpenStack-Ironic-API-Version: 1.%d or later", minorRaid, minor, minorRaid))
		return
	}
	var raw json.RawMessage
	if !decode(w, r, &raw) {
		return
	}
	var cfg map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&cfg); err != nil || cfg == nil {
		writeError(w, 400, "Invalid input for field/attribute target_raid_config: the body must be a JSON object such as {\"logical_disks\": [{\"size_gb\": 100, \"raid_level\": \"1\", \"controller\": \"software\", \"is_root_volume\": true}]}, or {} to unset it")
		return
	}
	if len(cfg) > 0 {
		norm, err := ValidateRaidConfig(cfg)
		if err != nil {
			writeError(w, 400, err.Error())
			return
		}
		cfg = norm
		// As Ironic's raid interface validate_raid_config: what the
		// node's raid_interface can build.
		err = s.e.View(r.PathValue("id"), func(n *fsm.Node, _ bool) error { return checkRaidForInterface(n, cfg) })
		var ee *engine.Error
		if errors.As(err, &ee) {
			writeErr(w, err)
			return
		}
		if err != nil {
			writeError(w, 400, err.Error())
			return
		}
	}
	if err := s.e.SetTargetRaidConfig(r.PathValue("id"), cfg); err != nil {
		writeErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// raidLevels are the schema's RAID levels; softwareRaidLevels those the
// ramdisk's Linux md builds.
var (
	raidLevels         = []string{"JBOD", "0", "1", "2", "5", "6", "1+0", "5+0", "6+0"}
	softwareRaidLevels = []string{"0", "1", "1+0"}
)

// logicalDiskProps are the schema's logical disk properties.
var logicalDiskProps = []string{"raid_level", "size_gb", "volume_name", "is_root_volume", "share_physical_disks",
	"disk_type", "interface_type", "number_of_physical_disks", "controller", "physical_disks"}

// softwareUnsupported are schema properties the software RAID builder
// has no use for: refused rather than ignored.
var softwareUnsupported = map[string]string{
	"share_physical_disks":     "software RAID puts one partition per logical disk on every holder disk, so disks are always shared",
	"disk_type":                "software RAID picks its disks with physical_disks (root device hints such as {\"rotational\": false})",
	"interface_type":           "software RAID picks its disks with physical_disks (root device hints such as {\"name\": \"/dev/sda\"})",
	"number_of_physical_disks": "software RAID uses every disk, or the disks physical_disks names",
}

// raidErr is Ironic's message for a schema violation.
func raidErr(format string, a ...any) error {
	return fmt.Errorf("RAID config validation error: "+format, a...)
}

// ValidateRaidConfig checks a target RAID configuration as Ironic does
// (its JSON schema, at most one root volume) and, when a logical disk has
// controller "software", as the ramdisk's software RAID needs (IPA's
// rules: every logical disk software, one or two of them, the first
// RAID-1, at most one of size "MAX", levels 0, 1 and 1+0, physical_disks
// as at least two root device hints). It returns the configuration with
// integer sizes as JSON numbers.
func ValidateRaidConfig(cfg map[string]any) (map[string]any, error) {
	for k := range cfg {
		if k != "logical_disks" {
			return nil, raidErr("Additional properties are not allowed (%s was unexpected); the configuration has only logical_disks", shortQuote(k))
		}
	}
	v, ok := cfg["logical_disks"]
	if !ok {
		return nil, raidErr("'logical_disks' is a required property")
	}
	list, ok := v.([]any)
	if !ok {
		return nil, raidErr("logical_disks must be a list of logical disks, each an object with raid_level and size_gb")
	}
	if len(list) == 0 {
		return nil, raidErr("[] is too short: logical_disks needs at least one logical disk")
	}
	out := make([]any, 0, len(list))
	roots, software := 0, 0
	for i, x := range list {
		ld, ok := x.(map[string]any)
		if !ok {
			return nil, raidErr("logical disk %d is not an object", i)
		}
		norm, err := validateLogicalDisk(i, ld)
		if err != nil {
			return nil, err
		}
		if b, _ := norm["is_root_volume"].(bool); b {
			roots++
		}
		if c, _ := norm["controller"].(string); c == "software" {
			software++
		}
		out = append(out, norm)
	}
	if roots > 1 {
		return nil, fmt.Errorf("Raid config cannot have more than one root volume. %d root volumes were specified", roots)
	}
	if software > 0 {
		if err := validateSoftwareRaid(out, software); err != nil {
			return nil, err
		}
	}
	return map[string]any{"logical_disks": out}, nil
}

func validateLogicalDisk(i int, ld map[string]any) (map[string]any, error) {
	at := fmt.Sprintf("logical disk %d", i)
	keys := make([]string, 0, len(ld))
	for k := range ld {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !contains(logicalDiskProps, k) {
			return nil, raidErr("%s: Additional properties are not allowed (%s was unexpected); a logical disk takes %s", at, shortQuote(k), strings.Join(logicalDiskProps, ", "))
		}
	}
	for _, k := range []string{"raid_level", "size_gb"} {
		if _, ok := ld[k]; !ok {
			return nil, raidErr("%s: '%s' is a required property", at, k)
		}
	}
	out := map[string]any{}
	level, ok := ld["raid_level"].(string)
	if !ok || !contains(raidLevels, level) {
		return nil, raidErr("%s: raid_level %v is not one of %s (a string)", at, jsonText(ld["raid_level"]), strings.Join(raidLevels, ", "))
	}
	out["raid_level"] = level
	switch s := ld["size_gb"].(type) {
	case string:
		if s != "MAX" {
			return nil, raidErr("%s: size_gb %q is not valid: give a whole number of GiB or \"MAX\" for the rest of the disks", at, s)
		}
		out["size_gb"] = s
	case json.Number:
		n, err := s.Int64()
		if err != nil || n < 0 {
			return nil, raidErr("%s: size_gb %s is not valid: give a whole number (>= 0) of GiB or \"MAX\"", at, s)
		}
		out["size_gb"] = n
	default:
		return nil, raidErr("%s: size_gb %s is not valid: give a whole number of GiB or \"MAX\"", at, jsonText(ld["size_gb"]))
	}
	for _, k := range []string{"volume_name", "controller"} {
		if v, ok := ld[k]; ok {
			s, isStr := v.(string)
			if !isStr {
				return nil, raidErr("%s: %s %s is not of type 'string'", at, k, jsonText(v))
			}
			out[k] = s
		}
	}
	for _, k := range []string{"is_root_volume", "share_physical_disks"} {
		if v, ok := ld[k]; ok {
			b, isBool := v.(bool)
			if !isBool {
				return nil, raidErr("%s: %s %s is not of type 'boolean'", at, k, jsonText(v))
			}
			out[k] = b
		}
	}
	enums := map[string][]string{"disk_type": {"hdd", "ssd"}, "interface_type": {"sata", "scsi", "sas"}}
	for _, k := range []string{"disk_type", "interface_type"} {
		if v, ok := ld[k]; ok {
			s, isStr := v.(string)
			if !isStr || !contains(enums[k], s) {
				return nil, raidErr("%s: %s %s is not one of %s", at, k, jsonText(v), strings.Join(enums[k], ", "))
			}
			out[k] = s
		}
	}
	if v, ok := ld["number_of_physical_disks"]; ok {
		n, isNum := v.(json.Number)
		c, err := n.Int64()
		if !isNum || err != nil || c < 1 {
			return nil, raidErr("%s: number_of_physical_disks %s must be a whole number greater than 0", at, jsonText(v))
		}
		out["number_of_physical_disks"] = c
	}
	if v, ok := ld["physical_disks"]; ok {
		if _, ok := ld["controller"]; !ok {
			return nil, raidErr("%s: 'controller' is a dependency of 'physical_disks': name the controller (\"software\" for Linux md) when you name the disks", at)
		}
		list, isList := v.([]any)
		if !isList {
			return nil, raidErr("%s: physical_disks must be a list of disk names (strings) or of root device hints (objects)", at)
		}
		strs, objs := 0, 0
		for _, p := range list {
			switch p.(type) {
			case string:
				strs++
			case map[string]any:
				objs++
			}
		}
		switch {
		case strs == len(list):
		case objs == len(list) && objs >= 2:
		case objs == len(list):
			return nil, raidErr("%s: physical_disks %s is too short: give at least two root device hints", at, jsonText(v))
		default:
			return nil, raidErr("%s: physical_disks must be all strings or all objects (root device hints)", at)
		}
		out["physical_disks"] = list
	}
	return out, nil
}

// validateSoftwareRaid is IPA's validate_configuration for Linux md, with
// RAID 5 and 6 refused (this ramdisk builds 0, 1 and 1+0).
func validateSoftwareRaid(lds []any, software int) error {
	var errs []string
	if software != len(lds) {
		errs = append(errs, "software RAID configuration requires all logical disks to have 'controller'='software'")
	}
	if len(lds) > 2 {
		errs = append(errs, fmt.Sprintf("software RAID configuration requires one or two logical disks, not %d", len(lds)))
	}
	names := map[string]bool{}
	maxes := 0
	for i, x := range lds {
		ld := x.(map[string]any)
		level := ld["raid_level"].(string)
		if !contains(softwareRaidLevels, level) {
			errs = append(errs, fmt.Sprintf("logical disk %d: software RAID level %s is not supported: the ramdisk builds Linux md levels %s (RAID 5 and 6 are not offered)", i, level, strings.Join(softwareRaidLevels, ", ")))
		}
		if i == 0 && level != "1" {
			errs = append(errs, "software RAID configuration requires RAID-1 for the first logical disk (it holds the root file system and the boot loader)")
		}
		if ld["size_gb"] == "MAX" {
			maxes++
		}
		if n, ok := ld["volume_name"].(string); ok {
			if !mdName.MatchString(n) {
				errs = append(errs, fmt.Sprintf("logical disk %d: volume_name %s is not a valid md array name: 1 to 32 letters, digits, '.', '_' or '-', not starting with '-'", i, shortQuote(n)))
			}
			if names[n] {
				errs = append(errs, fmt.Sprintf("duplicate software RAID device name %s", n))
			}
			names[n] = true
		}
		if pd, ok := ld["physical_disks"].([]any); ok {
			for _, p := range pd {
				if _, isHint := p.(map[string]any); !isHint {
					errs = append(errs, fmt.Sprintf("logical disk %d: the physical_disks parameter for software RAID must be a list of at least 2 root device hints (objects such as {\"name\": \"/dev/vda\"})", i))
					break
				}
			}
		}
		keys := make([]string, 0, len(softwareUnsupported))
		for k := range softwareUnsupported {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if _, set := ld[k]; set {
				errs = append(errs, fmt.Sprintf("logical disk %d: %s is not supported for software RAID: %s", i, k, softwareUnsupported[k]))
			}
		}
	}
	if maxes > 1 {
		errs = append(errs, "software RAID can have only one RAID device with size 'MAX'")
	}
	if len(errs) > 0 {
		return fmt.Errorf("Could not validate Software RAID config: %s", strings.Join(errs, "; "))
	}
	return nil
}

// mdName is what a software RAID volume_name may be: md metadata 1.2
// keeps 32 bytes of name, and mdadm takes it as an argument.
var mdName = regexp.MustCompile(`^[A-Za-z0-9_.][A-Za-z0-9_.-]{0,31}$`)

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// jsonText shows a value the way the client sent it, shortened.
func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return shortQuote(string(b))
}

// logicalDiskPropertyDocs are the descriptions of Ironic's RAID schema,
// which GET /v1/drivers/{name}/raid/logical_disk_properties lists.
var logicalDiskPropertyDocs = map[string]string{
	"raid_level":               "RAID level for the logical disk. Valid values are 'JBOD', '0', '1', '2', '5', '6', '1+0', '5+0' and '6+0'. Required.",
	"size_gb":                  "Size in GiB (Integer) for the logical disk. Use 'MAX' as size_gb if this logical disk is supposed to use the rest of the space available. Required.",
	"volume_name":              "Name of the volume to be created. If this is not specified, it will be auto-generated. Optional.",
	"is_root_volume":           "Specifies whether this disk is a root volume. By default, this is False. Optional.",
	"share_physical_disks":     "Specifies whether other logical disks can share physical disks with this logical disk. By default, this is False. Optional.",
	"disk_type":                "The type of disk preferred. Valid values are 'hdd' and 'ssd'. If this is not specified, disk type will not be a selection criterion for choosing backing physical disks. Optional.",
	"interface_type":           "The interface type of disk. Valid values are 'sata', 'scsi' and 'sas'. If this is not specified, interface type will not be a selection criterion for choosing backing physical disks. Optional.",
	"number_of_physical_disks": "Number of physical disks to use for this logical disk. By default, the driver uses the minimum number of disks required for that RAID level. Optional.",
	"controller":               "Controller to use for this logical disk. If not specified, the driver will choose a suitable RAID controller on the bare metal node. Optional.",
	"physical_disks":           "The physical disks to use for this logical disk. If not specified, the driver will choose suitable physical disks to use. Optional.",
}

// raidProperties is GET /v1/drivers/{name}/raid/logical_disk_properties
// (API 1.12): the logical disk properties a target_raid_config takes,
// with Ironic's descriptions.
func (s *Server) raidProperties(w http.ResponseWriter, r *http.Request) {
	if minor := apiMinor(r); minor < minorRaid {
		writeError(w, http.StatusNotAcceptable, fmt.Sprintf("Request not acceptable: the RAID logical disk properties are in API version 1.%d and later, and this request asked for 1.%d", minorRaid, minor))
		return
	}
	if _, err := s.e.Machine().Config().Drivers.Get(r.PathValue("name")); err != nil {
		writeError(w, 404, fmt.Sprintf("Could not find the following driver(s) or hardware type(s): %s.", r.PathValue("name")))
		return
	}
	writeJSON(w, 200, logicalDiskPropertyDocs)
}

// checkRAIDInterfacePatch answers a patch of raid_interface (API 1.31)
// before it is applied (checkKeptInterfacePatch): a string, remove or
// null resets it to the default, agent. Whether the node's driver
// supports the value is checkRAIDInterface's, once the patch (which may
// change the driver too) is applied.
func checkRAIDInterfacePatch(n *fsm.Node, ops []patchOp) error {
	return checkKeptInterfacePatch(n, ops, "raid_interface", drivers.RAIDDefault,
		drivers.ShownImpl(n.Driver, "raid", drivers.RAIDInterfaceOf(n.RaidInterface)), "agent, no-raid or the driver's own (redfish)")
}

// checkRAIDInterface refuses, with Ironic's IncompatibleInterface 400, a
// patched node whose raid_interface its (possibly new) driver does not
// support, and stores the default as "".
func (s *Server) checkRAIDInterface(n *fsm.Node) error {
	return s.checkKeptInterface(n, &n.RaidInterface, drivers.RAIDDefault, checkRAIDImpl)
}

// checkRAIDImpl refuses a raid_interface the driver does not support.
func checkRAIDImpl(d drivers.Declaration, impl string) error {
	ok := d.RAIDInterfaces()
	if contains(ok, impl) {
		return nil
	}
	return &engine.Error{Kind: engine.Invalid, Msg: fmt.Sprintf("raid interface implementation %s is not supported by hardware type %s. It supports %s: agent is software RAID built by the ramdisk, %s",
		implQuote(impl), d.Name, strings.Join(ok, ", "), hardwareRAIDHint(d))}
}

// ifaceName is what an interface implementation's name looks like.
var ifaceName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

func hardwareRAIDHint(d drivers.Declaration) string {
	if hw := d.HardwareRAID(); hw != "" {
		return hw + " the BMC's hardware RAID (out of band, no ramdisk boot), no-raid none."
	}
	return "no-raid none (this driver has no hardware RAID)."
}

// checkRaidForInterface checks a target_raid_config against the node's
// raid_interface: no-raid takes none (Ironic's UnsupportedDriverExtension),
// a hardware RAID interface refuses the software controller and, as
// Ironic's redfish RAID, interface_type scsi.
func checkRaidForInterface(n *fsm.Node, cfg map[string]any) error {
	iface := drivers.RAIDInterfaceOf(n.RaidInterface)
	if iface == drivers.RAIDNone {
		return fmt.Errorf("Driver %s does not support raid (disabled or not implemented): node %s has raid_interface no-raid; set it to agent or to its driver's hardware RAID (baremetal node set %s --raid-interface agent) first", n.Driver, n.Ident(), n.Ident())
	}
	if iface == drivers.RAIDAgent {
		return nil
	}
	lds, _ := cfg["logical_disks"].([]any)
	for i, x := range lds {
		ld, _ := x.(map[string]any)
		if c, _ := ld["controller"].(string); c == "software" {
			return fmt.Errorf("logical disk %d: controller \"software\" is Linux software RAID, which the ramdisk builds with raid_interface agent; node %s has raid_interface %s (the BMC's hardware RAID): name a controller of the BMC's storage (its Id) or leave controller out", i, n.Ident(), iface)
		}
		if t, _ := ld["interface_type"].(string); t == "scsi" {
			return fmt.Errorf("logical disk %d: interface type `scsi` not supported by Redfish RAID (Ironic's); use sas or sata", i)
		}
	}
	return nil
}
