package systest

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/lib/waitfor"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestRescueRefusalsOnMetrics: a simulated node is rescued; 8 idle
// sockets from 127.0.0.50 (python3) and 3 guessers from 127.0.0.60–62
// (OpenSSH's client through sshpass, wrong passwords) make its rescue
// login refuse connections over the pending share of one source, wrong
// passwords, and tries over a source's failure budget; the operator
// still logs in with the right password meanwhile. The edge agent's
// /metrics count the refusals as bmedge_agent_listener_refused_total
// {listener="rescue-ssh"} by kind, and the coordinator's as
// bmedge_listener_refused_total{listener="rescue-ssh"}, carried there by
// the node's heartbeats: the same counts once the guessers stop.
func TestRescueRefusalsOnMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("guesses passwords for about 15 s (-short)")
	}
	python := requireTool(t, "python3")
	requireTool(t, "ssh")
	sshpass := requireTool(t, "sshpass")
	c := testrig.Coordinator(t, testrig.Options{})
	cl := testrig.NewClient(t, c)
	var creds agent.Credentials
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "edge1"}, &creds); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	a := testrig.StartAgentConfig(t, creds, agent.Config{Sim: agent.SimOptions{Nodes: 1, StepDuration: 50 * time.Millisecond}, MetricsListen: "127.0.0.1:0"})
	if err := a.AwaitUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	id := cl.CreateNode("r1", "edge1", nil)
	cl.Do("PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "add", "path": "/instance_info/image_source", "value": "http://127.0.0.1:1/img"}}, nil)
	const pw = "Rescue-Metrics-Pa55"
	for _, v := range []struct{ verb, want string }{{"manage", "manageable"}, {"provide", "available"}, {"active", "active"}, {"rescue", "rescue"}} {
		extra := map[string]any{}
		if v.verb == "rescue" {
			extra["rescue_password"] = pw
		}
		cl.MustVerb(id, v.verb, extra)
		if n := cl.WaitRest(id, 30*time.Second); n.State != v.want {
			t.Fatalf("%s: %q %q", v.verb, n.State, n.LastError)
		}
	}
	// Where to log in, as the operator reads it in the node's history.
	var h struct {
		History []map[string]any `json:"history"`
	}
	cl.Do("GET", "/v1/nodes/"+id+"/history", nil, &h)
	port := ""
	for _, e := range h.History {
		if m := regexp.MustCompile(`ssh -p (\d+) rescue@127\.0\.0\.1`).FindStringSubmatch(fmt.Sprint(e["event"])); m != nil {
			port = m[1]
		}
	}
	if port == "" {
		t.Fatalf("no rescue login in the history: %v", h.History)
	}
	coordSeries := func(kind string) float64 {
		_, text := scrape(t, c.APIURL+"/metrics", "", "")
		return max(0, sample(text, `bmedge_listener_refused_total{kind="`+kind+`",listener="rescue-ssh"}`))
	}
	agentSeries := func(kind string) float64 {
		_, text := scrape(t, "http://"+a.MetricsAddr()+"/metrics", "", "")
		return max(0, sample(text, `bmedge_agent_listener_refused_total{kind="`+kind+`",listener="rescue-ssh"}`))
	}
	kinds := []string{"pending-per-source", "login-failed", "login-budget"}
	for _, k := range kinds {
		if a, c := agentSeries(k), coordSeries(k); a != 0 || c != 0 {
			t.Fatalf("before any refusal: %s %v on the agent, %v on the coordinator", k, a, c)
		}
	}

	// 8 idle sockets from one address: 2 pending are its share.
	idle := exec.Command(python, "-c", `
import socket, sys
socks = []
for i in range(8):
    s = socket.socket()
    s.bind(("127.0.0.50", 0))
    s.connect(("127.0.0.1", int(sys.argv[1])))
    socks.append(s)
print("open", flush=True)
sys.stdin.read()
`, port)
	stdin, err := idle.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := idle.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := idle.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); _ = idle.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "open\n" {
		t.Fatalf("python3's idle sockets: %q %v", line, err)
	}

	ssh := func(ctx context.Context, from, password string, tries int, command string) (string, error) {
		cmd := exec.CommandContext(ctx, sshpass, "-p", password, "ssh", "-F", "/dev/null", "-b", from, "-o", "StrictHostKeyChecking=no",
			"-o", "UserKnownHostsFile=/dev/null", "-o", "PreferredAuthentications=password", "-o", "PubkeyAuthentication=no",
			"-o", fmt.Sprintf("NumberOfPasswordPrompts=%d", tries), "-o", "ConnectTimeout=10", "-o", "LogLevel=ERROR", "-p", port, "rescue@127.0.0.1", command)
		b, err := cmd.CombinedOutput()
		return string(b), err
	}
	// The guessers: wrong passwords, three tries a connection, until told
	// to stop.
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ctx.Err() == nil; n++ {
				_, _ = ssh(ctx, fmt.Sprintf("127.0.0.%d", 60+i), fmt.Sprintf("guess-%d-%d", i, n), 3, "true")
			}
		}()
	}
	t.Cleanup(func() { stop(); wg.Wait() })
	if !waitfor.Until(90*time.Second, func() bool { return agentSeries("login-budget") >= 3 }) {
		t.Fatalf("the guessers spent no failure budget in 90 s: login-failed %v, login-budget %v", agentSeries("login-failed"), agentSeries("login-budget"))
	}
	// The operator, from another address, while they hold on.
	octx, ocancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer ocancel()
	if got, err := ssh(octx, "127.0.0.1", pw, 1, "hostname"); err != nil || !strings.Contains(got, id) {
		t.Fatalf("the operator's login with the right password, under 8 idle sockets and 3 guessers: %q %v", got, err)
	}
	stop()
	wg.Wait()

	// The agent's counts stand still now; the coordinator's reach them
	// with the next heartbeats.
	want := map[string]float64{}
	for _, k := range kinds {
		want[k] = agentSeries(k)
	}
	t.Logf("agent /metrics, rescue-ssh: %v", want)
	if want["pending-per-source"] < 6 || want["login-failed"] < 15 || want["login-budget"] < 3 {
		t.Fatalf("agent /metrics, rescue-ssh: %v; want at least 6 over the pending share of 127.0.0.50, 15 wrong passwords (5 of each guesser's budget) and 3 tries refused unchecked", want)
	}
	got := map[string]float64{}
	if !waitfor.Until(30*time.Second, func() bool {
		for _, k := range kinds {
			got[k] = coordSeries(k)
		}
		return maps.Equal(got, want)
	}) {
		t.Fatalf("coordinator /metrics, rescue-ssh: %v; want the agent's %v (the node's heartbeats carry them)", got, want)
	}
}
