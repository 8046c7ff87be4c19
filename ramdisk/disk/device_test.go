package disk

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"
)

// fakeSys builds a sysfs-like tree: files maps paths relative to root to
// contents.
func fakeSys(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, c := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestList(t *testing.T) {
	vpd := string([]byte{0, 0x80, 0, 8}) + "SER-SDA "
	root := fakeSys(t, map[string]string{
		"block/sda/size":                         "2097152\n", // 1 GiB
		"block/sda/dev":                          "8:0\n",
		"block/sda/ro":                           "0\n",
		"block/sda/removable":                    "0\n",
		"block/sda/queue/rotational":             "1\n",
		"block/sda/queue/logical_block_size":     "512\n",
		"block/sda/queue/write_zeroes_max_bytes": "33550336\n",
		"block/sda/device/model":                 "WDC WD1002F9YZ  \n",
		"block/sda/device/vendor":                "ATA\n",
		"block/sda/device/type":                  "0\n",
		"block/sda/device/vpd_pg80":              vpd,
		"block/sda/device/wwid":                  "naa.5000C500A1B2C3D4E5F6\n",
		"block/sda/sda2/partition":               "2\n",
		"block/sda/sda2/start":                   "4096\n",
		"block/sda/sda2/size":                    "8192\n",
		"block/sda/sda2/dev":                     "8:2\n",
		"block/sda/sda1/partition":               "1\n",
		"block/sda/sda1/start":                   "2048\n",
		"block/sda/sda1/size":                    "2048\n",
		"block/sda/sda1/ro":                      "1\n",
		"block/nvme0n1/size":                     "4194304\n",
		"block/nvme0n1/queue/rotational":         "0\n",
		"block/nvme0n1/queue/logical_block_size": "4096\n",
		"block/nvme0n1/device/serial":            "NVME123\n",
		"block/nvme0n1/wwid":                     "eui.0025388b71b0e3a1\n",
		"block/vda/size":                         "1024\n",
		"block/vda/serial":                       "DISK0\n",
		"block/vda/ro":                           "1\n",
		"block/sr0/size":                         "0\n",
		"block/sr0/removable":                    "1\n",
		"block/sdb/size":                         "1024\n",
		"block/sdb/removable":                    "1\n",
		"block/sdb/device/model":                 "Virtual HDisk0\n",
		"block/loop0/size":                       "0\n",
		"block/loop1/size":                       "2048\n",
		"block/zram0/size":                       "2048\n",
		"block/dm-0/size":                        "2048\n",
	})

	devs, err := List(ListOptions{SysRoot: root, DevRoot: "/dev"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	byName := map[string]Device{}
	for _, d := range devs {
		names = append(names, d.Name)
		byName[d.Name] = d
	}
	if got := strings.Join(names, ","); got != "nvme0n1,sda,sdb,sr0,vda" {
		t.Fatalf("devices = %s, want nvme0n1,sda,sdb,sr0,vda", got)
	}
	sda := byName["sda"]
	checks := []struct {
		name      string
		got, want any
	}{
		{"sda size", sda.SizeBytes, uint64(1 << 30)},
		{"sda path", sda.Path, "/dev/sda"},
		{"sda rotational", sda.Rotational, true},
		{"sda serial (vpd)", sda.Serial, "SER-SDA"},
		{"sda model", sda.Model, "WDC WD1002F9YZ"},
		{"sda vendor", sda.Vendor, "ATA"},
		{"sda wwn", sda.WWN, "0x5000c500a1b2c3d4"},
		{"sda write zeroes", sda.Queue.WriteZeroesMaxBytes, uint64(33550336)},
		{"sda devno", sda.DevNo, "8:0"},
		{"sda partitions", len(sda.Partitions), 2},
		{"sda1 first", sda.Partitions[0].Name, "sda1"},
		{"sda1 path", sda.Partitions[0].Path, "/dev/sda1"},
		{"sda1 start", sda.Partitions[0].StartBytes, uint64(2048 * 512)},
		{"sda1 ro", sda.Partitions[0].ReadOnly, true},
		{"sda2 size", sda.Partitions[1].SizeBytes, uint64(8192 * 512)},
		{"nvme serial", byName["nvme0n1"].Serial, "NVME123"},
		{"nvme wwn", byName["nvme0n1"].WWN, "eui.0025388b71b0e3a1"},
		{"nvme block size", byName["nvme0n1"].LogicalBlockSize, uint64(4096)},
		{"nvme rotational", byName["nvme0n1"].Rotational, false},
		{"vda serial", byName["vda"].Serial, "DISK0"},
		{"vda ro", byName["vda"].ReadOnly, true},
		{"sr0 virtual", byName["sr0"].VirtualMedia, true},
		{"sdb virtual (removable 'Virtual' model)", byName["sdb"].VirtualMedia, true},
		{"sda not virtual", sda.VirtualMedia, false},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}

	withLoop, err := List(ListOptions{SysRoot: root, IncludeLoop: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(withLoop) != len(devs)+1 || withLoop[0].Name != "loop1" || !withLoop[0].Loop {
		t.Errorf("IncludeLoop: want loop1 (attached) added and loop0 (empty) left out, got %v", withLoop)
	}
}

func TestListErrors(t *testing.T) {
	if _, err := List(ListOptions{SysRoot: filepath.Join(t.TempDir(), "nope")}); err == nil || !strings.Contains(err.Error(), "is sysfs mounted") {
		t.Errorf("missing sysfs: err = %v", err)
	}
	root := fakeSys(t, map[string]string{"block/sda/size": "lots\n"})
	if _, err := List(ListOptions{SysRoot: root}); err == nil || !strings.Contains(err.Error(), "sda") {
		t.Errorf("bad size: err = %v, want one naming sda", err)
	}
}

func TestFromPath(t *testing.T) {
	f := filepath.Join(t.TempDir(), "img")
	if err := os.WriteFile(f, make([]byte, 12345), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := FromPath(f, "")
	if err != nil {
		t.Fatal(err)
	}
	if !d.Regular || d.SizeBytes != 12345 || d.Path != f {
		t.Errorf("FromPath(file) = %+v", d)
	}
	if _, err := FromPath(filepath.Join(t.TempDir(), "missing"), ""); err == nil {
		t.Error("FromPath(missing) succeeded")
	}
	if _, err := FromPath(t.TempDir(), ""); err == nil || !strings.Contains(err.Error(), "neither a block device") {
		t.Errorf("FromPath(dir) err = %v", err)
	}
}

func TestCheckNotInUse(t *testing.T) {
	sys := fakeSys(t, map[string]string{
		"block/sda/dev":               "8:0\n",
		"block/sda/sda2/dev":          "8:2\n",
		"block/sda/sda2/holders/dm-0": "",
		"block/dm-0/dev":              "253:0\n",
	})
	// holders entries are directories in sysfs; a file works the same for
	// ReadDir, which is all CheckNotInUse uses.
	dev := Device{
		Name: "sda", Path: "/dev/sda", DevNo: "8:0", SysPath: filepath.Join(sys, "block", "sda"),
		Partitions: []Partition{{Name: "sda1", Path: "/dev/sda1", DevNo: "8:1"}, {Name: "sda2", Path: "/dev/sda2", DevNo: "8:2"}},
	}
	cases := []struct {
		name      string
		mountinfo string
		swaps     string
		wantErr   string
	}{
		{"unused", "22 26 0:21 / /sys rw - sysfs sysfs rw\n", "", ""},
		{"disk mounted", "30 1 8:0 / /mnt rw - ext4 /dev/sda rw\n", "", "is mounted at /mnt"},
		{"partition mounted", "30 1 8:1 / /boot rw - ext4 /dev/sda1 rw\n", "", "sda1 (8:1) is mounted at /boot"},
		{"lvm on partition mounted", "30 1 253:0 / / rw - xfs /dev/mapper/vg-root rw\n", "", "dm-0"},
		{"swap", "", "Filename Type Size Used Priority\n/dev/sda1 partition 100 0 -2\n", "active swap"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			proc := fakeSys(t, map[string]string{"self/mountinfo": c.mountinfo, "swaps": c.swaps})
			err := CheckNotInUse(dev, proc)
			if c.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("err = %v, want containing %q", err, c.wantErr)
			}
		})
	}
}

// TestCheckNotInUseRealRoot checks the guard against this machine's real
// root disk. It only reads sysfs and /proc; nothing is written.
func TestCheckNotInUseRealRoot(t *testing.T) {
	var st struct{ found string }
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Skip("no /proc/self/mountinfo:", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 9 && f[4] == "/" && strings.HasPrefix(f[len(f)-2], "/dev/") {
			st.found = f[len(f)-2]
		}
	}
	if st.found == "" {
		t.Skip("root filesystem is not on a /dev block device here (overlay or similar)")
	}
	dev, err := FromPath(st.found, "")
	if err != nil {
		t.Skipf("root device %s not usable: %v", st.found, err)
	}
	err = CheckNotInUse(dev, "")
	if err == nil {
		t.Fatalf("CheckNotInUse(%s) = nil, but / is mounted from it", st.found)
	}
	t.Logf("guard refused the real root disk: %v", err)
}

func TestNVMePassthruLayout(t *testing.T) {
	if got := unsafe.Sizeof(nvmePassthruCmd{}); got != 72 {
		t.Fatalf("nvme_passthru_cmd is 72 bytes in the kernel ABI, Go struct is %d", got)
	}
	if got := unsafe.Offsetof(nvmePassthruCmd{}.Addr); got != 24 {
		t.Fatalf("addr offset = %d, want 24", got)
	}
}

func TestNVMeDetectIgnoresOthers(t *testing.T) {
	f := filepath.Join(t.TempDir(), "nvme0n1")
	if err := os.WriteFile(f, make([]byte, 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	// A regular file named like an NVMe namespace must not be detected.
	for _, d := range []Device{{Name: "sda", Path: "/dev/null"}, {Name: "nvme0n1", Path: f, Regular: true}, {Name: "nvme0n1", Path: f}} {
		if m, ok, _ := (NVMeFormat{}).Detect(t.Context(), d); ok {
			t.Errorf("Detect(%+v) = %s, true; want not supported", d, m)
		}
	}
}
