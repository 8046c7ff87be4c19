package ramdisk_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// needCmd returns a Debian tool's path, or skips (fails under
// BM_REQUIRE_ALL=1).
func needCmd(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("BM_REQUIRE_ALL") == "1" {
			t.Fatalf("%s is missing (Debian package %s; scripts/install-test-deps.sh installs it)", name, pkg)
		}
		t.Skipf("%s is missing: install Debian's %s (scripts/install-test-deps.sh)", name, pkg)
	}
	return p
}

// partedImage is a whole-disk image of size bytes with one partition of
// random data, partitioned by sfdisk with table label ("gpt" or "dos").
func partedImage(t *testing.T, dir, label string, size int64, seed uint64) []byte {
	t.Helper()
	p := filepath.Join(dir, label+".img")
	randomFile(t, p, size, seed)
	c := exec.Command("sfdisk", "-q", p)
	c.Stdin = strings.NewReader("label: " + label + "\nstart=2048, size=8192, type=L\n")
	if label == "dos" {
		c.Stdin = strings.NewReader("label: dos\nstart=2048, size=8192, type=83\n")
	}
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("sfdisk %s: %v\n%s", label, err, out)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// cloudInitView is what cloud-init's own config drive reader returned.
type cloudInitView struct {
	Metadata    map[string]any `json:"metadata"`
	NetworkData map[string]any `json:"networkdata"`
	UserData    string         `json:"userdata"`
}

// readConfigDrive finds the partition of the disk file labelled config-2
// (sfdisk lists the partitions, blkid reads each one's label), copies it
// out, has xorriso extract it and cloud-init's read_config_drive read it.
// It returns the table label and what cloud-init read.
func readConfigDrive(t *testing.T, diskPath string) (string, cloudInitView) {
	t.Helper()
	out, err := exec.Command("sfdisk", "--json", diskPath).Output()
	if err != nil {
		t.Fatalf("sfdisk --json %s: %v", diskPath, err)
	}
	var v struct {
		PT struct {
			Label      string `json:"label"`
			SectorSize int64  `json:"sectorsize"`
			Partitions []struct {
				Start int64 `json:"start"`
				Size  int64 `json:"size"`
			} `json:"partitions"`
		} `json:"partitiontable"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("sfdisk --json: %v\n%s", err, out)
	}
	ss := max(v.PT.SectorSize, 512)
	var found []int
	for i, p := range v.PT.Partitions {
		lbl, _ := exec.Command("blkid", "-p", "-O", strconv.FormatInt(p.Start*ss, 10), "-s", "LABEL", "-o", "value", diskPath).Output()
		if strings.TrimSpace(string(lbl)) == "config-2" {
			found = append(found, i)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d partitions labelled config-2 on the disk (want 1); table %s", len(found), out)
	}
	p := v.PT.Partitions[found[0]]
	f, err := os.Open(diskPath)
	if err != nil {
		t.Fatal(err)
	}
	part := make([]byte, p.Size*ss)
	_, err = f.ReadAt(part, p.Start*ss)
	f.Close()
	if err != nil && err != io.EOF {
		t.Fatal(err)
	}
	dir := t.TempDir()
	iso := filepath.Join(dir, "part.img")
	if err := os.WriteFile(iso, part, 0o600); err != nil {
		t.Fatal(err)
	}
	x := filepath.Join(dir, "x")
	if out, err := exec.Command("xorriso", "-osirrox", "on", "-indev", iso, "-extract", "/", x).CombinedOutput(); err != nil {
		t.Fatalf("xorriso extract of the config-2 partition: %v\n%s", err, out)
	}
	script := `import json, sys
from cloudinit.sources.DataSourceConfigDrive import read_config_drive
r = read_config_drive(sys.argv[1])
ud = r.get('userdata') or b''
if isinstance(ud, bytes): ud = ud.decode()
print(json.dumps({'metadata': r['metadata'], 'networkdata': r.get('networkdata'), 'userdata': ud}, default=str))`
	res, err := exec.Command("/usr/bin/python3", "-c", script, x).CombinedOutput()
	if err != nil {
		t.Fatalf("cloud-init's read_config_drive: %v\n%s", err, res)
	}
	lines := strings.Split(strings.TrimSpace(string(res)), "\n")
	var ci cloudInitView
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &ci); err != nil {
		t.Fatalf("cloud-init's answer %s: %v", res, err)
	}
	return v.PT.Label, ci
}

// checkDrive asserts that cloud-init read the hostname, key and address.
func checkDrive(t *testing.T, ci cloudInitView, host, key, addr string) {
	t.Helper()
	if ci.Metadata["hostname"] != host {
		t.Errorf("cloud-init reads hostname %v, want %s (metadata %v)", ci.Metadata["hostname"], host, ci.Metadata)
	}
	if !strings.Contains(jsonString(ci.Metadata["public_keys"]), key) {
		t.Errorf("cloud-init reads public_keys %v, want %s", ci.Metadata["public_keys"], key)
	}
	if !strings.Contains(jsonString(ci.NetworkData), `"ip_address":"`+addr+`"`) {
		t.Errorf("cloud-init reads network data %v, want the static address %s", ci.NetworkData, addr)
	}
}

func networkData(addr string) map[string]any {
	return map[string]any{
		"links":    []any{map[string]any{"id": "eth0", "type": "phy", "ethernet_mac_address": "52:54:00:12:34:56"}},
		"networks": []any{map[string]any{"id": "net0", "type": "ipv4", "link": "eth0", "ip_address": addr, "netmask": "255.255.255.0", "routes": []any{map[string]any{"network": "0.0.0.0", "netmask": "0.0.0.0", "gateway": "192.0.2.1"}}}},
		"services": []any{map[string]any{"type": "dns", "address": "192.0.2.1"}},
	}
}

// TestQEMUConfigDrive: one QEMU node deploys a GPT raw image (Debian's
// `baremetal node deploy --config-drive JSON`) and then rebuilds with an
// MBR raw image (PUT provision), each with a JSON config drive (hostname,
// an SSH key, static network_data; the second takes its network from the
// node's network_data field).
// Then `baremetal node rebuild --config-drive DIR` (the CLI builds a
// gzipped, base64-encoded ISO with xorrisofs), and a rebuild whose
// config drive is a URL (PUT provision) of such an ISO, made by the
// CLI's own code (ironicclient's make_configdrive). The images and that
// URL are on the test's server at 127.0.0.1, which the VM cannot reach
// (its loopback is its own): they reach it only through the site cache
// (the image cached, the config drive streamed through, never stored).
// After each, the test reads the VM's disk on the host: one partition
// labelled config-2 (new at the end of the disk for the images without
// one, the existing one afterwards), and cloud-init's own
// read_config_drive returns the hostname, key and network sent. The API
// shows the config drive masked.
func TestQEMUConfigDrive(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU several times")
	}
	t.Parallel()
	kernel, initrd := needDirect(t)
	needCmd(t, "sfdisk", "fdisk")
	needCmd(t, "xorriso", "xorriso")
	needCmd(t, "xorrisofs", "xorriso")
	baremetal := needCmd(t, "baremetal", "python3-ironicclient")
	if err := exec.Command("/usr/bin/python3", "-c", "import cloudinit.sources.DataSourceConfigDrive").Run(); err != nil {
		if os.Getenv("BM_REQUIRE_ALL") == "1" {
			t.Fatalf("cloud-init is missing (Debian package cloud-init): %v", err)
		}
		t.Skip("cloud-init is missing: install Debian's cloud-init (scripts/install-test-deps.sh)")
	}
	dir := t.TempDir()
	diskPath := filepath.Join(dir, "disk.raw")
	const diskSize = 256 << 20
	randomFile(t, diskPath, 4<<20, 11)
	if err := os.Truncate(diskPath, diskSize); err != nil {
		t.Fatal(err)
	}

	gpt := partedImage(t, dir, "gpt", 8<<20, 12)
	mbr := partedImage(t, dir, "dos", 8<<20, 13)
	key := "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEdgeTestKeyOnly ops@site"
	files := map[string][]byte{"/gpt.img": gpt, "/mbr.img": mbr}
	var filesMu sync.Mutex
	gets := map[string]int{}
	port := serveHTTP(t, func(w http.ResponseWriter, r *http.Request) {
		filesMu.Lock()
		b, ok := files[r.URL.Path]
		gets[r.URL.Path]++
		filesMu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Write(b)
	})
	base := "http://127.0.0.1:" + port

	// The edge agent also runs the site image cache, which the VMs reach
	// at 10.0.2.2: write_image's image and a URL config drive reach the
	// ramdisk through it.
	l := newLab(t, labOptions{Kernel: kernel, Initrd: initrd, ImageCache: true})
	cl := l.cl
	console := filepath.Join(dir, "console.log")
	showConsole(t, console, 4096)
	id := l.createNode("vm1", "qemu-dev", map[string]any{"qemu_disk": diskPath, "qemu_disk_serial": "DISK0", "qemu_console": console, "qemu_memory_mb": 512},
		map[string]any{"root_device": map[string]any{"serial": "DISK0"}})
	image := func(p string, b []byte) {
		t.Helper()
		ops := []map[string]any{{"op": "add", "path": "/instance_info/image_source", "value": base + p},
			{"op": "add", "path": "/instance_info/image_checksum", "value": sha(b)}}
		if code := cl.Do("PATCH", "/v1/nodes/"+id, ops, nil); code != 200 {
			t.Fatalf("patch: %d", code)
		}
	}
	cl.MustVerb(id, "manage", nil)
	l.wait(id, "manage", "manageable", 30*time.Second)
	cl.MustVerb(id, "provide", nil)
	l.wait(id, "provide", "available", 5*time.Minute)

	// The Debian CLI against the coordinator, no auth on loopback.
	bm := func(args ...string) {
		t.Helper()
		cmd := exec.Command(baremetal, args...)
		cmd.Env = append(os.Environ(), "OS_AUTH_TYPE=none", "OS_ENDPOINT="+cl.Base, "HOME="+dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("baremetal %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}

	t.Run("gpt-json-cli", func(t *testing.T) {
		image("/gpt.img", gpt)
		bm("node", "deploy", "vm1", "--config-drive", jsonString(map[string]any{
			"meta_data":    map[string]any{"hostname": "gpt-host", "public_keys": map[string]any{"ops": key}},
			"network_data": networkData("192.0.2.10"),
			"user_data":    "#cloud-config\nruncmd: [true]\n"}))
		got := l.wait(id, "deploy", "active", 5*time.Minute)
		if got.InstanceInfo["configdrive"] != "******" {
			t.Errorf("instance_info.configdrive shows %v, want ******", got.InstanceInfo["configdrive"])
		}
		// The image's partition (sectors 2048 to 10239) is on the disk as
		// written; its tables were changed for the config drive.
		if !bytes.Equal(readHead(t, diskPath, 5<<20)[1<<20:], gpt[1<<20:5<<20]) {
			t.Fatal("the disk does not hold the GPT image's partition")
		}
		label, ci := readConfigDrive(t, diskPath)
		if label != "gpt" {
			t.Fatalf("table %s after the GPT image", label)
		}
		checkDrive(t, ci, "gpt-host", key, "192.0.2.10")
		if ci.Metadata["uuid"] != id || ci.Metadata["name"] != "vm1" || !strings.HasPrefix(ci.UserData, "#cloud-config") {
			t.Errorf("cloud-init reads uuid %v name %v user data %q; want the node's uuid and name and the user data", ci.Metadata["uuid"], ci.Metadata["name"], ci.UserData)
		}
		historyHas(t, cl, "into a new partition at the end of the disk 2 (gpt")
	})

	t.Run("mbr-json", func(t *testing.T) {
		// The disk's end holds the GPT image's config drive and backup
		// GPT: wipe it so that nothing stale passes for new.
		f, err := os.OpenFile(diskPath, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteAt(make([]byte, 128<<20), diskSize-(128<<20))
		f.Close()
		image("/mbr.img", mbr)
		// The node's own network_data (API 1.66) goes into a drive that
		// gives none.
		if code := cl.Do("PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "add", "path": "/network_data", "value": networkData("192.0.2.20")}}, nil); code != 200 {
			t.Fatalf("patch network_data: %d", code)
		}
		cl.MustVerb(id, "rebuild", map[string]any{"configdrive": map[string]any{
			"meta_data": map[string]any{"hostname": "mbr-host", "public_keys": map[string]any{"ops": key}}}})
		l.wait(id, "rebuild", "active", 5*time.Minute)
		label, ci := readConfigDrive(t, diskPath)
		if label != "dos" {
			t.Fatalf("table %s after the MBR image", label)
		}
		checkDrive(t, ci, "mbr-host", key, "192.0.2.20")
		historyHas(t, cl, "into a new partition at the end of the disk 2 (mbr")
	})

	t.Run("iso-dir-cli", func(t *testing.T) {
		// `--config-drive DIR`: the CLI builds the ISO (xorrisofs),
		// gzips and base64-encodes it.
		cdDir := filepath.Join(dir, "cd")
		latest := filepath.Join(cdDir, "openstack", "latest")
		os.MkdirAll(latest, 0o700)
		os.WriteFile(filepath.Join(latest, "meta_data.json"), []byte(`{"uuid": "`+id+`", "hostname": "dir-host", "public_keys": {"ops": "`+key+`"}}`), 0o600)
		os.WriteFile(filepath.Join(latest, "network_data.json"), []byte(jsonString(networkData("192.0.2.30"))), 0o600)
		bm("node", "rebuild", "vm1", "--config-drive", cdDir)
		l.wait(id, "rebuild", "active", 5*time.Minute)
		_, ci := readConfigDrive(t, diskPath)
		checkDrive(t, ci, "dir-host", key, "192.0.2.30")
	})

	t.Run("iso-url-cache", func(t *testing.T) {
		// A URL config drive (Ironic takes one as configdrive): the
		// gzipped, base64-encoded ISO of a directory, as Debian's
		// ironicclient makes it.
		cdDir := filepath.Join(dir, "cd-url")
		latest := filepath.Join(cdDir, "openstack", "latest")
		os.MkdirAll(latest, 0o700)
		os.WriteFile(filepath.Join(latest, "meta_data.json"), []byte(`{"uuid": "`+id+`", "hostname": "url-host", "public_keys": {"ops": "`+key+`"}}`), 0o600)
		os.WriteFile(filepath.Join(latest, "network_data.json"), []byte(jsonString(networkData("192.0.2.40"))), 0o600)
		out, err := exec.Command("/usr/bin/python3", "-c", "import sys\nfrom ironicclient.common.utils import make_configdrive\nsys.stdout.write(make_configdrive(sys.argv[1]).decode())", cdDir).Output()
		if err != nil || len(out) < 100 {
			t.Fatalf("ironicclient's make_configdrive: %v %q", err, out)
		}
		filesMu.Lock()
		files["/cd.b64"] = out
		filesMu.Unlock()
		cl.MustVerb(id, "rebuild", map[string]any{"configdrive": base + "/cd.b64"})
		got := l.wait(id, "rebuild", "active", 5*time.Minute)
		if got.InstanceInfo["configdrive"] != "******" {
			t.Errorf("instance_info.configdrive shows %v, want ******", got.InstanceInfo["configdrive"])
		}
		_, ci := readConfigDrive(t, diskPath)
		checkDrive(t, ci, "url-host", key, "192.0.2.40")
		filesMu.Lock()
		n := gets["/cd.b64"]
		filesMu.Unlock()
		if n < 1 {
			t.Errorf("the config drive's URL was never fetched")
		}
	})

}
