package vbmc_test

import (
	"context"
	"net/http"
	"net/http/httptest"
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

// TestSushyFirmwareVolumesRegistry runs python3-sushy through the vBMC's
// SimpleUpdate (a task that completes and one that fails, the version
// changing only at the next start), volume create/refuse/delete and the
// BIOS attribute registry with a PATCH refused by its bounds.
func TestSushyFirmwareVolumesRegistry(t *testing.T) {
	py := requireSushy(t)
	files := map[string][]byte{
		"/bios.bin": vbmc.FirmwareImage(vbmc.ComponentBIOS, "1.1.0"),
		"/fail.bin": vbmc.FirmwareImage(vbmc.ComponentBIOS, "2.0.0", "fail=flash write error"),
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if data, ok := files[r.URL.Path]; ok {
			_, _ = w.Write(data)
			return
		}
		http.NotFound(w, r)
	}))
	defer srv.Close()
	l := newLab(t, vbmc.Config{UpdateDelay: 50 * time.Millisecond})
	script, err := filepath.Abs("testdata/sushy_oob.py")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, py, script, l.url, "admin", "s3cret", srv.URL+"/bios.bin", srv.URL+"/fail.bin").CombinedOutput()
	t.Logf("sushy:\n%s", out)
	if err != nil || !strings.Contains(string(out), "ALL OK") {
		t.Fatalf("sushy check failed: %v", err)
	}
	installed, pending, err := l.bmc.Firmware("1")
	if err != nil || installed["bios"] != "1.1.0" || len(pending) != 0 {
		t.Fatalf("firmware after sushy: %v %v %v", installed, pending, err)
	}
	tasks := l.bmc.Tasks()
	if len(tasks) != 2 || tasks[0].State != vbmc.TaskCompleted || tasks[1].State != vbmc.TaskException {
		t.Fatalf("tasks: %+v", tasks)
	}
}

// TestSushySecureBoot runs python3-sushy through the SecureBoot resource
// as Ironic's set_secure_boot_state does (set_enabled, then a read), and
// a start that boots with it.
func TestSushySecureBoot(t *testing.T) {
	py := requireSushy(t)
	l := newLab(t, vbmc.Config{})
	script, err := filepath.Abs("testdata/sushy_secureboot.py")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, py, script, l.url, "admin", "s3cret").CombinedOutput()
	t.Logf("sushy:\n%s", out)
	if err != nil || !strings.Contains(string(out), "ALL OK") {
		t.Fatalf("sushy check failed: %v", err)
	}
	if st, _ := l.bmc.State("1"); !st.SecureBoot {
		t.Fatalf("state after sushy: %+v", st)
	}
	if starts := l.machine.Starts(); len(starts) != 1 || !starts[0].SecureBoot {
		t.Fatalf("machine starts = %+v; want one with Secure Boot", starts)
	}
}
