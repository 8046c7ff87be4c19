package netboot

import (
	"context"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent/netboot/labnet"
)

// recorder is a slog handler that keeps the messages, to see what the
// services did.
type recorder struct {
	mu   sync.Mutex
	msgs []string
	next slog.Handler
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(ctx context.Context, rec slog.Record) error {
	line := rec.Message
	rec.Attrs(func(a slog.Attr) bool { line += " " + a.String(); return true })
	r.mu.Lock()
	r.msgs = append(r.msgs, line)
	r.mu.Unlock()
	if rec.Level >= slog.LevelWarn {
		return r.next.Handle(ctx, rec)
	}
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

func (r *recorder) has(s string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.msgs {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}

func (r *recorder) reset() {
	r.mu.Lock()
	r.msgs = nil
	r.mu.Unlock()
}

func (r *recorder) all() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.msgs, "\n")
}

// TestQEMUFirmwareChain boots QEMU VMs (TCG) on the site network and
// watches the chain each firmware runs, up to the ramdisk's kernel and
// initramfs fetched over HTTP:
//   - UEFI (OVMF) with the NIC's option ROM removed: OVMF's own PXE
//     client gets snponly.efi by TFTP, iPXE then its script by HTTP;
//   - BIOS (SeaBIOS) with QEMU's NIC ROM, which is iPXE: it says so (user
//     class iPXE) and gets the script's URL directly.
func TestQEMUFirmwareChain(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU twice")
	}
	if !labnet.Isolate(t) {
		return
	}
	labnet.Need(t, "qemu-system-x86_64")
	kernel, _ := filepath.Abs("../../build/ramdisk/vmlinuz")
	initrd, _ := filepath.Abs("../../build/ramdisk/initramfs.cpio.xz")
	if _, err := os.Stat(initrd); err != nil {
		if os.Getenv("BM_REQUIRE_ALL") == "1" {
			t.Fatal("the ramdisk is missing (make ramdisk)")
		}
		t.Skip("the ramdisk is missing; run make ramdisk")
	}
	site := labnet.New(t)
	rec := &recorder{next: slog.NewTextHandler(os.Stderr, nil)}
	s, err := New(Config{Interface: site.Bridge, Mode: ModeDHCP, RangeStart: site.IP(100), RangeEnd: site.IP(110),
		Kernel: kernel, Initrd: initrd, Log: slog.New(rec)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, fw := range []struct {
		name, mac string
		args      []string
		want      []string
	}{
		{"uefi", "52:54:00:12:34:51", []string{"-bios", "/usr/share/ovmf/OVMF.fd", "-device", "virtio-net-pci,netdev=n0,mac=52:54:00:12:34:51,romfile=,bootindex=1"},
			[]string{"TFTP: sent remote=10.77.0.100", "file=" + UEFIBinary, "script served", "vmlinuz served", "initrd served"}},
		{"bios", "52:54:00:12:34:52", []string{"-device", "virtio-net-pci,netdev=n0,mac=52:54:00:12:34:52,bootindex=1"},
			[]string{"ipxe=true", "script served", "vmlinuz served", "initrd served"}},
	} {
		t.Run(fw.name, func(t *testing.T) {
			if _, err := os.Stat("/usr/share/ovmf/OVMF.fd"); err != nil && fw.name == "uefi" {
				t.Skip("no OVMF")
			}
			rec.reset()
			tap := site.Tap()
			console := filepath.Join(t.TempDir(), "console.log")
			if err := s.Arm(Boot{Node: fw.name, MACs: []net.HardwareAddr{mac(fw.mac)}, Cmdline: "console=ttyS0 bm.node=" + fw.name}); err != nil {
				t.Fatal(err)
			}
			args := append([]string{"-m", "512", "-nographic", "-no-reboot", "-serial", "file:" + console, "-monitor", "none",
				"-netdev", "tap,id=n0,ifname=" + tap + ",script=no,downscript=no", "-device", "virtio-rng-pci"}, fw.args...)
			cmd := exec.Command("qemu-system-x86_64", args...)
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
			start := time.Now()
			for deadline := start.Add(4 * time.Minute); ; {
				done := true
				for _, w := range fw.want {
					if !rec.has(w) {
						done = false
					}
				}
				if done {
					break
				}
				if time.Now().After(deadline) {
					b, _ := os.ReadFile(console)
					t.Fatalf("the chain did not reach the ramdisk; want %q; the services said:\n%s\nconsole:\n%s", fw.want, rec.all(), b)
				}
				time.Sleep(500 * time.Millisecond)
			}
			t.Logf("%s: firmware to the ramdisk's initramfs in %.1fs", fw.name, time.Since(start).Seconds())
			s.Disarm(fw.name)
		})
	}
}
