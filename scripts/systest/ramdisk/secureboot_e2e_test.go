package ramdisk_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent/netboot"
	"github.com/bmedge/bmedge/agent/netboot/labnet"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// firmwareRefusal is what OVMF's boot manager prints on the serial
// console when Secure Boot refuses a boot option's image.
var firmwareRefusal = regexp.MustCompile(`BdsDxe: failed to load (Boot[0-9A-F]{4} "[^"]*")[^\n]*: Access Denied`)

// secureBootRamdisk is the folder of scripts/build-ramdisk.sh's output:
// build/ramdisk, or BM_RAMDISK_DIR (a build of one's own). It skips (fails
// under make test) when the ramdisk, its Secure Boot chain or the
// firmware is missing.
func secureBootRamdisk(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("BM_RAMDISK_DIR")
	if dir == "" {
		dir = "../../../build/ramdisk"
	}
	dir, _ = filepath.Abs(dir)
	var missing []string
	for _, f := range []string{filepath.Join(dir, "bmramdisk.iso"), filepath.Join(dir, netboot.ShimBinary), filepath.Join(dir, netboot.GRUBBinary),
		filepath.Join(dir, "vmlinuz"), filepath.Join(dir, "initramfs.cpio.zst"), ovmfSecureCode, ovmfSecureVars, unsignedGRUB} {
		if _, err := os.Stat(f); err != nil {
			missing = append(missing, f)
		}
	}
	for _, c := range []string{"qemu-system-x86_64", "mformat", "mcopy", "xorriso"} {
		if _, err := exec.LookPath(c); err != nil {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		if os.Getenv("BM_REQUIRE_ALL") == "1" {
			t.Fatalf("missing for Secure Boot (make ramdisk builds the ramdisk and installs ovmf, grub-efi-amd64-bin, mtools, xorriso): %s", strings.Join(missing, ", "))
		}
		t.Skipf("missing for Secure Boot (run make ramdisk): %s", strings.Join(missing, ", "))
	}
	return dir
}

// secureVM starts QEMU (TCG) on OVMF with Secure Boot on: q35 with SMM
// (the variables are writable only from SMM), the code read-only, a fresh
// copy of the variables with Microsoft's keys. It returns the serial
// console's log and a channel closed when QEMU exits (-no-reboot).
func secureVM(t *testing.T, args ...string) (string, <-chan struct{}) {
	t.Helper()
	return startVM(t, vmSpec{Firmware: ovmfSecureCode, Args: append([]string{"-device", "virtio-rng-pci"}, args...)})
}

// awaitConsole waits until the console matches re, QEMU exits, or the
// time is up; it returns the match's first group.
func awaitConsole(t *testing.T, console string, exited <-chan struct{}, re *regexp.Regexp, d time.Duration) string {
	t.Helper()
	deadline := time.After(d)
	for {
		b, _ := os.ReadFile(console)
		if m := re.FindSubmatch(b); m != nil {
			return string(m[len(m)-1])
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(console)
			if m := re.FindSubmatch(b); m != nil {
				return string(m[len(m)-1])
			}
			t.Fatalf("QEMU exited before the console said %s:\n%s", re, tail(b, 4096))
		case <-deadline:
			t.Fatalf("the console did not say %s in %s:\n%s", re, d, tail(b, 4096))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// unsignedISO is an ISO like the ramdisk's for UEFI, an EFI system
// partition image as El Torito boot image, whose EFI/BOOT/BOOTX64.EFI is
// Debian's GRUB unsigned.
func unsignedISO(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	tree := filepath.Join(dir, "tree")
	if err := os.MkdirAll(tree, 0o755); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(tree, "efi.img")
	for _, c := range [][]string{
		{"mformat", "-C", "-t", "160", "-h", "2", "-s", "32", "-i", img, "::"},
		{"mmd", "-i", img, "::/EFI", "::/EFI/BOOT"},
		{"mcopy", "-i", img, unsignedGRUB, "::/EFI/BOOT/BOOTX64.EFI"},
		{"xorriso", "-as", "mkisofs", "-o", filepath.Join(dir, "unsigned.iso"), "-V", "UNSIGNED", "-r", "-e", "efi.img", "-no-emul-boot", tree},
	} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(c, " "), err, out)
		}
	}
	return filepath.Join(dir, "unsigned.iso")
}

// secureBootConsole checks what the console says of Secure Boot: the
// kernel's EFI stub found it on (it read the firmware's SecureBoot
// variable), and so did the ramdisk agent (from efivarfs, as its inventory
// reports it: boot.secure_boot).
func secureBootConsole(t *testing.T, console string) {
	t.Helper()
	consoleHas(t, console, "EFI stub: UEFI Secure Boot is enabled.")
	consoleHas(t, console, "bmramdisk: boot mode uefi; Secure Boot on")
}

// TestQEMUSecureBootISO boots QEMU on OVMF with Secure Boot on and
// Microsoft's keys enrolled. The ramdisk ISO, as a BMC's virtual media (a
// USB CD-ROM) with the boot's parameters medium, boots through Debian's
// signed chain (shim, GRUB, the kernel): the agent says hello to the
// test's broker and reports Secure Boot on. The same firmware refuses an
// ISO whose BOOTX64.EFI is unsigned: its boot manager says "Access
// Denied" for the CD, and nothing of the image runs.
func TestQEMUSecureBootISO(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU twice")
	}
	t.Parallel()
	dir := secureBootRamdisk(t)
	t.Run("signed", func(t *testing.T) {
		t.Parallel()
		const node = "5b0e3c1d-2a4f-4e6b-8c7d-9e0f1a2b3c4d"
		const password = "secure-media-0123456789"
		user := "node:" + node
		b, port := startISOBroker(t, user, password)
		params := fmt.Sprintf("bm.node=%s bm.site=lab bm.broker=mqtt://10.0.2.2:%d bm.user=%s bm.password=%s", node, port, user, password)
		start := time.Now()
		console, _ := secureVM(t, append(usbCD(t, filepath.Join(dir, "bmramdisk.iso"), params),
			"-netdev", "user,id=n0", "-device", "virtio-net-pci,netdev=n0,romfile=")...)
		select {
		case m := <-b.hellos:
			if m.Node != node {
				t.Fatalf("hello from node %q, want %s", m.Node, node)
			}
			t.Logf("Secure Boot, virtual media: hello from node %s after %.1fs", m.Node, time.Since(start).Seconds())
		case <-time.After(4 * time.Minute):
			t.Fatalf("no hello after 4 minutes; broker attempts: %v", b.Attempts())
		}
		secureBootConsole(t, console)
	})
	t.Run("unsigned", func(t *testing.T) {
		t.Parallel()
		console, exited := secureVM(t, append(usbCD(t, unsignedISO(t), ""), "-nic", "none")...)
		opt := awaitConsole(t, console, exited, firmwareRefusal, 2*time.Minute)
		if !strings.Contains(opt, "USB") {
			t.Fatalf("the firmware refused %s, want the USB CD-ROM", opt)
		}
		b, _ := os.ReadFile(console)
		if bytes.Contains(b, []byte("GRUB")) {
			t.Fatalf("the unsigned GRUB ran:\n%s", tail(b, 4096))
		}
		t.Logf("Secure Boot refused the unsigned image: %s", firmwareRefusal.Find(b))
	})
}

// TestQEMUSecureBootNetboot: QEMU on OVMF with Secure Boot on, on a site
// network of the test's own (a bridge in a private network namespace),
// boots from the edge agent's network boot services (agent/netboot in
// DHCP mode) armed without Secure Boot: the firmware gets iPXE by TFTP,
// which is not signed, and refuses it ("Access Denied" for its PXE boot
// option); iPXE never asks for its script. TestQEMUSecureBootIPMINode
// boots the signed chain.
func TestQEMUSecureBootNetboot(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU")
	}
	if !labnet.Isolate(t) {
		return
	}
	dir := secureBootRamdisk(t)
	labnet.Need(t, "qemu-system-x86_64")
	site := labnet.New(t)
	tee := &logTee{next: testrig.Logger(t).Handler()}
	srv, err := netboot.New(netboot.Config{Interface: site.Bridge, Mode: netboot.ModeDHCP, RangeStart: site.IP(100), RangeEnd: site.IP(120),
		Router: site.Addr, Kernel: filepath.Join(dir, "vmlinuz"), Initrd: filepath.Join(dir, "initramfs.cpio.zst"), Log: slog.New(tee)})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	const node = "7c1d2e3f-4a5b-4c6d-8e9f-0a1b2c3d4e5f"
	const nodeMAC = "52:54:00:5b:00:01"
	hw, _ := net.ParseMAC(nodeMAC)
	if err := srv.Arm(netboot.Boot{Node: node, MACs: []net.HardwareAddr{hw}, Cmdline: "console=ttyS0,115200 bm.node=" + node}); err != nil {
		t.Fatal(err)
	}
	// The NIC's own option ROM (iPXE) removed: OVMF's PXE client runs.
	console, exited := secureVM(t, "-netdev", "tap,id=n0,ifname="+site.Tap()+",script=no,downscript=no",
		"-device", "virtio-net-pci,netdev=n0,mac="+nodeMAC+",romfile=,bootindex=1")
	opt := awaitConsole(t, console, exited, firmwareRefusal, 2*time.Minute)
	if !strings.Contains(opt, "PXE") {
		t.Fatalf("the firmware refused %s, want its PXE boot option", opt)
	}
	if tee.count("network boot TFTP: sent", "file="+netboot.UEFIBinary) == 0 {
		t.Fatalf("the firmware refused %s before it got iPXE by TFTP", opt)
	}
	if tee.count("network boot HTTP: script served") > 0 {
		t.Fatal("iPXE ran under Secure Boot: it fetched its script")
	}
	t.Logf("Secure Boot refused iPXE (unsigned): %s", opt)
}

// TestQEMUSecureBootIPMINode: an IPMI node (ipmi_sim as its BMC, whose
// power-on starts a QEMU VM on OVMF with Secure Boot on and Microsoft's
// keys) with Ironic's capability secure_boot:true, on a site network of
// the test's own, is inspected through the coordinator and the edge
// agent's network boot: the boot command says secure_boot, so the agent
// gives the firmware the signed chain (shim, GRUB, kernel and initramfs
// by TFTP); the ramdisk inspects, and Debian's baremetal client shows the
// node's boot_mode uefi and secure_boot True.
func TestQEMUSecureBootIPMINode(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU")
	}
	if !labnet.Isolate(t) {
		return
	}
	dir := secureBootRamdisk(t)
	labnet.Need(t, "qemu-system-x86_64", "nsenter")
	tmp := t.TempDir()
	site := labnet.New(t)
	const nodeMAC = "52:54:00:5b:00:02"
	disk := filepath.Join(tmp, "disk.raw")
	randomFile(t, disk, 64<<20, 29)
	console := filepath.Join(tmp, "console.log")
	showConsole(t, console, 6144)
	tee := &logTee{next: testrig.Logger(t).Handler()}
	// Shim, GRUB, the kernel and the initrd all come by TFTP here (GRUB's
	// network boot), slow under TCG: a loaded machine took over 4
	// minutes. The WAIT timeout and the step's wait are generous; they
	// cost only when the boot is slow.
	l := newLab(t, labOptions{Netboot: site, NetKernel: filepath.Join(dir, "vmlinuz"), NetInitrd: filepath.Join(dir, "initramfs.cpio.zst"),
		WaitTimeout: 10 * time.Minute, AgentLog: slog.New(tee)})
	c := l.c
	// The BMC's power-on starts the VM with a fresh copy of the firmware's
	// variables, from the network when its boot device is pxe.
	sim := l.ipmiBMC(ipmiVMOptions{Disk: disk, Console: console, Tap: site.Tap(), MAC: nodeMAC, SecureBoot: true, Dir: tmp})

	id := l.createNode("sb1", "ipmi", sim.DriverInfo(), map[string]any{"root_device": map[string]any{"serial": "DISK0"}, "capabilities": "boot_mode:uefi,secure_boot:true"})
	if code := l.cl.Do("POST", "/v1/ports", map[string]any{"node_uuid": id, "address": nodeMAC, "pxe_enabled": true}, nil); code != 201 {
		t.Fatalf("port: %d", code)
	}
	l.step(id, "manage", "manageable", nil, time.Minute)
	l.step(id, "inspect", "manageable", nil, 11*time.Minute)
	for _, want := range [][]string{
		{"network boot armed", "node=" + id, "secure_boot=true"},
		{"network boot TFTP: sent", "node=" + id, "file=" + netboot.ShimBinary},
		{"network boot TFTP: sent", "node=" + id, "file=" + netboot.GRUBBinary},
		{"network boot TFTP: sent", "node=" + id, "file=" + netboot.GRUBConfig},
		{"network boot TFTP: sent", "node=" + id, "file=vmlinuz"},
		{"network boot TFTP: sent", "node=" + id, "file=initrd"},
	} {
		if tee.count(want...) == 0 {
			t.Errorf("the edge agent's log has no line with %q", want)
		}
	}
	if tee.count("network boot TFTP: sent", "node="+id, "file="+netboot.UEFIBinary) > 0 {
		t.Error("the edge agent gave the Secure Boot node iPXE")
	}
	secureBootConsole(t, console)
	out := secureBootCLI(t, c.APIAddr, "node", "show", id, "-f", "value", "-c", "boot_mode", "-c", "secure_boot")
	if f := strings.Fields(out); len(f) != 2 || f[0] != "uefi" || f[1] != "True" {
		t.Fatalf("baremetal node show -c boot_mode -c secure_boot: %q, want uefi True", out)
	}
	t.Logf("baremetal node show: boot_mode, secure_boot = %s", strings.Join(strings.Fields(out), " "))
}

// secureBootCLI runs Debian's baremetal client (python3-ironicclient)
// against the coordinator and returns its standard output.
func secureBootCLI(t *testing.T, apiAddr string, args ...string) string {
	t.Helper()
	const bm = "/usr/bin/baremetal"
	if _, err := os.Stat(bm); err != nil {
		if os.Getenv("BM_REQUIRE_ALL") == "1" {
			t.Fatalf("%s is missing (package python3-ironicclient); run scripts/install-test-deps.sh", bm)
		}
		t.Skipf("%s is missing: install Debian's python3-ironicclient (scripts/install-test-deps.sh)", bm)
	}
	home := t.TempDir()
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "OS_") || k == "HOME" || strings.HasPrefix(k, "XDG_") || strings.EqualFold(k, "no_proxy") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "OS_AUTH_TYPE=none", "OS_ENDPOINT=http://"+apiAddr, "HOME="+home, "NO_PROXY=127.0.0.1", "no_proxy=127.0.0.1", "PYTHONDONTWRITEBYTECODE=1")
	cmd := exec.Command(bm, args...)
	cmd.Env, cmd.Dir = env, home
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("baremetal %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}
