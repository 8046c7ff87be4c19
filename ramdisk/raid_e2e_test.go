package ramdisk_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/coordinator/testrig"
)

// raidLab is a QEMU lab whose automated cleaning runs the software RAID
// steps as Ironic's operators set them up ([deploy]
// delete_configuration_priority and create_configuration_priority):
// raid.delete_configuration before the erase steps, raid.create_configuration
// after them, so that the node is deployed onto its arrays.
func raidLab(t *testing.T, kernel, initrd string) *testrig.Client {
	t.Helper()
	o := testrig.Options{Machine: fsm.Config{WaitTimeout: 3 * time.Minute,
		PriorityOverrides: map[string]int{"raid.delete_configuration": 100, "raid.create_configuration": 5}}}
	c := testrig.Coordinator(t, o)
	cl := testrig.NewClient(t, c)
	var creds agent.Credentials
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "lab"}, &creds); code != 201 {
		t.Fatalf("site: %d", code)
	}
	sb := agent.SiteBrokerOptions{Listen: "127.0.0.1:0", URL: "mqtt://10.0.2.2"}
	testrig.StartAgentConfig(t, creds, agent.Config{SiteBroker: sb, QEMU: agent.QEMUOptions{Kernel: kernel, Initrd: initrd}})
	return cl
}

// curlAt is curl at an API version: the independent client of the RAID
// API checks.
func curlAt(t *testing.T, cl *testrig.Client, version, method, path, body string) (int, string) {
	t.Helper()
	args := []string{"-sS", "-o", "-", "-w", "\n%{http_code}", "-X", method, "-H", "Content-Type: application/json",
		"-H", "X-OpenStack-Ironic-API-Version: " + version, cl.Base + path}
	if body != "" {
		args = append(args, "--data", body)
	}
	out, err := exec.Command("curl", args...).Output()
	if err != nil {
		t.Fatalf("curl %s %s: %v", method, path, err)
	}
	s := strings.TrimSpace(string(out))
	i := strings.LastIndexByte(s, '\n')
	code := 0
	_ = json.Unmarshal([]byte(s[i+1:]), &code)
	return code, s[:max(i, 0)]
}

// gptParts reads the (start, size) in bytes of the used GPT entries of
// a disk image, nil when it has no GPT.
func gptParts(t *testing.T, path string) [][2]int64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 34*512)
	if _, err := io.ReadFull(f, buf); err != nil {
		t.Fatal(err)
	}
	if string(buf[512:520]) != "EFI PART" {
		return nil
	}
	var out [][2]int64
	for i := 0; i < 128; i++ {
		e := buf[1024+i*128:]
		first, last := binary.LittleEndian.Uint64(e[32:]), binary.LittleEndian.Uint64(e[40:])
		if first == 0 {
			continue
		}
		out = append(out, [2]int64{int64(first * 512), int64((last - first + 1) * 512)})
	}
	return out
}

// examine runs the host's mdadm --examine on the first 4 MiB of the
// region [off, off+4 MiB) of a disk image (copied to a file: mdadm reads
// regular files) and returns its output and whether it found a superblock.
func examine(t *testing.T, disk string, off int64) (string, bool) {
	t.Helper()
	src, err := os.Open(disk)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	part := filepath.Join(t.TempDir(), "member")
	dst, err := os.Create(part)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, io.NewSectionReader(src, off, 4<<20)); err != nil {
		t.Fatal(err)
	}
	dst.Close()
	out, err := exec.Command("mdadm", "--examine", part).CombinedOutput()
	return string(out), err == nil
}

// TestQEMUSoftwareRAID: a QEMU node with two disks (virtio and NVMe) gets
// a target_raid_config (RAID-1 root, RAID-0 data) through PUT
// .../states/raid; provide's automated cleaning runs
// raid.delete_configuration, the erase steps and raid.create_configuration;
// the host's mdadm finds the md superblocks on both disk files and
// raid_config shows the arrays. The deploy writes the image to the root
// array: both mirrors hold it after the members' data offset. After the
// undeploy a manual raid.delete_configuration leaves no superblock and no
// partition table; raid.apply_configuration then builds the RAID-1 its
// argument gives. The API refusals are checked with curl.
func TestQEMUSoftwareRAID(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU five times")
	}
	kernel, initrd := need(t)
	for _, tool := range []string{"mdadm", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("BM_REQUIRE_ALL") == "1" {
				t.Fatalf("%s is missing (scripts/install-test-deps.sh installs it)", tool)
			}
			t.Skipf("%s is missing (Debian package %s)", tool, tool)
		}
	}
	cl := raidLab(t, kernel, initrd)
	dir := t.TempDir()
	// The image to deploy onto the root array, served on loopback (the
	// guest reaches it as 10.0.2.2).
	img := make([]byte, 8<<20)
	for i := range img {
		img[i] = byte(i*7 + i>>12)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/root.img" {
			http.NotFound(w, r)
			return
		}
		w.Write(img)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	imgURL := "http://10.0.2.2:" + itoa(ln.Addr().(*net.TCPAddr).Port) + "/root.img"
	disks := []string{filepath.Join(dir, "raid1.raw"), filepath.Join(dir, "nvme.raw")}
	for _, d := range disks {
		if err := os.WriteFile(d, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(d, 1536<<20); err != nil { // sparse
			t.Fatal(err)
		}
	}
	info := map[string]any{"qemu_disk": disks[0], "qemu_nvme_disk": disks[1], "qemu_nvme_serial": "NVME0",
		"qemu_console": filepath.Join(dir, "console.log"), "qemu_memory_mb": 512}
	var n testrig.Node
	if code := cl.Do("POST", "/v1/nodes", map[string]any{"name": "raid1", "driver": "qemu-dev", "conductor_group": "lab", "driver_info": info}, &n); code != 201 {
		t.Fatalf("create node: %d", code)
	}
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "console.log"))
			t.Logf("console (last 4 KiB):\n%s", tail(b, 4096))
		}
	})
	cl.MustVerb(n.UUID, "manage", nil)
	if got := cl.WaitRest(n.UUID, 30*time.Second); got.State != "manageable" {
		t.Fatalf("manage: %q %q", got.State, got.LastError)
	}

	target := `{"logical_disks": [{"size_gb": 1, "raid_level": "1", "controller": "software", "is_root_volume": true, "volume_name": "root"},` +
		` {"size_gb": "MAX", "raid_level": "0", "controller": "software", "volume_name": "data"}]}`
	// Refusals, as Ironic: below 1.12, RAID 5 for software, schema errors.
	if code, body := curlAt(t, cl, "1.11", "PUT", "/v1/nodes/raid1/states/raid", target); code != 406 {
		t.Errorf("PUT states/raid at 1.11: %d %s; want 406", code, body)
	}
	for bad, want := range map[string]string{
		`{"logical_disks": [{"size_gb": 1, "raid_level": "1", "controller": "software"}, {"size_gb": "MAX", "raid_level": "5", "controller": "software"}]}`: "RAID 5 and 6 are not offered",
		`{"logical_disks": [{"size_gb": 1, "raid_level": "1"}], "x": 1}`:                                                                                    "Additional properties are not allowed",
		`{"logical_disks": [{"raid_level": "1"}]}`:                                                                                                          "'size_gb' is a required property",
		`{"logical_disks": [{"size_gb": "big", "raid_level": "1"}]}`:                                                                                        "size_gb",
		`{"logical_disks": [{"size_gb": 1, "raid_level": "0", "controller": "software"}]}`:                                                                  "RAID-1 for the first logical disk",
		`{"logical_disks": [{"size_gb": 1, "raid_level": "1", "is_root_volume": true}, {"size_gb": 1, "raid_level": "1", "is_root_volume": true}]}`:         "more than one root volume",
		`{"logical_disks": [{"size_gb": 1, "raid_level": "1", "controller": "software", "disk_type": "ssd"}]}`:                                              "disk_type is not supported for software RAID",
	} {
		if code, body := curlAt(t, cl, "1.12", "PUT", "/v1/nodes/raid1/states/raid", bad); code != 400 || !strings.Contains(body, want) {
			t.Errorf("PUT states/raid %s: %d %s; want 400 with %q", bad, code, body, want)
		}
	}
	if code, body := curlAt(t, cl, "1.12", "PUT", "/v1/nodes/raid1/states/raid", target); code != 204 {
		t.Fatalf("PUT states/raid: %d %s", code, body)
	}
	code, body := curlAt(t, cl, "1.12", "GET", "/v1/nodes/raid1?fields=target_raid_config,raid_config", "")
	if code != 200 || !strings.Contains(body, `"volume_name":"data"`) || !strings.Contains(body, `"raid_config":{}`) {
		t.Fatalf("node after PUT: %d %s", code, body)
	}
	if code, body := curlAt(t, cl, "1.11", "GET", "/v1/nodes/raid1?fields=target_raid_config", ""); code != 406 {
		t.Errorf("target_raid_config at 1.11: %d %s; want 406", code, body)
	}

	verb := func(v, want string, extra map[string]any) testrig.Node {
		t.Helper()
		cl.MustVerb(n.UUID, v, extra)
		got := cl.WaitRest(n.UUID, 6*time.Minute)
		if got.State != want {
			t.Fatalf("%s ended in %q: %s", v, got.State, got.LastError)
		}
		return got
	}
	// Automated cleaning, with the priorities Ironic's operators give
	// the RAID steps: delete, erase, create.
	verb("provide", "available", nil)
	historyRe(t, cl, "raid1", `(?s)raid\.delete_configuration done.*deploy\.erase_devices_metadata done.*deploy\.erase_devices done.*raid\.create_configuration done`)
	var node struct {
		RaidConfig struct {
			LogicalDisks []map[string]any `json:"logical_disks"`
			LastUpdated  string           `json:"last_updated"`
		} `json:"raid_config"`
		Properties map[string]any `json:"properties"`
	}
	if code := cl.Do("GET", "/v1/nodes/raid1", nil, &node); code != 200 {
		t.Fatalf("get node: %d", code)
	}
	lds := node.RaidConfig.LogicalDisks
	if len(lds) != 2 || lds[0]["device"] != "/dev/md0" || lds[0]["volume_name"] != "root" || lds[1]["device"] != "/dev/md1" || node.RaidConfig.LastUpdated == "" {
		t.Fatalf("raid_config after create: %+v", node.RaidConfig)
	}
	t.Logf("raid_config: %+v", node.RaidConfig)
	if node.Properties["local_gb"] != float64(1) {
		t.Errorf("properties/local_gb after create: %v; want 1 (the root volume's size)", node.Properties["local_gb"])
	}
	historyRe(t, cl, "raid1", `raid\.create_configuration done: /dev/md0 \(root, RAID-1, [0-9]+ bytes\) on /dev/nvme0n1p1 /dev/vda1; /dev/md1 \(data, RAID-0, [0-9]+ bytes\) on /dev/nvme0n1p2 /dev/vda2`)

	// The host's mdadm reads both disk files: each has two members, of
	// the arrays root (RAID-1) and data (RAID-0).
	for _, d := range disks {
		parts := gptParts(t, d)
		if len(parts) != 2 {
			t.Fatalf("%s: %d GPT partitions, want 2", d, len(parts))
		}
		for i, want := range []string{"Raid Level : raid1", "Raid Level : raid0"} {
			out, ok := examine(t, d, parts[i][0])
			if !ok || !strings.Contains(out, want) || !strings.Contains(out, "Version : 1.2") || !strings.Contains(out, "Raid Devices : 2") {
				t.Errorf("mdadm --examine of %s partition %d: %v\n%s", filepath.Base(d), i+1, ok, out)
			}
		}
	}

	// Deploy: write_image finds the root array (assembled anew in this
	// boot) and writes the image to it; both mirrors hold it.
	if code := cl.Do("PATCH", "/v1/nodes/raid1", []map[string]any{
		{"op": "add", "path": "/instance_info/image_source", "value": imgURL},
		{"op": "add", "path": "/instance_info/image_checksum", "value": sha(img)}}, nil); code != 200 {
		t.Fatalf("patch instance_info: %d", code)
	}
	verb("active", "active", nil)
	historyRe(t, cl, "raid1", `deploy step deploy\.write_image done: 8388608 bytes \(none, 8388608 downloaded\) written to /dev/md[0-9]+`)
	for _, d := range disks {
		part := gptParts(t, d)[0][0]
		out, _ := examine(t, d, part)
		m := regexp.MustCompile(`Data Offset : ([0-9]+) sectors`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("mdadm --examine of %s after deploy shows no data offset:\n%s", filepath.Base(d), out)
		}
		off, _ := strconv.ParseInt(m[1], 10, 64)
		f, err := os.Open(d)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(img))
		_, err = f.ReadAt(got, part+off*512)
		f.Close()
		if err != nil || !bytes.Equal(got, img) {
			t.Errorf("%s does not hold the image in its root array member (data offset %d sectors): %v", filepath.Base(d), off, err)
		}
	}
	verb("deleted", "available", nil)
	verb("manage", "manageable", nil)
	verb("clean", "manageable", map[string]any{"clean_steps": []map[string]any{{"interface": "raid", "step": "delete_configuration"}}})
	var after struct {
		RaidConfig map[string]any `json:"raid_config"`
	}
	if code := cl.Do("GET", "/v1/nodes/raid1", nil, &after); code != 200 {
		t.Fatalf("get node: %d", code)
	}
	if after.RaidConfig == nil || len(after.RaidConfig) != 0 {
		t.Errorf("raid_config after delete: %v; want {}", after.RaidConfig)
	}
	historyRe(t, cl, "raid1", `raid\.delete_configuration done: /dev/md[0-9]+ stopped; /dev/md[0-9]+ stopped; superblocks zeroed on (/dev/(nvme0n1p|vda)[12] ?){4}; partition tables zeroed on /dev/nvme0n1 /dev/vda\n`)
	for _, d := range disks {
		if p := gptParts(t, d); p != nil {
			t.Errorf("%s still has a GPT after delete: %v", d, p)
		}
		for _, off := range []int64{0, 8 << 20, (8 << 20) + (1 << 30)} {
			if out, ok := examine(t, d, off); ok || !strings.Contains(out, "No md superblock detected") {
				t.Errorf("mdadm --examine of %s at %d MiB after delete: found %v\n%s", filepath.Base(d), off>>20, ok, out)
			}
		}
	}

	// raid.apply_configuration: the configuration as its argument; a
	// clean without it fails before anything runs, naming the argument.
	if code, body := curlAt(t, cl, "latest", "PUT", "/v1/nodes/raid1/states/provision",
		`{"target": "clean", "clean_steps": [{"interface": "raid", "step": "apply_configuration", "args": {"delete_existing": false}}]}`); code != 202 {
		t.Fatalf("clean with apply_configuration without raid_config: %d %s", code, body)
	}
	if got := cl.WaitRest(n.UUID, time.Minute); got.State != "clean failed" || !strings.Contains(got.LastError, `required argument "raid_config" is missing`) {
		t.Errorf("apply_configuration without raid_config ended in %q: %s; want clean failed naming raid_config", got.State, got.LastError)
	}
	verb("manage", "manageable", nil)
	verb("clean", "manageable", map[string]any{"clean_steps": []map[string]any{{"interface": "raid", "step": "apply_configuration",
		"args": map[string]any{"raid_config": map[string]any{"logical_disks": []map[string]any{
			{"size_gb": "MAX", "raid_level": "1", "controller": "software", "is_root_volume": true}}}}}}})
	var applied struct {
		RaidConfig struct {
			LogicalDisks []map[string]any `json:"logical_disks"`
		} `json:"raid_config"`
	}
	if code := cl.Do("GET", "/v1/nodes/raid1", nil, &applied); code != 200 {
		t.Fatalf("get node: %d", code)
	}
	if lds := applied.RaidConfig.LogicalDisks; len(lds) != 1 || lds[0]["device"] != "/dev/md0" || lds[0]["size_gb"] != "MAX" {
		t.Errorf("raid_config after apply_configuration: %+v", applied.RaidConfig)
	}
	for _, d := range disks {
		parts := gptParts(t, d)
		if len(parts) != 1 || parts[0][0] != 8<<20 {
			t.Fatalf("%s after apply_configuration: partitions %v, want one at 8 MiB", filepath.Base(d), parts)
		}
		if out, ok := examine(t, d, parts[0][0]); !ok || !strings.Contains(out, "Raid Level : raid1") {
			t.Errorf("mdadm --examine of %s after apply_configuration: %v\n%s", filepath.Base(d), ok, out)
		}
	}
}

func historyRe(t *testing.T, cl *testrig.Client, node, re string) {
	t.Helper()
	h := nodeHistory(t, cl, node)
	if !regexp.MustCompile(re).MatchString(h) {
		t.Errorf("history of %s matches no %q:\n%s", node, re, h)
	}
}
