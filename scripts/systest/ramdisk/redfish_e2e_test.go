package ramdisk_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bmedge/bmedge/drivers/redfish/vbmc"
)

// needISO returns the built ramdisk ISO, or skips (fails under make test).
func needISO(t *testing.T) string {
	t.Helper()
	need(t)
	iso, _ := filepath.Abs("../../../build/ramdisk/bmramdisk.iso")
	if _, err := os.Stat(iso); err != nil {
		if os.Getenv("BM_REQUIRE_ALL") == "1" {
			t.Fatalf("the ramdisk ISO is missing (run make ramdisk): %v", err)
		}
		t.Skip("the ramdisk ISO is missing; run make ramdisk (make test does)")
	}
	return iso
}

// TestRedfishQEMURamdisk is the whole life of a Redfish server, with a
// QEMU VM behind the virtual Redfish BMC (over TLS, redfish_verify_ca set
// to the lab CA) driven by the edge agent in real mode: a wrong BMC
// password sends manage back to enroll with the BMC's refusal; inspect
// boots the ramdisk ISO from virtual media (the VM has no -kernel: it
// boots the CD, and finds its parameters on the virtual USB stick) and
// records the VM's properties; provide erases the disk; deploy writes the
// image, leaves the boot device on the disk and power-cycles the VM;
// undeploy cleans again. The ramdisk reaches the broker over mqtts with
// the CA pin from its parameters medium. Inspect → provide → deploy
// powers the VM on into the ramdisk three times (counted at the BMC's
// machine); then, with driver_info/fast_track=true (fast track), the same
// sequence powers it on into the ramdisk once: inspection and cleaning
// leave it running, and provide and deploy start in it.
func TestRedfishQEMURamdisk(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU several times")
	}
	t.Parallel()
	iso := needISO(t)
	vmDir := vmDir(t, "rfvm")
	diskPath := filepath.Join(vmDir, "disk.raw")
	const diskSize = 1 << 30
	randomFile(t, diskPath, 64<<20, 3)
	if err := os.Truncate(diskPath, diskSize); err != nil {
		t.Fatal(err)
	}
	console := filepath.Join(vmDir, "console.log")
	showConsole(t, console, 4096)

	// The instance image, served on loopback (the guest reaches it as 10.0.2.2).
	img := make([]byte, 16<<20)
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range img {
		img[i] = byte(rng.Uint32())
	}
	imgURL := serveFile(t, "/raw.img", img)

	// The coordinator (API and broker over TLS) and the site's edge agent
	// in real mode, serving the ISO to the BMC on loopback; the ramdisk
	// reaches the site broker of the edge agent (over TLS, at 10.0.2.2
	// from inside the VM), not the coordinator's. An ISO boot under TCG
	// (firmware, GRUB reading the CD, the kernel) takes far longer than a
	// -kernel boot: the lab gives the ramdisk 3 minutes.
	l := newLab(t, labOptions{ISO: iso, CoordinatorTLS: true, SiteTLS: true})
	cl := l.cl
	// The BMC: TLS with a certificate of the lab CA, one QEMU machine.
	bmc := l.redfishBMC(bmcOptions{Dir: vmDir, Disk: diskPath, DiskSerial: "DISK0", Console: console})
	sysID, starts := bmc.sysID, bmc.starts

	id := l.createNode("vm1", "redfish", bmc.driverInfo("wrong"), map[string]any{"root_device": map[string]any{"serial": "DISK0"}})
	n := l.step(id, "manage", "enroll", nil, 30*time.Second)
	if !strings.Contains(n.LastError, "401") {
		t.Fatalf("manage with a wrong BMC password: last_error %q does not quote the BMC's refusal", n.LastError)
	}
	if code := cl.Do("PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "replace", "path": "/driver_info/redfish_password", "value": "s3cret"}}, nil); code != 200 {
		t.Fatalf("patch: %d", code)
	}
	l.step(id, "manage", "manageable", nil, 30*time.Second)

	// BIOS settings by manual cleaning, out of band: a list without the
	// required settings fails naming the step and the argument and stages
	// nothing; a good one is staged and applied by the VM's next reset.
	bad := []map[string]any{{"interface": "bios", "step": "apply_configuration"}}
	n = l.step(id, "clean", "clean failed", map[string]any{"clean_steps": bad}, 30*time.Second)
	if !strings.Contains(n.LastError, "apply_configuration") || !strings.Contains(n.LastError, "settings") {
		t.Fatalf("clean without settings: last_error %q", n.LastError)
	}
	if st, _ := bmc.State(sysID); len(st.PendingBios) != 0 {
		t.Fatalf("a refused clean staged BIOS settings: %v", st.PendingBios)
	}
	l.step(id, "manage", "manageable", nil, 30*time.Second)
	good := []map[string]any{{"interface": "bios", "step": "apply_configuration",
		"args": map[string]any{"settings": []map[string]any{{"name": "ProcVirtualization", "value": "Disabled"}}}}}
	l.step(id, "clean", "manageable", map[string]any{"clean_steps": good}, 60*time.Second)
	if st, _ := bmc.State(sysID); st.PendingBios["ProcVirtualization"] != "Disabled" || st.Bios["ProcVirtualization"] != "Enabled" {
		t.Fatalf("after the clean step: pending %v, current %v; want the setting pending", st.PendingBios, st.Bios)
	}
	if code := cl.Do("PUT", "/v1/nodes/"+id+"/states/power", map[string]string{"target": "rebooted"}, nil); code != 202 {
		t.Fatalf("reboot: %d", code)
	}
	if got := cl.WaitRest(id, 60*time.Second); got.LastError != "" || got.PowerState != "power on" {
		t.Fatalf("reboot: %+v", got)
	}
	if st, _ := bmc.State(sysID); st.Bios["ProcVirtualization"] != "Disabled" || len(st.PendingBios) != 0 {
		t.Fatalf("after the VM's reset the BIOS holds %v (pending %v); want the setting applied", st.Bios, st.PendingBios)
	}

	// Inspect: the VM boots the ISO from the virtual CD.
	starts.reset()
	cl.MustVerb(id, "inspect", nil)
	// The VM was running (it booted its empty disk after the reset): a
	// new QEMU starts from the CD.
	cdBoot := waitCDBoot(t, vmDir, 3*time.Minute)
	if strings.Contains(cdBoot, "-kernel") || !strings.Contains(cdBoot, "id=cd0,media=cdrom,readonly=on,format=raw,file=") || !strings.Contains(cdBoot, "usb-storage") {
		t.Fatalf("the VM does not boot the ISO with its parameters stick: %s", cdBoot)
	}
	n = cl.WaitRest(id, 4*time.Minute)
	if n.State != "manageable" {
		t.Fatalf("inspect ended in %q: %s", n.State, n.LastError)
	}
	mem, _ := n.Properties["memory_mb"].(float64)
	if n.Properties["cpus"] != 1.0 || n.Properties["local_gb"] != 1.0 || mem < 900 || mem > 1100 {
		t.Fatalf("properties do not match the VM (1 CPU, 1024 MiB, 1 GiB disk): %v", n.Properties)
	}
	consoleHas(t, console, "connected to mqtts://10.0.2.2:")
	if st, _ := bmc.State(sysID); st.MediaInserted || st.USBInserted || st.PowerState != "Off" {
		t.Fatalf("after inspection the BMC shows %+v; want the media ejected and the VM off", st)
	}
	// The parameters came from the USB stick; the console (a BMC's
	// serial log, in real life) shows them with the password redacted.
	b, _ := os.ReadFile(console)
	if m := regexp.MustCompile(`bm\.password=[^<\s]`).FindIndex(b); m != nil {
		t.Fatalf("the VM console shows the broker password: %q", b[max(0, m[0]-200):m[1]])
	}
	if !bytes.Contains(b, []byte("bm.password=<redacted>")) {
		t.Fatalf("the agent's start-up line with its redacted parameters is not on the console:\n%s", tail(b, 2048))
	}

	// Provide: automated cleaning erases the disk.
	l.step(id, "provide", "available", nil, 8*time.Minute)
	if off := firstNonZero(t, diskPath); off >= 0 {
		t.Fatalf("after cleaning the disk has a non-zero byte at %d", off)
	}

	// Deploy: the image is written, the boot device stays on the disk,
	// the VM is powered off and on into the instance.
	patch := []map[string]any{{"op": "add", "path": "/instance_info/image_source", "value": imgURL},
		{"op": "add", "path": "/instance_info/image_checksum", "value": sha(img)}}
	if code := cl.Do("PATCH", "/v1/nodes/"+id, patch, nil); code != 200 {
		t.Fatalf("patch: %d", code)
	}
	n = l.step(id, "active", "active", nil, 5*time.Minute)
	if !bytes.Equal(readHead(t, diskPath, len(img)), img) {
		t.Fatal("the disk does not hold the image after deploy")
	}
	st, _ := bmc.State(sysID)
	if st.PowerState != "On" || st.BootTarget != vbmc.BootHdd || st.BootEnabled != vbmc.OverrideContinuous || st.MediaInserted || st.USBInserted {
		t.Fatalf("after deploy the BMC shows %+v; want on, boot from the disk for good, no media", st)
	}
	h := history(t, cl)
	for _, want := range []string{"deploy.tear_down_agent", "deploy.boot_instance"} {
		if !strings.Contains(h, want) {
			t.Fatalf("the deploy's history lacks %s:\n%s", want, h)
		}
	}

	if got := starts.get(); strings.Join(got, ",") != "Cd,Cd,Cd,Hdd" {
		t.Fatalf("inspect → provide → deploy started the VM from %v; want the ramdisk's CD three times, then the disk", got)
	}

	// Undeploy: cleaned again through a new ramdisk boot.
	l.step(id, "deleted", "available", nil, 8*time.Minute)
	if off := firstNonZero(t, diskPath); off >= 0 {
		t.Fatalf("after undeploy's cleaning the disk has a non-zero byte at %d", off)
	}

	// Fast track (driver_info/fast_track, as Ironic's per-node switch of
	// [deploy]fast_track): inspect → provide → deploy again, from a VM
	// that is off. The ramdisk boots once; inspection and cleaning leave
	// the VM on with its media, and the next operation starts in it.
	if st, _ := bmc.State(sysID); st.PowerState != "Off" {
		t.Fatalf("after undeploy the VM is %s, want Off", st.PowerState)
	}
	if code := cl.Do("PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "add", "path": "/driver_info/fast_track", "value": "true"}}, nil); code != 200 {
		t.Fatalf("patch fast_track: %d", code)
	}
	starts.reset()
	ftStart := time.Now()
	l.step(id, "manage", "manageable", nil, 30*time.Second)
	l.step(id, "inspect", "manageable", nil, 4*time.Minute)
	if st, _ := bmc.State(sysID); st.PowerState != "On" || !st.MediaInserted {
		t.Fatalf("fast track: after inspection the BMC shows %+v; want the VM on in its ramdisk", st)
	}
	// Data on the disk for provide's erase to remove (written in place:
	// the VM runs with the disk open).
	if f, err := os.OpenFile(diskPath, os.O_WRONLY, 0); err != nil {
		t.Fatal(err)
	} else if _, err := f.WriteAt(img, 0); err != nil || f.Close() != nil {
		t.Fatalf("write the disk: %v", err)
	}
	l.step(id, "provide", "available", nil, 8*time.Minute)
	if off := firstNonZero(t, diskPath); off >= 0 {
		t.Fatalf("fast track: after cleaning the disk has a non-zero byte at %d", off)
	}
	// Undeploy dropped instance_info.
	if code := cl.Do("PATCH", "/v1/nodes/"+id, patch, nil); code != 200 {
		t.Fatalf("patch: %d", code)
	}
	l.step(id, "active", "active", nil, 5*time.Minute)
	t.Logf("fast track: inspect → provide → deploy in %.1fs", time.Since(ftStart).Seconds())
	if !bytes.Equal(readHead(t, diskPath, len(img)), img) {
		t.Fatal("fast track: the disk does not hold the image after deploy")
	}
	if got := starts.get(); strings.Join(got, ",") != "Cd,Hdd" {
		t.Fatalf("fast track: inspect → provide → deploy started the VM from %v; want the ramdisk's CD once, then the disk", got)
	}
	if st, _ := bmc.State(sysID); st.PowerState != "On" || st.BootTarget != vbmc.BootHdd || st.MediaInserted || st.USBInserted {
		t.Fatalf("fast track: after deploy the BMC shows %+v; want on, from the disk, no media", st)
	}
	if h := history(t, cl); strings.Count(h, "fast track: the running ramdisk") != 2 {
		t.Fatalf("fast track: the history does not show provide and deploy using the running ramdisk:\n%s", h)
	}
}

// startCounter is the machine behind the BMC, counting its starts (a
// power-on, or a restart) with the device each started from.
type startCounter struct {
	vbmc.Machine
	mu     sync.Mutex
	boot   string
	starts []string
}

func (c *startCounter) SetBoot(ctx context.Context, b vbmc.Boot) error {
	err := c.Machine.SetBoot(ctx, b)
	if err == nil {
		c.mu.Lock()
		c.boot = b.Device
		c.mu.Unlock()
	}
	return err
}

func (c *startCounter) Power(ctx context.Context, action vbmc.ResetType) error {
	wasOn := c.Machine.PoweredOn()
	err := c.Machine.Power(ctx, action)
	restart := action == vbmc.ResetForceRestart || action == vbmc.ResetGracefulRestart || action == vbmc.ResetPowerCycle
	if err == nil && (restart || (action == vbmc.ResetOn && !wasOn)) {
		c.mu.Lock()
		c.starts = append(c.starts, c.boot)
		c.mu.Unlock()
	}
	return err
}

func (c *startCounter) reset() { c.mu.Lock(); c.starts = nil; c.mu.Unlock() }

func (c *startCounter) get() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.starts...)
}
