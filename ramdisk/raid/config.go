// Package raid builds and deletes software RAID (Linux md) in the ramdisk,
// as IPA's create_configuration and delete_configuration do: a GPT on each
// holder disk, one partition per logical disk on each, an md array
// (metadata 1.2, made with mdadm) per logical disk over those partitions,
// the root volume first; deleting stops every array, zeroes the md
// superblock of every member and the partition tables of the disks.
package raid

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// LogicalDisk is one logical disk of a target_raid_config (Ironic's
// schema), as far as software RAID uses it.
type LogicalDisk struct {
	RaidLevel     string           `json:"raid_level"`
	SizeGB        any              `json:"size_gb"` // whole GiB (number) or "MAX"
	VolumeName    string           `json:"volume_name,omitempty"`
	IsRootVolume  bool             `json:"is_root_volume,omitempty"`
	Controller    string           `json:"controller,omitempty"`
	PhysicalDisks []map[string]any `json:"physical_disks,omitempty"`
}

// Config is a target_raid_config.
type Config struct {
	LogicalDisks []LogicalDisk `json:"logical_disks"`
}

// mdName is what a volume_name may be: md metadata 1.2 keeps 32 bytes of
// name, and mdadm takes it as an argument.
var mdName = regexp.MustCompile(`^[A-Za-z0-9_.][A-Za-z0-9_.-]{0,31}$`)

// Levels are the md levels built, in Ironic's names.
var Levels = map[string]string{"0": "0", "1": "1", "1+0": "10"}

// sizeBytes is the logical disk's partition size, 0 for "MAX".
func (ld LogicalDisk) sizeBytes() (uint64, error) {
	switch v := ld.SizeGB.(type) {
	case string:
		if v == "MAX" {
			return 0, nil
		}
	case float64:
		if v > 0 && v == float64(uint64(v)) {
			return uint64(v) << 30, nil
		}
	}
	return 0, fmt.Errorf("size_gb %v: give a whole number of GiB greater than 0 or \"MAX\"", ld.SizeGB)
}

// Parse reads a target_raid_config from a step's argument and checks it
// as IPA's validate_configuration does for software RAID. It returns the
// software logical disks; none is an error (hardware RAID is the
// driver's raid interface, not the ramdisk's).
func Parse(v any) (Config, error) {
	var c Config
	if v == nil {
		return c, fmt.Errorf("the node has no target_raid_config: set one with PUT /v1/nodes/<node>/states/raid (API 1.12), e.g. {\"logical_disks\": [{\"size_gb\": \"MAX\", \"raid_level\": \"1\", \"controller\": \"software\", \"is_root_volume\": true}]}")
	}
	b, err := json.Marshal(v)
	if err != nil {
		return c, err
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("target_raid_config: %w", err)
	}
	if len(c.LogicalDisks) == 0 {
		return c, fmt.Errorf("target_raid_config has no logical_disks")
	}
	var errs []string
	soft := 0
	for _, ld := range c.LogicalDisks {
		if ld.Controller == "software" {
			soft++
		}
	}
	if soft == 0 {
		return c, fmt.Errorf("target_raid_config has no logical disk with controller \"software\": the ramdisk builds only software RAID (Linux md)")
	}
	if soft != len(c.LogicalDisks) {
		errs = append(errs, "software RAID configuration requires all logical disks to have 'controller'='software'")
	}
	if len(c.LogicalDisks) > 2 {
		errs = append(errs, "software RAID configuration requires one or two logical disks")
	}
	if c.LogicalDisks[0].RaidLevel != "1" {
		errs = append(errs, "software RAID configuration requires RAID-1 for the first logical disk")
	}
	maxes, roots := 0, 0
	for i, ld := range c.LogicalDisks {
		if _, ok := Levels[ld.RaidLevel]; !ok {
			errs = append(errs, fmt.Sprintf("logical disk %d: RAID level %q is not built here (0, 1, 1+0)", i, ld.RaidLevel))
		}
		n, err := ld.sizeBytes()
		if err != nil {
			errs = append(errs, fmt.Sprintf("logical disk %d: %v", i, err))
		}
		if err == nil && n == 0 {
			maxes++
		}
		if ld.IsRootVolume {
			roots++
		}
		if ld.VolumeName != "" && !mdName.MatchString(ld.VolumeName) {
			errs = append(errs, fmt.Sprintf("logical disk %d: volume_name %q is not a valid md array name: 1 to 32 letters, digits, '.', '_' or '-', not starting with '-'", i, ld.VolumeName))
		}
		if len(ld.PhysicalDisks) == 1 {
			errs = append(errs, fmt.Sprintf("logical disk %d: physical_disks needs at least 2 root device hints", i))
		}
	}
	if maxes > 1 {
		errs = append(errs, "software RAID can have only one RAID device with size 'MAX'")
	}
	if roots > 1 {
		errs = append(errs, "software RAID configuration allows only one logical disk to be marked as is_root_volume")
	}
	if len(errs) > 0 {
		return c, fmt.Errorf("could not validate software RAID config: %s", strings.Join(errs, "; "))
	}
	return c, nil
}
