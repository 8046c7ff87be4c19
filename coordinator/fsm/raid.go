package fsm

import (
	"maps"
	"time"
)

// raidDone stores what an in-band RAID step reported, as Ironic's
// update_raid_info: after create_configuration the node's raid_config is
// the step's raid_config with last_updated, and a root volume of a fixed
// size sets properties/local_gb; after delete_configuration raid_config
// is empty and properties/root_device goes (it may have named an array).
// New maps, never the old ones changed in place.
func raidDone(n *Node, step string, data map[string]any, now time.Time) {
	switch step {
	case "create_configuration", "apply_configuration":
		rc, ok := data["raid_config"].(map[string]any)
		if !ok {
			return
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
}
