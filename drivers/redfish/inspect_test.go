package redfish_test

import (
	"strings"
	"testing"

	"github.com/bmedge/bmedge/drivers/redfish"
)

func TestCPUArch(t *testing.T) {
	for _, c := range []struct{ is, arch, want string }{
		{"x86-64", "x86", "x86_64"}, {"", "x86", "x86_64"}, {"ARM-A64", "ARM", "aarch64"},
		{"", "ARM", "arm"}, {"IA-64", "", "ia64"}, {"", "OEM", ""}, {"", "", ""},
	} {
		if got := redfish.CPUArch(c.is, c.arch); got != c.want {
			t.Errorf("CPUArch(%q, %q) = %q, want %q", c.is, c.arch, got, c.want)
		}
	}
}

// The virtual BMC links no Processors nor EthernetInterfaces: the reading
// still gives what the system says, with warnings naming what is missing.
func TestInspectOOBOnTheVirtualBMC(t *testing.T) {
	r := newRig(t, rigOptions{})
	d := r.driver(t, r.fastOptions())
	inv, err := d.InspectOOB(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", inv)
	if inv.CPU.Count == 0 || inv.Memory.PhysicalMB == 0 {
		t.Errorf("cpus %d, memory %d MiB: want both from the summaries", inv.CPU.Count, inv.Memory.PhysicalMB)
	}
	if !strings.Contains(strings.Join(inv.Warnings, "\n"), "EthernetInterfaces") {
		t.Errorf("no warning names the missing EthernetInterfaces: %q", inv.Warnings)
	}
}
