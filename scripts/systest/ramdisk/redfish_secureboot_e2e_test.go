package ramdisk_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/drivers/redfish/vbmc"
)

// TestQEMURedfishSecureBoot: a Redfish node behind the virtual BMC (its
// system in Legacy mode, Secure Boot off; a QEMU VM behind it) with
// Ironic's capability secure_boot:true is inspected through the
// coordinator and a real-mode edge agent. The boot command says
// secure_boot, so the agent has the redfish driver set the boot mode to
// UEFI and turn the SecureBoot resource on before it inserts the ramdisk
// ISO; the BMC then starts the VM on OVMF's Secure Boot firmware with
// Microsoft's keys, which boots the ISO's signed chain (shim, GRUB, the
// kernel) from the virtual CD. The ramdisk inspects and reports Secure
// Boot on; Debian's baremetal client shows boot_mode uefi and secure_boot
// True. A second node, behind a BMC without the SecureBoot resource,
// fails its inspection with a last_error naming what the BMC lacks, and
// its machine never starts.
func TestQEMURedfishSecureBoot(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU")
	}
	t.Parallel()
	dir := secureBootRamdisk(t)
	iso := filepath.Join(dir, "bmramdisk.iso")
	vmDir := vmDir(t, "rfsb")
	disk := filepath.Join(vmDir, "disk.raw")
	randomFile(t, disk, 64<<20, 29)
	console := filepath.Join(vmDir, "console.log")
	showConsole(t, console, 6144)
	t.Cleanup(func() {
		if t.Failed() {
			q, _ := os.ReadFile(filepath.Join(vmDir, "qemu.log"))
			t.Logf("qemu.log:\n%s", tail(q, 2048))
		}
	})
	// The ramdisk reaches the agent's site broker at 10.0.2.2 (QEMU's
	// user network's host) from inside the VM.
	l := newLab(t, labOptions{ISO: iso})
	c, cl := l.c, l.cl
	bmc := l.redfishBMC(bmcOptions{Dir: vmDir, Disk: disk, DiskSerial: "DISK0", Console: console, SecureBoot: true})
	// The BMC that lacks the SecureBoot resource: its machine in memory
	// (it must never start).
	bmc2 := l.redfishBMC(bmcOptions{Memory: true})
	plain := bmc2.memory

	create := func(name, url string) string {
		t.Helper()
		return l.createNode(name, "redfish", map[string]any{"redfish_address": url, "redfish_username": "admin", "redfish_password": "s3cret"},
			map[string]any{"root_device": map[string]any{"serial": "DISK0"}, "capabilities": "boot_mode:uefi,secure_boot:true"})
	}

	// Without the SecureBoot resource: refused before anything boots.
	id2 := create("sb-none", bmc2.url)
	l.step(id2, "manage", "manageable", nil, 30*time.Second)
	n := l.step(id2, "inspect", "inspect failed", nil, 60*time.Second)
	if !strings.Contains(n.LastError, "no SecureBoot resource") || !strings.Contains(n.LastError, "secure_boot:true") {
		t.Fatalf("inspection on a BMC without SecureBoot: last_error %q does not name what the BMC lacks", n.LastError)
	}
	if st, _ := bmc2.State(bmc2.SystemIDs()[0]); len(plain.Starts()) != 0 || st.MediaInserted || st.PowerState != "Off" {
		t.Fatalf("the BMC without SecureBoot: starts %v, state %+v; want nothing started or inserted", plain.Starts(), st)
	}

	id := create("sb-redfish", bmc.url)
	l.step(id, "manage", "manageable", nil, 30*time.Second)
	cl.MustVerb(id, "inspect", nil)
	// The VM the BMC starts for the ramdisk runs OVMF's Secure Boot code.
	line := waitCDBoot(t, vmDir, 3*time.Minute)
	if !strings.Contains(line, "unit=0,readonly=on,file="+ovmfSecureCode) || !strings.Contains(line, "property=secure,value=on") {
		t.Fatalf("the ramdisk's VM does not run the Secure Boot firmware: %s", line)
	}
	start := time.Now()
	n = cl.WaitRest(id, 4*time.Minute)
	t.Logf("inspect: %s %.1fs after the VM started %s", n.State, time.Since(start).Seconds(), n.LastError)
	if n.State != "manageable" {
		t.Fatalf("inspect ended in %q: %s", n.State, n.LastError)
	}
	if st, _ := bmc.State(bmc.SystemIDs()[0]); !st.SecureBoot || st.BootMode != vbmc.ModeUEFI {
		t.Fatalf("the BMC after the inspection: %+v; want SecureBootEnable on and boot mode UEFI", st)
	}
	secureBootConsole(t, console)
	out := secureBootCLI(t, c.APIAddr, "node", "show", id, "-f", "value", "-c", "boot_mode", "-c", "secure_boot")
	if f := strings.Fields(out); len(f) != 2 || f[0] != "uefi" || f[1] != "True" {
		t.Fatalf("baremetal node show -c boot_mode -c secure_boot: %q, want uefi True", out)
	}
	t.Logf("baremetal node show: boot_mode, secure_boot = %s", strings.Join(strings.Fields(out), " "))
}
