package ramdisk_test

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestRedfishRamdiskDeployKernelRamdisk: a redfish node of the ramdisk
// deploy interface given instance_info kernel and ramdisk (no boot_iso)
// and kernel_append_params, as Ironic's prepare_boot_iso takes them: the
// site's edge agent fetches both through its image cache, builds a
// bootable ISO of them and has the virtual Redfish BMC insert it; the
// QEMU VM behind the BMC boots that ISO from its virtual CD, and its
// console shows the kernel started with the given parameters (a marker
// only the built ISO's boot loader passes) and the ramdisk unpacked; the
// node is active. Undeploy ejects the ISO. Takes about 30 s.
func TestRedfishRamdiskDeployKernelRamdisk(t *testing.T) {
	t.Parallel()
	kernel, initrd := need(t)
	l := newLab(t, labOptions{NoAgent: true, NoAutomatedClean: true})
	cfg := agent.Config{Log: l.log, SiteBroker: agent.SiteBrokerOptions{Listen: "127.0.0.1:0", URL: "mqtt://10.0.2.2"},
		// The BMC fetches the built ISO from the host: the cache on loopback.
		Cache: agent.ImageCacheOptions{Dir: t.TempDir(), Listen: "127.0.0.1:0", MaxBytes: 1 << 30,
			FetchAllow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}}
	testrig.StartAgentConfig(t, l.creds, cfg)
	kb, err := os.ReadFile(kernel)
	if err != nil {
		t.Fatal(err)
	}
	ib, err := os.ReadFile(initrd)
	if err != nil {
		t.Fatal(err)
	}
	port := serveHTTP(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/vmlinuz":
			w.Write(kb)
		case "/initrd":
			w.Write(ib)
		default:
			http.NotFound(w, r)
		}
	})
	origin := "http://127.0.0.1:" + port
	mark := make([]byte, 6)
	rand.Read(mark)
	marker := "bm.ramdiskdeploy=" + hex.EncodeToString(mark)

	vm := vmDir(t, "rdk")
	disk := filepath.Join(vm, "disk.raw")
	if err := os.WriteFile(disk, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	console := filepath.Join(vm, "console.log")
	showConsole(t, console, 8192)
	bmc := l.redfishBMC(bmcOptions{Dir: vm, Disk: disk, DiskSerial: "DISK0", Console: console, MemoryMB: 512})
	id := l.createNode("rdk1", "redfish", bmc.driverInfo("s3cret"), nil)
	l.patch(id, map[string]any{"op": "add", "path": "/deploy_interface", "value": "ramdisk"})
	l.step(id, "manage", "manageable", nil, 60*time.Second)
	l.step(id, "provide", "available", nil, 60*time.Second)
	l.patch(id,
		map[string]any{"op": "add", "path": "/instance_info/kernel", "value": origin + "/vmlinuz"},
		map[string]any{"op": "add", "path": "/instance_info/ramdisk", "value": origin + "/initrd"},
		map[string]any{"op": "add", "path": "/instance_info/kernel_append_params", "value": "console=ttyS0 panic=-1 " + marker})
	start := time.Now()
	l.step(id, "active", "active", nil, 90*time.Second)
	// Sized for a loaded machine under TCG: the VM sat in GRUB for over
	// a minute under stress-ng.
	if !waitConsole(t, console, marker, 4*time.Minute) {
		t.Fatalf("the VM's console never showed the kernel command line with %s", marker)
	}
	if b, _ := os.ReadFile(console); !strings.Contains(string(b), "Command line: BOOT_IMAGE=/boot/vmlinuz console=ttyS0 panic=-1 "+marker) {
		t.Fatalf("the console shows the marker, but not on the kernel's command line as the built ISO's GRUB passes it")
	}
	// The kernel unpacks the ramdisk it was given.
	if !waitConsole(t, console, "Freeing initrd memory", 4*time.Minute) {
		t.Fatalf("the kernel never unpacked the ramdisk")
	}
	t.Logf("active, and the kernel of the built ISO started, %.1fs after the deploy", time.Since(start).Seconds())
	if st := bmc.state(); !st.MediaInserted {
		t.Fatalf("BMC state when active: %+v; want the built ISO inserted", st)
	}
	l.step(id, "deleted", "available", nil, 60*time.Second)
	if st := bmc.state(); st.MediaInserted {
		t.Fatalf("after undeploy the BMC still holds the ISO: %+v", st)
	}
}
