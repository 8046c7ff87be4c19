package fsm

import (
	"encoding/json"
	"fmt"
	"maps"
	"time"

	"github.com/bmedge/bmedge/drivers"
)

// raidDone stores what an in-band RAID step reported, as Ironic's
// update_raid_info: after create_configuration the node's raid_config is
// the step's raid_config with last_updated, and a root volume of a fixed
// size sets properties/local_gb; after delete_configuration raid_config
// is empty and properties/root_device goes (it may have named an array).
// New maps, never the old ones changed in place. A raid_config over the
// bounds (drivers.MaxRAIDVolumes logical disks, drivers.MaxRAIDConfigBytes
// encoded) is not stored: the error says so, for the node's history.
func raidDone(n *Node, step string, data map[string]any, now time.Time) error {
	switch step {
	case "create_configuration", "apply_configuration":
		rc, ok := data["raid_config"].(map[string]any)
		if !ok {
			return nil
		}
		if lds, _ := rc["logical_disks"].([]any); len(lds) > drivers.MaxRAIDVolumes {
			return fmt.Errorf("raid_config not stored: the step reported %d logical disks, more than the %d a node holds", len(lds), drivers.MaxRAIDVolumes)
		}
		if b, err := json.Marshal(rc); err != nil || len(b) > drivers.MaxRAIDConfigBytes {
			return fmt.Errorf("raid_config not stored: the step reported %d bytes of it, more than the %d a node holds", len(b), drivers.MaxRAIDConfigBytes)
		}
		cur := maps.Clone(rc)
		cur["last_updated"] = now.UTC().Format("2006-01-02 15:04:05.000000")
		n.RaidConfig = cur
		lds, _ := rc["logical_disks"].([]any)
		for _, x := range lds {
			ld, _ := x.(map[string]any)
			if root, _ := ld["is_root_volume"].(bool); !root {
				continue
			}
			if gb, ok := ld["size_gb"].(float64); ok {
				props := maps.Clone(n.Properties)
				if props == nil {
					props = map[string]any{}
				}
				props["local_gb"] = int64(gb)
				n.Properties = props
			}
		}
	case "delete_configuration":
		n.RaidConfig = nil
		if _, ok := n.Properties["root_device"]; ok {
			props := maps.Clone(n.Properties)
			delete(props, "root_device")
			n.Properties = props
		}
	}
	return nil
}
