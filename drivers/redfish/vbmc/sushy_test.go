package vbmc_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/drivers/redfish/vbmc"
)

// requireSushy returns Debian's python3 when it can import sushy. Debian's
// python3-sushy lives in /usr/lib/python3/dist-packages, which the first
// python3 on PATH (a virtualenv, a newer build) may not see, so it is
// /usr/bin/python3 by name. With BM_REQUIRE_ALL=1 a missing sushy fails.
func requireSushy(t *testing.T) string {
	t.Helper()
	const py = "/usr/bin/python3"
	err := exec.Command(py, "-c", "import sushy").Run()
	if err == nil {
		return py
	}
	if os.Getenv("BM_REQUIRE_ALL") == "1" {
		t.Fatalf("python3-sushy is not usable with %s (%v); run scripts/install-test-deps.sh", py, err)
	}
	t.Skipf("python3-sushy is not usable with %s (%v); run scripts/install-test-deps.sh (make test does)", py, err)
	return ""
}

// TestSushyDrivesTheVBMC runs an independent client, OpenStack's sushy,
// through login, power, boot override, virtual media, BIOS settings, a
// manager reset (re-login) and logout, then checks the BMC's own state.
func TestSushyDrivesTheVBMC(t *testing.T) {
	py := requireSushy(t)
	l := newLab(t, vbmc.Config{SessionLimit: 2})
	script, err := filepath.Abs("testdata/sushy_check.py")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	image := "http://10.0.2.2:8080/boot.iso"
	out, err := exec.CommandContext(ctx, py, script, l.url, "admin", "s3cret", image).CombinedOutput()
	t.Logf("sushy:\n%s", out)
	if err != nil || !strings.Contains(string(out), "ALL OK") {
		t.Fatalf("sushy check failed: %v", err)
	}
	st, err := l.bmc.State("1")
	if err != nil {
		t.Fatal(err)
	}
	if st.PowerState != "Off" || st.BootTarget != "Hdd" || st.BootEnabled != "Continuous" || st.MediaInserted {
		t.Fatalf("state after sushy: %+v", st)
	}
	if st.Bios["ProcVirtualization"] != "Disabled" || st.Bios["BootDelaySeconds"] != float64(7) || len(st.PendingBios) != 0 {
		t.Fatalf("BIOS after sushy: %+v", st)
	}
	starts := l.machine.Starts()
	if len(starts) != 3 || starts[0].Device != "Hdd" || starts[1].Device != "Pxe" || starts[2].Device != "Hdd" {
		t.Fatalf("machine starts = %+v; want Hdd (On), Pxe (restart with the Once override), Hdd", starts)
	}
	if l.bmc.ManagerResets() != 1 {
		t.Fatalf("manager resets = %d", l.bmc.ManagerResets())
	}
	if n := l.bmc.Sessions(); n != 0 {
		t.Fatalf("%d sessions left open after sushy logged out", n)
	}
}
