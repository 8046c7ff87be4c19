package inventory

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/bmedge/bmedge/ramdisk/image"
)

const gib = 1 << 30

func TestPropertiesWithHints(t *testing.T) {
	inv := Inventory{
		CPU:    CPU{Count: 8, Architecture: "x86_64"},
		Memory: Memory{Total: 15 * gib, PhysicalMB: 16384},
		Disks: []Disk{
			{Name: "/dev/sda", Size: 2 * gib, Serial: "USB1", Removable: true}, // too small without hints
			{Name: "/dev/sdb", Size: 500 * gib, Serial: "BIG", Rotational: true},
			{Name: "/dev/sdc", Size: 120 * gib, Serial: "SSD"},
			{Name: "/dev/sr0", Size: 700 << 20, VirtualMedia: true, ReadOnly: true},
			{Name: "/dev/vdb", Size: 2 * gib, Serial: "SMALL"}, // too small without hints
		},
	}
	p, err := Properties(inv)
	if err != nil {
		t.Fatal(err)
	}
	if p.CPUs != 8 || p.MemoryMB != 16384 || p.CPUArch != "x86_64" || p.LocalGB != 120 || p.RootDisk != "/dev/sdc" {
		t.Fatalf("no hints: %+v, want 8 CPUs, 16384 MiB, x86_64, the smallest disk of at least 4 GiB (sdc, 120)", p)
	}

	var hints image.RootDeviceHints
	if err := json.Unmarshal([]byte(`{"serial": "BIG"}`), &hints); err != nil {
		t.Fatal(err)
	}
	if p, err = PropertiesWithHints(inv, hints); err != nil || p.LocalGB != 500 || p.RootDisk != "/dev/sdb" {
		t.Fatalf("serial hint: %+v %v, want sdb with 500", p, err)
	}
	// A hint may pick a small disk: the operator asked for it.
	if err := json.Unmarshal([]byte(`{"name": "/dev/vdb"}`), &hints); err != nil {
		t.Fatal(err)
	}
	if p, err = PropertiesWithHints(inv, hints); err != nil || p.LocalGB != 2 || p.RootDisk != "/dev/vdb" {
		t.Fatalf("name hint: %+v %v, want vdb with 2", p, err)
	}
	// Not a removable one (a USB stick, a BMC's virtual media).
	if err := json.Unmarshal([]byte(`{"name": "/dev/sda"}`), &hints); err != nil {
		t.Fatal(err)
	}
	if _, err = PropertiesWithHints(inv, hints); err == nil || !strings.Contains(err.Error(), "sda (2 GiB, serial USB1): removable") {
		t.Fatalf("a hint naming a removable disk: %v", err)
	}
	if err := json.Unmarshal([]byte(`{"serial": "NOPE"}`), &hints); err != nil {
		t.Fatal(err)
	}
	if _, err = PropertiesWithHints(inv, hints); err == nil || !strings.Contains(err.Error(), "NOPE") {
		t.Fatalf("hints matching nothing: %v, want an error naming the hint", err)
	}

	// Diskless without hints is a valid node with local_gb 0; the
	// memory falls back to the kernel's total.
	p, err = Properties(Inventory{CPU: CPU{Count: 2, Architecture: "aarch64"}, Memory: Memory{Total: 3 * gib}})
	if err != nil || p.LocalGB != 0 || p.RootDisk != "" || p.MemoryMB != 3072 {
		t.Fatalf("diskless: %+v %v", p, err)
	}
}

// Collect on the machine running the test: whatever it is, the required
// parts are there and consistent with what Go sees.
func TestCollectHere(t *testing.T) {
	inv, err := Collect(t.Context(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if inv.CPU.Count < runtime.NumCPU() {
		t.Errorf("CPU count %d, but Go may use %d", inv.CPU.Count, runtime.NumCPU())
	}
	if inv.CPU.Architecture == "" || inv.Memory.Total == 0 || inv.Memory.PhysicalMB == 0 {
		t.Errorf("inventory lacks arch or memory: %+v", inv)
	}
	if m := map[string]string{"amd64": "x86_64", "arm64": "aarch64"}[runtime.GOARCH]; m != "" && inv.CPU.Architecture != m {
		t.Errorf("architecture %q on GOARCH %s", inv.CPU.Architecture, runtime.GOARCH)
	}
	if b := inv.Boot.CurrentBootMode; b != "uefi" && b != "bios" {
		t.Errorf("boot mode %q, want uefi or bios", b)
	}
	for _, d := range inv.Disks {
		if !strings.HasPrefix(d.Name, "/dev/") || d.Size == 0 {
			t.Errorf("disk %+v: want a /dev path and a size", d)
		}
	}
	for _, n := range inv.Interfaces {
		if n.Name == "lo" {
			t.Error("loopback listed as an interface")
		}
	}
	if _, err := json.Marshal(inv); err != nil {
		t.Fatal(err)
	}
}

func TestCollectCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := Collect(ctx, Options{}); err == nil || !strings.Contains(err.Error(), "cancelled") {
		t.Fatalf("cancelled collect: %v", err)
	}
}

// TestReadSecureBoot reads the SecureBoot variable of efivarfs trees
// written as the kernel shows them: four attribute bytes, then the value.
func TestReadSecureBoot(t *testing.T) {
	tree := func(vars map[string][]byte) string {
		root := t.TempDir()
		dir := filepath.Join(root, "sys/firmware/efi/efivars")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, b := range vars {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return root
	}
	const sb = "SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
	attrs := []byte{6, 0, 0, 0} // boot service and runtime access
	other := map[string][]byte{"BootOrder-8be4df61-93ca-11d2-aa0d-00e098032b8c": {7, 0, 0, 0, 1, 0}}
	for _, c := range []struct {
		name    string
		vars    map[string][]byte
		on      bool
		wantErr string
	}{
		{"on", map[string][]byte{sb: append(attrs, 1)}, true, ""},
		{"off", map[string][]byte{sb: append(attrs, 0)}, false, ""},
		{"no such variable", other, false, ""},
		{"not mounted", nil, false, "efivarfs is not mounted"},
		{"short", map[string][]byte{sb: {6, 0, 0}}, false, "has 3 bytes, want 5"},
	} {
		on, err := ReadSecureBoot(tree(c.vars))
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%s: %v, want an error with %q", c.name, err, c.wantErr)
			}
			continue
		}
		if err != nil || on != c.on {
			t.Errorf("%s: %v %v, want %v", c.name, on, err, c.on)
		}
	}
	if _, err := ReadSecureBoot(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no UEFI variables at") {
		t.Errorf("no efivars folder: %v", err)
	}
}
