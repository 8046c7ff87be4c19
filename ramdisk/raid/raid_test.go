package raid

import (
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
	if got.Label != "gpt" || len(got.Partitions) != 2 {
		t.Fatalf("sfdisk reads %s", out)
	}
	for i, p := range got.Partitions {
		if p.Start*512 != parts[i].Start || p.Size*512 != parts[i].Size || p.Type != linuxRAIDType || p.Name != parts[i].Name {
			t.Errorf("partition %d: sfdisk reads %+v, want %+v of type %s", i+1, p, parts[i], linuxRAIDType)
		}
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
