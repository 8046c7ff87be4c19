package raid

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestLayoutAndGPT: fixed sizes first from 8 MiB, "MAX" last to the end;
// the GPT written reads back with util-linux's sfdisk (an independent
// reader) as the same partitions, type Linux RAID, and verifies clean.
func TestLayoutAndGPT(t *testing.T) {
	const size = 3 << 30
	parts, err := layout([]uint64{0, 1 << 30}, []string{"root", "data"}, size, 512)
	if err != nil {
		t.Fatal(err)
	}
	if parts[1].Start != 8<<20 || parts[1].Size != 1<<30 || parts[0].Start != 8<<20+1<<30 || parts[0].Start+parts[0].Size > size-34*512 {
		t.Fatalf("layout: %+v", parts)
	}
	if _, err := layout([]uint64{4 << 30}, []string{"big"}, size, 512); err == nil || !strings.Contains(err.Error(), "do not fit") {
		t.Fatalf("a 4 GiB volume on a 3 GiB disk: %v", err)
	}
	sfdisk, err := exec.LookPath("sfdisk")
	if err != nil {
		if os.Getenv("BM_REQUIRE_ALL") == "1" {
			t.Fatal("sfdisk is missing (Debian package fdisk)")
		}
		t.Skip("sfdisk is missing (Debian package fdisk)")
	}
	path := filepath.Join(t.TempDir(), "disk.raw")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	parts = append(parts, biosBootPart(0))
	if err := writeGPT(f, size, 512, parts); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if out, err := exec.Command(sfdisk, "--verify", path).CombinedOutput(); err != nil || !strings.Contains(string(out), "No errors detected") {
		t.Fatalf("sfdisk --verify: %v\n%s", err, out)
	}
	out, err := exec.Command(sfdisk, "--json", path).Output()
	if err != nil {
		t.Fatal(err)
	}
	var pt struct {
		PartitionTable struct {
			Label      string `json:"label"`
			Partitions []struct {
				Start, Size uint64
				Type, Name  string
			} `json:"partitions"`
		} `json:"partitiontable"`
	}
	if err := json.Unmarshal(out, &pt); err != nil {
		t.Fatal(err)
	}
	got := pt.PartitionTable
	if got.Label != "gpt" || len(got.Partitions) != 3 {
		t.Fatalf("sfdisk reads %s", out)
	}
	for i, p := range got.Partitions {
		typ := linuxRAIDType
		if i == 2 {
			typ = biosBootType // IPA's BIOS boot partition: 2 MiB at 1 MiB, numbered after the RAID partitions
			if p.Start*512 != 1<<20 || p.Size*512 != 2<<20 || p.Name != "bios-boot-part-0" {
				t.Errorf("BIOS boot partition: sfdisk reads %+v", p)
			}
		}
		if p.Start*512 != parts[i].Start || p.Size*512 != parts[i].Size || p.Type != typ || p.Name != parts[i].Name {
			t.Errorf("partition %d: sfdisk reads %+v, want %+v of type %s", i+1, p, parts[i], typ)
		}
	}
}

// TestCreateRefusesUEFIRoot: in UEFI boot mode a root volume is refused
// before any disk is touched (its boot loader would be missing); the
// other volumes alone are built.
func TestCreateRefusesUEFIRoot(t *testing.T) {
	var cfg Config
	if err := json.Unmarshal([]byte(`{"logical_disks": [{"size_gb": 1, "raid_level": "1", "controller": "software", "is_root_volume": true}, {"size_gb": "MAX", "raid_level": "0", "controller": "software"}]}`), &cfg); err != nil {
		t.Fatal(err)
	}
	o := Options{BootMode: "uefi"}
	if _, err := Create(context.Background(), cfg, nil, true, true, o); err == nil || !strings.Contains(err.Error(), "UEFI boot mode") || !strings.Contains(err.Error(), "legacy BIOS") {
		t.Errorf("UEFI with a root volume: %v", err)
	}
	// Only the non-root volume: past the boot mode check (and failing
	// on the missing disks).
	if _, err := Create(context.Background(), cfg, nil, false, true, o); err == nil || strings.Contains(err.Error(), "UEFI") {
		t.Errorf("UEFI without the root volume: %v", err)
	}
	// The ramdisk's own boot mode: firmware/efi in sysfs.
	sys := t.TempDir()
	if (Options{SysRoot: sys}).bootMode() != "bios" {
		t.Error("no firmware/efi: want bios")
	}
	os.MkdirAll(filepath.Join(sys, "firmware", "efi"), 0o755)
	if (Options{SysRoot: sys}).bootMode() != "uefi" {
		t.Error("firmware/efi: want uefi")
	}
	if _, err := InstallBootloader(context.Background(), "/dev/md0", "img", Options{SysRoot: sys}); err == nil || !strings.Contains(err.Error(), "BIOS boot only") {
		t.Errorf("InstallBootloader in UEFI mode: %v", err)
	}
}

// TestHolderDisksAndPartitions: the holders of an md array from sysfs
// (partition members give their disk, a whole-disk member itself) and
// the array's partitions in number order.
func TestHolderDisksAndPartitions(t *testing.T) {
	sys := t.TempDir()
	mk := func(p string) {
		if err := os.MkdirAll(filepath.Join(sys, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	touch := func(p string) {
		if err := os.WriteFile(filepath.Join(sys, p), []byte("1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mk("devices/pci/nvme0n1/nvme0n1p1")
	touch("devices/pci/nvme0n1/nvme0n1p1/partition")
	mk("devices/virtio/vda/vda1")
	touch("devices/virtio/vda/vda1/partition")
	mk("devices/virtio/vdb")
	mk("class/block")
	for name, dir := range map[string]string{"nvme0n1p1": "devices/pci/nvme0n1/nvme0n1p1", "vda1": "devices/virtio/vda/vda1", "vdb": "devices/virtio/vdb"} {
		if err := os.Symlink(filepath.Join(sys, dir), filepath.Join(sys, "class/block", name)); err != nil {
			t.Fatal(err)
		}
	}
	md := filepath.Join(sys, "block/md0")
	for _, s := range []string{"slaves/nvme0n1p1", "slaves/vda1", "slaves/vdb", "md0p2", "md0p10", "md0p1", "md"} {
		mk("block/md0/" + s)
	}
	for _, s := range []string{"md0p2", "md0p10", "md0p1"} {
		touch("block/md0/" + s + "/partition")
	}
	got, err := holderDisks(sys, md)
	if err != nil || strings.Join(got, " ") != "/dev/nvme0n1 /dev/vda /dev/vdb" {
		t.Errorf("holderDisks = %v, %v", got, err)
	}
	if p := mdPartitions(md, "/dev/md0"); strings.Join(p, " ") != "/dev/md0p1 /dev/md0p2 /dev/md0p10" {
		t.Errorf("mdPartitions = %v", p)
	}
}

// TestAddKernelArgs: rd.md.uuid= appended to GRUB_CMDLINE_LINUX only, as
// IPA's substitution for dracut images.
func TestAddKernelArgs(t *testing.T) {
	p := filepath.Join(t.TempDir(), "grub")
	os.WriteFile(p, []byte("GRUB_TIMEOUT=5\nGRUB_CMDLINE_LINUX_DEFAULT=\"quiet\"\nGRUB_CMDLINE_LINUX=\"console=ttyS0\"\n"), 0o644)
	if err := addKernelArgs(p, []string{"rd.md.uuid=a:b:c:d"}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	if want := "GRUB_TIMEOUT=5\nGRUB_CMDLINE_LINUX_DEFAULT=\"quiet\"\nGRUB_CMDLINE_LINUX=\"console=ttyS0 rd.md.uuid=a:b:c:d\"\n"; string(b) != want {
		t.Errorf("got %q, want %q", b, want)
	}
	if err := addKernelArgs(filepath.Join(t.TempDir(), "none"), []string{"x"}); err != nil {
		t.Errorf("no /etc/default/grub: %v", err)
	}
}

// TestParse: IPA's software RAID rules, checked again in the ramdisk.
func TestParse(t *testing.T) {
	for cfg, want := range map[string]string{
		`{"logical_disks": [{"size_gb": 1, "raid_level": "1", "controller": "software", "is_root_volume": true}, {"size_gb": "MAX", "raid_level": "1+0", "controller": "software"}]}`: "",
		`null`: "no target_raid_config",
		`{"logical_disks": [{"size_gb": 1, "raid_level": "1", "controller": "software", "volume_name": "-x"}]}`:                                                 "not a valid md array name",
		`{"logical_disks": [{"size_gb": 1, "raid_level": "1", "controller": "RAID.Integrated.1-1"}]}`:                                                           "no logical disk with controller",
		`{"logical_disks": [{"size_gb": 1, "raid_level": "0", "controller": "software"}]}`:                                                                      "RAID-1 for the first",
		`{"logical_disks": [{"size_gb": 1, "raid_level": "1", "controller": "software"}, {"size_gb": 1, "raid_level": "5", "controller": "software"}]}`:         `RAID level "5" is not built here`,
		`{"logical_disks": [{"size_gb": 0, "raid_level": "1", "controller": "software"}]}`:                                                                      "size_gb 0",
		`{"logical_disks": [{"size_gb": "MAX", "raid_level": "1", "controller": "software"}, {"size_gb": "MAX", "raid_level": "0", "controller": "software"}]}`: "only one RAID device with size 'MAX'",
	} {
		var v any
		if err := json.Unmarshal([]byte(cfg), &v); err != nil {
			t.Fatal(err)
		}
		_, err := Parse(v)
		if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("%s: %v; want %q", cfg, err, want)
		}
	}
}

func TestPartPath(t *testing.T) {
	for in, want := range map[string]string{"/dev/vda": "/dev/vda2", "/dev/nvme0n1": "/dev/nvme0n1p2", "/dev/sdb": "/dev/sdb2"} {
		if got := partPath(in, 2); got != want {
			t.Errorf("partPath(%s, 2) = %s, want %s", in, got, want)
		}
	}
}
