package ramdisk_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestRedfishQEMUPlanSurvivesAgentKill9 is a plan at the edge in real
// mode surviving kill -9 of the edge agent. The site's edge agent runs
// as a process of its own (so that it can be killed) with its site
// broker on a pinned port; the node is a QEMU VM behind the virtual
// Redfish BMC, which the test owns, not the agent: the VM keeps running
// while the agent is dead, as real hardware does. A manual clean of
// three in-band steps (erase_devices_metadata, a 20 s burnin_cpu,
// erase_pstore) boots the ramdisk ISO once and is handed to the agent as
// one plan. During burnin_cpu the agent is killed with SIGKILL and, a
// few seconds later, started again on the same state folder and
// addresses. The restarted agent loads the plan from its state folder
// and resumes it at the running step; the ramdisk, still running the
// burn-in, reconnects to the new site broker with its boot's credential
// (kept in the state folder); the clean ends in manageable with each
// step once in the node's history, in order. Nothing ran twice: the
// first step did not run again (a marker written at the start of the
// disk after it ran, where it zeroes, is still there), the burn-in ran
// once (one account of it on the VM's console), the VM started once.
func TestRedfishQEMUPlanSurvivesAgentKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU")
	}
	t.Parallel()
	iso := needISO(t)
	bin := buildAgentBinary(t)
	vmDir := vmDir(t, "pkvm")
	diskPath := filepath.Join(vmDir, "disk.raw")
	randomFile(t, diskPath, 64<<20, 11)
	console := filepath.Join(vmDir, "console.log")
	showConsole(t, console, 4096)

	// The coordinator, in-process, and the site "lab", whose edge agent
	// the test runs as a process; an ISO boot under TCG is slow: the lab's
	// 3-minute WAIT timeout, as TestRedfishQEMURamdisk.
	l := newLab(t, labOptions{CoordinatorTLS: true, SiteTLS: true, NoAgent: true})
	cl, creds := l.cl, l.creds
	certFile, keyFile, caFile := l.cert, l.key, l.ca
	// The BMC (the test's, not the agent's): TLS, one QEMU machine.
	bmc := l.redfishBMC(bmcOptions{Dir: vmDir, Disk: diskPath, DiskSerial: "DISK0", Console: console})
	starts := bmc.starts
	dir := t.TempDir()
	credFile := filepath.Join(dir, "lab.json")
	b, _ := json.Marshal(creds)
	if err := os.WriteFile(credFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	// The same addresses for both runs: the ramdisk reconnects to the
	// site broker's port it was booted with.
	args := []string{"--credentials-file", credFile, "--state-dir", filepath.Join(dir, "state"), "--ca-file", caFile,
		"--ramdisk-iso", iso, "--media-listen", testrig.FreeAddr(t),
		"--site-broker-listen", testrig.FreeAddr(t), "--site-broker-url", "mqtts://10.0.2.2",
		"--site-broker-tls-cert", certFile, "--site-broker-tls-key", keyFile,
		"--resend-interval", "500ms", "--heartbeat-summary", "500ms", "-v"}
	log1, log2 := filepath.Join(dir, "agent1.log"), filepath.Join(dir, "agent2.log")
	t.Cleanup(func() {
		if t.Failed() {
			for _, f := range []string{log1, log2} {
				b, _ := os.ReadFile(f)
				t.Logf("%s (last 32 KiB):\n%s", filepath.Base(f), tail(b, 32768))
			}
		}
	})
	a1 := startAgentBinary(t, bin, log1, args...)
	waitLog(t, log1, time.Minute, "edge agent connected")
	waitLog(t, log1, 5*time.Second, "site broker up")

	id := l.createNode("pk1", "redfish", bmc.driverInfo("s3cret"), nil)
	var n testrig.Node
	cl.MustVerb(id, "manage", nil)
	if n = cl.WaitRest(id, 30*time.Second); n.State != "manageable" {
		t.Fatalf("manage: %q %s", n.State, n.LastError)
	}

	steps := []string{"deploy.erase_devices_metadata", "deploy.burnin_cpu", "deploy.erase_pstore"}
	start := time.Now()
	cl.MustVerb(id, "clean", map[string]any{"clean_steps": []map[string]any{
		{"interface": "deploy", "step": "erase_devices_metadata"},
		{"interface": "deploy", "step": "burnin_cpu", "args": map[string]any{"agent_burnin_cpu_timeout": 20}},
		{"interface": "deploy", "step": "erase_pstore"}}})

	// The burn-in runs: the agent has kept the plan at its second step.
	deadline := time.Now().Add(4 * time.Minute)
	for {
		n = cl.Get(id)
		if n.CleanStep["step"] == "burnin_cpu" && logHas(log1, "plan step started", "step=deploy.burnin_cpu") {
			break
		}
		if n.State == "clean failed" || time.Now().After(deadline) {
			t.Fatalf("the burn-in did not start: %q clean_step %v %s", n.State, n.CleanStep, n.LastError)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("burn-in started %.1fs after the clean request", time.Since(start).Seconds())
	// The first step zeroed the start of the disk; a marker there now
	// shows whether it ever runs again.
	if head := readHead(t, diskPath, 1<<20); !bytes.Equal(head, make([]byte, len(head))) {
		t.Fatal("erase_devices_metadata is done but the disk's first MiB is not zero")
	}
	marker := bytes.Repeat([]byte("plan-kill-9 marker "), 200)
	if f, err := os.OpenFile(diskPath, os.O_WRONLY, 0); err != nil {
		t.Fatal(err)
	} else if _, err := f.WriteAt(marker, 0); err != nil || f.Close() != nil {
		t.Fatalf("write the marker: %v", err)
	}

	// The ramdisk gets the step over loopback at once; 2 s into the 20 s
	// burn-in the agent dies without a word.
	time.Sleep(2 * time.Second)
	a1.kill9()
	if st, _ := bmc.State(bmc.SystemIDs()[0]); st.PowerState != "On" || len(qemuCmdlines(t, vmDir)) != 1 {
		t.Fatalf("with the agent dead the VM is %s (QEMU: %q); want it running", st.PowerState, qemuCmdlines(t, vmDir))
	}
	time.Sleep(3 * time.Second) // the site without its agent
	startAgentBinary(t, bin, log2, args...)
	waitLog(t, log2, time.Minute, "edge agent connected")

	n = cl.WaitRest(id, 3*time.Minute)
	t.Logf("clean: %s %.1fs after the request %s", n.State, time.Since(start).Seconds(), n.LastError)
	if n.State != "manageable" || n.LastError != "" {
		t.Fatalf("the clean ended in %q: %s", n.State, n.LastError)
	}
	// The restarted agent took the plan up at its running step (without
	// it the coordinator's resends would still finish the clean, step by
	// step, from the coordinator).
	if !logHas(log2, "plans loaded from the state folder") || !logHas(log2, "plan resumed", "step=deploy.burnin_cpu") {
		t.Fatal("the restarted agent's log does not say that it loaded the plan from its state folder and resumed it at deploy.burnin_cpu")
	}
	// Each step was started once at the site, across both runs.
	for _, s := range steps {
		if c := logCount(log1, "plan step started", "step="+s) + logCount(log2, "plan step started", "step="+s); c != 1 {
			t.Fatalf("the agent's logs show %s started %d times by the plan; want once", s, c)
		}
	}
	var h struct {
		History []struct{ Event, Severity string } `json:"history"`
	}
	if code := cl.Do("GET", "/v1/nodes/"+id+"/history", nil, &h); code != 200 {
		t.Fatalf("history: %d", code)
	}
	var done, lines []string
	for _, e := range h.History {
		lines = append(lines, e.Severity+" "+e.Event)
		if e.Severity == "ERROR" {
			t.Errorf("an error in the node's history: %s", e.Event)
		}
		for _, s := range steps {
			if strings.HasPrefix(e.Event, "clean step "+s+" done") {
				done = append(done, s)
			}
		}
	}
	if strings.Join(done, ",") != strings.Join(steps, ",") {
		t.Fatalf("the steps done in the history are %v; want each of %v once, in order:\n%s", done, steps, strings.Join(lines, "\n"))
	}
	if !bytes.Equal(readHead(t, diskPath, len(marker)), marker) {
		t.Fatal("the marker written after erase_devices_metadata is gone: the step ran again")
	}
	if b, _ := os.ReadFile(console); bytes.Count(b, []byte("cpu burn-in")) != 1 {
		t.Fatalf("the VM console has %d accounts of the cpu burn-in; want 1:\n%s", bytes.Count(b, []byte("cpu burn-in")), tail(b, 4096))
	}
	if got := starts.get(); strings.Join(got, ",") != "Cd" {
		t.Fatalf("the VM was started %v; want once, from the ramdisk's CD", got)
	}
	// Powered off by the restarted agent, which ends the boot the first
	// one began as that one would (the boot is kept in the state
	// folder): both virtual media ejected.
	if st, _ := bmc.State(bmc.SystemIDs()[0]); st.PowerState != "Off" || st.MediaInserted || st.USBInserted {
		t.Fatalf("after the clean: VM %s, virtual CD inserted %v, USB stick inserted %v; want Off with both media ejected by the restarted agent", st.PowerState, st.MediaInserted, st.USBInserted)
	}
}

// buildAgentBinary builds the edge agent command into the test's folder.
func buildAgentBinary(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build the agent: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "agent")
	if out, err := exec.Command(goBin, "build", "-o", bin, "github.com/bmedge/bmedge/agent/cmd/agent").CombinedOutput(); err != nil {
		t.Fatalf("go build agent: %v\n%s", err, out)
	}
	return bin
}

// agentProc is an edge agent process.
type agentProc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// startAgentBinary runs the agent with args, its log written to logPath;
// it is killed when the test ends.
func startAgentBinary(t *testing.T, bin, logPath string, args ...string) *agentProc {
	t.Helper()
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatal(err)
	}
	p := &agentProc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); f.Close(); close(p.done) }()
	t.Cleanup(p.kill9)
	return p
}

// kill9 kills the agent with SIGKILL and waits until it is gone.
func (p *agentProc) kill9() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// logHas says whether one line of the log at path holds every one of want.
func logHas(path string, want ...string) bool { return logCount(path, want...) > 0 }

// logCount counts the lines of the log at path that hold every one of want.
func logCount(path string, want ...string) int {
	b, _ := os.ReadFile(path)
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(l, w)
		}
		if ok {
			n++
		}
	}
	return n
}

// waitLog waits until a line of the log at path holds every one of want.
func waitLog(t *testing.T, path string, timeout time.Duration, want ...string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !logHas(path, want...) {
		if time.Now().After(deadline) {
			t.Fatalf("%s has no line with %q after %s", filepath.Base(path), want, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
