package bmc

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/lib/roothints"
	"github.com/bmedge/bmedge/protocol"
)

// inspectorBMC is a BMC that inspects out of band and counts power
// actions and boot-device changes (an inspection makes none).
type inspectorBMC struct {
	stubBMC
	inv             drivers.OOBInventory
	power, bootDevs int
}

func (b *inspectorBMC) InspectOOB(context.Context) (drivers.OOBInventory, error) { return b.inv, nil }
func (b *inspectorBMC) SetPower(context.Context, string) error                   { b.power++; return nil }
func (b *inspectorBMC) SetBootDevice(context.Context, string) error              { b.bootDevs++; return nil }

// TestInspectOOB: the step inspect.inspect_hardware returns the BMC's
// reading as the ramdisk's inspection does (inventory, properties with
// local_gb of the root disk the hints choose, capabilities' boot_mode),
// plugin data naming its origin, the reading's warnings as the command's
// warnings, with no power action; hints that match nothing fail the
// step, a BMC that cannot inspect out of band is refused saying what to
// do.
func TestInspectOOB(t *testing.T) {
	const gib = 1 << 30
	inv := drivers.OOBInventory{
		CPU:    drivers.OOBCPU{Count: 32, Architecture: "x86_64", ModelName: "Xeon"},
		Memory: drivers.OOBMemory{PhysicalMB: 487424},
		Disks: []drivers.OOBDisk{{Name: "Disk.Bay.1", Size: 1800 * gib, Rotational: true, Serial: "S1"},
			{Name: "Disk.Bay.0", Size: 480 * gib, Serial: "S0"}, {Name: "SD.1", Size: 2 * gib}},
		Interfaces: []drivers.OOBInterface{{Name: "NIC.1", MACAddress: "52:54:00:aa:bb:01"}},
		Boot:       drivers.OOBBoot{CurrentBootMode: "uefi"},
		Warnings:   []string{"Storage /redfish/v1/Systems/1/Storage/2: HTTP 404"},
	}
	b := &inspectorBMC{inv: inv}
	s := New(Config{Site: "s1", Log: slog.New(slog.DiscardHandler)})
	s.Put("n1", "redfish", b)
	run := func(args map[string]any) (map[string]any, error) {
		ctx, data := WithData(context.Background())
		m := &protocol.Message{Node: "n1", Driver: "redfish", Action: protocol.ActionOOBStep,
			Step: &protocol.Step{Interface: drivers.OOBInspectInterface, Step: drivers.OOBInspectStep, Args: args}}
		err := s.Exec(ctx, m, noBooter{})
		return data(), err
	}
	d, err := run(nil)
	if err != nil {
		t.Fatal(err)
	}
	j, _ := json.Marshal(d)
	props, _ := d["properties"].(map[string]any)
	if props["cpus"] != 32.0 || props["memory_mb"] != 487424.0 || props["cpu_arch"] != "x86_64" || props["local_gb"] != 480.0 {
		t.Fatalf("properties %v; want 32 CPUs, 487424 MiB, x86_64, local_gb 480 (the smallest disk of at least 4 GiB)", props)
	}
	if caps, _ := d["capabilities"].(map[string]any); caps["boot_mode"] != "uefi" {
		t.Fatalf("capabilities %v", caps)
	}
	pd, _ := d["plugin_data"].(map[string]any)
	if pd["inspect_interface"] != "redfish" || pd["source"] != "bmc" || pd["root_disk"] != "Disk.Bay.0" {
		t.Fatalf("plugin_data %v", pd)
	}
	inventory, _ := d["inventory"].(map[string]any)
	if ifs, _ := inventory["interfaces"].([]any); len(ifs) != 1 || inventory["warnings"] != nil {
		t.Fatalf("inventory %s", j)
	}
	if w, _ := d[protocol.DataWarnings].([]any); len(w) != 1 || !strings.Contains(w[0].(string), "HTTP 404") {
		t.Fatalf("warnings %v; want the partial reading's", d[protocol.DataWarnings])
	}
	if b.power != 0 || b.bootDevs != 0 {
		t.Fatalf("the inspection made %d power actions and %d boot device changes", b.power, b.bootDevs)
	}
	if d[protocol.DataPowerState] != nil {
		t.Fatalf("an inspection read the power state back: %v", d[protocol.DataPowerState])
	}

	d, err = run(map[string]any{"root_device": map[string]any{"size": ">= 1000"}})
	if props, _ := d["properties"].(map[string]any); err != nil || props["local_gb"] != 1800.0 {
		t.Fatalf("with hint size >= 1000: %v, %v", err, d["properties"])
	}
	if _, err = run(map[string]any{"root_device": map[string]any{"serial": "nope"}}); err == nil || !strings.Contains(err.Error(), "no disk matches the root device hints") {
		t.Fatalf("hints that match nothing: %v", err)
	}
	if _, err = run(map[string]any{"root_device": map[string]any{"hctl": "0:0:0:0"}}); err == nil || !strings.Contains(err.Error(), `"hctl" is not supported`) {
		t.Fatalf("an unsupported hint: %v", err)
	}
	s.Put("n1", "redfish", &stubBMC{})
	if _, err = run(nil); err == nil || !strings.Contains(err.Error(), "set the node's inspect_interface to agent") {
		t.Fatalf("a BMC without out-of-band inspection: %v", err)
	}
}

// noBooter is a Booter that must not be used.
type noBooter struct{}

func (noBooter) SetBootDevice(context.Context, string, drivers.BMC, string) error {
	panic("boot device changed")
}
func (noBooter) SetPower(context.Context, string, drivers.BMC, string) error { panic("power changed") }
func (noBooter) NoteArgs(string, map[string]any)                             {}

// TestSelectRootByName: the rule is lib/roothints' (tested there,
// TestRootHintsAsTheRamdisk, as the ramdisk applies it); the agent gives
// it a BMC's disks by name, as the ramdisk lists its devices, and names
// them in its errors as the BMC's.
func TestSelectRootByName(t *testing.T) {
	const gib = 1 << 30
	disks := []drivers.OOBDisk{
		{Name: "sda", Size: 1800 * gib, Rotational: true, Serial: "WD-1"},
		{Name: "sdb", Size: 480 * gib, Serial: "S3Z"},
		{Name: "nvme0n1", Size: 960 * gib, Serial: "PHL"},
	}
	if d, err := selectRoot(disks, roothints.Hints{Size: ">= 900"}); err != nil || d.Name != "nvme0n1" {
		t.Errorf("size >= 900: %q, %v; want nvme0n1, the first by name", d.Name, err)
	}
	if disks[0].Name != "sda" {
		t.Errorf("selectRoot reordered the disks it was given: %v", disks)
	}
	if d, err := selectRoot(disks, roothints.Hints{}); err != nil || d.Name != "sdb" {
		t.Errorf("no hints: %q, %v; want sdb, the smallest of at least 4 GiB", d.Name, err)
	}
	if _, err := selectRoot(disks, roothints.Hints{Serial: "none"}); err == nil || !strings.Contains(err.Error(), "no disk matches the root device hints {serial=none}; disks the BMC reports: nvme0n1 (960 GiB, serial PHL): serial none does not match") {
		t.Errorf("no match: %v", err)
	}
	if _, err := selectRoot(nil, roothints.Hints{}); err == nil || err.Error() != "no disk of at least 4 GiB: the BMC reports no disks" {
		t.Errorf("no disks: %v", err)
	}
}
