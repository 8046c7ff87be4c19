package netboot

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent/netboot/labnet"
)

// TestSiteNetworkClients runs the services on a site network of the
// test's own (a bridge in a private network namespace) with other
// machines on it (namespaces with a veth each) speaking as independent
// clients: busybox udhcpc for DHCP, curl for TFTP and HTTP. A MAC that is
// not being booted gets no DHCP answer, no iPXE binary and no script; the
// node's MAC gets a lease, the BIOS binary as a PXE client, the script's
// URL as iPXE, and the script; once the boot ends, nothing.
func TestSiteNetworkClients(t *testing.T) {
	if !labnet.Isolate(t) {
		return
	}
	labnet.Need(t, "busybox", "curl", "nsenter")
	dir := t.TempDir()
	kernel, initrd := filepath.Join(dir, "vmlinuz"), filepath.Join(dir, "initrd")
	os.WriteFile(kernel, []byte("kernel"), 0o644)
	os.WriteFile(initrd, []byte("initrd"), 0o644)
	site := labnet.New(t)
	s, err := New(Config{Interface: site.Bridge, Mode: ModeDHCP, RangeStart: site.IP(100), RangeEnd: site.IP(110), Router: site.Addr,
		HTTPPort: 8082, Kernel: kernel, Initrd: initrd, Log: discardLog()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	node := site.Host("52:54:00:12:34:01", "")
	stranger := site.Host("52:54:00:12:34:99", "10.77.0.60/24")
	if err := s.Arm(Boot{Node: "n1", MACs: []net.HardwareAddr{node.MAC}, Cmdline: "bm.node=n1 bm.password=secret"}); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "udhcpc.sh")
	os.WriteFile(script, []byte("#!/bin/sh\n[ \"$1\" = bound ] && echo \"LEASE ip=$ip siaddr=$siaddr boot_file=$boot_file router=$router\"\nexit 0\n"), 0o755)
	udhcpc := func(h *labnet.Host, extra ...string) string {
		t.Helper()
		args := append([]string{"udhcpc", "-i", "eth0", "-n", "-q", "-t", "3", "-T", "1", "-s", script}, extra...)
		out, _ := h.Run("busybox", args...)
		return out
	}
	if out := udhcpc(stranger, "-V", "PXEClient:Arch:00000:UNDI:002001"); strings.Contains(out, "LEASE") {
		t.Fatalf("a MAC not being booted got a lease:\n%s", out)
	}
	out := udhcpc(node, "-V", "PXEClient:Arch:00000:UNDI:002001")
	if !strings.Contains(out, "LEASE ip=10.77.0.100 siaddr=10.77.0.1 boot_file=undionly.kpxe router=10.77.0.1") {
		t.Fatalf("the node as a BIOS PXE client: no lease with the iPXE binary:\n%s", out)
	}
	// iPXE sends user class "iPXE" (option 77): it gets the script.
	out = udhcpc(node, "-V", "PXEClient:Arch:00000:UNDI:002001", "-x", "0x4d:69505845")
	i := strings.Index(out, "boot_file=http://10.77.0.1:8082/boot/")
	if i < 0 {
		t.Fatalf("the node as iPXE did not get its script's URL:\n%s", out)
	}
	scriptURL := strings.Fields(out[i+len("boot_file="):])[0]
	// The node takes its address, as a PXE firmware would.
	if _, err := node.Run("ip", "addr", "add", "10.77.0.100/24", "dev", "eth0"); err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile("/usr/lib/ipxe/" + BIOSBinary)
	if got, err := node.Run("curl", "-sf", "--max-time", "20", "tftp://10.77.0.1/"+BIOSBinary); err != nil || got != string(want) {
		t.Fatalf("the node's tftp of %s: %d bytes (want %d), %v", BIOSBinary, len(got), len(want), err)
	}
	if _, err := stranger.Run("curl", "-sf", "--max-time", "20", "tftp://10.77.0.1/"+BIOSBinary); err == nil {
		t.Fatal("tftp served the iPXE binary to an address no booting node holds")
	}
	got, err := node.Run("curl", "-sf", "--max-time", "10", scriptURL)
	if err != nil || !strings.Contains(got, "bm.node=n1 bm.password=secret") {
		t.Fatalf("the node's script: %q %v", got, err)
	}
	if code, _ := stranger.Run("curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10", scriptURL); code != "404" {
		t.Fatalf("the script to another machine: %s, want 404", code)
	}
	if code, _ := node.Run("curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10",
		"http://10.77.0.1:8082/boot/"+strings.Repeat("a", 32)+"/boot.ipxe"); code != "404" {
		t.Fatalf("an unknown script path: %s, want 404", code)
	}
	s.Disarm("n1")
	if code, _ := node.Run("curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10", scriptURL); code != "404" {
		t.Fatalf("the script after the boot ended: %s, want 404", code)
	}
	if _, err := node.Run("ip", "addr", "flush", "dev", "eth0"); err != nil {
		t.Fatal(err)
	}
	if out := udhcpc(node, "-V", "PXEClient:Arch:00000:UNDI:002001"); strings.Contains(out, "LEASE") {
		t.Fatalf("the node got a lease after its boot ended:\n%s", out)
	}
}

// TestRouterAdvertOnlyToBootingNodes: the services answer an IPv6 router
// solicitation (Debian's rdisc6 in a site host, the independent client)
// of a MAC being booted with an advertisement that configures nothing
// (router lifetime 0, no prefix, no managed or other flag), so that iPXE
// ends its IPv6 configuration at once; a MAC not being booted gets no
// answer, nor does the node once its boot ended.
func TestRouterAdvertOnlyToBootingNodes(t *testing.T) {
	if !labnet.Isolate(t) {
		return
	}
	labnet.Need(t, "rdisc6", "nsenter")
	dir := t.TempDir()
	kernel, initrd := filepath.Join(dir, "vmlinuz"), filepath.Join(dir, "initrd")
	os.WriteFile(kernel, []byte("kernel"), 0o644)
	os.WriteFile(initrd, []byte("initrd"), 0o644)
	site := labnet.New(t)
	s, err := New(Config{Interface: site.Bridge, Mode: ModeDHCP, RangeStart: site.IP(100), RangeEnd: site.IP(110), Router: site.Addr,
		HTTPPort: 8083, Kernel: kernel, Initrd: initrd, Log: discardLog()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	node := site.Host("52:54:00:12:35:01", "")
	stranger := site.Host("52:54:00:12:35:99", "")
	if err := s.Arm(Boot{Node: "n1", MACs: []net.HardwareAddr{node.MAC}, Cmdline: "bm.node=n1"}); err != nil {
		t.Fatal(err)
	}
	// rdisc6 (-1: the first answer only, 3 tries a second apart) sends
	// from the host's link-local address once duplicate address
	// detection has passed.
	for _, h := range []*labnet.Host{node, stranger} {
		for end := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			out, _ := h.Run("ip", "-6", "addr", "show", "dev", "eth0", "scope", "link")
			if strings.Contains(out, "inet6 fe80") && !strings.Contains(out, "tentative") {
				break
			}
			if time.Now().After(end) {
				t.Fatalf("the site host has no IPv6 link-local address: %s", out)
			}
		}
	}
	rdisc := func(h *labnet.Host) (string, error) { return h.Run("rdisc6", "-1", "-r", "3", "-w", "1000", "eth0") }
	out, err := rdisc(node)
	if err != nil {
		t.Fatalf("the node being booted got no router advertisement: %v", err)
	}
	for _, want := range []string{"Router lifetime         :            0", "Stateful address conf.  :           No", "Stateful other conf.    :           No"} {
		if !strings.Contains(strings.Join(strings.Fields(out), " "), strings.Join(strings.Fields(want), " ")) {
			t.Errorf("the advertisement lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "Prefix") {
		t.Errorf("the advertisement has a prefix:\n%s", out)
	}
	if out, err := rdisc(stranger); err == nil {
		t.Fatalf("a MAC not being booted got a router advertisement:\n%s", out)
	}
	s.Disarm("n1")
	if out, err := rdisc(node); err == nil {
		t.Fatalf("the node got a router advertisement after its boot ended:\n%s", out)
	}
}
