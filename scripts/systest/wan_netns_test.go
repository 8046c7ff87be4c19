package systest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bmedge/bmedge/lib/freeport"
	"github.com/bmedge/bmedge/scripts/internal/tunwire"
	"golang.org/x/sys/unix"
)

// A WAN for tests: the site (its edge agent) runs in a network namespace
// of its own, joined to the host, where the coordinator listens, by one
// link that the test can cut or impair. Everything is removed when the
// test ends, failed or not.
//
// Two kinds of link:
//   - wanVeth: a veth pair; cut by setting the host end down.
//   - wanWire: two TUN devices (one in the namespace) and a wire between
//     them in this process that delays every packet and drops a share of
//     them at random: the impairment tc netem gives, for kernels without
//     netem (sch_netem is not built into every kernel). newImpairedWAN
//     uses a veth pair with tc netem on both ends when the kernel has it,
//     else the wire.

type wanKind int

const (
	wanVeth wanKind = iota
	wanWire
)

type wanNet struct {
	t      testing.TB
	NS     string
	HostIf string
	SiteIf string
	// HostIP is the host's address on the link (the coordinator listens
	// there), SiteIP the namespace's.
	HostIP, SiteIP string
	wire           *tunwire.Wire
	// netem is set when the impairment is the kernel's tc netem.
	netem bool
}

var wanSeq atomic.Int32

// needWAN skips the test unless network namespaces can be made here:
// always when not root; when ip is missing, unless the run demands every
// component (make test sets BM_REQUIRE_ALL=1; iproute2 is a test
// dependency).
func needWAN(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the WAN tests need root: they make a network namespace and a link to it (run the tests as root)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		wanSkip(t, "the WAN tests need the ip command (Debian package iproute2; scripts/install-test-deps.sh installs it)")
	}
}

// wanSkip skips, or fails when the run demands every component.
func wanSkip(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("BM_REQUIRE_ALL") == "1" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

func run(args ...string) (string, error) {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// newWAN makes the namespace and the link; the namespace's end is up and
// addressed, loopback in it is up.
func newWAN(t testing.TB, kind wanKind) *wanNet {
	t.Helper()
	needWAN(t)
	seq := int(wanSeq.Add(1))
	pid := os.Getpid()
	w := &wanNet{t: t,
		NS:     fmt.Sprintf("bmwan%d-%d", pid, seq),
		HostIf: fmt.Sprintf("bw%dh%d", pid%1000000, seq%100),
		SiteIf: fmt.Sprintf("bw%dn%d", pid%1000000, seq%100),
	}
	// A /30 of 10.213.0.0/16 of this process and link: private, and
	// apart from other tests' networks.
	sub := (pid*4 + seq) % 16384
	w.HostIP = fmt.Sprintf("10.213.%d.%d", sub/64, sub%64*4+1)
	w.SiteIP = fmt.Sprintf("10.213.%d.%d", sub/64, sub%64*4+2)
	// Leftovers of a killed run of the same process id, and of test
	// processes that died before their cleanup.
	_, _ = run("ip", "link", "del", w.HostIf)
	_, _ = run("ip", "netns", "del", w.NS)
	sweepWANs()
	if _, err := run("ip", "netns", "add", w.NS); err != nil {
		wanSkip(t, "cannot make a network namespace here: %v", err)
	}
	t.Cleanup(func() {
		if w.wire != nil {
			w.wire.Close()
		}
		_, _ = run("ip", "link", "del", w.HostIf)
		if _, err := run("ip", "netns", "del", w.NS); err != nil {
			t.Errorf("removing the test's network namespace: %v", err)
		}
	})
	must := func(args ...string) {
		t.Helper()
		if _, err := run(args...); err != nil {
			t.Fatal(err)
		}
	}
	switch kind {
	case wanVeth:
		must("ip", "link", "add", w.HostIf, "type", "veth", "peer", "name", w.SiteIf)
		must("ip", "link", "set", w.SiteIf, "netns", w.NS)
		must("ip", "addr", "add", w.HostIP+"/30", "dev", w.HostIf)
		must("ip", "netns", "exec", w.NS, "ip", "addr", "add", w.SiteIP+"/30", "dev", w.SiteIf)
	case wanWire:
		host, err := tunwire.OpenTUN(w.HostIf)
		if err != nil {
			wanSkip(t, "cannot make a TUN device here: %v", err)
		}
		site, err := tunwire.OpenTUN(w.SiteIf)
		if err != nil {
			host.Close()
			wanSkip(t, "cannot make a TUN device here: %v", err)
		}
		w.wire = tunwire.New(host, site)
		must("ip", "link", "set", w.SiteIf, "netns", w.NS)
		must("ip", "addr", "add", w.HostIP, "peer", w.SiteIP, "dev", w.HostIf)
		must("ip", "netns", "exec", w.NS, "ip", "addr", "add", w.SiteIP, "peer", w.HostIP, "dev", w.SiteIf)
	}
	must("ip", "link", "set", w.HostIf, "up")
	must("ip", "netns", "exec", w.NS, "ip", "link", "set", w.SiteIf, "up")
	must("ip", "netns", "exec", w.NS, "ip", "link", "set", "lo", "up")
	return w
}

// sweepWANs removes the namespaces of WAN tests whose process is gone
// (killed before its cleanup ran): deleting the namespace deletes the
// veth pair in it; a TUN device dies with its process.
func sweepWANs() {
	out, err := run("ip", "netns", "list")
	if err != nil {
		return
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		name := f[0]
		rest, ok := strings.CutPrefix(name, "bmwanprobe")
		if !ok {
			if rest, ok = strings.CutPrefix(name, "bmwan"); !ok {
				continue
			}
			rest, _, _ = strings.Cut(rest, "-")
		}
		pid, err := strconv.Atoi(rest)
		if err != nil || pid <= 0 {
			continue
		}
		if err := unix.Kill(pid, 0); errors.Is(err, unix.ESRCH) {
			_, _ = run("ip", "netns", "del", name)
		}
	}
}

// Cut takes the link down (the host's end), Restore brings it back.
func (w *wanNet) Cut() {
	w.t.Helper()
	if _, err := run("ip", "link", "set", w.HostIf, "down"); err != nil {
		w.t.Fatal(err)
	}
}

func (w *wanNet) Restore() {
	w.t.Helper()
	if _, err := run("ip", "link", "set", w.HostIf, "up"); err != nil {
		w.t.Fatal(err)
	}
	// A TUN end that was down lost its address's route: bring it back.
	if w.wire != nil {
		_, _ = run("ip", "addr", "replace", w.HostIP, "peer", w.SiteIP, "dev", w.HostIf)
	}
}

// newImpairedWAN makes a WAN whose link delays every packet by oneWay
// in each direction (round trip 2×oneWay) and drops the share loss of
// them each way: a veth pair with tc netem on both ends when the kernel
// has netem, else the TUN wire.
func newImpairedWAN(t testing.TB, oneWay time.Duration, loss float64) *wanNet {
	t.Helper()
	needWAN(t)
	if !netemWorks(t) {
		w := newWAN(t, wanWire)
		w.wire.Set(oneWay, loss)
		t.Logf("WAN: TUN wire, %s each way, %.0f %% loss each way (this kernel has no tc netem)", oneWay, loss*100)
		t.Cleanup(func() {
			c, d := w.wire.Carried.Load(), w.wire.Dropped.Load()
			t.Logf("WAN wire: %d packets carried, %d dropped (%.1f %%)", c, d, 100*float64(d)/float64(max(c+d, 1)))
		})
		w.checkRTT(2 * oneWay)
		return w
	}
	w := newWAN(t, wanVeth)
	for _, dev := range []struct{ ns, dev string }{{"", w.HostIf}, {w.NS, w.SiteIf}} {
		args := []string{"tc", "qdisc", "add", "dev", dev.dev, "root", "netem", "delay", fmt.Sprintf("%dms", oneWay.Milliseconds()),
			"loss", strconv.FormatFloat(loss*100, 'f', -1, 64) + "%"}
		if dev.ns != "" {
			args = append([]string{"ip", "netns", "exec", dev.ns}, args...)
		}
		if _, err := run(args...); err != nil {
			t.Fatal(err)
		}
	}
	w.netem = true
	w.checkRTT(2 * oneWay)
	t.Logf("WAN: veth with tc netem, %s each way, %.0f %% loss each way", oneWay, loss*100)
	return w
}

// checkRTT fails the test unless a round trip over the link takes at
// least want: the shortest of a few TCP connection attempts to a closed
// port of the namespace (SYN there, RST back).
func (w *wanNet) checkRTT(want time.Duration) {
	w.t.Helper()
	best := time.Hour
	for range 6 {
		start := time.Now()
		c, err := net.DialTimeout("tcp", net.JoinHostPort(w.SiteIP, "9"), 5*time.Second)
		if err == nil {
			c.Close()
		}
		if d := time.Since(start); err == nil || strings.Contains(err.Error(), "refused") {
			best = min(best, d)
		}
	}
	if best == time.Hour || best < want*9/10 {
		w.t.Fatalf("a round trip over the impaired link took %s, want about %s", best, want)
	}
	w.t.Logf("WAN: shortest round trip measured %s", best.Round(time.Millisecond))
}

// netemWorks tells whether tc netem can be used: tried on the loopback of
// a namespace made for the purpose.
func netemWorks(t testing.TB) bool {
	if _, err := exec.LookPath("tc"); err != nil {
		return false
	}
	ns := fmt.Sprintf("bmwanprobe%d", os.Getpid())
	_, _ = run("ip", "netns", "del", ns)
	if _, err := run("ip", "netns", "add", ns); err != nil {
		return false
	}
	defer func() { _, _ = run("ip", "netns", "del", ns) }()
	_, err := run("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms")
	return err == nil
}

// Command returns a command that runs in the namespace.
func (w *wanNet) Command(bin string, args ...string) (string, []string) {
	return "ip", append([]string{"netns", "exec", w.NS, bin}, args...)
}

// Bytes is what crossed the link so far, both ways (IP packets, as the
// host's end counts them).
func (w *wanNet) Bytes() int64 {
	w.t.Helper()
	var sum int64
	for _, f := range []string{"rx_bytes", "tx_bytes"} {
		b, err := os.ReadFile("/sys/class/net/" + w.HostIf + "/statistics/" + f)
		if err != nil {
			w.t.Fatal(err)
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			w.t.Fatal(err)
		}
		sum += v
	}
	return sum
}

// FreePort returns a free TCP port on the host's address of the link.
func (w *wanNet) FreePort() string {
	w.t.Helper()
	addr, err := freeport.Addr(w.HostIP)
	if err != nil {
		w.t.Fatal(err)
	}
	return addr
}
