package systest

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/drivers/redfish/vbmc"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// sushyVolume is one volume as python3-sushy reads it from the BMC.
type sushyVolume struct {
	ID            string   `json:"id"`
	RAIDType      string   `json:"raid_type"`
	CapacityBytes int64    `json:"capacity_bytes"`
	Drives        []string `json:"drives"`
}

// TestHardwareRAIDThroughTheEdgeAgent: a redfish node behind the virtual
// Redfish BMC, its raid_interface set to redfish, with a target_raid_config
// of one RAID-1 root volume: a manual clean with raid.create_configuration
// runs out of band at the edge agent (the machine is never started: no
// ramdisk boot), the node's raid_config shows the volume and
// python3-sushy, an independent client, lists it on the BMC;
// raid.delete_configuration deletes it (sushy finds none) and empties
// raid_config.
func TestHardwareRAIDThroughTheEdgeAgent(t *testing.T) {
	const py = "/usr/bin/python3" // Debian's, which sees python3-sushy
	if err := exec.Command(py, "-c", "import sushy").Run(); err != nil {
		if os.Getenv("BM_REQUIRE_ALL") == "1" {
			t.Fatalf("python3-sushy is not usable with %s (%v); run scripts/install-test-deps.sh", py, err)
		}
		t.Skipf("python3-sushy is not usable with %s (%v); run scripts/install-test-deps.sh (make test does)", py, err)
	}
	script, err := filepath.Abs("testdata/sushy_volumes.py")
	if err != nil {
		t.Fatal(err)
	}
	m := vbmc.NewMemoryMachine(vbmc.MemoryOptions{})
	b, err := vbmc.New(vbmc.Config{Username: "root", Password: "calvin", Systems: []vbmc.SystemConfig{{Machine: m}}})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := vbmc.Serve(b, vbmc.ServeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(); b.Close() })
	sushyVolumes := func() []sushyVolume {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, py, script, srv.URL, "root", "calvin")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		var vols []sushyVolume
		if err != nil || json.Unmarshal(out, &vols) != nil {
			t.Fatalf("sushy: %v\n%s\n%s", err, out, stderr.String())
		}
		return vols
	}

	c := testrig.Coordinator(t, testrig.Options{})
	cl := testrig.NewClient(t, c)
	testrig.Site(t, c, "rack1", agent.SimOptions{}) // real mode: no simulated nodes
	info := map[string]any{"redfish_address": srv.URL, "redfish_username": "root", "redfish_password": "calvin"}
	var n testrig.Node
	if code := cl.Do("POST", "/v1/nodes", map[string]any{"name": "hwraid", "driver": "redfish", "conductor_group": "rack1", "driver_info": info}, &n); code != 201 {
		t.Fatalf("create: %d", code)
	}
	cl.MustVerb(n.UUID, "manage", nil)
	if got := cl.WaitRest(n.UUID, 60*time.Second); got.State != "manageable" {
		t.Fatalf("manage: %q, last_error %q", got.State, got.LastError)
	}
	if code := cl.Do("PATCH", "/v1/nodes/"+n.UUID, []map[string]any{{"op": "replace", "path": "/raid_interface", "value": "redfish"}}, nil); code != 200 {
		t.Fatalf("PATCH raid_interface redfish: %d", code)
	}
	target := map[string]any{"logical_disks": []any{map[string]any{"size_gb": 50, "raid_level": "1", "is_root_volume": true}}}
	if code := cl.Do("PUT", "/v1/nodes/"+n.UUID+"/states/raid", target, nil); code != 204 {
		t.Fatalf("PUT states/raid: %d", code)
	}
	var steps struct {
		Steps []struct {
			Interface       string `json:"interface"`
			Step            string `json:"step"`
			RequiresRamdisk bool   `json:"requires_ramdisk"`
		} `json:"steps"`
	}
	// 202 until a ramdisk reported its in-band steps; the driver's are listed.
	if code := cl.Do("GET", "/v1/nodes/"+n.UUID+"/cleaning/steps", nil, &steps); code != 200 && code != 202 {
		t.Fatalf("cleaning/steps: %d", code)
	}
	listed := 0
	for _, s := range steps.Steps {
		if s.Interface == "raid" && s.Step == "create_configuration" {
			listed++
			if s.RequiresRamdisk {
				t.Errorf("cleaning/steps lists raid.create_configuration as needing the ramdisk for raid_interface redfish")
			}
		}
	}
	if listed != 1 {
		t.Errorf("cleaning/steps lists raid.create_configuration %d times; want once", listed)
	}
	raidConfig := func() []map[string]any {
		t.Helper()
		var doc struct {
			RaidConfig struct {
				LogicalDisks []map[string]any `json:"logical_disks"`
			} `json:"raid_config"`
			Properties map[string]any `json:"properties"`
		}
		if code := cl.Do("GET", "/v1/nodes/"+n.UUID, nil, &doc); code != 200 {
			t.Fatalf("GET node: %d", code)
		}
		return doc.RaidConfig.LogicalDisks
	}
	clean := func(step string) {
		t.Helper()
		cl.MustVerb(n.UUID, "clean", map[string]any{"clean_steps": []map[string]any{{"interface": "raid", "step": step}}})
		if got := cl.WaitRest(n.UUID, 60*time.Second); got.State != "manageable" || got.LastError != "" {
			t.Fatalf("clean with raid.%s: %q, last_error %q", step, got.State, got.LastError)
		}
	}

	clean("create_configuration")
	lds := raidConfig()
	if len(lds) != 1 || lds[0]["raid_level"] != "1" || lds[0]["size_gb"] != 50.0 || lds[0]["is_root_volume"] != true || lds[0]["controller"] != "RAID.Integrated.1" {
		t.Fatalf("raid_config after create_configuration: %v", lds)
	}
	vols := sushyVolumes()
	if len(vols) != 1 || vols[0].RAIDType != "RAID1" || vols[0].CapacityBytes != 50<<30 || len(vols[0].Drives) != 2 || vols[0].ID != lds[0]["id"] {
		t.Fatalf("sushy reads %+v from the BMC; want the RAID1 volume of 50 GiB on 2 drives that raid_config shows (%v)", vols, lds)
	}
	if s := m.Starts(); len(s) != 0 || m.PoweredOn() {
		t.Fatalf("the machine was started %d times (powered on %v): hardware RAID needs no ramdisk boot", len(s), m.PoweredOn())
	}

	clean("delete_configuration")
	if vols := sushyVolumes(); len(vols) != 0 {
		t.Fatalf("sushy still reads %+v from the BMC after delete_configuration", vols)
	}
	if lds := raidConfig(); len(lds) != 0 {
		t.Fatalf("raid_config after delete_configuration: %v", lds)
	}
}
