package roothints

import (
	"encoding/json"
	"strings"
	"testing"
)

var testWords = Words{Floor: "no disk", NoMatch: "no disk matches root device hints", Seen: "disks seen", None: "no disks"}

// TestRootHintsAsTheRamdisk: the rule the ramdisk (ramdisk/image
// SelectRoot, the disk a deploy overwrites) and the edge agent's
// out-of-band inspection (agent/bmc, local_gb) both apply, on the disks
// and hints they used to be compared on when each had its own copy:
// sizes with every operator, string hints case-insensitively with s==,
// s>, <in> and <or>, name with and without /dev/, rotational as a
// boolean or a string; hints that parse badly or match nothing fail.
func TestRootHintsAsTheRamdisk(t *testing.T) {
	// In the order the ramdisk lists them (by name), as the agent sorts
	// a BMC's.
	disks := []Disk{
		{Name: "nvme0n1", SizeBytes: 960 * gib, Serial: "PHL", Model: "INTEL SSDPE2KX", WWN: "eui.01"},
		{Name: "sda", SizeBytes: 1800 * gib, Rotational: true, Serial: "WD-1", Model: "HUS726T", Vendor: "HGST", WWN: "0x5000cca"},
		{Name: "sdb", SizeBytes: 480 * gib, Serial: "S3Z", Model: "MZ7KH480", Vendor: "Samsung"},
		{Name: "sdc", SizeBytes: 2 * gib, Serial: "SD1"},
	}
	for _, c := range []struct {
		hints   map[string]any
		want    string
		wantErr string
	}{
		{hints: nil, want: "sdb"}, // the smallest of at least 4 GiB
		{hints: map[string]any{"size": 480}, want: "sdb"},
		{hints: map[string]any{"size": ">= 900"}, want: "nvme0n1"}, // the first in order
		{hints: map[string]any{"size": "<or> 2 <or> 960"}, want: "nvme0n1"},
		{hints: map[string]any{"size": "!= 480"}, want: "nvme0n1"},
		{hints: map[string]any{"size": "< 100"}, want: "sdc"}, // hints may pick a disk under 4 GiB
		{hints: map[string]any{"serial": "s3z"}, want: "sdb"},
		{hints: map[string]any{"serial": "<in> ph"}, want: "nvme0n1"},
		{hints: map[string]any{"model": "s== mz7kh480"}, want: "sdb"},
		{hints: map[string]any{"vendor": "<or> hgst <or> samsung"}, want: "sda"},
		{hints: map[string]any{"wwn": "0x5000cca"}, want: "sda"},
		{hints: map[string]any{"name": "/dev/nvme0n1"}, want: "nvme0n1"},
		{hints: map[string]any{"name": "sdc"}, want: "sdc"},
		{hints: map[string]any{"rotational": false}, want: "nvme0n1"},
		{hints: map[string]any{"rotational": "true", "size": "> 100"}, want: "sda"},
		{hints: map[string]any{"model": "s> m"}, want: "sdb"},
		{hints: map[string]any{"serial": "none"}, wantErr: "no disk matches root device hints {serial=none}; disks seen: nvme0n1 (960 GiB, serial PHL, wwn eui.01, model INTEL SSDPE2KX): serial none does not match; sda"},
		{hints: map[string]any{"size": "big"}, wantErr: `root device hint size "big" is not a positive integer`},
		{hints: map[string]any{"model": "<xx> y"}, wantErr: "uses an unsupported operator"},
		{hints: map[string]any{"hctl": "0:0:0:0"}, wantErr: `root device hint "hctl" is not supported`},
		{hints: map[string]any{"by_path": "/dev/disk/by-path/pci-0000:00:1f.2-ata-1"}, wantErr: `"by_path" is not supported`},
	} {
		h, err := FromValue(c.hints)
		i := -1
		if err == nil {
			i, err = Select(disks, h, testWords)
		}
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("hints %v: chose %d (%v), want an error containing %q", c.hints, i, err, c.wantErr)
			}
			continue
		}
		if err != nil || disks[i].Name != c.want {
			t.Errorf("hints %v: chose %d (%v), want %s", c.hints, i, err, c.want)
		}
	}
	// Protected disks are never chosen, and said why; with no disks at
	// all, the caller's words say so.
	prot := []Disk{{Name: "sr0", SizeBytes: 8 * gib, Protected: "virtual media"}, {Name: "sdz", SizeBytes: 1 * gib}}
	if _, err := Select(prot, Hints{}, testWords); err == nil || err.Error() != "no disk of at least 4 GiB; disks seen: sr0 (8 GiB): virtual media; sdz (1 GiB): smaller than 4 GiB; fix the hints or the hardware" {
		t.Errorf("protected and small disks: %v", err)
	}
	if _, err := Select(prot, Hints{Name: "sr0"}, testWords); err == nil || !strings.Contains(err.Error(), "sr0 (8 GiB): virtual media") {
		t.Errorf("a protected disk named by the hints: %v", err)
	}
	if _, err := Select(nil, Hints{}, testWords); err == nil || err.Error() != "no disk of at least 4 GiB: no disks" {
		t.Errorf("no disks: %v", err)
	}
}

func TestHintsJSON(t *testing.T) {
	yes := true
	cases := []struct {
		in      string
		want    Hints
		wantErr string
	}{
		{in: `{"size": 100}`, want: Hints{Size: "100"}},
		{in: `{"size": ">= 50", "rotational": false}`, want: Hints{Size: ">= 50", Rotational: new(bool)}},
		{in: `{"serial": "ABC", "rotational": "true"}`, want: Hints{Serial: "ABC", Rotational: &yes}},
		{in: `{"hctl": "1:0:0:0"}`, wantErr: `"hctl" is not supported`},
		{in: `{"rotational": "maybe"}`, wantErr: "not a boolean"},
		{in: `{"size": -3}`, wantErr: "not a positive integer"},
		{in: `[1]`, wantErr: "not a JSON object"},
	}
	for _, c := range cases {
		var h Hints
		err := json.Unmarshal([]byte(c.in), &h)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%s: err = %v, want containing %q", c.in, err, c.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.in, err)
			continue
		}
		if h.String() != c.want.String() {
			t.Errorf("%s: got %s, want %s", c.in, h, c.want)
		}
	}
	// A decoded value (a step's args) reads the same; nil is no hints.
	if h, err := FromValue(map[string]any{"size": 100.0, "rotational": "no"}); err != nil || h.String() != "{size=100, rotational=false}" {
		t.Errorf("FromValue: %s, %v", h, err)
	}
	if h, err := FromValue(nil); err != nil || !h.IsZero() {
		t.Errorf("FromValue(nil): %s, %v", h, err)
	}
	if _, err := FromValue("sda"); err == nil || !strings.Contains(err.Error(), "not a JSON object") {
		t.Errorf("FromValue of a string: %v", err)
	}
}
