//go:build linux

package lldp

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/lib/lldp"
	"github.com/bmedge/bmedge/lib/waitfor"
)

// helperResult is what the listener run inside the test's namespace
// prints.
type helperResult struct {
	LLDP    [][]any       `json:"lldp"`
	Err     string        `json:"err"`
	Took    time.Duration `json:"took"`
	Flags   string        `json:"flags_after"`
	Started string        `json:"started"`
}

// TestListenHelper is the listener run by TestListenLLDPD inside a
// network namespace (ip netns exec ... TEST_BINARY): it listens on
// $BM_LLDP_LISTEN for $BM_LLDP_WAIT and prints what it heard.
func TestListenHelper(t *testing.T) {
	name := os.Getenv("BM_LLDP_LISTEN")
	if name == "" {
		t.Skip("run by TestListenLLDPD inside its network namespace")
	}
	wait, _ := time.ParseDuration(os.Getenv("BM_LLDP_WAIT"))
	start := time.Now()
	r := Listen(context.Background(), []string{name}, wait)[name]
	out := helperResult{Took: time.Since(start)}
	if r.TLVs != nil {
		out.LLDP = lldp.Raw(r.TLVs)
	}
	if r.Err != nil {
		out.Err = r.Err.Error()
	}
	if b, err := os.ReadFile(filepath.Join("/sys/class/net", name, "operstate")); err == nil {
		out.Flags = strings.TrimSpace(string(b))
	}
	b, _ := json.Marshal(out)
	fmt.Println("RESULT " + string(b))
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestListenLLDPD: Debian's lldpd in one network namespace sends LLDP
// on a veth whose peer is in another, where the ramdisk's listener runs:
// the listener hears the chassis MAC, port name, system name and port
// description lldpd was configured with; with no sender it gives up
// after its wait, having brought its down interface up for the listen
// and down again. Skipped unless root with ip and lldpd.
func TestListenLLDPD(t *testing.T) { lldpdCase(t, false) }

// TestListenLLDPDOnBridge: the same with lldpd on a Linux bridge whose
// port is the veth, as lldpd on a lab's bridge reaches the VMs on it:
// the port ID is the bridge's name.
func TestListenLLDPDOnBridge(t *testing.T) { lldpdCase(t, true) }

func lldpdCase(t *testing.T, bridge bool) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: makes network namespaces and raw sockets")
	}
	lldpd, err := exec.LookPath("lldpd")
	if err != nil {
		if _, err2 := os.Stat("/usr/sbin/lldpd"); err2 != nil {
			t.Skip("lldpd is missing: install Debian's lldpd (scripts/install-test-deps.sh)")
		}
		lldpd = "/usr/sbin/lldpd"
	}
	lldpcli := filepath.Join(filepath.Dir(lldpd), "lldpcli")
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("ip (iproute2) is missing")
	}
	// Names of their own per case: the other case's namespaces may not
	// be gone yet (their lldpd exiting).
	id := fmt.Sprintf("%d", os.Getpid()%10000*10)
	if bridge {
		id = fmt.Sprintf("%d", os.Getpid()%10000*10+1)
	}
	nsA, nsB, ifA, ifB := "bmlldp-a-"+id, "bmlldp-b-"+id, "bml"+id+"a", "bml"+id+"b"
	if out, err := exec.Command("ip", "netns", "add", nsA).CombinedOutput(); err != nil {
		t.Skipf("cannot make a network namespace: %v %s", err, out)
	}
	t.Cleanup(func() {
		// Whatever still runs in the namespaces is this test's (lldpd's
		// two processes).
		for _, ns := range []string{nsA, nsB} {
			out, _ := exec.Command("ip", "netns", "pids", ns).Output()
			for _, p := range strings.Fields(string(out)) {
				_ = exec.Command("kill", p).Run()
			}
			_ = exec.Command("ip", "netns", "del", ns).Run()
		}
	})
	run(t, "ip", "netns", "add", nsB)
	run(t, "ip", "link", "add", ifA, "netns", nsA, "type", "veth", "peer", "name", ifB, "netns", nsB)
	run(t, "ip", "-n", nsA, "link", "set", ifA, "up")
	send := ifA
	if bridge {
		send = "bml" + id + "br"
		run(t, "ip", "-n", nsA, "link", "add", send, "type", "bridge")
		run(t, "ip", "-n", nsA, "link", "set", ifA, "master", send)
		run(t, "ip", "-n", nsA, "link", "set", send, "up")
	}
	macs := map[string]bool{}
	for _, ifc := range []string{ifA, send} {
		macs[strings.Fields(strings.SplitN(run(t, "ip", "-n", nsA, "-o", "link", "show", ifc), "link/ether", 2)[1])[0]] = true
	}

	helper := func(wait time.Duration) helperResult {
		t.Helper()
		cmd := exec.Command("ip", "netns", "exec", nsB, os.Args[0], "-test.run=^TestListenHelper$", "-test.count=1")
		cmd.Env = append(os.Environ(), "BM_LLDP_LISTEN="+ifB, "BM_LLDP_WAIT="+wait.String())
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("listener: %v\n%s", err, out)
		}
		_, after, ok := strings.Cut(string(out), "RESULT ")
		var r helperResult
		if !ok || json.Unmarshal([]byte(strings.SplitN(after, "\n", 2)[0]), &r) != nil {
			t.Fatalf("listener said:\n%s", out)
		}
		return r
	}

	var r helperResult
	if !bridge {
		// Nobody sends yet: the listener gives up after its wait.
		r = helper(time.Second)
		// (The bound above the wait leaves room for a loaded machine.)
		if r.LLDP != nil || r.Took < time.Second || r.Took > 5*time.Second || r.Flags != "down" {
			t.Fatalf("with no sender: %+v; want nothing after about 1 s, the interface down again", r)
		}
	}

	// The listener's end up from here on, as a ramdisk's NICs are, and
	// lldpd started only once its interface has carrier: lldpd skips an
	// interface that is not running until it next looks at it.
	run(t, "ip", "-n", nsB, "link", "set", ifB, "up")
	waitOperUp(t, nsB, ifB)
	waitOperUp(t, nsA, ifA)
	waitOperUp(t, nsA, send)
	// lldpcli reaches the socket as lldpd's unprivileged user: a
	// directory it may enter (t.TempDir's parent is root's alone).
	dir, err := os.MkdirTemp("", "bmlldp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "lldpd.socket")
	// The configuration goes to lldpd's own start (-O): lldpd starts
	// paused, its lldpcli applies this file and then resumes it, so the
	// first frame lldpd ever sends is the configured one. Configuring it
	// with lldpcli after the start raced with that lldpcli: its "resume"
	// sends back the whole configuration as it read it before, which put
	// the system name and the 30 s tx-interval back (a frame with the
	// host's own name, or none for 30 s).
	conf := filepath.Join(dir, "lldpd.conf")
	confText := fmt.Sprintf("configure system hostname sw-test-%s\n"+
		"configure lldp portidsubtype ifname\n"+
		"configure ports %s lldp portdescription \"rack 4 port 7\"\n"+
		"configure lldp tx-interval 1\n", id, send)
	if err := os.WriteFile(conf, []byte(confText), 0o644); err != nil {
		t.Fatal(err)
	}
	d := exec.Command("ip", "netns", "exec", nsA, lldpd, "-d", "-u", sock, "-I", send, "-O", conf)
	var logs strings.Builder
	d.Stdout, d.Stderr = &logs, &logs
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Process.Kill(); _ = d.Wait() })
	r = helper(10 * time.Second)
	if r.LLDP == nil {
		// What lldpd says it did, for the failure.
		stats, _ := exec.Command(lldpcli, "-u", sock, "show", "statistics").CombinedOutput()
		config, _ := exec.Command(lldpcli, "-u", sock, "show", "configuration").CombinedOutput()
		t.Fatalf("listener heard nothing in %s (interface %s)\nlldpd's log:\n%s\nlldpcli show statistics:\n%s\nlldpcli show configuration:\n%s",
			r.Took, r.Flags, logs.String(), stats, config)
	}
	tlvs, err := lldp.FromRaw(jsonAny(t, r.LLDP))
	if err != nil {
		t.Fatalf("listener heard %+v: %v (lldpd: %s)", r, err, logs.String())
	}
	n := lldp.Decode(tlvs)
	if !macs[n.ChassisID] || n.ChassisIDSubtype != "mac_address" || n.PortID != send || n.SystemName != "sw-test-"+id || n.PortDescription != "rack 4 port 7" {
		t.Fatalf("heard %+v; want chassis one of %v, port %s, system sw-test-%s, port description \"rack 4 port 7\"", n, macs, send, id)
	}
	if r.Flags != "up" || r.Took > 8*time.Second {
		t.Fatalf("listen took %s, interface %s after it; want a frame within the 1 s tx-interval, the interface left up", r.Took, r.Flags)
	}
}

// waitOperUp waits until the interface in the namespace has carrier
// (operstate up): a veth has it once both ends are up, a bridge once a
// port of it has, both a moment after the links are set up.
func waitOperUp(t *testing.T, ns, ifc string) {
	t.Helper()
	var state string
	if !waitfor.Until(10*time.Second, func() bool {
		out, _ := exec.Command("ip", "netns", "exec", ns, "cat", filepath.Join("/sys/class/net", ifc, "operstate")).Output()
		state = strings.TrimSpace(string(out))
		return state == "up"
	}) {
		t.Fatalf("%s in %s: operstate %q after 10 s, want up", ifc, ns, state)
	}
}

// jsonAny is v as JSON decodes it (numbers float64), as the coordinator
// reads an inventory.
func jsonAny(t *testing.T, v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	_ = json.Unmarshal(b, &out)
	return out
}
