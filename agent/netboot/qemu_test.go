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
	"github.com/bmedge/bmedge/lib/waitfor"
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
	kernel, initrd := ramdiskFiles(t)
	site := labnet.New(t)
	rec := &recorder{next: slog.NewTextHandler(os.Stderr, nil)}
	s, err := New(Config{Interface: site.Bridge, Mode: ModeDHCP, RangeStart: site.IP(100), RangeEnd: site.IP(110),
		Kernel: kernel, Initrd: initrd, Log: slog.New(rec)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	runChain(t, site, s, rec, []firmware{
		{"uefi", "52:54:00:12:34:51", []string{"-bios", "/usr/share/ovmf/OVMF.fd", "-device", "virtio-net-pci,netdev=n0,mac=52:54:00:12:34:51,romfile=,bootindex=1"},
			[]string{"TFTP: sent remote=10.77.0.100", "file=" + UEFIBinary, "script served", "vmlinuz served", "initrd served"}},
		{"bios", "52:54:00:12:34:52", []string{"-device", "virtio-net-pci,netdev=n0,mac=52:54:00:12:34:52,bootindex=1"},
			[]string{"ipxe=true", "script served", "vmlinuz served", "initrd served"}},
	})
}

// TestQEMUProxyDHCP: the same chains in proxy mode, beside the site's own
// DHCP server (busybox udhcpd on another machine of the site network),
// which gives the addresses; the agent gives only the boot files.
func TestQEMUProxyDHCP(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU twice")
	}
	if !labnet.Isolate(t) {
		return
	}
	labnet.Need(t, "qemu-system-x86_64", "busybox", "nsenter")
	kernel, initrd := ramdiskFiles(t)
	site := labnet.New(t)
	dhcpd := site.Host("52:54:00:12:34:02", "10.77.0.2/24")
	dir := t.TempDir()
	conf := filepath.Join(dir, "udhcpd.conf")
	os.WriteFile(conf, []byte("start 10.77.0.150\nend 10.77.0.160\ninterface eth0\nlease_file "+filepath.Join(dir, "leases")+
		"\npidfile "+filepath.Join(dir, "pid")+"\noption subnet 255.255.255.0\noption router 10.77.0.1\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "leases"), nil, 0o644)
	udhcpd := dhcpd.Command("busybox", "udhcpd", "-f", conf)
	if err := udhcpd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = udhcpd.Process.Kill(); _ = udhcpd.Wait() }()
	rec := &recorder{next: slog.NewTextHandler(os.Stderr, nil)}
	s, err := New(Config{Interface: site.Bridge, Mode: ModeProxy, Kernel: kernel, Initrd: initrd, Log: slog.New(rec)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	runChain(t, site, s, rec, []firmware{
		{"uefi", "52:54:00:12:34:61", []string{"-bios", "/usr/share/ovmf/OVMF.fd", "-device", "virtio-net-pci,netdev=n0,mac=52:54:00:12:34:61,romfile=,bootindex=1"},
			[]string{"proxy-DHCP: OFFER node=uefi", "TFTP: sent remote=10.77.0.1", "file=" + UEFIBinary, "script served", "vmlinuz served", "initrd served"}},
		{"bios", "52:54:00:12:34:62", []string{"-device", "virtio-net-pci,netdev=n0,mac=52:54:00:12:34:62,bootindex=1"},
			[]string{"proxy-DHCP: OFFER node=bios", "ipxe=true", "script served", "vmlinuz served", "initrd served"}},
	})
}

type firmware struct {
	name, mac string
	args      []string
	want      []string
}

func ramdiskFiles(t *testing.T) (kernel, initrd string) {
	t.Helper()
	labnet.Need(t, "qemu-system-x86_64")
	kernel, _ = filepath.Abs("../../build/ramdisk/vmlinuz")
	initrd, _ = filepath.Abs("../../build/ramdisk/initramfs.cpio.zst")
	if _, err := os.Stat(initrd); err != nil {
		if os.Getenv("BM_REQUIRE_ALL") == "1" {
			t.Fatal("the ramdisk is missing (make ramdisk)")
		}
		t.Skip("the ramdisk is missing; run make ramdisk")
	}
	if _, err := os.Stat("/usr/share/ovmf/OVMF.fd"); err != nil {
		if os.Getenv("BM_REQUIRE_ALL") == "1" {
			t.Fatal("OVMF is missing (Debian package ovmf)")
		}
		t.Skip("OVMF is missing (Debian package ovmf)")
	}
	return kernel, initrd
}

// runChain boots each firmware's VM on the site network and waits until
// the services said every one of its wants.
func runChain(t *testing.T, site *labnet.Net, s *Server, rec *recorder, fws []firmware) {
	for _, fw := range fws {
		t.Run(fw.name, func(t *testing.T) {
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
			if !waitfor.Until(time.Until(start.Add(4*time.Minute)), func() bool {
				for _, w := range fw.want {
					if !rec.has(w) {
						return false
					}
				}
				return true
			}) {
				b, _ := os.ReadFile(console)
				t.Fatalf("the chain did not reach the ramdisk; want %q; the services said:\n%s\nconsole:\n%s", fw.want, rec.all(), b)
			}
			t.Logf("%s: firmware to the ramdisk's initramfs in %.1fs", fw.name, time.Since(start).Seconds())
			s.Disarm(fw.name)
		})
	}
}
