package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/bmedge/bmedge/lib/freeport"
	"github.com/bmedge/bmedge/scripts/internal/tunwire"
	"golang.org/x/sys/unix"
)

// The WAN of the benchmark, made as make bench-wan makes it
// (scripts/systest/wan_netns_test.go): the site's edge agent runs in a
// network namespace of its own, joined to the host, where the
// coordinator's broker listens, by one link that delays every packet by
// the one-way delay in each direction. The link is a veth pair with tc
// netem on both ends where the kernel has netem, else two TUN devices
// and a wire between them in this process that delays every packet (in
// order; scripts/internal/tunwire, the system tests' too). The namespace and the link are removed by close, and a killed
// run's leftovers by the next run.
type wan struct {
	ns, hostIf, siteIf string
	hostIP, siteIP     string
	wire               *tunwire.Wire
	how                string
}

func run(args ...string) (string, error) {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

const nsPrefix = "bmcons"

// sweep removes the namespaces of earlier runs whose process is gone.
func sweep() {
	out, err := run("ip", "netns", "list")
	if err != nil {
		return
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		rest, ok := strings.CutPrefix(f[0], nsPrefix)
		if !ok {
			continue
		}
		rest = strings.TrimPrefix(rest, "probe")
		pid, err := strconv.Atoi(rest)
		if err != nil || pid <= 0 {
			continue
		}
		if err := unix.Kill(pid, 0); errors.Is(err, unix.ESRCH) {
			_, _ = run("ip", "netns", "del", f[0])
		}
	}
}

// netemWorks tells whether tc netem can be used here, tried on the
// loopback of a namespace made for the purpose.
func netemWorks() bool {
	if _, err := exec.LookPath("tc"); err != nil {
		return false
	}
	ns := fmt.Sprintf("%sprobe%d", nsPrefix, os.Getpid())
	_, _ = run("ip", "netns", "del", ns)
	if _, err := run("ip", "netns", "add", ns); err != nil {
		return false
	}
	defer func() { _, _ = run("ip", "netns", "del", ns) }()
	_, err := run("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms")
	return err == nil
}

// newWAN makes the namespace and a link of oneWay delay each way.
func newWAN(oneWay time.Duration) (w *wan, err error) {
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, errors.New("the ip command is missing (Debian package iproute2)")
	}
	sweep()
	pid := os.Getpid()
	w = &wan{ns: fmt.Sprintf("%s%d", nsPrefix, pid), hostIf: fmt.Sprintf("bc%dh", pid%1000000), siteIf: fmt.Sprintf("bc%dn", pid%1000000)}
	// A /30 of 10.214.0.0/16 of this process: private, apart from the
	// system tests' 10.213.0.0/16.
	sub := pid % 16384
	w.hostIP = fmt.Sprintf("10.214.%d.%d", sub/64, sub%64*4+1)
	w.siteIP = fmt.Sprintf("10.214.%d.%d", sub/64, sub%64*4+2)
	_, _ = run("ip", "link", "del", w.hostIf)
	_, _ = run("ip", "netns", "del", w.ns)
	netem := netemWorks()
	if _, err := run("ip", "netns", "add", w.ns); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			w.close()
		}
	}()
	var cmds [][]string
	if netem {
		w.how = "veth + tc netem"
		cmds = [][]string{
			{"ip", "link", "add", w.hostIf, "type", "veth", "peer", "name", w.siteIf},
			{"ip", "link", "set", w.siteIf, "netns", w.ns},
			{"ip", "addr", "add", w.hostIP + "/30", "dev", w.hostIf},
			{"ip", "netns", "exec", w.ns, "ip", "addr", "add", w.siteIP + "/30", "dev", w.siteIf},
			{"tc", "qdisc", "add", "dev", w.hostIf, "root", "netem", "delay", fmt.Sprintf("%dms", oneWay.Milliseconds())},
			{"ip", "netns", "exec", w.ns, "tc", "qdisc", "add", "dev", w.siteIf, "root", "netem", "delay", fmt.Sprintf("%dms", oneWay.Milliseconds())},
		}
	} else {
		w.how = "TUN wire (this kernel has no tc netem)"
		host, err := tunwire.OpenTUN(w.hostIf)
		if err != nil {
			return w, fmt.Errorf("cannot make a TUN device here: %w", err)
		}
		site, err := tunwire.OpenTUN(w.siteIf)
		if err != nil {
			host.Close()
			return w, fmt.Errorf("cannot make a TUN device here: %w", err)
		}
		w.wire = tunwire.New(host, site)
		w.wire.Set(oneWay, 0)
		cmds = [][]string{
			{"ip", "link", "set", w.siteIf, "netns", w.ns},
			{"ip", "addr", "add", w.hostIP, "peer", w.siteIP, "dev", w.hostIf},
			{"ip", "netns", "exec", w.ns, "ip", "addr", "add", w.siteIP, "peer", w.hostIP, "dev", w.siteIf},
		}
	}
	cmds = append(cmds,
		[]string{"ip", "link", "set", w.hostIf, "up"},
		[]string{"ip", "netns", "exec", w.ns, "ip", "link", "set", w.siteIf, "up"},
		[]string{"ip", "netns", "exec", w.ns, "ip", "link", "set", "lo", "up"})
	for _, c := range cmds {
		if _, err := run(c...); err != nil {
			return w, err
		}
	}
	return w, nil
}

func (w *wan) close() {
	if w.wire != nil {
		w.wire.Close()
	}
	_, _ = run("ip", "link", "del", w.hostIf)
	_, _ = run("ip", "netns", "del", w.ns)
}

// rtt is the shortest of a few TCP connection attempts to a closed port
// of the namespace (SYN there, RST back).
func (w *wan) rtt() time.Duration {
	best := time.Duration(0)
	for range 6 {
		start := time.Now()
		c, err := net.DialTimeout("tcp", net.JoinHostPort(w.siteIP, "9"), 5*time.Second)
		if err == nil {
			c.Close()
		}
		if d := time.Since(start); err == nil || strings.Contains(err.Error(), "refused") {
			if best == 0 || d < best {
				best = d
			}
		}
	}
	return best
}

// bytes is what crossed the link so far, both ways (IP packets, as the
// host's end counts them).
func (w *wan) bytes() int64 {
	var sum int64
	for _, f := range []string{"rx_bytes", "tx_bytes"} {
		b, err := os.ReadFile("/sys/class/net/" + w.hostIf + "/statistics/" + f)
		if err != nil {
			return -1
		}
		v, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		sum += v
	}
	return sum
}

// freePort is a free TCP address on the host's end of the link.
func (w *wan) freeAddr() (string, error) {
	return freeport.Addr(w.hostIP)
}

// command runs bin in the namespace.
func (w *wan) command(bin string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", w.ns, bin}, args...)...)
}
