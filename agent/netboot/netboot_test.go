package netboot

import (
	"bytes"
	"encoding/binary"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"
)

func discardLog() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// handlerServer is a Server with no sockets, to call answer directly.
func handlerServer(t *testing.T, mode string) *Server {
	t.Helper()
	cfg := Config{Interface: "site0", Address: net.IPv4(10, 1, 0, 1).To4(), Mode: mode, Netmask: net.CIDRMask(24, 32),
		LeaseTime: time.Hour, TTL: time.Hour, Log: discardLog()}
	s := &Server{cfg: cfg, log: cfg.Log, netmask: cfg.Netmask, boots: map[string]*armed{}, byMAC: map[string]*armed{}, byTok: map[string]*armed{},
		httpURL: "http://10.1.0.1:8082"}
	if mode == ModeDHCP {
		l, err := newLeases(cfg.Address, cfg.Netmask, net.IPv4(10, 1, 0, 100), net.IPv4(10, 1, 0, 101), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		s.leases = l
	}
	return s
}

func mac(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}

func discover(t *testing.T, hw net.HardwareAddr, mods ...dhcpv4.Modifier) *dhcpv4.DHCPv4 {
	t.Helper()
	d, err := dhcpv4.NewDiscovery(hw, mods...)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func pxeMods(arch iana.Arch) []dhcpv4.Modifier {
	a := make([]byte, 2)
	binary.BigEndian.PutUint16(a, uint16(arch))
	return []dhcpv4.Modifier{dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:00000:UNDI:002001")),
		dhcpv4.WithGeneric(dhcpv4.OptionClientSystemArchitectureType, a)}
}

var ipxeClass = dhcpv4.WithGeneric(dhcpv4.OptionUserClassInformation, []byte("iPXE"))

// TestDHCPAnswersOnlyArmedMACs: a full DHCP server offers an address and
// the boot file by the client's kind (BIOS PXE, UEFI PXE, iPXE, the
// ramdisk's plain DHCP) to armed MACs only; nothing to others, nothing
// once disarmed; a request for another address is refused.
func TestDHCPAnswersOnlyArmedMACs(t *testing.T) {
	s := handlerServer(t, ModeDHCP)
	node := mac("52:54:00:00:00:01")
	stranger := mac("52:54:00:00:00:99")
	if err := s.Arm(Boot{Node: "n1", MACs: []net.HardwareAddr{node}, Cmdline: "bm.password=secret"}); err != nil {
		t.Fatal(err)
	}
	if r := s.answer(discover(t, stranger, pxeMods(iana.INTEL_X86PC)...), false); r != nil {
		t.Fatalf("a MAC not being booted got an answer: %s", r.Summary())
	}
	cases := []struct {
		name     string
		mods     []dhcpv4.Modifier
		file     string
		nextSrv  bool
		contains string
	}{
		{"BIOS PXE", pxeMods(iana.INTEL_X86PC), BIOSBinary, true, ""},
		{"UEFI PXE", pxeMods(iana.EFI_X86_64), UEFIBinary, true, ""},
		{"UEFI BC PXE", pxeMods(iana.EFI_BC), UEFIBinary, true, ""},
		{"iPXE", append(pxeMods(iana.INTEL_X86PC), ipxeClass), "", false, "http://10.1.0.1:8082/boot/"},
		{"ramdisk", nil, "", false, ""},
	}
	for _, c := range cases {
		r := s.answer(discover(t, node, c.mods...), false)
		if r == nil || r.MessageType() != dhcpv4.MessageTypeOffer {
			t.Fatalf("%s: no offer", c.name)
		}
		if !r.YourIPAddr.Equal(net.IPv4(10, 1, 0, 100)) || !bytes.Equal(r.SubnetMask(), net.CIDRMask(24, 32)) || !r.ServerIdentifier().Equal(s.cfg.Address) {
			t.Fatalf("%s: offer %s", c.name, r.Summary())
		}
		if c.file != "" && (r.BootFileName != c.file || r.BootFileNameOption() != c.file) {
			t.Fatalf("%s: boot file %q / option 67 %q, want %q", c.name, r.BootFileName, r.BootFileNameOption(), c.file)
		}
		if c.nextSrv != r.ServerIPAddr.Equal(s.cfg.Address) {
			t.Fatalf("%s: next server %s", c.name, r.ServerIPAddr)
		}
		if c.contains != "" && (!strings.HasPrefix(r.BootFileName, c.contains) || !strings.HasSuffix(r.BootFileName, "/boot.ipxe")) {
			t.Fatalf("%s: boot file %q, want the script's URL", c.name, r.BootFileName)
		}
		if c.name == "ramdisk" && (r.BootFileName != "" || r.BootFileNameOption() != "") {
			t.Fatalf("the ramdisk's own DHCP got a boot file %q", r.BootFileName)
		}
	}
	// Request the offered address: ack; another's: nak.
	req := discover(t, node, dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.IPv4(10, 1, 0, 100))), dhcpv4.WithOption(dhcpv4.OptServerIdentifier(s.cfg.Address)))
	if r := s.answer(req, false); r == nil || r.MessageType() != dhcpv4.MessageTypeAck || !r.YourIPAddr.Equal(net.IPv4(10, 1, 0, 100)) {
		t.Fatalf("request of the offered address: %v", r)
	}
	bad := discover(t, node, dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest), dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.IPv4(10, 1, 0, 7))))
	if r := s.answer(bad, false); r == nil || r.MessageType() != dhcpv4.MessageTypeNak {
		t.Fatalf("request of an address outside the range: %v, want a nak", r)
	}
	s.Disarm("n1")
	if r := s.answer(discover(t, node, pxeMods(iana.INTEL_X86PC)...), false); r != nil {
		t.Fatalf("a disarmed node got an answer: %s", r.Summary())
	}
}

// TestDHCPRangeExhausted: a second node gets the other address, a third
// none.
func TestDHCPRangeExhausted(t *testing.T) {
	s := handlerServer(t, ModeDHCP)
	for i, m := range []string{"52:54:00:00:00:01", "52:54:00:00:00:02", "52:54:00:00:00:03"} {
		if err := s.Arm(Boot{Node: "n" + m, MACs: []net.HardwareAddr{mac(m)}}); err != nil {
			t.Fatal(err)
		}
		r := s.answer(discover(t, mac(m)), false)
		if i < 2 && (r == nil || !r.YourIPAddr.Equal(net.IPv4(10, 1, 0, byte(100+i)))) {
			t.Fatalf("node %d: %v", i, r)
		}
		if i == 2 && r != nil {
			t.Fatalf("a third node got %s from a range of two", r.YourIPAddr)
		}
	}
}

// TestProxyDHCP: proxy mode answers PXE clients of armed MACs only, with
// no address, option 60 PXEClient and discovery control; DHCPREQUEST on
// port 4011 gets an ack; non-PXE clients (the ramdisk) get nothing, as the
// site's own DHCP server serves them.
func TestProxyDHCP(t *testing.T) {
	s := handlerServer(t, ModeProxy)
	node := mac("52:54:00:00:00:01")
	if err := s.Arm(Boot{Node: "n1", MACs: []net.HardwareAddr{node}}); err != nil {
		t.Fatal(err)
	}
	if r := s.answer(discover(t, mac("52:54:00:00:00:02"), pxeMods(iana.EFI_X86_64)...), false); r != nil {
		t.Fatal("proxy answered a MAC not being booted")
	}
	if r := s.answer(discover(t, node), false); r != nil {
		t.Fatal("proxy answered a client that is not PXE")
	}
	r := s.answer(discover(t, node, pxeMods(iana.EFI_X86_64)...), false)
	if r == nil || r.MessageType() != dhcpv4.MessageTypeOffer || !r.YourIPAddr.IsUnspecified() || r.ClassIdentifier() != "PXEClient" ||
		r.BootFileName != UEFIBinary || !r.ServerIPAddr.Equal(s.cfg.Address) || !bytes.Equal(r.GetOneOption(dhcpv4.OptionVendorSpecificInformation), []byte{6, 1, 8, 255}) {
		t.Fatalf("proxy offer: %v", r)
	}
	req := discover(t, node, append(pxeMods(iana.EFI_X86_64), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest), ipxeClass)...)
	if r := s.answer(req, false); r != nil {
		t.Fatal("proxy answered a DHCPREQUEST on port 67 (the site's DHCP server's business)")
	}
	if r := s.answer(req, true); r == nil || r.MessageType() != dhcpv4.MessageTypeAck || !strings.HasSuffix(r.BootFileName, "/boot.ipxe") {
		t.Fatalf("proxy ack on port 4011 to iPXE: %v", r)
	}
}

func TestParseARP(t *testing.T) {
	table := `IP address       HW type     Flags       HW address            Mask     Device
10.77.0.50       0x1         0x2         52:54:00:00:00:01     *        site0
10.77.0.51       0x1         0x0         00:00:00:00:00:00     *        site0
10.77.0.52       0x1         0x2         52:54:00:00:00:03     *        eth9
`
	if m, ok := parseARP(strings.NewReader(table), "site0", net.ParseIP("10.77.0.50")); !ok || m.String() != "52:54:00:00:00:01" {
		t.Fatalf("complete entry: %v %v", m, ok)
	}
	if _, ok := parseARP(strings.NewReader(table), "site0", net.ParseIP("10.77.0.51")); ok {
		t.Fatal("an incomplete entry counted")
	}
	if _, ok := parseARP(strings.NewReader(table), "site0", net.ParseIP("10.77.0.52")); ok {
		t.Fatal("an entry of another interface counted")
	}
}

func TestParseMACs(t *testing.T) {
	got, err := ParseMACs([]any{"52:54:00:AA:bb:01"})
	if err != nil || len(got) != 1 || got[0].String() != "52:54:00:aa:bb:01" {
		t.Fatalf("%v %v", got, err)
	}
	for _, bad := range []any{[]any{"x"}, []any{3}, "52:54:00:aa:bb:01", []any{"00:00:00:00:fe:80:00:00:00:00:00:00:02:00:5e:10:00:00:00:01"}} {
		if _, err := ParseMACs(bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

// TestHTTPScriptOnlyToTheNode: the script, kernel and initramfs of a boot
// are served under its random path to the node's MAC only (by the source
// address's neighbour entry); an unknown path, another MAC or an ended
// boot get 404; the TFTP server serves the iPXE binaries, nothing else,
// and only to a booting node's MAC. On loopback (curl, an independent client; the MAC lookup is
// replaced).
func TestHTTPScriptOnlyToTheNode(t *testing.T) {
	if _, err := os.Stat("/usr/lib/ipxe/" + BIOSBinary); err != nil && os.Getenv("BM_REQUIRE_ALL") != "1" {
		t.Skip("Debian's ipxe package is not installed")
	}
	dir := t.TempDir()
	kernel, initrd := filepath.Join(dir, "vmlinuz"), filepath.Join(dir, "initrd")
	os.WriteFile(kernel, bytes.Repeat([]byte("K"), 5000), 0o600)
	os.WriteFile(initrd, bytes.Repeat([]byte("I"), 7000), 0o600)
	// The MAC the handler sees for the request's address; set between
	// requests (curl, another process: the race detector sees no order).
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
	node := mac("52:54:00:00:00:01")
	if err := s.Arm(Boot{Node: "n1", MACs: []net.HardwareAddr{node}, Cmdline: "console=ttyS0 bm.node=n1 bm.password=secret"}); err != nil {
		t.Fatal(err)
	}
	script := s.scriptURL(s.bootOfMAC(node))
	base := strings.TrimSuffix(script, "/boot.ipxe")
	curl := func(url string) (int, string) {
		t.Helper()
		out, err := runCurl(url)
		if err != nil {
			t.Fatal(err)
		}
		code := out[len(out)-3:]
		return atoi(code), out[:len(out)-3]
	}
	setPeer(node)
	code, body := curl(script)
	if code != 200 || !strings.Contains(body, "kernel "+base+"/vmlinuz initrd=initrd console=ttyS0 bm.node=n1 bm.password=secret") ||
		!strings.Contains(body, "initrd --name initrd "+base+"/initrd") || !strings.HasPrefix(body, "#!ipxe") {
		t.Fatalf("script: %d %q", code, body)
	}
	if code, body := curl(base + "/vmlinuz"); code != 200 || len(body) != 5000 {
		t.Fatalf("kernel: %d, %d bytes", code, len(body))
	}
	if code, body := curl(base + "/initrd"); code != 200 || len(body) != 7000 {
		t.Fatalf("initrd: %d, %d bytes", code, len(body))
	}
	if code, _ := curl(s.httpURL + "/boot/" + strings.Repeat("0", 32) + "/boot.ipxe"); code != 404 {
		t.Fatalf("unknown path: %d", code)
	}
	setPeer(mac("52:54:00:00:00:02"))
	if code, _ := curl(script); code != 404 {
		t.Fatalf("script to another MAC: %d", code)
	}
	setPeer(nil)
	if code, _ := curl(script); code != 404 {
		t.Fatalf("script to an address with no neighbour entry: %d", code)
	}
	setPeer(node)
	tftpURL := "tftp://127.0.0.1:" + itoa(s.cfg.TFTPPort) + "/"
	want, _ := os.ReadFile("/usr/lib/ipxe/" + BIOSBinary)
	if out, err := runCurlRaw(tftpURL + BIOSBinary); err != nil || out != string(want) {
		t.Fatalf("tftp %s: %d bytes (want %d), %v", BIOSBinary, len(out), len(want), err)
	}
	if _, err := runCurlRaw(tftpURL + "etc/passwd"); err == nil {
		t.Fatal("tftp served a file that is not an iPXE binary")
	}
	// In proxy mode too, the binary goes only to a booting node's MAC.
	setPeer(mac("52:54:00:00:00:02"))
	if out, err := runCurlRaw(tftpURL + BIOSBinary); err == nil {
		t.Fatalf("tftp served %d bytes to a MAC that is not booting", len(out))
	}
	setPeer(nil)
	if out, err := runCurlRaw(tftpURL + BIOSBinary); err == nil {
		t.Fatalf("tftp served %d bytes to an address with no neighbour entry", len(out))
	}
	setPeer(node)
	s.Disarm("n1")
	if code, _ := curl(script); code != 404 {
		t.Fatalf("script after the boot ended: %d", code)
	}
	if out, err := runCurlRaw(tftpURL + BIOSBinary); err == nil {
		t.Fatalf("tftp served %d bytes after the boot ended", len(out))
	}
}
