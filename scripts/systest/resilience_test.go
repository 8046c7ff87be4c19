package systest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/lib/waitfor"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestMain lets the test binary act as the coordinator program, so that
// tests can run it as a separate process and kill -9 it, and as an ipmi
// node's network-booting machine (netboot_machine_test.go).
func TestMain(m *testing.M) {
	testrig.AsCoordinator()
	asNetbootMachine()
	os.Exit(m.Run())
}

// requireTool skips a test whose real component is missing, unless the
// run demands every component (make test sets BM_REQUIRE_ALL=1).
func requireTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("BM_REQUIRE_ALL") == "1" {
			t.Fatalf("%s is not installed; run scripts/install-test-deps.sh", name)
		}
		t.Skipf("%s is not installed; run scripts/install-test-deps.sh (make test does)", name)
	}
	return p
}

type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// awaitListening waits until the process listens on addr (a TCP connect
// succeeds), failing the test if it exits first or takes over 30 s.
func (p *proc) awaitListening(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !listening(addr) {
		select {
		case <-p.done:
			t.Fatalf("%s exited before it listened on %s", filepath.Base(p.cmd.Path), addr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not listen on %s after 30 s", filepath.Base(p.cmd.Path), addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func startCoordinatorProcess(t *testing.T, dataDir, api, mqtt string) *proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "serve", "--data-dir", dataDir, "--api-listen", api, "--mqtt-listen", mqtt,
		"--wait-timeout", "20s", "--command-timeout", "20s", "--resend-interval", "300ms", "--tick", "100ms")
	cmd.Env = append(os.Environ(), "BM_TEST_AS_COORDINATOR=1")
	log, err := os.OpenFile(filepath.Join(dataDir, "..", "coordinator.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); log.Close(); close(p.done) }()
	t.Cleanup(func() { p.kill() })
	cl := &testrig.Client{Base: "http://" + api, T: t}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if ok := func() bool {
			defer func() { _ = recover() }()
			return probe(cl.Base)
		}(); ok {
			return p
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(dataDir, "..", "coordinator.log"))
			t.Fatalf("coordinator did not come up:\n%s", b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (p *proc) kill() {
	if p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
	}
	<-p.done
}

// TestKill9Recovery kills the coordinator while nodes are in clean wait,
// wait call-back and deploying; after a restart every node reaches its
// target or a failed state with last_error.
func TestKill9Recovery(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	api, mqtt := testrig.FreeAddr(t), testrig.FreeAddr(t)
	p := startCoordinatorProcess(t, dataDir, api, mqtt)
	cl := &testrig.Client{Base: "http://" + api, T: t}
	var creds agent.Credentials
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "site1"}, &creds); code != 201 {
		t.Fatalf("site: %d", code)
	}
	testrig.StartAgent(t, creds, agent.SimOptions{Nodes: 8, StepDuration: 3 * time.Second, BMCDelay: 700 * time.Millisecond})
	ids := map[string]string{}
	for _, name := range []string{"cleaning", "deploywait", "deploying"} {
		ids[name] = cl.CreateNode(name, "site1", nil)
		cl.MustVerb(ids[name], "manage", nil)
	}
	for name, id := range ids {
		cl.WaitRest(id, 15*time.Second)
		if name != "cleaning" {
			cl.MustVerb(id, "provide", nil)
		}
	}
	for name, id := range ids {
		if name != "cleaning" {
			cl.WaitRest(id, 30*time.Second)
			cl.Do("PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "add", "path": "/instance_info/image_source", "value": "http://127.0.0.1:1/i"}}, nil)
		}
	}
	cl.MustVerb(ids["cleaning"], "provide", nil)
	cl.MustVerb(ids["deploywait"], "active", nil)
	cl.WaitState(ids["cleaning"], "clean wait", 10*time.Second)
	cl.WaitState(ids["deploywait"], "wait call-back", 10*time.Second)
	cl.MustVerb(ids["deploying"], "active", nil)
	if n := cl.Get(ids["deploying"]); n.State != "deploying" {
		t.Fatalf("deploying node is in %q", n.State)
	}
	before := map[string]string{}
	for name, id := range ids {
		before[name] = cl.Get(id).State
	}
	p.kill()
	t.Logf("killed the coordinator with nodes in %v", before)
	startCoordinatorProcess(t, dataDir, api, mqtt)
	want := map[string]string{"cleaning": "available", "deploywait": "active", "deploying": "active"}
	for name, id := range ids {
		n := cl.WaitRest(id, 60*time.Second)
		if n.State != want[name] && (!strings.HasSuffix(n.State, "failed") || n.LastError == "") {
			t.Errorf("%s: ended in %q (last_error %q), want %q or a failed state with last_error", name, n.State, n.LastError, want[name])
		}
		t.Logf("%s: %s -> %s %s", name, before[name], n.State, n.LastError)
	}
}

// TestExternalBrokerRestart runs the coordinator against a real Mosquitto
// and kills the broker mid-run: no result is lost (end-to-end resends).
func TestExternalBrokerRestart(t *testing.T) {
	mosq := requireTool(t, "mosquitto")
	dir := t.TempDir()
	addr := testrig.FreeAddr(t)
	port := addr[strings.LastIndex(addr, ":")+1:]
	conf := filepath.Join(dir, "mosquitto.conf")
	os.WriteFile(conf, []byte(fmt.Sprintf("listener %s 127.0.0.1\nallow_anonymous true\npersistence false\nmax_queued_messages 100000\nmax_inflight_messages 1000\n", port)), 0o644)
	startMosq := func() *proc {
		cmd := exec.Command(mosq, "-c", conf)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		p := &proc{cmd: cmd, done: make(chan struct{})}
		go func() { _ = cmd.Wait(); close(p.done) }()
		t.Cleanup(p.kill)
		p.awaitListening(t, addr)
		return p
	}
	m := startMosq()
	c := testrig.Coordinator(t, testrig.Options{BrokerURL: "mqtt://" + addr})
	a := testrig.Site(t, c, "site1", agent.SimOptions{Nodes: 8, StepDuration: 1500 * time.Millisecond})
	cl := testrig.NewClient(t, c)
	var ids []string
	for i := 0; i < 5; i++ {
		id := cl.CreateNode(fmt.Sprintf("m%d", i), "site1", nil)
		ids = append(ids, id)
		cl.MustVerb(id, "manage", nil)
	}
	for _, id := range ids {
		cl.WaitRest(id, 15*time.Second)
		cl.MustVerb(id, "provide", nil)
	}
	for _, id := range ids {
		cl.WaitState(id, "clean wait", 10*time.Second)
	}
	m.kill()
	// Steps finish while the broker is down: their results wait in the
	// agent's outbox.
	if !waitfor.Until(30*time.Second, func() bool { return a.Outbox() >= len(ids) }) {
		t.Fatalf("the agent's outbox holds %d with the broker down; want the results of %d nodes' steps", a.Outbox(), len(ids))
	}
	startMosq()
	for _, id := range ids {
		n := cl.WaitRest(id, 60*time.Second)
		if n.State != "available" {
			t.Errorf("node %s ended in %q: %s", n.Name, n.State, n.LastError)
		}
		h, _ := c.Engine.History(id)
		done := 0
		for _, e := range h {
			if strings.HasPrefix(e.Event, "clean step deploy.erase_devices") && strings.HasSuffix(e.Event, "done") {
				done++
			}
		}
		if done != 2 {
			t.Errorf("node %s: %d erase steps done in history, want 2", n.Name, done)
		}
	}
}

// TestBrokerACL: a real MQTT client with node A's credentials is refused
// node B's topics and another site's; wrong passwords are refused.
func TestBrokerACL(t *testing.T) {
	sub := requireTool(t, "mosquitto_sub")
	pub := requireTool(t, "mosquitto_pub")
	c := testrig.Coordinator(t, testrig.Options{Machine: fsm.Config{}})
	cl := testrig.NewClient(t, c)
	testrig.Site(t, c, "site1", agent.SimOptions{Nodes: 4, NoBoot: true})
	cl.Do("POST", "/v1/sites", map[string]string{"name": "site2"}, nil)
	// Node A boots the ramdisk (which never comes): its boot credential
	// is valid while it waits.
	a, user, pass := bootingNode(t, c, cl, "a", "site1")
	b := cl.CreateNode("b", "site1", nil)
	host, port := splitAddr(c.BrokerURL)
	run := func(bin string, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		all := append([]string{"-V", "mqttv5", "-h", host, "-p", port, "-u", user, "-P", pass, "-i", "ramdisk-" + a}, args...)
		out, err := exec.CommandContext(ctx, bin, all...).CombinedOutput()
		return string(out), err
	}
	// Allowed: node A's own command topic (no message: -W ends it).
	if out, err := run(sub, "-t", "bm/v1/site/site1/node/"+a+"/cmd", "-W", "1"); strings.Contains(out, "denied") {
		t.Fatalf("own topic denied: %v %s", err, out)
	}
	for _, topic := range []string{"bm/v1/site/site1/node/" + b + "/cmd", "bm/v1/site/site2/bmc/cmd", "bm/v1/site/site1/bmc/cmd", "bm/#"} {
		out, _ := run(sub, "-t", topic, "-W", "2")
		t.Logf("subscribe %s: %q", topic, out)
		if !strings.Contains(out, "denied") {
			t.Errorf("subscribe to %s as node A was not denied: %q", topic, out)
		}
	}
	// Publishing into B's event topic is refused (PUBACK 0x87 with v5).
	out, err := run(pub, "-q", "1", "-t", "bm/v1/site/site1/node/"+b+"/evt", "-m", "{}")
	t.Logf("publish to B: %v %q", err, out)
	if !strings.Contains(strings.ToLower(out), "not authorized") {
		t.Errorf("publish to node B's topic accepted: %v %q", err, out)
	}
	pass = "wrong"
	out, err = run(sub, "-t", "bm/v1/site/site1/node/"+a+"/cmd", "-W", "2")
	if err == nil || !strings.Contains(strings.ToLower(out), "not authorized") && !strings.Contains(strings.ToLower(out), "bad user name or password") {
		t.Errorf("wrong password accepted: %v %q", err, out)
	}
}

func splitAddr(url string) (string, string) {
	hp := strings.TrimPrefix(url, "mqtt://")
	i := strings.LastIndex(hp, ":")
	return hp[:i], hp[i+1:]
}

func probe(base string) bool {
	resp, err := httpGet(base + "/v1")
	if err != nil {
		return false
	}
	return resp == 200
}
