package ramdisk_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/drivers/redfish/vbmc"
)

// unsignedDiskGRUB is Debian's GRUB for disks unsigned (package
// grub-efi-amd64-bin): the program the signed grubx64.efi is, without
// the signature.
const unsignedDiskGRUB = "/usr/lib/grub/x86_64-efi/monolithic/grubx64.efi"

// instanceMarker is what a whole-disk image's GRUB configuration
// (wholeDiskImage) says on the console before it boots the kernel.
var instanceMarker = regexp.MustCompile(`bmedge-instance: GRUB boots the ([a-z]+) image`)

// isoChain takes the ramdisk ISO's signed chain out of its EFI system
// partition image: shim (EFI/BOOT/BOOTX64.EFI) and Debian's signed GRUB
// beside it (grubx64.efi), as scripts/build-ramdisk.sh put them there.
func isoChain(t *testing.T, iso string) (shim, grub string) {
	t.Helper()
	dir := t.TempDir()
	esp := filepath.Join(dir, "efi.img")
	shim, grub = filepath.Join(dir, "shimx64.efi"), filepath.Join(dir, "grubx64.efi")
	for _, c := range [][]string{
		{"xorriso", "-osirrox", "on", "-indev", iso, "-extract", "/boot/grub/efi.img", esp},
		{"mcopy", "-i", esp, "::/EFI/BOOT/BOOTX64.EFI", shim},
		{"mcopy", "-i", esp, "::/EFI/BOOT/grubx64.efi", grub},
	} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(c, " "), err, out)
		}
	}
	return shim, grub
}

// wholeDiskImage is a UEFI whole-disk image as an operator's would be: a
// GPT with one EFI system partition (FAT) whose EFI/BOOT/BOOTX64.EFI is
// loader (beside it grub, when not ""), with the kernel, a GRUB
// configuration that says instanceMarker with name and boots the kernel
// on the serial console, and the .disk/info GRUB's embedded configuration
// looks for.
func wholeDiskImage(t *testing.T, name, loader, grub, kernel string) []byte {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "grub.cfg")
	info := filepath.Join(dir, "info")
	os.WriteFile(cfg, []byte(fmt.Sprintf("set timeout=0\necho \"bmedge-instance: GRUB boots the %s image\"\n"+
		"linux /boot/vmlinuz console=ttyS0,115200 bmedge.instance=%s panic=0\nboot\n", name, name)), 0o644)
	os.WriteFile(info, []byte("bmedge test instance\n"), 0o644)
	// 24 MiB of FAT: 24 tracks of 64 heads and 32 sectors.
	const espSectors = 24 * 64 * 32
	esp := filepath.Join(dir, "esp.img")
	cmds := [][]string{
		{"mformat", "-C", "-t", "24", "-h", "64", "-s", "32", "-v", "BMINSTANCE", "-i", esp, "::"},
		{"mmd", "-i", esp, "::/EFI", "::/EFI/BOOT", "::/boot", "::/boot/grub", "::/.disk"},
		{"mcopy", "-i", esp, loader, "::/EFI/BOOT/BOOTX64.EFI"},
		{"mcopy", "-i", esp, kernel, "::/boot/vmlinuz"},
		{"mcopy", "-i", esp, cfg, "::/boot/grub/grub.cfg"},
		{"mcopy", "-i", esp, info, "::/.disk/info"},
	}
	if grub != "" {
		cmds = append(cmds, []string{"mcopy", "-i", esp, grub, "::/EFI/BOOT/grubx64.efi"})
	}
	for _, c := range cmds {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(c, " "), err, out)
		}
	}
	// The disk: 1 MiB, the partition, 1 MiB for the backup GPT.
	disk := filepath.Join(dir, "disk.img")
	if err := os.WriteFile(disk, make([]byte, (2048+espSectors+2048)*512), 0o644); err != nil {
		t.Fatal(err)
	}
	sf := exec.Command("sfdisk", "--quiet", disk)
	sf.Stdin = strings.NewReader(fmt.Sprintf("label: gpt\nstart=2048, size=%d, type=C12A7328-F81F-11D2-BA4B-00A0C93EC93B, name=ESP\n", espSectors))
	if out, err := sf.CombinedOutput(); err != nil {
		t.Fatalf("sfdisk: %v\n%s", err, out)
	}
	b, err := os.ReadFile(disk)
	if err != nil {
		t.Fatal(err)
	}
	fat, err := os.ReadFile(esp)
	if err != nil || len(fat) != espSectors*512 {
		t.Fatalf("the EFI system partition's image: %d bytes, %v", len(fat), err)
	}
	copy(b[2048*512:], fat)
	return b
}

// TestQEMUSecureBootInstance: a Redfish node behind the virtual BMC (its
// system in Legacy mode, Secure Boot off; a QEMU VM behind it), deployed
// with Ironic's capability secure_boot:true in instance_info (as Nova
// and Metal3 ask for it) and a whole-disk image whose boot chain is
// signed (shim and Debian's signed GRUB from the ramdisk ISO, Debian's
// signed kernel), boots the image from its disk with Secure Boot on: the
// BMC starts the instance on OVMF's Secure Boot firmware with
// Microsoft's keys, the image's GRUB says so on the serial console and
// the kernel's EFI stub finds Secure Boot enabled. Its undeploy turns
// the BMC's SecureBootEnable off again (Ironic's clean_up_instance). The
// same firmware refuses the image with an unsigned GRUB on the disk: its
// boot manager says "Access Denied" for the disk, and nothing of the
// image runs.
func TestQEMUSecureBootInstance(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU twice")
	}
	t.Parallel()
	dir := secureBootRamdisk(t)
	if _, err := exec.LookPath("sfdisk"); err != nil {
		if os.Getenv("BM_REQUIRE_ALL") == "1" {
			t.Fatal("sfdisk is missing (Debian package fdisk)")
		}
		t.Skip("sfdisk is missing (Debian package fdisk)")
	}
	iso := filepath.Join(dir, "bmramdisk.iso")
	kernel := filepath.Join(dir, "vmlinuz")
	shim, grub := isoChain(t, iso)

	t.Run("unsigned", func(t *testing.T) {
		t.Parallel()
		img := filepath.Join(t.TempDir(), "unsigned.img")
		if err := os.WriteFile(img, wholeDiskImage(t, "unsigned", unsignedDiskGRUB, "", kernel), 0o644); err != nil {
			t.Fatal(err)
		}
		console, exited := secureVM(t, "-drive", "file="+img+",format=raw,if=none,id=d0", "-device", "virtio-blk-pci,drive=d0,bootindex=0", "-nic", "none")
		opt := awaitConsole(t, console, exited, firmwareRefusal, 2*time.Minute)
		b, _ := os.ReadFile(console)
		if instanceMarker.Match(b) || bytes.Contains(b, []byte("GRUB")) {
			t.Fatalf("the unsigned GRUB ran:\n%s", tail(b, 4096))
		}
		t.Logf("Secure Boot refused the unsigned image on the disk (boot option %s): %s", opt, firmwareRefusal.Find(b))
	})

	t.Run("signed", func(t *testing.T) {
		t.Parallel()
		img := wholeDiskImage(t, "signed", shim, grub, kernel)
		imgURL := serveFile(t, "/signed.img", img)
		vmDir := vmDir(t, "sbinst")
		disk := filepath.Join(vmDir, "disk.raw")
		randomFile(t, disk, 64<<20, 31)
		console := filepath.Join(vmDir, "console.log")
		showConsole(t, console, 6144)
		l := newLab(t, labOptions{ISO: iso, NoAutomatedClean: true})
		bmc := l.redfishBMC(bmcOptions{Dir: vmDir, Disk: disk, DiskSerial: "DISK0", Console: console, SecureBoot: true})
		id := l.createNode("sb-instance", "redfish", bmc.driverInfo("s3cret"), map[string]any{"root_device": map[string]any{"serial": "DISK0"}})
		l.step(id, "manage", "manageable", nil, 30*time.Second)
		l.step(id, "provide", "available", nil, 30*time.Second)
		l.patch(id,
			map[string]any{"op": "add", "path": "/instance_info/image_source", "value": imgURL},
			map[string]any{"op": "add", "path": "/instance_info/image_checksum", "value": sha(img)},
			map[string]any{"op": "add", "path": "/instance_info/capabilities", "value": map[string]any{"boot_mode": "uefi", "secure_boot": "true"}})
		start := time.Now()
		l.step(id, "active", "active", nil, 5*time.Minute)
		if st := bmc.state(); !st.SecureBoot || st.BootMode != vbmc.ModeUEFI || st.PowerState != "On" {
			t.Fatalf("the BMC when active: %+v; want on, boot mode UEFI, SecureBootEnable on", st)
		}
		var line string
		for _, l := range qemuCmdlines(t, vmDir) {
			line = l
		}
		if !strings.Contains(line, "unit=0,readonly=on,file="+ovmfSecureCode) || !strings.Contains(line, "property=secure,value=on") || strings.Contains(line, "id=cd,bootindex=0") {
			t.Fatalf("the instance's VM does not run the Secure Boot firmware from its disk: %s", line)
		}
		name := awaitConsole(t, console, nil, instanceMarker, 2*time.Minute)
		if name != "signed" {
			t.Fatalf("the disk's GRUB boots the %s image", name)
		}
		for _, want := range []string{"EFI stub: UEFI Secure Boot is enabled.", "bmedge.instance=signed", "secureboot: Secure boot enabled"} {
			awaitInstance(t, console, want, time.Minute)
		}
		t.Logf("deploy to the instance booted with Secure Boot on: %.1fs", time.Since(start).Seconds())

		l.step(id, "deleted", "available", nil, time.Minute)
		if st := bmc.state(); st.SecureBoot || st.PowerState != "Off" {
			t.Fatalf("the BMC after undeploy: %+v; want off, SecureBootEnable off", st)
		}
		// The firmware honours it: powered on again (no cleaning: the
		// image is still on the disk), the machine starts on OVMF without
		// Secure Boot, and the kernel finds it off.
		if code := l.cl.Do("PUT", "/v1/nodes/"+id+"/states/power", map[string]string{"target": "power on"}, nil); code != 202 {
			t.Fatalf("power on after undeploy: %d", code)
		}
		awaitInstance(t, console, "secureboot: Secure boot disabled", 2*time.Minute)
		if b, _ := os.ReadFile(console); bytes.Contains(b[bytes.LastIndex(b, []byte("bmedge-instance:")):], []byte("EFI stub: UEFI Secure Boot is enabled.")) {
			t.Fatal("after undeploy the instance still boots with Secure Boot on")
		}
		for _, line := range qemuCmdlines(t, vmDir) {
			if strings.Contains(line, ovmfSecureCode) || !strings.Contains(line, "-bios ") {
				t.Fatalf("after undeploy the VM runs the Secure Boot firmware: %s", line)
			}
		}
	})
}

// awaitInstance waits until the console, after the last time the disk's
// GRUB said instanceMarker (the instance's latest boot), says want.
func awaitInstance(t *testing.T, console, want string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		b, _ := os.ReadFile(console)
		if i := bytes.LastIndex(b, []byte("bmedge-instance:")); i >= 0 && bytes.Contains(b[i:], []byte(want)) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the instance's console did not say %q in %s:\n%s", want, d, tail(b, 4096))
		}
		time.Sleep(250 * time.Millisecond)
	}
}
