package netboot

import (
	"bufio"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent/netboot/labnet"
)

// sniffer is a passive machine's capture of DHCP answers (UDP to port
// 68) on its interface in promiscuous mode, by a raw packet socket in
// python3: one line per frame, with its destination MAC and IP and
// whether it carries a script URL (/boot/); "MARK" for the test's own
// marker (sniffMark).
const sniffer = `
import select, socket, struct, sys
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.bind(("eth0", 0))
print("ready", flush=True)
while True:
    r, _, _ = select.select([s, sys.stdin], [], [])
    if sys.stdin in r and not sys.stdin.read(1):
        break
    if s not in r:
        continue
    f = s.recv(65535)
    if len(f) < 42 or f[12:14] != b"\x08\x00" or f[23] != 17:
        continue
    udp = f[14 + (f[14] & 15) * 4:]
    if struct.unpack("!H", udp[2:4])[0] != 68:
        continue
    if b"bmedge-sniff-mark" in udp:
        print("MARK", flush=True)
        continue
    print("ANSWER dst_mac=%s dst_ip=%s script=%s" % (f[0:6].hex(), socket.inet_ntoa(f[30:34]), b"/boot/" in udp), flush=True)
`

// sniffMark is the payload of the marker the capture's stop sends
// before it ends: a broadcast to port 68 from the site network's address,
// through the bridge after whatever answers went before it.
const sniffMark = "bmedge-sniff-mark"

// sniff starts the capture on h and returns a function that stops it
// and returns the lines it printed: once the capture saw the marker sent
// from bcast (the site network's broadcast address) after the answers,
// so every frame before it is in.
func sniff(t *testing.T, h *labnet.Host, from, bcast net.IP) (stop func() []string) {
	t.Helper()
	cmd := h.Command("python3", "-c", sniffer)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 100)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	select {
	case l := <-lines:
		if l != "ready" {
			t.Fatalf("the capture on the passive machine: %q", l)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the capture on the passive machine did not start")
	}
	return func() []string {
		// The marker, sent until the capture saw it: the frames before
		// it on the bridge have reached the capture then.
		conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: from})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		var got []string
		deadline := time.After(10 * time.Second)
	mark:
		for {
			if _, err := conn.WriteToUDP([]byte(sniffMark), &net.UDPAddr{IP: bcast, Port: 68}); err != nil {
				t.Fatalf("the capture's marker: %v", err)
			}
			retry := time.After(200 * time.Millisecond)
			for {
				select {
				case l, ok := <-lines:
					if !ok {
						t.Fatal("the capture ended before its marker")
					}
					if l == "MARK" {
						break mark
					}
					got = append(got, l)
				case <-retry:
					continue mark
				case <-deadline:
					t.Fatal("the capture did not see its marker within 10 s")
				}
			}
		}
		in.Close()
		for l := range lines {
			if l != "MARK" {
				got = append(got, l)
			}
		}
		_ = cmd.Wait()
		_, _ = io.Copy(io.Discard, out)
		return got
	}
}

// TestDHCPAnswersUnicast: a node booting iPXE that does not ask for
// broadcast answers (busybox udhcpc, an independent client, with iPXE's
// user class) gets its lease and its script's URL, and a passive machine
// on the site network, listening in promiscuous mode on the same bridge,
// receives no DHCP answer at all: the offer and the ack go to the node's
// MAC address alone (RFC 2131 4.1). When the node asks for broadcast
// (udhcpc -B), the passive machine does see the answers and the script
// URL in them: what docs/netboot.md says is left for the neighbour check.
func TestDHCPAnswersUnicast(t *testing.T) {
	if !labnet.Isolate(t) {
		return
	}
	labnet.Need(t, "busybox", "python3", "nsenter")
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
	node := site.Host("52:54:00:12:34:01", "")
	passive := site.Host("52:54:00:12:34:98", "10.77.0.61/24")
	if _, err := passive.Run("ip", "link", "set", "eth0", "promisc", "on"); err != nil {
		t.Fatal(err)
	}
	if err := s.Arm(Boot{Node: "n1", MACs: []net.HardwareAddr{node.MAC}, Cmdline: "bm.node=n1"}); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "udhcpc.sh")
	os.WriteFile(script, []byte("#!/bin/sh\n[ \"$1\" = bound ] && echo \"LEASE ip=$ip boot_file=$boot_file\"\nexit 0\n"), 0o755)
	ipxe := func(extra ...string) string {
		t.Helper()
		args := append([]string{"udhcpc", "-i", "eth0", "-n", "-q", "-t", "3", "-T", "1", "-s", script,
			"-V", "PXEClient:Arch:00000:UNDI:002001", "-x", "0x4d:69505845"}, extra...)
		out, _ := node.Run("busybox", args...)
		return out
	}

	// 1. No broadcast flag: unicast to the node's MAC.
	bcast := site.IP(255)
	stop := sniff(t, passive, site.Addr, bcast)
	out := ipxe()
	seen := stop()
	if !strings.Contains(out, "LEASE ip=10.77.0.100 boot_file=http://10.77.0.1:8083/boot/") {
		t.Fatalf("the node without the broadcast flag got no lease with its script's URL:\n%s", out)
	}
	if len(seen) > 0 {
		t.Fatalf("a passive machine on the site network received the DHCP answers to a node that did not ask for broadcast:\n%s", strings.Join(seen, "\n"))
	}

	// 2. The broadcast flag: everyone on the site network sees them.
	stop = sniff(t, passive, site.Addr, bcast)
	out = ipxe("-B")
	seen = stop()
	if !strings.Contains(out, "LEASE ip=10.77.0.100 boot_file=http://10.77.0.1:8083/boot/") {
		t.Fatalf("the node with the broadcast flag got no lease with its script's URL:\n%s", out)
	}
	joined := strings.Join(seen, "\n")
	if !strings.Contains(joined, "dst_mac=ffffffffffff dst_ip=255.255.255.255 script=True") {
		t.Fatalf("with the broadcast flag the passive machine saw %q, want the broadcast answers with the script URL (the capture's own check)", joined)
	}
}
