package ramdisk_test

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/drivers/redfish/vbmc"
)

// TestRedfishQEMUHTTPBoot: a redfish node with boot_interface
// redfish-https (Ironic's UEFI HTTP boot) behind the virtual Redfish BMC
// with a QEMU machine: its inspection boots the ramdisk by UEFI HTTP
// boot. The edge agent gives the BMC the boot source override UefiHttp
// and an HttpBootUri of a per-boot ISO it serves (the ramdisk ISO with
// the boot's parameters in its GRUB menu); the BMC's firmware fetches it
// and OVMF boots it; no virtual media is inserted; the ramdisk inspects
// and the node is manageable, with the BMC's HttpBootUri cleared and the
// ISO no longer served. Debian's baremetal client shows the boot
// interface and boot_mode uefi.
func TestRedfishQEMUHTTPBoot(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU")
	}
	t.Parallel()
	iso := needISO(t)
	if _, err := os.Stat("/usr/share/ovmf/OVMF.fd"); err != nil {
		if os.Getenv("BM_REQUIRE_ALL") == "1" {
			t.Fatalf("OVMF is missing (Debian's ovmf): %v", err)
		}
		t.Skip("OVMF is missing (Debian's ovmf)")
	}
	vmDir := vmDir(t, "rfhttp")
	disk := filepath.Join(vmDir, "disk.raw")
	randomFile(t, disk, 64<<20, 31)
	console := filepath.Join(vmDir, "console.log")
	showConsole(t, console, 6144)
	t.Cleanup(func() {
		if t.Failed() {
			q, _ := os.ReadFile(filepath.Join(vmDir, "qemu.log"))
			t.Logf("qemu.log:\n%s", tail(q, 2048))
		}
	})
	l := newLab(t, labOptions{ISO: iso})
	c, cl := l.c, l.cl
	bmc := l.redfishBMC(bmcOptions{Dir: vmDir, Disk: disk, DiskSerial: "DISK0", Console: console})
	id := l.createNode("https1", "redfish", bmc.driverInfo("s3cret"),
		map[string]any{"root_device": map[string]any{"serial": "DISK0"}, "capabilities": "boot_mode:uefi"})
	l.patch(id, map[string]any{"op": "replace", "path": "/boot_interface", "value": "redfish-https"})
	l.step(id, "manage", "manageable", nil, 30*time.Second)
	cl.MustVerb(id, "inspect", nil)

	// The VM the BMC starts boots the image its firmware fetched by HTTP
	// as a CD under OVMF; the BMC's virtual media stay empty.
	line := waitCDBoot(t, vmDir, 3*time.Minute)
	if !strings.Contains(line, filepath.Join("media", "httpboot.img")) || !strings.Contains(line, "OVMF") {
		t.Fatalf("the ramdisk's VM does not boot the UEFI HTTP boot image under OVMF: %s", line)
	}
	st := bmc.state()
	if st.MediaInserted || st.USBInserted || st.BootTarget != vbmc.BootUefiHttp || st.BootMode != vbmc.ModeUEFI || !strings.Contains(st.HTTPBootURI, "/boot.iso") {
		t.Fatalf("the BMC while the ramdisk boots: %+v; want boot target UefiHttp with the agent's per-boot ISO in UEFI mode and no virtual media", st)
	}
	bootURI := st.HTTPBootURI
	fetched, err := os.ReadFile(filepath.Join(vmDir, "media", "httpboot.img"))
	if err != nil {
		t.Fatal(err)
	}
	orig, err := os.ReadFile(iso)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(fetched, orig) || !bytes.Contains(fetched, []byte("bm.node="+id)) || bytes.Contains(orig, []byte("bm.node=")) {
		t.Fatalf("the image fetched (%d bytes) is not the per-boot ISO: want the ramdisk ISO with the boot's parameters (bm.node=%s) in its menu", len(fetched), id)
	}
	start := time.Now()
	n := cl.WaitRest(id, 5*time.Minute)
	t.Logf("inspect by UEFI HTTP boot: %s %.1fs after the VM started %s", n.State, time.Since(start).Seconds(), n.LastError)
	if n.State != "manageable" {
		t.Fatalf("inspect ended in %q: %s", n.State, n.LastError)
	}
	var node struct {
		Properties map[string]any `json:"properties"`
	}
	if code := cl.Do("GET", "/v1/nodes/"+id, nil, &node); code != 200 || node.Properties["memory_mb"] == nil {
		t.Fatalf("the node after the inspection: %d, properties %v; want the ramdisk's inventory", code, node.Properties)
	}
	// Ironic's clean_up_ramdisk of redfish-https: the override's URI
	// cleared; the per-boot ISO is no longer served.
	deadline := time.Now().Add(time.Minute)
	for {
		if bmc.state().HTTPBootURI == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the BMC's HttpBootUri is still set a minute after the inspection")
		}
		time.Sleep(200 * time.Millisecond)
	}
	if st := bmc.state(); st.MediaInserted || st.USBInserted {
		t.Fatalf("virtual media inserted after the inspection: %+v", st)
	}
	if resp, err := http.Get(bootURI); err != nil || resp.StatusCode != http.StatusNotFound {
		code := 0
		if err == nil {
			code = resp.StatusCode
			resp.Body.Close()
		}
		t.Fatalf("the per-boot ISO after the inspection: %d %v; want 404", code, err)
	}
	out := secureBootCLI(t, c.APIAddr, "node", "show", id, "-f", "value", "-c", "boot_interface", "-c", "boot_mode")
	if f := strings.Fields(out); len(f) != 2 || f[0] != "redfish-https" || f[1] != "uefi" {
		t.Fatalf("baremetal node show -c boot_interface -c boot_mode: %q, want redfish-https uefi", out)
	}
}
