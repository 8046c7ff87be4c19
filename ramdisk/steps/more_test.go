package steps

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/protocol"
	"github.com/bmedge/bmedge/ramdisk/disk"
	"github.com/bmedge/bmedge/ramdisk/inventory"
)

func TestVerifyProperties(t *testing.T) {
	found := inventory.NodeProperties{CPUs: 1, MemoryMB: 1000, LocalGB: 1, CPUArch: "x86_64"}
	v, err := VerifyProperties(map[string]any{"cpus": 4.0, "memory_mb": "1024", "local_gb": 1.0, "cpu_arch": "x86_64"}, found, 5)
	if err != nil || len(v.Checked) != 4 || len(v.Differs) != 1 || v.Differs[0] != "cpus: node.properties says 4, the node has 1" {
		t.Fatalf("verify = %+v, %v", v, err)
	}
	v, _ = VerifyProperties(map[string]any{"memory_mb": 2048.0, "cpu_arch": "aarch64"}, found, 5)
	if len(v.Differs) != 2 || !strings.Contains(v.Differs[0], "memory_mb: node.properties says 2048, the node has 1000 (more than 5% apart)") || !strings.Contains(v.Differs[1], "cpu_arch: node.properties says aarch64, the node has x86_64") {
		t.Fatalf("differs %q", v.Differs)
	}
	if _, err := VerifyProperties(map[string]any{"cpus": "four"}, found, 5); err == nil || !strings.Contains(err.Error(), `cpus="four" is not a number`) {
		t.Fatalf("bad property: %v", err)
	}
	if v, _ := VerifyProperties(nil, found, 5); len(v.Checked) != 0 {
		t.Fatalf("nothing set, checked %v", v.Checked)
	}
}

// TestBurninNetworkNeedsConfig: the runner hands burnin_network to
// ramdisk/burnin, which refuses a step without its pairing.
func TestBurninNetworkNeedsConfig(t *testing.T) {
	_, err := runner(nil, nil).Run(t.Context(), protocol.Step{Interface: "deploy", Step: "burnin_network"}, func(float64, string) {})
	if err == nil || !strings.Contains(err.Error(), "agent_burnin_fio_network_config is required") {
		t.Fatalf("burnin_network: %v", err)
	}
}

func TestStepArgsChecked(t *testing.T) {
	r := runner(nil, nil)
	for step, args := range map[string]map[string]any{
		"burnin_cpu":    {"agent_burnin_cpu_timeout": "soon"},
		"burnin_memory": {"agent_burnin_vm_timeout": -1.0},
		"burnin_disk":   {"agent_burnin_fio_disk_loops": true},
	} {
		_, err := r.Run(t.Context(), protocol.Step{Interface: "deploy", Step: step, Args: args}, func(float64, string) {})
		if err == nil || !strings.Contains(err.Error(), "argument agent_burnin_") {
			t.Errorf("%s with %v: %v", step, args, err)
		}
	}
}

func TestBurninDiskStep(t *testing.T) {
	a := junk(t, "vda", 1<<20)
	ro := junk(t, "sdr", 1<<20)
	ro.ReadOnly = true
	r := runner([]disk.Device{a, ro}, nil)
	var pl progressLog
	step := protocol.Step{Interface: "deploy", Step: "burnin_disk", Args: map[string]any{"agent_burnin_fio_disk_loops": "1"}}
	if _, err := r.Run(t.Context(), step, pl.fn); err == nil || !strings.Contains(err.Error(), ro.Path+" is read-only (set agent_erase_skip_read_only=true") {
		t.Fatalf("read-only device: %v", err)
	}
	step.Args["agent_erase_skip_read_only"] = true
	res, err := r.Run(t.Context(), step, pl.fn)
	if err != nil {
		t.Fatal(err)
	}
	sum, _ := res["summary"].(string)
	if !strings.Contains(sum, a.Path+" 1.00 passes, 1048576 bytes verified, write ") || !strings.Contains(sum, "0 I/O errors, 0 mismatches") || !strings.Contains(sum, ro.Path+" skipped (read-only") {
		t.Fatalf("summary %q", sum)
	}
}

func TestErasePstore(t *testing.T) {
	proc, store := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(proc, "mounts"), []byte("sysfs /sys sysfs rw 0 0\npstore "+store+" pstore rw 0 0\n"), 0o644)
	for _, f := range []string{"dmesg-efi-1", "console-ramoops-0"} {
		os.WriteFile(filepath.Join(store, f), []byte("oops"), 0o644)
	}
	r := runner(nil, nil)
	r.Erase.ProcRoot = proc
	res, err := r.Run(t.Context(), protocol.Step{Interface: "deploy", Step: "erase_pstore"}, func(float64, string) {})
	if err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(store); len(left) != 0 {
		t.Fatalf("pstore still holds %v", left)
	}
	if sum, _ := res["summary"].(string); sum != "2 pstore records removed from "+store+": console-ramoops-0, dmesg-efi-1" {
		t.Fatalf("summary %q", sum)
	}
}

// A removable device fails the destructive steps naming the argument that
// skips it, and that argument is one the step declares (so that the
// coordinator accepts it).
func TestRemovableRefusedWithADeclaredArgument(t *testing.T) {
	a := junk(t, "vda", 1<<20)
	rm := junk(t, "sdu", 1<<20)
	rm.Removable = true
	r := runner([]disk.Device{a, rm}, nil)
	for _, step := range []string{"burnin_disk", "erase_devices"} {
		_, err := r.Run(t.Context(), protocol.Step{Interface: "deploy", Step: step, Args: map[string]any{"agent_burnin_fio_disk_loops": 1}}, func(float64, string) {})
		if err == nil || !strings.Contains(err.Error(), rm.Path+" is removable (set agent_erase_skip_removable=true") {
			t.Fatalf("%s: %v", step, err)
		}
		for _, arg := range []string{"agent_erase_skip_removable", "agent_erase_skip_read_only"} {
			if decl, _ := drivers.Standard("deploy", step); decl.ArgsInfo[arg].Description == "" {
				t.Errorf("deploy.%s does not declare %s, which its refusal names", step, arg)
			}
		}
	}
}
