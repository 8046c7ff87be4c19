package ramdisk_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/drivers/redfish/vbmc"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
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
	dir := secureBootRamdisk(t)
	iso := filepath.Join(dir, "bmramdisk.iso")
	qemu, _ := exec.LookPath("qemu-system-x86_64")
	vmDir, err := os.MkdirTemp("", "rfsb")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(vmDir) })
	disk := filepath.Join(vmDir, "disk.raw")
	randomFile(t, disk, 64<<20, 29)
	console := filepath.Join(vmDir, "console.log")
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(console)
			t.Logf("VM console (last 6 KiB, terminal escapes left out):\n%s", tail(ansiEscape.ReplaceAll(b, []byte(" ")), 6144))
			q, _ := os.ReadFile(filepath.Join(vmDir, "qemu.log"))
			t.Logf("qemu.log:\n%s", tail(q, 2048))
		}
	})
	machine, err := vbmc.NewQEMUMachine(vbmc.QEMUConfig{QEMU: qemu, Dir: vmDir, Disk: disk, DiskSerial: "DISK0", MemoryMB: 1024,
		Console: console, OVMFSecureCode: ovmfSecureCode, OVMFSecureVars: ovmfSecureVars, Logger: testrig.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	bmc, err := vbmc.New(vbmc.Config{Username: "admin", Password: "s3cret", Logger: testrig.Logger(t),
		Systems: []vbmc.SystemConfig{{Machine: machine, BootMode: vbmc.ModeLegacy, CPUs: 1, MemoryGiB: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	bmcSrv, err := vbmc.Serve(bmc, vbmc.ServeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bmcSrv.Close(); bmc.Close(); machine.Close() })
	// The BMC that lacks the SecureBoot resource: its machine in memory
	// (it must never start).
	plain := vbmc.NewMemoryMachine(vbmc.MemoryOptions{})
	bmc2, err := vbmc.New(vbmc.Config{Username: "admin", Password: "s3cret", Logger: testrig.Logger(t),
		Systems: []vbmc.SystemConfig{{Machine: plain, NoSecureBoot: true}}})
	if err != nil {
		t.Fatal(err)
	}
	bmc2Srv, err := vbmc.Serve(bmc2, vbmc.ServeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bmc2Srv.Close(); bmc2.Close() })

	c := testrig.Coordinator(t, testrig.Options{Machine: fsm.Config{WaitTimeout: 3 * time.Minute}})
	cl := testrig.NewClient(t, c)
	var creds agent.Credentials
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "lab"}, &creds); code != 201 {
		t.Fatalf("site: %d", code)
	}
	// The ramdisk reaches the agent's site broker at 10.0.2.2 (QEMU's
	// user network's host) from inside the VM.
	testrig.StartAgentConfig(t, creds, agent.Config{Ramdisk: agent.RamdiskOptions{ISO: iso, Listen: "127.0.0.1:0"},
		SiteBroker: agent.SiteBrokerOptions{Listen: "127.0.0.1:0", URL: "mqtt://10.0.2.2"}})

	create := func(name, url string) string {
		t.Helper()
		var n testrig.Node
		body := map[string]any{"name": name, "driver": "redfish", "conductor_group": "lab",
			"driver_info": map[string]any{"redfish_address": url, "redfish_username": "admin", "redfish_password": "s3cret"},
			"properties":  map[string]any{"root_device": map[string]any{"serial": "DISK0"}, "capabilities": "boot_mode:uefi,secure_boot:true"}}
		if code := cl.Do("POST", "/v1/nodes", body, &n); code != 201 {
			t.Fatalf("create %s: %d", name, code)
		}
		return n.UUID
	}
	verb := func(id, v, want string, d time.Duration) testrig.Node {
		t.Helper()
		start := time.Now()
		cl.MustVerb(id, v, nil)
		got := cl.WaitRest(id, d)
		t.Logf("%s: %s in %.1fs %s", v, got.State, time.Since(start).Seconds(), got.LastError)
		if got.State != want {
			t.Fatalf("%s ended in %q, want %q: %s", v, got.State, want, got.LastError)
		}
		return got
	}

	// Without the SecureBoot resource: refused before anything boots.
	id2 := create("sb-none", bmc2Srv.URL)
	verb(id2, "manage", "manageable", 30*time.Second)
	n := verb(id2, "inspect", "inspect failed", 60*time.Second)
	if !strings.Contains(n.LastError, "no SecureBoot resource") || !strings.Contains(n.LastError, "secure_boot:true") {
		t.Fatalf("inspection on a BMC without SecureBoot: last_error %q does not name what the BMC lacks", n.LastError)
	}
	if st, _ := bmc2.State(bmc2.SystemIDs()[0]); len(plain.Starts()) != 0 || st.MediaInserted || st.PowerState != "Off" {
		t.Fatalf("the BMC without SecureBoot: starts %v, state %+v; want nothing started or inserted", plain.Starts(), st)
	}

	id := create("sb-redfish", bmcSrv.URL)
	verb(id, "manage", "manageable", 30*time.Second)
	cl.MustVerb(id, "inspect", nil)
	// The VM the BMC starts for the ramdisk runs OVMF's Secure Boot code.
	deadline := time.Now().Add(60 * time.Second)
	var line string
	for line == "" {
		if time.Now().After(deadline) {
			t.Fatalf("no QEMU booting from the CD; running: %q", qemuCmdlines(t, vmDir))
		}
		time.Sleep(100 * time.Millisecond)
		for _, l := range qemuCmdlines(t, vmDir) {
			if strings.Contains(l, "id=cd,bootindex=0") {
				line = l
			}
		}
	}
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
