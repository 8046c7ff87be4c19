package ramdisk_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent/netboot/labnet"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// logTee is a slog handler that writes to the test's log and keeps the
// messages, to see what the edge agent's network boot served.
type logTee struct {
	mu    sync.Mutex
	lines []string
	next  slog.Handler
	attrs []slog.Attr
}

func (l *logTee) Enabled(context.Context, slog.Level) bool { return true }
func (l *logTee) Handle(ctx context.Context, r slog.Record) error {
	line := r.Message
	for _, a := range l.attrs {
		line += " " + a.String()
	}
	r.Attrs(func(a slog.Attr) bool { line += " " + a.String(); return true })
	l.mu.Lock()
	l.lines = append(l.lines, line)
	l.mu.Unlock()
	if r.Level < slog.LevelInfo {
		return nil
	}
	return l.next.Handle(ctx, r)
}
func (l *logTee) WithAttrs(as []slog.Attr) slog.Handler {
	return &logView{l, as}
}
func (l *logTee) WithGroup(string) slog.Handler { return l }

// logView is a logTee with attributes.
type logView struct {
	l     *logTee
	attrs []slog.Attr
}

func (v *logView) Enabled(ctx context.Context, lv slog.Level) bool { return true }
func (v *logView) Handle(ctx context.Context, r slog.Record) error {
	r.AddAttrs(v.attrs...)
	return v.l.Handle(ctx, r)
}
func (v *logView) WithAttrs(as []slog.Attr) slog.Handler {
	return &logView{v.l, append(append([]slog.Attr(nil), v.attrs...), as...)}
}
func (v *logView) WithGroup(string) slog.Handler { return v }

func (l *logTee) count(parts ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		all := true
		for _, p := range parts {
			if !strings.Contains(line, p) {
				all = false
				break
			}
		}
		if all {
			n++
		}
	}
	return n
}

// TestNetbootIPMIQEMURamdisk: an IPMI node (ipmi_sim as its BMC, a QEMU
// VM as its machine, started by the BMC's power-on) on a site network of
// the test's own (a bridge in a private network namespace) boots the real
// ramdisk by network boot from the edge agent: the VM's UEFI firmware
// (OVMF, the NIC's own option ROM removed, so that the firmware's PXE
// client runs) gets a lease and snponly.efi by TFTP, iPXE gets the boot's
// script, kernel and initramfs by HTTP, and the ramdisk inspects and
// cleans through the edge agent's site broker. The coordinator and its
// broker listen on loopback only: a machine on the site network cannot
// reach them.
func TestNetbootIPMIQEMURamdisk(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU several times")
	}
	if !labnet.Isolate(t) {
		return
	}
	kernel, initrd := need(t)
	labnet.Need(t, "qemu-system-x86_64", "nsenter")
	if _, err := os.Stat("/usr/share/ovmf/OVMF.fd"); err != nil {
		if os.Getenv("BM_REQUIRE_ALL") == "1" {
			t.Fatal("OVMF is missing (Debian package ovmf)")
		}
		t.Skip("OVMF is missing (Debian package ovmf)")
	}
	dir := t.TempDir()
	site := labnet.New(t)
	const nodeMAC = "52:54:00:be:ef:01"

	diskPath := filepath.Join(dir, "disk.raw")
	randomFile(t, diskPath, 64<<20, 11)
	console := filepath.Join(dir, "console.log")
	showConsole(t, console, 6144)

	// The coordinator: API and broker on loopback. The edge agent: its
	// WAN link to the coordinator's broker; on the site network the site
	// broker and network boot.
	tee := &logTee{next: testrig.Logger(t).Handler()}
	l := newLab(t, labOptions{Netboot: site, NetKernel: kernel, NetInitrd: initrd, WaitTimeout: 4 * time.Minute, AgentLog: slog.New(tee)})
	c, cl := l.c, l.cl
	// The BMC's power-on starts the VM, booting from the network when its
	// boot device is pxe, else from the disk; power-off kills it.
	sim := l.ipmiBMC(ipmiVMOptions{Disk: diskPath, Console: console, Tap: site.Tap(), MAC: nodeMAC})
	siteBroker := site.Addr.String() + ":1883"
	if got := l.agent.SiteBrokerAddr(); got != siteBroker {
		t.Fatalf("site broker on %q, want %s", got, siteBroker)
	}

	// A machine on the site network reaches the site broker, not the
	// coordinator's broker or API (loopback only, in another host).
	other := site.Host("52:54:00:be:ef:99", "10.77.0.60/24")
	mqttPort := c.BrokerURL[strings.LastIndex(c.BrokerURL, ":")+1:]
	dial := func(addr string) error {
		host, port, _ := strings.Cut(addr, ":")
		_, err := other.Run("bash", "-c", "exec 3<>/dev/tcp/"+host+"/"+port)
		return err
	}
	if err := dial(siteBroker); err != nil {
		t.Fatalf("the site broker is not reachable from the site network: %v", err)
	}
	for _, addr := range []string{site.Addr.String() + ":" + mqttPort, "127.0.0.1:" + mqttPort} {
		if err := dial(addr); err == nil {
			t.Fatalf("the coordinator's broker is reachable from the site network at %s", addr)
		}
	}

	id := l.createNode("vm1", "ipmi", sim.DriverInfo(), map[string]any{"root_device": map[string]any{"serial": "DISK0"}})
	if code := cl.Do("POST", "/v1/ports", map[string]any{"node_uuid": id, "address": nodeMAC, "pxe_enabled": true}, nil); code != 201 {
		t.Fatalf("port: %d", code)
	}
	l.step(id, "manage", "manageable", nil, 60*time.Second)
	n := l.step(id, "inspect", "manageable", nil, 6*time.Minute)
	mem, _ := n.Properties["memory_mb"].(float64)
	if n.Properties["cpus"] != 1.0 || mem < 900 || mem > 1100 {
		t.Fatalf("properties do not match the VM (1 CPU, 1024 MiB): %v", n.Properties)
	}
	// The chain, as the edge agent served it: the lease, the UEFI binary by
	// TFTP to the firmware, the script, kernel and initramfs by HTTP.
	for _, want := range [][]string{
		{"network boot DHCP: ack", "mac=" + nodeMAC, "pxe=true", "ipxe=false"},
		{"network boot TFTP: sent", "file=snponly.efi"},
		{"network boot DHCP: ack", "mac=" + nodeMAC, "ipxe=true"},
		{"network boot HTTP: script served", "node=" + id},
		{"network boot HTTP: vmlinuz served", "node=" + id},
		{"network boot HTTP: initrd served", "node=" + id},
		{"network boot DHCP: ack", "mac=" + nodeMAC, "pxe=false", "ipxe=false"},
	} {
		if tee.count(want...) == 0 {
			t.Errorf("the edge agent's log has no line with %q", want)
		}
	}
	if tee.count("network boot disarmed", "node="+id) == 0 {
		t.Error("the node's network boot was not disarmed when inspection ended")
	}
	// The ramdisk talked to the site broker, never to the coordinator's.
	consoleHas(t, console, "connected to mqtt://"+siteBroker)
	if t.Failed() {
		t.FailNow()
	}

	l.step(id, "provide", "available", nil, 8*time.Minute)
	if off := firstNonZero(t, diskPath); off >= 0 {
		t.Fatalf("after cleaning the disk has a non-zero byte at %d", off)
	}
	if got := tee.count("network boot HTTP: script served", "node="+id); got < 2 {
		t.Fatalf("the script was served %d times; want one per boot (inspect, clean)", got)
	}
	// The credential is on the kernel command line: never in the log.
	tee.mu.Lock()
	defer tee.mu.Unlock()
	for _, l := range tee.lines {
		if strings.Contains(l, "bm.password=") {
			t.Fatalf("the edge agent logged a boot's password: %s", l)
		}
	}
}
