package ipmisim

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bmedge/bmedge/lib/waitfor"
)

// The power-on hook, which a QEMU lab will use to start a VM: it runs at
// power-on with the boot device in force, detached (ipmitool gets its
// answer at once), and is killed at power-off and by Close.
func TestPowerOnCommand(t *testing.T) {
	s := StartTest(t, Options{PowerOn: `echo "$BM_IPMISIM_BOOT" >>"$(dirname "$0")/boots"; exec sleep 600`})
	dir := s.Dir

	if _, err := s.Ipmitool("chassis", "bootdev", "pxe"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := s.Ipmitool("chassis", "power", "on"); err != nil {
		t.Fatal(err)
	}
	// A script that waited for QEMU would hold ipmitool until QEMU ends
	// (never, here); a loaded machine takes a few seconds at most.
	if d := time.Since(start); d > 15*time.Second {
		t.Fatalf("power on took %s: the script waited for the command", d)
	}
	pid := waitPid(t, dir)
	if !alive(pid) {
		t.Fatalf("power-on command %d is not running", pid)
	}
	waitFor(t, func() bool { b, _ := os.ReadFile(filepath.Join(dir, "boots")); return string(b) == "pxe\n" }, "the command to see BM_IPMISIM_BOOT=pxe")
	if out, err := s.Ipmitool("chassis", "power", "status"); err != nil || !strings.Contains(out, "is on") {
		t.Fatalf("power status: %q, %v", out, err)
	}

	if _, err := s.Ipmitool("chassis", "power", "off"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return !alive(pid) }, "power off to kill the command")
	if c, err := s.Chassis(); err != nil || c.Power {
		t.Fatalf("chassis after power off: %+v, %v", c, err)
	}

	if _, err := s.Ipmitool("chassis", "power", "on"); err != nil {
		t.Fatal(err)
	}
	pid = waitPid(t, dir)
	s.Close()
	waitFor(t, func() bool { return !alive(pid) }, "Close to kill the command")
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("Close left %s: %v", dir, err)
	}
}

func waitPid(t *testing.T, dir string) int {
	t.Helper()
	var pid int
	waitFor(t, func() bool {
		b, err := os.ReadFile(filepath.Join(dir, "power-on.pid"))
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pid > 0
	}, "power-on.pid")
	return pid
}

// alive reports whether pid runs (a zombie of a killed child counts as
// gone: the command's parent, the script, has exited, so init reaps it).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	return len(f) < 3 || f[2] != "Z"
}

func waitFor(t *testing.T, ok func() bool, what string) {
	t.Helper()
	if !waitfor.Until(5*time.Second, ok) {
		t.Fatalf("timed out waiting for %s", what)
	}
}
