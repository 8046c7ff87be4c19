package api_test

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/coordinator/configdrive"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestConfigDriveAPI: the provision request's configdrive and
// disable_ramdisk through curl, as Ironic answers them: each malformed
// or misplaced one is a 400 (406 for a version) that says what to do,
// and a deploy with a config drive shows it masked, while the Badger
// files never hold it in clear.
func TestConfigDriveAPI(t *testing.T) {
	dataDir := t.TempDir()
	c := testrig.Coordinator(t, testrig.Options{DataDir: dataDir})
	testrig.Site(t, c, "site1", agent.SimOptions{Nodes: 2, StepDuration: 20 * time.Millisecond})
	api := testrig.NewClient(t, c)
	base := api.Base
	put := func(id, ver, body string, want int, wantIn string) {
		t.Helper()
		a := vcurl(t, base, ver, "PUT", "/v1/nodes/"+id+"/states/provision", body)
		if a.status != want || !strings.Contains(a.body, wantIn) {
			t.Fatalf("PUT provision %.120s at %s: %d %.400s; want %d with %q", body, ver, a.status, a.body, want, wantIn)
		}
	}
	id := api.CreateNode("cd1", "site1", nil)
	api.MustVerb(id, "manage", nil)
	if n := api.WaitRest(id, 30*time.Second); n.State != "manageable" {
		t.Fatalf("manage: %+v", n)
	}

	// disable_ramdisk: Ironic's check_allow_disable_ramdisk.
	put(id, "1.87", `{"target":"provide","disable_ramdisk":true}`, 400, "disable_ramdisk is supported only with manual cleaning or servicing")
	put(id, "1.69", `{"target":"clean","disable_ramdisk":true,"clean_steps":[{"interface":"management","step":"fake_reset_bmc"}]}`, 406, "1.70")
	put(id, "1.87", `{"target":"clean","disable_ramdisk":true,"clean_steps":[{"interface":"deploy","step":"erase_devices"}]}`, 400, "requires booting a ramdisk")
	put(id, "1.87", `{"target":"clean","disable_ramdisk":true,"clean_steps":[{"interface":"management","step":"fake_reset_bmc","args":{"delay":0.01}}]}`, 202, "")
	if n := api.WaitRest(id, 30*time.Second); n.State != "manageable" {
		t.Fatalf("out-of-band clean with disable_ramdisk: %+v", n)
	}

	// configdrive only goes with active (and rebuild from 1.35).
	put(id, "1.87", `{"target":"provide","configdrive":{"meta_data":{}}}`, 400, "only supported when setting provision state to active, rebuild")
	put(id, "1.34", `{"target":"provide","configdrive":"H4sI"}`, 400, "provision state to active")
	// Shapes and versions.
	put(id, "1.55", `{"target":"active","configdrive":{"meta_data":{}}}`, 400, "1.56")
	put(id, "1.58", `{"target":"active","configdrive":{"vendor_data":{}}}`, 400, "1.59")
	put(id, "1.87", `{"target":"active","configdrive":{"hostname":"x"}}`, 400, "unknown key")
	put(id, "1.87", `{"target":"active","configdrive":"ftp://example.com/cd"}`, 400, "http:// or https://")
	big := filepath.Join(t.TempDir(), "big.json")
	os.WriteFile(big, []byte(`{"target":"active","configdrive":"`+strings.Repeat("A", 600<<10)+`"}`), 0o600)
	put(id, "1.87", "@"+big, 400, "524288 bytes (512 KiB)") // curl reads the body from the file

	// network_data (1.66) is kept and shown: config drives built from
	// the JSON form use it when they give none.
	nd := `{"links":[{"id":"eth0","type":"phy"}],"networks":[],"services":[]}`
	if a := vcurl(t, base, "1.66", "PATCH", "/v1/nodes/"+id, `[{"op":"add","path":"/network_data","value":`+nd+`}]`); a.status != 200 || !strings.Contains(a.body, `"network_data":{"links":[{"id":"eth0"`) {
		t.Fatalf("PATCH /network_data at 1.66: %d %.300s", a.status, a.body)
	}
	api.MustVerb(id, "provide", nil)
	if n := api.WaitRest(id, 30*time.Second); n.State != "available" {
		t.Fatalf("provide: %+v", n)
	}
	if code := api.Do("PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "add", "path": "/instance_info/image_source", "value": "http://127.0.0.1:1/img"}}, nil); code != 200 {
		t.Fatalf("patch: %d", code)
	}
	iso, err := configdrive.BuildISO(configdrive.Label, map[string][]byte{"openstack/latest/meta_data.json": []byte(`{"hostname":"secret-host"}`)})
	if err != nil {
		t.Fatal(err)
	}
	enc, _ := configdrive.Encode(iso)
	put(id, "1.87", `{"target":"active","configdrive":"`+enc+`"}`, 202, "")
	api.WaitRest(id, 30*time.Second)
	a := vcurl(t, base, "1.87", "GET", "/v1/nodes/"+id, "")
	var n struct {
		InstanceInfo map[string]any `json:"instance_info"`
	}
	json.Unmarshal([]byte(a.body), &n)
	if n.InstanceInfo["configdrive"] != "******" || strings.Contains(a.body, enc[:40]) {
		t.Fatalf("instance_info.configdrive %v; want ****** and the drive nowhere in %.300s", n.InstanceInfo["configdrive"], a.body)
	}
	for _, p := range []string{"/v1/nodes/detail", "/v1/nodes/" + id + "/history"} {
		if a := vcurl(t, base, "1.87", "GET", p, ""); strings.Contains(a.body, enc[20:60]) {
			t.Fatalf("GET %s shows the config drive", p)
		}
	}
	// The coordinator keeps the drive (for a rebuild) encrypted at rest.
	needle := []byte(enc[20:60])
	filepath.WalkDir(dataDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if b, _ := os.ReadFile(p); bytes.Contains(b, needle) {
			t.Errorf("%s holds the config drive in clear", p)
		}
		return nil
	})
}
