package redfish_test

import (
	"encoding/json"
	"testing"
)

// TestRunRAIDStepReportsRaidConfig: the hardware RAID steps report the
// volumes read back as raid_config in Ironic's shape (id, name,
// controller, size_gb, raid_level, physical_disks; the root volume
// created marked is_root_volume); create_configuration without the
// node's target_raid_config says how to set one; delete leaves none.
func TestRunRAIDStepReportsRaidConfig(t *testing.T) {
	r := newRig(t, rigOptions{})
	d := r.driver(t, r.oobOptions())
	c := ctx(t)
	if _, err := d.RunRAIDStep(c, "raid.create_configuration", nil); err == nil {
		t.Fatal("create_configuration without target_raid_config succeeded")
	} else {
		mustContain(t, err, "PUT /v1/nodes/{node}/states/raid")
	}
	target := map[string]any{"logical_disks": []any{
		map[string]any{"size_gb": 20.0, "raid_level": "0", "volume_name": "scratch"},
		map[string]any{"size_gb": 40.0, "raid_level": "1", "is_root_volume": true},
	}}
	rc, err := d.RunRAIDStep(c, "raid.create_configuration", map[string]any{"target_raid_config": target})
	if err != nil {
		t.Fatal(err)
	}
	js, _ := json.Marshal(rc)
	var got struct {
		LogicalDisks []map[string]any `json:"logical_disks"`
	}
	if json.Unmarshal(js, &got) != nil || len(got.LogicalDisks) != 2 {
		t.Fatalf("raid_config %s", js)
	}
	root, other := got.LogicalDisks[0], got.LogicalDisks[1]
	if root["raid_level"] != "1" || root["size_gb"] != 40.0 || root["is_root_volume"] != true || root["controller"] != "RAID.Integrated.1" ||
		root["id"] == "" || len(root["physical_disks"].([]any)) != 2 {
		t.Fatalf("root volume %v (raid_config %s)", root, js)
	}
	if other["raid_level"] != "0" || other["name"] != "scratch" || other["is_root_volume"] != nil {
		t.Fatalf("second volume %v", other)
	}
	rc, err = d.RunRAIDStep(c, "raid.delete_configuration", nil)
	if err != nil {
		t.Fatal(err)
	}
	if lds, _ := rc["logical_disks"].([]any); len(lds) != 0 {
		t.Fatalf("after delete: %v", rc)
	}
	if vols, _ := r.bmc.Volumes("1"); len(vols) != 0 {
		t.Fatalf("the BMC still has %+v", vols)
	}
}
