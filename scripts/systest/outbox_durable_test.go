package systest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// buildAgent builds the agent command into a temporary folder.
func buildAgent(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build the agent: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "agent")
	out, err := exec.Command(goBin, "build", "-o", bin, "github.com/bmedge/bmedge/agent/cmd/agent").CombinedOutput()
	if err != nil {
		t.Fatalf("go build agent: %v\n%s", err, out)
	}
	return bin
}

// startAgentProcess runs the agent command with args, its log appended
// to logPath; it is killed (SIGKILL) when the test ends.
func startAgentProcess(t *testing.T, bin, logPath string, args ...string) *proc {
	t.Helper()
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); log.Close(); close(p.done) }()
	t.Cleanup(p.kill)
	return p
}

// agentMetric sums the samples of a metric of the agent at addr whose
// labels contain every one of labels ("name" for the plain metric).
func agentMetric(t *testing.T, addr, name string, labels ...string) (float64, error) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	sum := 0.0
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+" ") && !strings.HasPrefix(line, name+"{") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("metric line %q: %v", line, err)
		}
		sum += v
	}
	return sum, nil
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, detail := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s (%s)", what, timeout, detail)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kill9Rig starts the coordinator as a process of its own, registers
// site1 and writes its credentials file; the coordinator's and agent's
// logs are shown when the test fails. It returns the agent binary, what
// restarts the coordinator needs, the API client, the credentials file
// and the agent log's path.
func kill9Rig(t *testing.T) (bin, dataDir, api, mqtt string, coord *proc, cl *testrig.Client, credFile, agentLog string) {
	t.Helper()
	bin = buildAgent(t)
	dir := t.TempDir()
	dataDir = filepath.Join(dir, "data")
	api, mqtt = testrig.FreeAddr(t), testrig.FreeAddr(t)
	coord = startCoordinatorProcess(t, dataDir, api, mqtt)
	cl = &testrig.Client{Base: "http://" + api, T: t}
	var creds agent.Credentials
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "site1"}, &creds); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	credFile = filepath.Join(dir, "site1.json")
	b, _ := json.Marshal(creds)
	if err := os.WriteFile(credFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	agentLog = filepath.Join(dir, "agent.log")
	t.Cleanup(func() {
		if t.Failed() {
			for _, f := range []string{agentLog, filepath.Join(dir, "coordinator.log")} {
				b, _ := os.ReadFile(f)
				t.Logf("%s:\n%s", filepath.Base(f), b)
			}
		}
	})
	return
}

// onceInHistory checks that each node's history has exactly one event
// that match accepts (what it means: what) and no error.
func onceInHistory(t *testing.T, cl *testrig.Client, ids []string, what string, match func(event string) bool) {
	t.Helper()
	for _, id := range ids {
		done, events := 0, []string{}
		for _, e := range historyOf(t, cl, id) {
			events = append(events, e.Severity+" "+e.Event)
			if match(e.Event) {
				done++
			}
			if e.Severity == "ERROR" {
				t.Errorf("node %s: error in its history: %s", id, e.Event)
			}
		}
		if done != 1 {
			t.Errorf("node %s: %s %d times, want once; history:\n%s", id, what, done, strings.Join(events, "\n"))
		}
	}
}

// TestEdgeOutboxSurvivesKill9: the edge agent (the real binary, a
// separate process) holds results the coordinator has not acknowledged
// (the coordinator was killed while the BMC commands ran) and is killed
// with SIGKILL. Restarted with the same state folder, it sends them
// again: every node's operation completes with each result applied
// exactly once, and the restarted agent runs none of the commands again
// (the coordinator's re-sent commands are answered from the stored
// done-records).
func TestEdgeOutboxSurvivesKill9(t *testing.T) {
	t.Parallel()
	bin, dataDir, api, mqtt, coord, cl, credFile, agentLog := kill9Rig(t)
	// No --state-dir: the default, next to the credentials file.
	agentArgs := func(metrics, bmcDelay string) []string {
		return []string{"--credentials-file", credFile, "--simulate", "4", "--bmc-delay", bmcDelay,
			"--resend-interval", "300ms", "--step-duration", "100ms", "--boot-delay", "100ms", "--heartbeat", "500ms",
			"--power-sync-interval", "0", "--metrics-listen", metrics}
	}
	metrics1 := testrig.FreeAddr(t)
	ag := startAgentProcess(t, bin, agentLog, agentArgs(metrics1, "2s")...)
	waitFor(t, 20*time.Second, "the agent connects", func() (bool, string) {
		b, _ := os.ReadFile(agentLog)
		return strings.Contains(string(b), "edge agent connected"), "no 'edge agent connected' in its log"
	})
	const nodes = 4
	var ids []string
	for i := range nodes {
		id := cl.CreateNode(fmt.Sprintf("n%d", i), "site1", nil)
		ids = append(ids, id)
		cl.MustVerb(id, "manage", nil)
	}
	for _, id := range ids {
		cl.WaitState(id, "verifying", 10*time.Second)
	}
	// The validate commands reached the agent (each runs 2 s on its
	// simulated BMC): the coordinator dies before their results arrive.
	time.Sleep(500 * time.Millisecond)
	coord.kill()
	waitFor(t, 15*time.Second, "the agent holds the 4 unacknowledged results", func() (bool, string) {
		v, err := agentMetric(t, metrics1, "bmedge_agent_outbox_depth")
		return err == nil && v == nodes, fmt.Sprintf("outbox depth %v, %v", v, err)
	})
	if v, _ := agentMetric(t, metrics1, "bmedge_agent_bmc_operations_total", `action="validate"`); v != nodes {
		t.Fatalf("the first agent ran %v validate commands, want %d", v, nodes)
	}
	ag.kill()
	t.Log("killed the coordinator, then (with 4 results unacknowledged) the agent, with SIGKILL")

	startCoordinatorProcess(t, dataDir, api, mqtt)
	metrics2 := testrig.FreeAddr(t)
	startAgentProcess(t, bin, agentLog, agentArgs(metrics2, "100ms")...)
	for _, id := range ids {
		n := cl.WaitRest(id, 60*time.Second)
		if n.State != "manageable" {
			t.Fatalf("node %s ended in %q (last_error %q), want manageable", id, n.State, n.LastError)
		}
	}
	log, _ := os.ReadFile(agentLog)
	if !strings.Contains(string(log), "outbox loaded from the state folder") || !strings.Contains(string(log), "unacknowledged=4") {
		t.Fatalf("the restarted agent did not load the 4 unacknowledged results:\n%s", log)
	}
	if v, err := agentMetric(t, metrics2, "bmedge_agent_bmc_operations_total", `action="validate"`); err != nil || v != 0 {
		t.Fatalf("the restarted agent ran %v validate commands (%v), want 0: the stored results answer them", v, err)
	}
	if v, err := agentMetric(t, metrics2, "bmedge_agent_results_resent_total"); err != nil || v < nodes {
		t.Fatalf("the restarted agent resent %v results (%v), want at least %d", v, err, nodes)
	}
	onceInHistory(t, cl, ids, "the validate result was applied", func(ev string) bool { return strings.HasSuffix(ev, "verifying -> manageable") })
	// The state folder is the default, next to the credentials file, and
	// private.
	stateDir := credFile + ".state"
	for path, want := range map[string]os.FileMode{stateDir: 0o700, filepath.Join(stateDir, "outbox.key"): 0o600} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Fatalf("%s has mode %04o, want %04o", path, fi.Mode().Perm(), want)
		}
	}

	// The site goes on working: every node is cleaned and made available
	// by the restarted agent.
	for _, id := range ids {
		cl.MustVerb(id, "provide", nil)
	}
	for _, id := range ids {
		if n := cl.WaitRest(id, 90*time.Second); n.State != "available" {
			t.Fatalf("node %s: provide ended in %q (last_error %q)", id, n.State, n.LastError)
		}
	}
}

// TestEdgeRelayedResultsSurviveKill9: the results of the site's ramdisks
// (here simulated ones, which go through the same relay as real ones)
// that the edge agent took over — written to its durable outbox and
// acknowledged to the ramdisks, which forget them — survive a SIGKILL of
// the agent while the coordinator is down: after both restart, every
// inspection completes from the stored result, applied once.
func TestEdgeRelayedResultsSurviveKill9(t *testing.T) {
	t.Parallel()
	bin, dataDir, api, mqtt, coord, cl, credFile, agentLog := kill9Rig(t)
	agentArgs := func(metrics string) []string {
		return []string{"--credentials-file", credFile, "--simulate", "4", "--bmc-delay", "50ms",
			"--resend-interval", "300ms", "--step-duration", "3s", "--boot-delay", "100ms", "--heartbeat", "500ms",
			"--heartbeat-summary", "500ms", "--power-sync-interval", "0", "--metrics-listen", metrics}
	}
	metrics1 := testrig.FreeAddr(t)
	ag := startAgentProcess(t, bin, agentLog, agentArgs(metrics1)...)
	waitFor(t, 20*time.Second, "the agent connects", func() (bool, string) {
		b, _ := os.ReadFile(agentLog)
		return strings.Contains(string(b), "edge agent connected"), "no 'edge agent connected' in its log"
	})
	const nodes = 4
	var ids []string
	for i := range nodes {
		id := cl.CreateNode(fmt.Sprintf("n%d", i), "site1", nil)
		ids = append(ids, id)
		cl.MustVerb(id, "manage", nil)
	}
	for _, id := range ids {
		cl.WaitRest(id, 20*time.Second)
		cl.MustVerb(id, "inspect", nil)
	}
	// The ramdisks are running inspect_hardware (3 s), as their
	// heartbeats said: the coordinator dies before their results arrive.
	waitFor(t, 20*time.Second, "every node's ramdisk runs its inspection", func() (bool, string) {
		running := 0
		for _, id := range ids {
			n := cl.Get(id)
			if n.State == "inspect wait" && n.Properties["cpus"] == nil && ramdiskRuns(n) {
				running++
			}
		}
		return running == nodes, fmt.Sprintf("%d of %d in inspect wait with the ramdisk's heartbeat saying it runs the step", running, nodes)
	})
	coord.kill()
	// The results go into the agent's outbox, acknowledged to the
	// ramdisks, and into its state folder (the summary of their
	// heartbeats waits in memory only). On a loaded machine a ramdisk
	// may not have had its step's command before the coordinator died:
	// its step runs once the coordinator is back. So the agent is killed
	// once what it keeps has not changed for two step lengths, and the
	// restarted agent must load exactly that.
	kept, since := -1.0, time.Now()
	waitFor(t, 90*time.Second, "the agent's kept relayed results settle", func() (bool, string) {
		v, err := agentMetric(t, metrics1, "bmedge_agent_outbox_kept")
		if err != nil {
			return false, err.Error()
		}
		if v != kept {
			kept, since = v, time.Now()
		}
		return kept >= 1 && (kept >= nodes || time.Since(since) > 6*time.Second), fmt.Sprintf("outbox kept %v", v)
	})
	ag.kill()
	t.Logf("killed the coordinator, then (with %v relayed results unacknowledged) the agent, with SIGKILL", kept)

	startCoordinatorProcess(t, dataDir, api, mqtt)
	startAgentProcess(t, bin, agentLog, agentArgs(testrig.FreeAddr(t))...)
	for _, id := range ids {
		n := cl.WaitRest(id, 60*time.Second)
		if n.State != "manageable" || n.Properties["cpus"] == nil {
			t.Fatalf("node %s ended in %q (last_error %q, properties %v), want manageable with the inventory's properties", id, n.State, n.LastError, n.Properties)
		}
	}
	log, _ := os.ReadFile(agentLog)
	// Only results are kept on disk (not heartbeat summaries): the four.
	if want := fmt.Sprintf("unacknowledged=%d ", int(kept)); !strings.Contains(string(log), "outbox loaded from the state folder") || !strings.Contains(string(log), want) {
		t.Fatalf("the restarted agent did not load the %v relayed results it kept:\n%s", kept, log)
	}
	onceInHistory(t, cl, ids, "the inspection ended", func(ev string) bool {
		return strings.HasSuffix(ev, "-> manageable") && strings.Contains(ev, "inspect")
	})
}

// TestSimulatedSiteSurvivesAgentKill9: an edge agent running a simulated
// site (--simulate) is killed with SIGKILL while every node's ramdisk
// runs a clean step of the plan the site was handed. Restarted with the
// same state folder, the simulated nodes go on as real ones do (their
// power, their ramdisk's boot and token, the running step for what
// remains of it) and so do the plans: every node ends cleaning in
// available, one ramdisk boot and each clean step once in its history,
// none failed or timed out.
func TestSimulatedSiteSurvivesAgentKill9(t *testing.T) {
	t.Parallel()
	bin, _, _, _, _, cl, credFile, agentLog := kill9Rig(t)
	const nodes = 6
	agentArgs := []string{"--credentials-file", credFile, "--simulate", strconv.Itoa(nodes), "--bmc-delay", "50ms",
		"--resend-interval", "300ms", "--step-duration", "4s", "--boot-delay", "100ms", "--heartbeat", "500ms",
		"--heartbeat-summary", "500ms", "--power-sync-interval", "0", "--metrics-listen", testrig.FreeAddr(t)}
	ag := startAgentProcess(t, bin, agentLog, agentArgs...)
	var ids []string
	for i := range nodes {
		id := cl.CreateNode(fmt.Sprintf("n%d", i), "site1", nil)
		ids = append(ids, id)
		cl.MustVerb(id, "manage", nil)
	}
	for _, id := range ids {
		if n := cl.WaitRest(id, 30*time.Second); n.State != "manageable" {
			t.Fatalf("node %s: manage ended in %q (%s)", id, n.State, n.LastError)
		}
		cl.MustVerb(id, "provide", nil)
	}
	waitFor(t, 30*time.Second, "every node's ramdisk runs a clean step", func() (bool, string) {
		running := 0
		for _, id := range ids {
			if n := cl.Get(id); n.State == "clean wait" && len(n.CleanStep) > 0 {
				running++
			}
		}
		return running == nodes, fmt.Sprintf("%d of %d run a clean step", running, nodes)
	})
	// Into the step: every ramdisk's heartbeats say how far it got.
	waitFor(t, 30*time.Second, "every node's ramdisk reports progress in its clean step", func() (bool, string) {
		going := 0
		for _, id := range ids {
			if p, _ := cl.Get(id).CleanStep["progress"].(float64); p > 0 {
				going++
			}
		}
		return going == nodes, fmt.Sprintf("%d of %d report progress", going, nodes)
	})
	ag.kill()
	t.Log("killed the edge agent with SIGKILL while every node ran a clean step")
	// The site without its agent until the coordinator knows it (the
	// broker publishes the dead connection's will).
	waitFor(t, 30*time.Second, "the coordinator counts the site offline", func() (bool, string) {
		on, _ := siteOnline(cl, "site1")
		return !on, "site1 still online"
	})
	startAgentProcess(t, bin, agentLog, append(agentArgs[:len(agentArgs)-1:len(agentArgs)-1], testrig.FreeAddr(t))...)
	for _, id := range ids {
		if n := cl.WaitRest(id, 90*time.Second); n.State != "available" {
			t.Fatalf("node %s: cleaning ended in %q (last_error %q), want available", id, n.State, n.LastError)
		}
	}
	onceInHistory(t, cl, ids, "one ramdisk boot", func(ev string) bool { return strings.HasPrefix(ev, "ramdisk booted") })
	for _, step := range []string{"deploy.erase_devices_metadata", "deploy.erase_devices"} {
		onceInHistory(t, cl, ids, step+" done", func(ev string) bool { return ev == "clean step "+step+" done" })
	}
	log, _ := os.ReadFile(agentLog)
	if !strings.Contains(string(log), fmt.Sprintf("ramdisks_resumed=%d", nodes)) {
		t.Fatalf("the restarted agent did not resume the %d simulated ramdisks:\n%s", nodes, log)
	}
	// The site ran the cleaning as one plan per node (plans at the edge),
	// which the restarted agent took up where it was.
	if !strings.Contains(string(log), fmt.Sprintf(`msg="plans loaded from the state folder: each goes on where it was" plans=%d`, nodes)) {
		t.Fatalf("the restarted agent did not take up the %d nodes' plans:\n%s", nodes, log)
	}
}
