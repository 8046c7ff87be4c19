package api_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/bmedge/bmedge/coordinator/api"
)

// TestValidateRaidConfig: Ironic's RAID schema and IPA's software RAID
// rules, each refusal saying what is wrong.
func TestValidateRaidConfig(t *testing.T) {
	for _, c := range []struct{ cfg, want string }{
		{`{"logical_disks": [{"size_gb": 100, "raid_level": "1", "controller": "software", "is_root_volume": true}]}`, ""},
		{`{"logical_disks": [{"size_gb": 10, "raid_level": "1", "controller": "software", "physical_disks": [{"name": "/dev/vda"}, {"name": "/dev/vdb"}]}, {"size_gb": "MAX", "raid_level": "1+0", "controller": "software"}]}`, ""},
		{`{"logical_disks": [{"size_gb": "MAX", "raid_level": "5", "controller": "RAID.Integrated.1-1", "physical_disks": ["Disk.Bay.0", "Disk.Bay.1", "Disk.Bay.2"]}]}`, ""},
		{`{}`, "'logical_disks' is a required property"},
		{`{"logical_disks": []}`, "too short"},
		{`{"logical_disks": [{"size_gb": 1}]}`, "'raid_level' is a required property"},
		{`{"logical_disks": [{"size_gb": 1, "raid_level": "7"}]}`, "raid_level"},
		{`{"logical_disks": [{"size_gb": -1, "raid_level": "1"}]}`, "size_gb -1"},
		{`{"logical_disks": [{"size_gb": 1.5, "raid_level": "1"}]}`, "size_gb 1.5"},
		{`{"logical_disks": [{"size_gb": 1, "raid_level": "1", "wat": 1}]}`, `Additional properties are not allowed ("wat" was unexpected)`},
		{`{"logical_disks": [{"size_gb": 1, "raid_level": "1", "physical_disks": ["a", "b"]}]}`, "'controller' is a dependency of 'physical_disks'"},
		{`{"logical_disks": [{"size_gb": 1, "raid_level": "1", "controller": "c", "physical_disks": [{"name": "/dev/sda"}]}]}`, "too short"},
		{`{"logical_disks": [{"size_gb": 1, "raid_level": "1", "is_root_volume": "yes"}]}`, "is not of type 'boolean'"},
		{`{"logical_disks": [{"size_gb": 1, "raid_level": "1", "disk_type": "tape"}]}`, "disk_type"},
		{`{"logical_disks": [{"size_gb": 1, "raid_level": "1", "is_root_volume": true}, {"size_gb": 1, "raid_level": "0", "is_root_volume": true}]}`, "more than one root volume. 2 root volumes"},
		{`{"logical_disks": [{"size_gb": 1, "raid_level": "1", "controller": "software"}, {"size_gb": 1, "raid_level": "6", "controller": "software"}]}`, "RAID 5 and 6 are not offered"},
		{`{"logical_disks": [{"size_gb": 1, "raid_level": "0", "controller": "software"}]}`, "RAID-1 for the first logical disk"},
		{`{"logical_disks": [{"size_gb": "MAX", "raid_level": "1", "controller": "software"}, {"size_gb": "MAX", "raid_level": "0", "controller": "software"}]}`, "only one RAID device with size 'MAX'"},
		{`{"logical_disks": [{"size_gb": 1, "raid_level": "1", "controller": "software"}, {"size_gb": 1, "raid_level": "0"}]}`, "all logical disks to have 'controller'='software'"},
		{`{"logical_disks": [{"size_gb": 1, "raid_level": "1", "controller": "software"}, {"size_gb": 1, "raid_level": "0", "controller": "software"}, {"size_gb": 1, "raid_level": "0", "controller": "software"}]}`, "one or two logical disks"},
		{`{"logical_disks": [{"size_gb": 1, "raid_level": "1", "controller": "software", "volume_name": "a"}, {"size_gb": 1, "raid_level": "0", "controller": "software", "volume_name": "a"}]}`, "duplicate software RAID device name a"},
		{`{"logical_disks": [{"size_gb": 1, "raid_level": "1", "controller": "software", "physical_disks": ["/dev/sda", "/dev/sdb"]}]}`, "root device hints"},
		{`{"logical_disks": [{"size_gb": 1, "raid_level": "1", "controller": "software", "number_of_physical_disks": 2}]}`, "number_of_physical_disks is not supported for software RAID"},
		{`{"logical_disks": [{"size_gb": 1, "raid_level": "1", "controller": "software", "volume_name": "--zero"}]}`, "not a valid md array name"},
		{`{"logical_disks": [{"size_gb": 1, "raid_level": "1", "controller": "software", "volume_name": "a234567890123456789012345678901234"}]}`, "not a valid md array name"},
		{`{"logical_disks": [{"size_gb": 1, "raid_level": "1", "controller": "software", "volume_name": "root-1.a_b"}]}`, ""},
	} {
		dec := json.NewDecoder(strings.NewReader(c.cfg))
		dec.UseNumber()
		var cfg map[string]any
		if err := dec.Decode(&cfg); err != nil {
			t.Fatal(err)
		}
		_, err := api.ValidateRaidConfig(cfg)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v; want it accepted", c.cfg, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v; want an error with %q", c.cfg, err, c.want)
		}
	}
}

// TestRaidBaremetalCLI: Ironic's own client sets, shows and unsets
// target_raid_config (baremetal node set --target-raid-config), and
// reports the API's refusal of a software RAID 5, and lists the logical
// disk properties (baremetal driver raid property list); curl sees the
// 406 below API 1.12 and the 404s of an unknown node and driver.
func TestRaidBaremetalCLI(t *testing.T) {
	requireTool(t, baremetalPath, "python3-ironicclient")
	r := newVersionRig(t)
	id := r.node("site1", "manageable")
	bm := newBMCLI(t, r.api.Base)
	cfg := `{"logical_disks": [{"size_gb": 1, "raid_level": "1", "controller": "software", "is_root_volume": true}, {"size_gb": "MAX", "raid_level": "0", "controller": "software", "volume_name": "data"}]}`
	bm.ok("--os-baremetal-api-version", "1.12", "node", "set", id, "--target-raid-config", cfg)
	var shown struct {
		Target map[string]any `json:"target_raid_config"`
		Raid   map[string]any `json:"raid_config"`
	}
	if bm.json(&shown, "--os-baremetal-api-version", "1.12", "node", "show", id, "-f", "json", "-c", "target_raid_config", "-c", "raid_config") {
		lds, _ := shown.Target["logical_disks"].([]any)
		if len(lds) != 2 || shown.Raid == nil || len(shown.Raid) != 0 {
			t.Errorf("after set: target_raid_config %v raid_config %v", shown.Target, shown.Raid)
		}
	}
	bad := `{"logical_disks": [{"size_gb": 1, "raid_level": "1", "controller": "software"}, {"size_gb": "MAX", "raid_level": "5", "controller": "software"}]}`
	if res := bm.run("--os-baremetal-api-version", "1.12", "node", "set", id, "--target-raid-config", bad); res.code == 0 || !strings.Contains(res.stderr, "RAID 5 and 6 are not offered") {
		t.Errorf("set a software RAID 5: exit %d, stderr %s; want a refusal naming RAID 5", res.code, res.stderr)
	}
	bm.ok("--os-baremetal-api-version", "1.12", "node", "set", id, "--target-raid-config", "{}")
	var unset struct {
		Target map[string]any `json:"target_raid_config"`
	}
	if bm.json(&unset, "--os-baremetal-api-version", "1.12", "node", "show", id, "-f", "json", "-c", "target_raid_config") && (unset.Target == nil || len(unset.Target) != 0) {
		t.Errorf("after unset: target_raid_config %v; want {}", unset.Target)
	}
	var props []map[string]string
	if bm.json(&props, "--os-baremetal-api-version", "1.12", "driver", "raid", "property", "list", "fake", "-f", "json") {
		found := map[string]bool{}
		for _, p := range props {
			found[p["Property"]] = strings.HasSuffix(p["Description"], ".")
		}
		if len(props) != 10 || !found["raid_level"] || !found["size_gb"] || !found["physical_disks"] {
			t.Errorf("driver raid property list: %v", props)
		}
	}
	if a := vcurl(t, r.api.Base, "1.11", "GET", "/v1/drivers/fake/raid/logical_disk_properties", ""); a.status != 406 {
		t.Errorf("logical_disk_properties at 1.11: %d %s; want 406", a.status, a.body)
	}
	if a := vcurl(t, r.api.Base, "1.12", "GET", "/v1/drivers/nope/raid/logical_disk_properties", ""); a.status != 404 {
		t.Errorf("logical_disk_properties of an unknown driver: %d %s; want 404", a.status, a.body)
	}
	if a := vcurl(t, r.api.Base, "1.11", "PUT", "/v1/nodes/"+id+"/states/raid", cfg); a.status != 406 {
		t.Errorf("PUT states/raid at 1.11: %d %s; want 406", a.status, a.body)
	}
	if a := vcurl(t, r.api.Base, "1.12", "PUT", "/v1/nodes/no-such-node/states/raid", cfg); a.status != 404 {
		t.Errorf("PUT states/raid of an unknown node: %d %s; want 404", a.status, a.body)
	}
	if a := vcurl(t, r.api.Base, "1.12", "PUT", "/v1/nodes/"+id+"/states/raid", `[1]`); a.status != 400 || !strings.Contains(a.body, "must be a JSON object") {
		t.Errorf("PUT states/raid with a list: %d %s; want 400", a.status, a.body)
	}
}
