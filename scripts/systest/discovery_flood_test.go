package systest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/agent/boot"
	"github.com/bmedge/bmedge/agent/netboot/labnet"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// floodPy sends N DHCPDISCOVERs of PXE clients, each from a random MAC,
// as fast as it can: a machine (or a broken switch) flooding the site
// network.
const floodPy = `
import os, random, socket, struct, sys
n = int(sys.argv[1])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.setsockopt(socket.SOL_SOCKET, 25, b"eth0")  # SO_BINDTODEVICE: the broadcast goes out of eth0
s.bind(("0.0.0.0", 68))
vc = b"PXEClient:Arch:00000:UNDI:002001"
for i in range(n):
    mac = bytes([0x52, 0x54]) + os.urandom(4)
    xid = random.getrandbits(32)
    p = struct.pack("!BBBBIHH4s4s4s4s16s64s128s", 1, 1, 6, 0, xid, 0, 0x8000, b"\0"*4, b"\0"*4, b"\0"*4, b"\0"*4, mac + b"\0"*10, b"", b"")
    p += b"\x63\x82\x53\x63" + b"\x35\x01\x01" + bytes([60, len(vc)]) + vc + b"\x5d\x02\x00\x00" + b"\xff"
    s.sendto(p, ("255.255.255.255", 67))
print("sent", n)
`

// lineCounter is a slog handler that counts the records whose message
// contains a text, and passes every record on.
type lineCounter struct {
	slog.Handler
	mu    *sync.Mutex
	count map[string]int
}

func (l lineCounter) Handle(ctx context.Context, r slog.Record) error {
	l.mu.Lock()
	l.count[r.Message]++
	l.mu.Unlock()
	return l.Handler.Handle(ctx, r)
}

func (l lineCounter) WithAttrs(a []slog.Attr) slog.Handler {
	return lineCounter{Handler: l.Handler.WithAttrs(a), mu: l.mu, count: l.count}
}

// TestDiscoveryDHCPFlood: the edge agent's network boot on a site
// network of the test's own (a bridge in a private namespace), at a site
// that discovers with a cap of 5. A PXE client of a fresh MAC (busybox
// udhcpc, an independent client) gets a lease and the iPXE binary; a
// MAC that is a node's port gets nothing. Then 10,000 DHCPDISCOVERs of
// random MACs (python3, raw UDP): the agent answers at most the cap's
// remaining four, counts the refusals on /metrics, logs them at a
// bounded rate, and a fresh client after the flood gets nothing; no
// node is made of a DHCP request alone. With discovery off, a fresh MAC
// gets no answer.
func TestDiscoveryDHCPFlood(t *testing.T) {
	if !labnet.Isolate(t) {
		return
	}
	labnet.Need(t, "busybox", "python3", "nsenter")
	if _, err := os.Stat("/usr/lib/ipxe/undionly.kpxe"); err != nil {
		t.Skip("needs Debian's ipxe package")
	}
	dir := t.TempDir()
	kernel, initrd := filepath.Join(dir, "vmlinuz"), filepath.Join(dir, "initrd")
	os.WriteFile(kernel, []byte("kernel"), 0o644)
	os.WriteFile(initrd, []byte("initrd"), 0o644)
	site := labnet.New(t)

	c := testrig.Coordinator(t, testrig.Options{})
	cl := testrig.NewClient(t, c)
	var creds agent.Credentials
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "flood"}, &creds); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	known := cl.CreateNode("known", "flood", nil)
	if code := cl.Do("POST", "/v1/ports", map[string]any{"address": "52:54:00:aa:00:01", "node_uuid": known}, nil); code != 201 {
		t.Fatalf("port: %d", code)
	}
	counts := lineCounter{Handler: testrig.Logger(t).Handler(), mu: &sync.Mutex{}, count: map[string]int{}}
	a := testrig.StartAgentConfig(t, creds, agent.Config{Log: slog.New(counts), MetricsListen: "127.0.0.1:0",
		SiteBroker: agent.SiteBrokerOptions{Listen: "127.0.0.1:0"},
		Netboot: boot.NetbootOptions{Interface: site.Bridge, Mode: "dhcp", Range: "10.77.0.100-10.77.0.250", HTTPPort: -1, TFTPPort: -1,
			Kernel: kernel, Initrd: initrd}})
	setDiscovery := func(body map[string]any, on bool) {
		t.Helper()
		if code := cl.Do("PATCH", "/v1/sites/flood", body, nil); code != 200 {
			t.Fatalf("PATCH: %d", code)
		}
		waitFor(t, 10*time.Second, "the agent takes the configuration", func() (bool, string) {
			cf, _, _ := a.Discovery()
			return cf.Enabled == on, fmt.Sprintf("%+v", cf)
		})
	}
	setDiscovery(map[string]any{"discovery": true, "discovery_max_nodes": 5, "discovery_rate": 600, "discovery_driver": "fake-hardware"}, true)

	script := filepath.Join(dir, "udhcpc.sh")
	os.WriteFile(script, []byte("#!/bin/sh\n[ \"$1\" = bound ] && echo \"LEASE ip=$ip boot_file=$boot_file\"\nexit 0\n"), 0o755)
	udhcpc := func(h *labnet.Host) string {
		t.Helper()
		out, _ := h.Run("busybox", "udhcpc", "-i", "eth0", "-n", "-q", "-t", "2", "-T", "1", "-s", script, "-V", "PXEClient:Arch:00000:UNDI:002001")
		return out
	}
	if out := udhcpc(site.Host("52:54:00:bb:00:01", "")); !strings.Contains(out, "LEASE ip=10.77.0.") || !strings.Contains(out, "boot_file=undionly.kpxe") {
		t.Fatalf("a fresh PXE client at a site that discovers: no lease with the iPXE binary:\n%s", out)
	}
	if out := udhcpc(site.Host("52:54:00:aa:00:01", "")); strings.Contains(out, "LEASE") {
		t.Fatalf("a node's MAC was answered by discovery:\n%s", out)
	}

	flooder := site.Host("52:54:00:cc:00:01", "10.77.0.50/24")
	start := time.Now()
	if out, err := flooder.Run("python3", "-c", floodPy, "10000"); err != nil || !strings.Contains(out, "sent 10000") {
		t.Fatalf("flood: %v %s", err, out)
	}
	metric := func(outcome string) float64 {
		t.Helper()
		v, err := agentMetric(t, a.MetricsAddr(), "bmedge_agent_discovery_total", `outcome="`+outcome+`"`)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	// The agent has taken the flood once its count of unknown MACs asked
	// about holds still for a second (some datagrams may be lost on the
	// way: the count need not reach 10,000).
	taken := func() float64 { return metric("booted") + metric("cap") + metric("rate") + metric("discovery_off") }
	last, still := -1.0, time.Time{}
	waitFor(t, time.Minute, "the agent takes the flood", func() (bool, string) {
		n := taken()
		if n != last {
			last, still = n, time.Now()
		}
		return n >= 1000 && time.Since(still) >= time.Second, fmt.Sprintf("%v MACs asked about", n)
	})
	t.Logf("10,000 DISCOVERs sent and taken in %s (%v asked about)", time.Since(start).Round(100*time.Millisecond), last)
	if b := metric("booted"); b != 5 {
		t.Fatalf("discovery boots answered: %v, want the cap of 5", b)
	}
	refused := metric("cap") + metric("rate")
	if refused < 1000 {
		t.Fatalf("refusals counted: %v; want most of the 10,000", refused)
	}
	_, boots, _ := a.Discovery()
	if boots != 5 {
		t.Fatalf("%d discovery boots pending; want 5", boots)
	}
	counts.mu.Lock()
	logged := counts.count["not discovering a machine that belongs to no node"]
	counts.mu.Unlock()
	if logged > 3 {
		t.Fatalf("refusals logged %d times; want a bounded rate (one a minute per reason)", logged)
	}
	t.Logf("refused %v, logged %d times", refused, logged)
	if out := udhcpc(site.Host("52:54:00:bb:00:02", "")); strings.Contains(out, "LEASE") {
		t.Fatalf("a fresh PXE client past the cap got a lease:\n%s", out)
	}
	var nodes struct {
		Nodes []testrig.Node `json:"nodes"`
	}
	cl.Do("GET", "/v1/nodes", nil, &nodes)
	if len(nodes.Nodes) != 1 {
		t.Fatalf("%d nodes; a DHCP request alone makes none", len(nodes.Nodes))
	}

	setDiscovery(map[string]any{"discovery": false}, false)
	before := metric("discovery_off")
	if out := udhcpc(site.Host("52:54:00:bb:00:03", "")); strings.Contains(out, "LEASE") {
		t.Fatalf("discovery off: a fresh PXE client got a lease:\n%s", out)
	}
	if metric("discovery_off") <= before {
		t.Fatal("discovery off: the unanswered request is not counted")
	}
}
