package netboot

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/insomniacslk/dhcp/iana"
)

// TestSecureBootBootFiles: a boot armed with SecureBoot gives a UEFI PXE
// firmware shim instead of iPXE, and a BIOS one iPXE as before; a boot
// without it gives UEFI iPXE. Arming with SecureBoot without the signed
// binaries in ShimDir is refused, naming what is missing.
func TestSecureBootBootFiles(t *testing.T) {
	s := handlerServer(t, ModeDHCP)
	s.cfg.ShimDir = t.TempDir()
	sb, plain := mac("52:54:00:00:00:01"), mac("52:54:00:00:00:02")
	err := s.Arm(Boot{Node: "sb", MACs: []net.HardwareAddr{sb}, SecureBoot: true})
	if err == nil || !strings.Contains(err.Error(), "needs Debian's signed shimx64.efi in "+s.cfg.ShimDir) {
		t.Fatalf("arm with Secure Boot and no shim: %v", err)
	}
	for _, f := range []string{ShimBinary, GRUBBinary} {
		os.WriteFile(filepath.Join(s.cfg.ShimDir, f), []byte(f), 0o644)
	}
	if err := s.Arm(Boot{Node: "sb", MACs: []net.HardwareAddr{sb}, SecureBoot: true}); err != nil {
		t.Fatal(err)
	}
	if err := s.Arm(Boot{Node: "plain", MACs: []net.HardwareAddr{plain}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		hw   net.HardwareAddr
		arch iana.Arch
		want string
	}{
		{"Secure Boot, UEFI", sb, iana.EFI_X86_64, ShimBinary},
		{"Secure Boot, UEFI BC", sb, iana.EFI_BC, ShimBinary},
		{"Secure Boot, BIOS", sb, iana.INTEL_X86PC, BIOSBinary},
		{"without, UEFI", plain, iana.EFI_X86_64, UEFIBinary},
	} {
		r := s.answer(discover(t, c.hw, pxeMods(c.arch)...), false)
		if r == nil || r.BootFileName != c.want || r.BootFileNameOption() != c.want || !r.ServerIPAddr.Equal(s.cfg.Address) {
			t.Fatalf("%s: %v, want boot file %s from %s", c.name, r, c.want, s.cfg.Address)
		}
	}
}

// TestGRUBConfig: the configuration loads the boot's kernel and
// initramfs by TFTP from its path and passes the command line's words
// unchanged, a quote in them included.
func TestGRUBConfig(t *testing.T) {
	s := handlerServer(t, ModeDHCP)
	a := &armed{Boot: Boot{Node: "n'1", Cmdline: "console=ttyS0 bm.password=it's$x"}, token: strings.Repeat("ab", 16)}
	got := string(s.grubConfig(a))
	base := "(tftp,10.1.0.1)/boot/" + a.token
	for _, want := range []string{
		"echo 'bmedge: booting the ramdisk of node n'\\''1'\n",
		"if linux " + base + "/vmlinuz 'console=ttyS0' 'bm.password=it'\\''s$x'; then\n",
		"  if initrd " + base + "/initrd; then\n    boot\n",
		"exit 1\n",
	} {
		if !strings.Contains(got, want) {
			t.Fatalf("GRUB configuration without %q:\n%s", want, got)
		}
	}
}

// TestTFTPSecureBootChain: over TFTP (curl as the client) the node of a
// Secure Boot boot gets shim, GRUB, its GRUB configuration, and its kernel
// and initramfs under its boot's path; the node of a boot without Secure
// Boot gets none of them, nor another boot's path.
func TestTFTPSecureBootChain(t *testing.T) {
	if _, err := os.Stat("/usr/lib/ipxe/" + UEFIBinary); err != nil && os.Getenv("BM_REQUIRE_ALL") != "1" {
		t.Skip("Debian's ipxe package is not installed")
	}
	dir := t.TempDir()
	kernel, initrd := filepath.Join(dir, "vmlinuz"), filepath.Join(dir, "initrd")
	os.WriteFile(kernel, bytes.Repeat([]byte("K"), 2500), 0o600)
	os.WriteFile(initrd, bytes.Repeat([]byte("I"), 4500), 0o600)
	shim, grub := bytes.Repeat([]byte("S"), 3000), bytes.Repeat([]byte("G"), 5000)
	os.WriteFile(filepath.Join(dir, ShimBinary), shim, 0o644)
	os.WriteFile(filepath.Join(dir, GRUBBinary), grub, 0o644)
	var peerMu sync.Mutex
	var peerMAC net.HardwareAddr
	setPeer := func(m net.HardwareAddr) { peerMu.Lock(); peerMAC = m; peerMu.Unlock() }
	s, err := New(Config{Interface: "lo", Address: net.IPv4(127, 0, 0, 1), Mode: ModeProxy, HTTPPort: -1, TFTPPort: -1, DHCPPort: -1,
		Kernel: kernel, Initrd: initrd, Log: discardLog(),
		macOf: func(ip net.IP) (net.HardwareAddr, bool) {
			peerMu.Lock()
			defer peerMu.Unlock()
			return peerMAC, peerMAC != nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.cfg.ShimDir != dir {
		t.Fatalf("ShimDir %q, want the kernel's folder %q", s.cfg.ShimDir, dir)
	}
	sb, plain := mac("52:54:00:00:00:01"), mac("52:54:00:00:00:02")
	if err := s.Arm(Boot{Node: "sb", MACs: []net.HardwareAddr{sb}, Cmdline: "bm.node=sb bm.password=secret", SecureBoot: true}); err != nil {
		t.Fatal(err)
	}
	if err := s.Arm(Boot{Node: "plain", MACs: []net.HardwareAddr{plain}, Cmdline: "bm.node=plain"}); err != nil {
		t.Fatal(err)
	}
	tftpURL := "tftp://127.0.0.1:" + itoa(s.cfg.TFTPPort) + "/"
	setPeer(sb)
	for name, want := range map[string][]byte{ShimBinary: shim, GRUBBinary: grub} {
		if out, err := runCurlRaw(tftpURL + name); err != nil || out != string(want) {
			t.Fatalf("tftp %s: %d bytes (want %d), %v", name, len(out), len(want), err)
		}
	}
	cfg, err := runCurlRaw(tftpURL + GRUBConfig)
	tok := s.bootOfMAC(sb).token
	if err != nil || !strings.Contains(cfg, "if linux (tftp,127.0.0.1)/boot/"+tok+"/vmlinuz 'bm.node=sb' 'bm.password=secret'; then") {
		t.Fatalf("tftp %s: %q %v", GRUBConfig, cfg, err)
	}
	for name, size := range map[string]int{"vmlinuz": 2500, "initrd": 4500} {
		if out, err := runCurlRaw(tftpURL + "boot/" + tok + "/" + name); err != nil || len(out) != size {
			t.Fatalf("tftp the boot's %s: %d bytes (want %d), %v", name, len(out), size, err)
		}
	}
	if out, err := runCurlRaw(tftpURL + "boot/" + strings.Repeat("0", 32) + "/vmlinuz"); err == nil {
		t.Fatalf("tftp served a kernel (%d bytes) under another boot's path", len(out))
	}
	if _, err := runCurlRaw(tftpURL + "grub/x86_64-efi/grub.cfg"); err == nil {
		t.Fatal("tftp served a GRUB configuration at grub/x86_64-efi/grub.cfg")
	}
	setPeer(plain)
	for _, name := range []string{ShimBinary, GRUBBinary, GRUBConfig, "boot/" + tok + "/vmlinuz", "boot/" + s.bootOfMAC(plain).token + "/vmlinuz"} {
		if out, err := runCurlRaw(tftpURL + name); err == nil {
			t.Fatalf("tftp served %s (%d bytes) to a boot armed without Secure Boot", name, len(out))
		}
	}
	setPeer(mac("52:54:00:00:00:03"))
	if out, err := runCurlRaw(tftpURL + GRUBConfig); err == nil {
		t.Fatalf("tftp served a GRUB configuration (%d bytes) to a MAC that is not booting", len(out))
	}
}
