package drivers

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// Out-of-band firmware, RAID and BIOS operations a BMC driver may offer
// besides drivers.BMC, in Ironic's shapes: the firmware interface's
// components and settings, target_raid_config's logical disks, and the
// BIOS settings with their registry fields (API 1.74).

// FirmwareComponent is one installed firmware: "bios", "bmc" or
// "nic:<id>", and the version the BMC reports.
type FirmwareComponent struct {
	Component string `json:"component"`
	Version   string `json:"current_version"`
}

// FirmwareUpdate is one entry of firmware.update's settings argument.
type FirmwareUpdate struct {
	Component string `json:"component"`
	URL       string `json:"url"`
	// Checksum is "<algorithm>:<hex>" or a bare hex digest (md5, sha1,
	// sha256 or sha512 by its length); empty means not checked.
	Checksum string `json:"checksum,omitempty"`
	// Wait is Ironic's optional pause, in seconds, after the update.
	Wait int `json:"wait,omitempty"`
}

// FirmwareBMC updates and reads firmware.
type FirmwareBMC interface {
	FirmwareComponents(ctx context.Context) ([]FirmwareComponent, error)
	// UpdateFirmware applies the updates in order, each with the reset
	// it needs, and returns the components read back afterwards.
	UpdateFirmware(ctx context.Context, updates []FirmwareUpdate) ([]FirmwareComponent, error)
}

// LogicalDisk is one logical disk of Ironic's target_raid_config.
type LogicalDisk struct {
	// SizeGB is the size in GiB; 0 with SizeMax means "MAX".
	SizeGB                int      `json:"size_gb"`
	SizeMax               bool     `json:"-"`
	RAIDLevel             string   `json:"raid_level"`
	IsRootVolume          bool     `json:"is_root_volume,omitempty"`
	VolumeName            string   `json:"volume_name,omitempty"`
	Controller            string   `json:"controller,omitempty"`
	PhysicalDisks         []string `json:"physical_disks,omitempty"`
	NumberOfPhysicalDisks int      `json:"number_of_physical_disks,omitempty"`
	DiskType              string   `json:"disk_type,omitempty"`
	InterfaceType         string   `json:"interface_type,omitempty"`
	SharePhysicalDisks    bool     `json:"share_physical_disks,omitempty"`
}

// Volume is a RAID volume as the BMC reports it, in raid_config's shape.
type Volume struct {
	ID            string   `json:"volume_id"`
	Name          string   `json:"volume_name"`
	RAIDLevel     string   `json:"raid_level"`
	SizeGB        int      `json:"size_gb"`
	Controller    string   `json:"controller"`
	PhysicalDisks []string `json:"physical_disks"`
	IsRootVolume  bool     `json:"is_root_volume,omitempty"`
}

// RAIDBMC manages hardware RAID volumes.
type RAIDBMC interface {
	RAIDVolumes(ctx context.Context) ([]Volume, error)
	// CreateRAID creates the logical disks (after deleting every volume
	// when deleteExisting) and returns the volumes created.
	CreateRAID(ctx context.Context, disks []LogicalDisk, deleteExisting bool) ([]Volume, error)
	DeleteRAID(ctx context.Context) error
}

// BIOSSetting is one BIOS attribute with its registry fields, as
// Ironic's bios resource at API 1.74.
type BIOSSetting struct {
	Name            string   `json:"name"`
	Value           any      `json:"value"`
	AttributeType   string   `json:"attribute_type,omitempty"`
	AllowableValues []string `json:"allowable_values,omitempty"`
	LowerBound      *int64   `json:"lower_bound,omitempty"`
	UpperBound      *int64   `json:"upper_bound,omitempty"`
	MinLength       *int64   `json:"min_length,omitempty"`
	MaxLength       *int64   `json:"max_length,omitempty"`
	ReadOnly        *bool    `json:"read_only,omitempty"`
	ResetRequired   *bool    `json:"reset_required,omitempty"`
	Unique          *bool    `json:"unique,omitempty"`
}

// BIOSReader reads the BIOS settings.
type BIOSReader interface {
	BIOSSettings(ctx context.Context) ([]BIOSSetting, error)
}

// RAID levels of Ironic's target_raid_config.
var RAIDLevels = []string{"0", "1", "2", "5", "6", "1+0", "5+0", "6+0"}

// Argument names of raid.apply_configuration, Ironic's (with
// ArgRaidCreateRoot and ArgRaidCreateNonroot).
const (
	ArgRaidConfig     = "raid_config"
	ArgDeleteExisting = "delete_existing"
)

var hexRE = regexp.MustCompile(`^[0-9a-fA-F]+$`)

// ParseFirmwareSettings reads firmware.update's settings argument:
// [{"component": "bios"|"bmc"|"nic:<id>", "url": ..., "checksum": ..., "wait": N}].
func ParseFirmwareSettings(raw any) ([]FirmwareUpdate, error) {
	const usage = `a list of {"component": "bios"|"bmc"|"nic:<id>", "url": "http(s)://...", "checksum": "sha256:<hex>" (optional), "wait": seconds (optional)}`
	items, ok := raw.([]any)
	if !ok || len(items) == 0 {
		return nil, fmt.Errorf("step firmware.update: argument settings must be a non-empty list: %s", usage)
	}
	var out []FirmwareUpdate
	for i, it := range items {
		m, ok := it.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("step firmware.update: settings[%d] must be an object: %s", i, usage)
		}
		var u FirmwareUpdate
		for k, v := range m {
			switch k {
			case "component":
				u.Component, _ = v.(string)
			case "url":
				u.URL, _ = v.(string)
			case "checksum":
				u.Checksum, _ = v.(string)
				if u.Checksum == "" {
					return nil, fmt.Errorf("step firmware.update: settings[%d].checksum must be a string such as sha256:<hex>", i)
				}
			case "wait":
				f, ok := v.(float64)
				if !ok || f < 1 || f != float64(int(f)) || f > 3600 {
					return nil, fmt.Errorf("step firmware.update: settings[%d].wait must be whole seconds from 1 to 3600, not %v", i, v)
				}
				u.Wait = int(f)
			default:
				return nil, fmt.Errorf("step firmware.update: settings[%d] has an unknown key %q; %s", i, k, usage)
			}
		}
		if u.Component != "bios" && u.Component != "bmc" && !(strings.HasPrefix(u.Component, "nic:") && len(u.Component) > 4) {
			return nil, fmt.Errorf("step firmware.update: settings[%d].component %q is not bios, bmc or nic:<id>", i, m["component"])
		}
		if !strings.HasPrefix(u.URL, "http://") && !strings.HasPrefix(u.URL, "https://") {
			return nil, fmt.Errorf("step firmware.update: settings[%d].url must be an http or https URL", i)
		}
		if u.Checksum != "" {
			if _, _, err := SplitChecksum(u.Checksum); err != nil {
				return nil, fmt.Errorf("step firmware.update: settings[%d].checksum: %v", i, err)
			}
		}
		out = append(out, u)
	}
	return out, nil
}

// SplitChecksum returns a checksum's algorithm and lower-case hex digest.
func SplitChecksum(c string) (algo, digest string, err error) {
	algo, digest, ok := strings.Cut(c, ":")
	if !ok {
		digest = c
		algo = map[int]string{32: "md5", 40: "sha1", 64: "sha256", 128: "sha512"}[len(c)]
	}
	want := map[string]int{"md5": 32, "sha1": 40, "sha256": 64, "sha512": 128}[algo]
	if want == 0 || len(digest) != want || !hexRE.MatchString(digest) {
		return "", "", fmt.Errorf("%q is not <algorithm>:<hex> with md5, sha1, sha256 or sha512, nor a bare hex digest of one", c)
	}
	return algo, strings.ToLower(digest), nil
}

// ParseTargetRAIDConfig reads a target_raid_config (or raid_config
// argument) in Ironic's schema: {"logical_disks": [...]}.
func ParseTargetRAIDConfig(raw any) ([]LogicalDisk, error) {
	m, ok := raw.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("the RAID configuration must be an object {\"logical_disks\": [...]}, not %T", raw)
	}
	for k := range m {
		if k != "logical_disks" {
			return nil, fmt.Errorf("the RAID configuration has an unknown key %q; it has logical_disks only", k)
		}
	}
	list, ok := m["logical_disks"].([]any)
	if !ok || len(list) == 0 {
		return nil, fmt.Errorf("the RAID configuration needs a non-empty logical_disks list")
	}
	var out []LogicalDisk
	roots := 0
	for i, it := range list {
		d, ok := it.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("logical_disks[%d] must be an object", i)
		}
		var ld LogicalDisk
		at := fmt.Sprintf("logical_disks[%d]", i)
		for k, v := range d {
			var bad bool
			switch k {
			case "size_gb":
				if s, ok := v.(string); ok && s == "MAX" {
					ld.SizeMax = true
				} else if f, ok := v.(float64); ok && f >= 1 && f == float64(int(f)) {
					ld.SizeGB = int(f)
				} else {
					return nil, fmt.Errorf("%s.size_gb must be a whole number of GiB (at least 1) or \"MAX\", not %v", at, v)
				}
			case "raid_level":
				ld.RAIDLevel, _ = v.(string)
				bad = !contains(RAIDLevels, ld.RAIDLevel)
				if bad {
					return nil, fmt.Errorf("%s.raid_level %v is not one of %s", at, v, strings.Join(RAIDLevels, ", "))
				}
			case "is_root_volume":
				ld.IsRootVolume, bad = v.(bool)
				bad = !bad
			case "share_physical_disks":
				ld.SharePhysicalDisks, bad = v.(bool)
				bad = !bad
			case "volume_name":
				ld.VolumeName, _ = v.(string)
				bad = ld.VolumeName == ""
			case "controller":
				ld.Controller, _ = v.(string)
				bad = ld.Controller == ""
			case "disk_type":
				ld.DiskType, _ = v.(string)
				bad = ld.DiskType != "hdd" && ld.DiskType != "ssd"
			case "interface_type":
				ld.InterfaceType, _ = v.(string)
				bad = ld.InterfaceType != "sata" && ld.InterfaceType != "scsi" && ld.InterfaceType != "sas"
			case "number_of_physical_disks":
				f, ok := v.(float64)
				bad = !ok || f < 1 || f != float64(int(f))
				ld.NumberOfPhysicalDisks = int(f)
			case "physical_disks":
				l, ok := v.([]any)
				bad = !ok || len(l) == 0
				for _, p := range l {
					s, ok := p.(string)
					if !ok || s == "" {
						bad = true
					}
					ld.PhysicalDisks = append(ld.PhysicalDisks, s)
				}
			default:
				known := []string{"size_gb", "raid_level", "is_root_volume", "volume_name", "controller", "physical_disks",
					"number_of_physical_disks", "disk_type", "interface_type", "share_physical_disks"}
				sort.Strings(known)
				return nil, fmt.Errorf("%s has an unknown key %q; known: %s", at, k, strings.Join(known, ", "))
			}
			if bad {
				return nil, fmt.Errorf("%s.%s has a bad value %v (Ironic's target_raid_config schema)", at, k, v)
			}
		}
		if ld.RAIDLevel == "" || (!ld.SizeMax && ld.SizeGB == 0) {
			return nil, fmt.Errorf("%s needs size_gb and raid_level", at)
		}
		if ld.IsRootVolume {
			roots++
		}
		out = append(out, ld)
	}
	if roots > 1 {
		return nil, fmt.Errorf("the RAID configuration has %d root volumes; at most one logical disk may set is_root_volume", roots)
	}
	return out, nil
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}
