// Package labnet builds a private site network for tests of network boot,
// and only for tests: nothing in a program may import it.
//
// A test calls Isolate first: it runs the test again in a child process
// inside a new network namespace of its own (the parent only waits and
// passes on its output), so that nothing the test makes — a bridge, taps,
// veths, DHCP on port 67 — touches the machine's own network, and all of
// it vanishes with the child, also when it fails or is killed. In the
// child, New makes the site network: a bridge with the agent's address;
// Tap adds a tap for a QEMU VM, Host a second namespace (a "site host",
// held by a sleeping process) with a veth on the bridge, to run
// independent clients (busybox udhcpc, curl) as another machine would.
package labnet

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const childEnv = "BM_LABNET_CHILD"

// Isolate runs the calling test in a new network namespace. In the parent
// it runs the child, fails the test if the child failed, and returns
// false: the test must return at once. In the child it returns true. It
// skips when not root, unless BM_REQUIRE_ALL=1 (make test).
func Isolate(t *testing.T) bool {
	t.Helper()
	if os.Getenv(childEnv) == t.Name() {
		if err := run("ip", "link", "set", "lo", "up"); err != nil {
			t.Fatal(err)
		}
		return true
	}
	if os.Geteuid() != 0 {
		skip(t, "network boot tests make network namespaces, bridges and taps: they need root")
		return false
	}
	if _, err := exec.LookPath("ip"); err != nil {
		skip(t, "the ip command (iproute2) is missing")
		return false
	}
	args := []string{"-test.run=^" + regexpQuote(t.Name()) + "$", "-test.v", "-test.count=1", "-test.timeout=25m"}
	if testing.Short() {
		args = append(args, "-test.short")
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), childEnv+"="+t.Name())
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL, Setpgid: true}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the test in a new network namespace: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	var wg sync.WaitGroup
	wg.Add(1)
	skipped := false
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if strings.Contains(line, "--- SKIP: "+t.Name()) {
				skipped = true
			}
			t.Log(line)
		}
	}()
	err := cmd.Wait()
	pw.Close()
	wg.Wait()
	if err != nil {
		t.Fatalf("the test in its network namespace failed: %v", err)
	}
	if skipped {
		t.Skip("skipped in its network namespace (see above)")
	}
	return false
}

func skip(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("BM_REQUIRE_ALL") == "1" {
		t.Fatal(why)
	}
	t.Skip(why)
}

func regexpQuote(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`\.+*?()|[]{}^$`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Net is a site network inside the test's namespace.
type Net struct {
	// Bridge is the site network's interface; Addr its address (the
	// agent's), Prefix the subnet's length.
	Bridge string
	Addr   net.IP
	Prefix int
	t      *testing.T
	n      int
}

// New makes the bridge "site0" with 10.77.0.1/24: inside the test's own
// namespace, where no other network exists.
func New(t *testing.T) *Net {
	t.Helper()
	n := &Net{Bridge: "site0", Addr: net.IPv4(10, 77, 0, 1).To4(), Prefix: 24, t: t}
	n.must("ip", "link", "add", n.Bridge, "type", "bridge")
	n.must("ip", "addr", "add", n.Addr.String()+"/24", "dev", n.Bridge)
	n.must("ip", "link", "set", n.Bridge, "up")
	return n
}

// IP returns the site network's address .last (10.77.0.last).
func (n *Net) IP(last byte) net.IP { return net.IPv4(10, 77, 0, last).To4() }

func (n *Net) must(name string, args ...string) {
	n.t.Helper()
	if err := run(name, args...); err != nil {
		n.t.Fatal(err)
	}
}

// Tap adds a tap device on the bridge for a QEMU VM and returns its name.
func (n *Net) Tap() string {
	n.t.Helper()
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		skip(n.t, "no /dev/net/tun: QEMU's VM cannot join the site network")
	}
	n.n++
	name := "tap" + strconv.Itoa(n.n)
	n.must("ip", "tuntap", "add", "dev", name, "mode", "tap")
	n.must("ip", "link", "set", name, "master", n.Bridge)
	n.must("ip", "link", "set", name, "up")
	return name
}

// Host is another machine on the site network: a namespace of its own
// with one interface, eth0, on the bridge.
type Host struct {
	// MAC is eth0's address.
	MAC net.HardwareAddr
	pid int
	t   *testing.T
}

// Host adds a site host with the given MAC (and address/prefix, if
// not empty: "10.77.0.50/24"; without it, give it one by DHCP).
func (n *Net) Host(mac, cidr string) *Host {
	n.t.Helper()
	n.n++
	peer := "veth" + strconv.Itoa(n.n)
	sleeper := exec.Command("sleep", "3600")
	sleeper.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	if err := sleeper.Start(); err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() })
	pid := strconv.Itoa(sleeper.Process.Pid)
	n.must("ip", "link", "add", peer, "type", "veth", "peer", "name", "h"+peer, "netns", pid)
	n.must("ip", "link", "set", peer, "master", n.Bridge)
	n.must("ip", "link", "set", peer, "up")
	h := &Host{pid: sleeper.Process.Pid, t: n.t}
	h.must("ip", "link", "set", "h"+peer, "name", "eth0")
	h.must("ip", "link", "set", "lo", "up")
	h.must("ip", "link", "set", "eth0", "address", mac)
	h.must("ip", "link", "set", "eth0", "up")
	if cidr != "" {
		h.must("ip", "addr", "add", cidr, "dev", "eth0")
	}
	h.MAC, _ = net.ParseMAC(mac)
	// The bridge forwards only once the port is up; give it a moment.
	time.Sleep(200 * time.Millisecond)
	return h
}

// Command is a command run in the host's namespace.
func (h *Host) Command(name string, args ...string) *exec.Cmd {
	c := exec.Command("nsenter", append([]string{"-t", strconv.Itoa(h.pid), "-n", "--", name}, args...)...)
	c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return c
}

// Run runs a command in the host's namespace and returns its output.
func (h *Host) Run(name string, args ...string) (string, error) {
	out, err := h.Command(name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s (in the site host): %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

func (h *Host) must(name string, args ...string) {
	h.t.Helper()
	if _, err := h.Run(name, args...); err != nil {
		h.t.Fatal(err)
	}
}

// Need skips (or fails under BM_REQUIRE_ALL=1) when a command is missing.
func Need(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			skip(t, tool+" is not installed (scripts/install-test-deps.sh installs it)")
		}
	}
}
