package systest

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/coordinator/server"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// syncBuffer is a log sink shared by the coordinator and the edge agent.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// curlDo sends a request with curl (an independent client) and returns
// the status and body.
func curlDo(t *testing.T, base, method, path, body string) (string, string) {
	t.Helper()
	if _, err := exec.LookPath("curl"); err != nil {
		if os.Getenv("BM_REQUIRE_ALL") == "1" {
			t.Fatal("curl is missing")
		}
		t.Skip("curl is missing")
	}
	args := []string{"-sS", "-o", "-", "-w", "\n%{http_code}", "-X", method, "-H", "Content-Type: application/json",
		"-H", "X-OpenStack-Ironic-API-Version: latest", base + path}
	if body != "" {
		args = append(args, "--data", body)
	}
	out, err := exec.Command("curl", args...).Output()
	if err != nil {
		t.Fatalf("curl %s %s: %v", method, path, err)
	}
	s := strings.TrimSpace(string(out))
	i := strings.LastIndexByte(s, '\n')
	return s[i+1:], s[:max(i, 0)]
}

// faultString is the message of an Ironic-shaped error body.
func faultString(body string) string {
	var outer struct {
		ErrorMessage string `json:"error_message"`
	}
	var inner struct {
		FaultString string `json:"faultstring"`
	}
	if json.Unmarshal([]byte(body), &outer) != nil || json.Unmarshal([]byte(outer.ErrorMessage), &inner) != nil {
		return body
	}
	return inner.FaultString
}

// baremetalTry runs Debian's baremetal client and returns its output and
// error output, and whether it succeeded.
func baremetalTry(t *testing.T, apiAddr string, args ...string) (string, bool) {
	t.Helper()
	const bm = "/usr/bin/baremetal"
	if _, err := os.Stat(bm); err != nil {
		if os.Getenv("BM_REQUIRE_ALL") == "1" {
			t.Fatalf("%s is missing (package python3-ironicclient); run scripts/install-test-deps.sh", bm)
		}
		t.Skipf("%s is missing: install Debian's python3-ironicclient (scripts/install-test-deps.sh)", bm)
	}
	home := t.TempDir()
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "OS_") || k == "HOME" || strings.HasPrefix(k, "XDG_") || strings.EqualFold(k, "no_proxy") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "OS_AUTH_TYPE=none", "OS_ENDPOINT=http://"+apiAddr, "HOME="+home, "NO_PROXY=127.0.0.1", "no_proxy=127.0.0.1", "PYTHONDONTWRITEBYTECODE=1")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bm, args...)
	cmd.Env, cmd.Dir, cmd.WaitDelay = env, home, 5*time.Second
	out, err := cmd.CombinedOutput()
	return string(out), err == nil
}

// TestBurninNetworkPairing (simulated site): the coordinator refuses a
// bad pairing of deploy.burnin_network with a 400 naming the field
// (curl, and Debian's baremetal CLI), runs two nodes that name each
// other (one from its clean step, one from its driver_info) and hands
// each the pair's key, which is found nowhere: not in the node's API
// output while the step runs or after, its history, the logs (debug
// level) or any file of the data folder.
func TestBurninNetworkPairing(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	logs := &syncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, err := server.Start(context.Background(), server.Options{DataDir: data, APIListen: "127.0.0.1:0", MQTTListen: testrig.FreeAddr(t),
		Machine:      fsm.Config{WaitTimeout: 30 * time.Second, CommandTimeout: 20 * time.Second, ResendInterval: 500 * time.Millisecond, AutomatedClean: true},
		TickInterval: 100 * time.Millisecond, Log: logger})
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() { once.Do(c.Close) }
	t.Cleanup(stop)
	cl := testrig.NewClient(t, c)
	var creds agent.Credentials
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "s1"}, &creds); code != 201 {
		t.Fatalf("site: %d", code)
	}
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "s2"}, nil); code != 201 {
		t.Fatalf("site s2: %d", code)
	}
	testrig.StartAgentConfig(t, creds, agent.Config{Log: logger, Sim: agent.SimOptions{Nodes: 3, StepDuration: 2 * time.Second}})
	b1 := cl.CreateNode("b1", "s1", nil)
	b2 := cl.CreateNode("b2", "s1", map[string]any{
		// As the baremetal CLI sets it: a string holding the object.
		"agent_burnin_fio_network_config":  `{"role": "reader", "partner": "10.0.0.1:9000", "partner_node": "b1"}`,
		"agent_burnin_fio_network_runtime": "2",
	})
	cl.CreateNode("c1", "s2", nil)
	for _, id := range []string{b1, b2} {
		cl.MustVerb(id, "manage", nil)
		if n := cl.WaitRest(id, 20*time.Second); n.State != "manageable" {
			t.Fatalf("manage: %s %s", n.State, n.LastError)
		}
	}

	base := "http://" + c.APIAddr
	clean := func(node, args string) (string, string) {
		return curlDo(t, base, "PUT", "/v1/nodes/"+node+"/states/provision",
			`{"target": "clean", "clean_steps": [{"interface": "deploy", "step": "burnin_network", "args": `+args+`}]}`)
	}
	for _, c := range []struct{ args, want string }{
		{`{}`, "agent_burnin_fio_network_config is required"},
		{`{"agent_burnin_fio_network_config": {"role": "sender", "partner": "10.0.0.2:9000", "partner_node": "b2"}}`, `role "sender": want "writer"`},
		{`{"agent_burnin_fio_network_config": {"role": "writer", "partner": "10.0.0.2:99999", "partner_node": "b2"}}`, `partner "10.0.0.2:99999": port "99999": want 1 to 65535`},
		{`{"agent_burnin_fio_network_config": {"role": "writer", "partner": "10.0.0.2"}}`, `field "partner_node" is missing`},
		{`{"agent_burnin_fio_network_config": {"role": "writer", "partner": "10.0.0.2", "partner_node": "b2", "port": 1}}`, `unknown field "port"; it takes partner, partner_node, role`},
		{`{"agent_burnin_fio_network_config": {"role": "writer", "partner": "10.0.0.2", "partner_node": "nosuch"}}`, `partner_node "nosuch" is no node of this coordinator`},
		{`{"agent_burnin_fio_network_config": {"role": "writer", "partner": "10.0.0.2", "partner_node": "b1"}}`, `partner_node "b1" is node b1 itself`},
		{`{"agent_burnin_fio_network_config": {"role": "writer", "partner": "10.0.0.2", "partner_node": "c1"}}`, `partner_node "c1" is in site s2, node b1 in site s1`},
		{`{"agent_burnin_fio_network_config": {"role": "writer", "partner": "10.0.0.2", "partner_node": "b2"}, "agent_burnin_fio_network_runtime": 0}`, "agent_burnin_fio_network_runtime=0: want a number of seconds above 0"},
	} {
		code, body := clean("b1", c.args)
		if code != "400" || !strings.Contains(faultString(body), c.want) {
			t.Errorf("clean b1 with %s: %s %s; want 400 with %q", c.args, code, body, c.want)
		}
	}
	// The same refusal through the baremetal CLI.
	out, ok := baremetalTry(t, c.APIAddr, "node", "clean", "b1", "--clean-steps",
		`[{"interface": "deploy", "step": "burnin_network", "args": {"agent_burnin_fio_network_config": {"role": "writer", "partner": "10.0.0.2", "partner_node": "b1"}}}]`)
	if ok || !strings.Contains(out, `partner_node "b1" is node b1 itself`) {
		t.Errorf("baremetal node clean with a self-pairing: ok=%v\n%s", ok, out)
	}
	if n := cl.Get(b1); n.State != "manageable" {
		t.Fatalf("a refused clean moved the node: %s", n.State)
	}

	// b1 from its clean step, b2 from its driver_info (baremetal CLI).
	if out, ok := baremetalTry(t, c.APIAddr, "node", "clean", "b2", "--clean-steps", `[{"interface": "deploy", "step": "burnin_network"}]`); !ok {
		t.Fatalf("baremetal node clean b2: %s", out)
	}
	if code, body := clean("b1", `{"agent_burnin_fio_network_config": {"role": "writer", "partner": "10.0.0.2", "partner_node": "`+b2+`"}, "agent_burnin_fio_network_runtime": 2}`); code != "202" {
		t.Fatalf("clean b1: %s %s", code, body)
	}
	var during []string
	deadline := time.Now().Add(30 * time.Second)
	for len(during) < 2 && time.Now().Before(deadline) {
		for _, n := range []string{"b1", "b2"} {
			if _, body := curlDo(t, base, "GET", "/v1/nodes/"+n, ""); strings.Contains(body, `"step":"burnin_network"`) {
				during = append(during, body)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(during) < 2 {
		_, b := curlDo(t, base, "GET", "/v1/nodes/b1", "")
		t.Fatalf("never saw burnin_network as the clean_step: %v\n%s\n%s", during, b, logs.String())
	}
	for _, id := range []string{b1, b2} {
		if n := cl.WaitRest(id, 60*time.Second); n.State != "manageable" {
			t.Fatalf("clean of %s: %s %s", id, n.State, n.LastError)
		}
	}
	var seen []string
	seen = append(seen, during...)
	for _, n := range []string{"b1", "b2"} {
		_, node := curlDo(t, base, "GET", "/v1/nodes/"+n, "")
		_, hist := curlDo(t, base, "GET", "/v1/nodes/"+n+"/history", "")
		if !strings.Contains(hist, "clean step deploy.burnin_network done") {
			t.Errorf("%s's history lacks the step:\n%s", n, hist)
		}
		seen = append(seen, node, hist)
	}
	_, list := curlDo(t, base, "GET", "/v1/nodes/detail", "")
	seen = append(seen, list, logs.String())
	if !strings.Contains(logs.String(), "level=DEBUG") {
		t.Fatal("the logs were not captured at debug level: the search would look at nothing")
	}

	// The key the coordinator handed both nodes: HMAC of its secret over
	// the two UUIDs sorted (TestBurninPairKey in coordinator/engine says
	// it is the one the nodes get).
	secret, err := os.ReadFile(filepath.Join(data, "secret"))
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := min(b1, b2), max(b1, b2)
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("burnin_network:" + lo + ":" + hi))
	key := hex.EncodeToString(m.Sum(nil))
	for i, s := range seen {
		if strings.Contains(s, key) || strings.Contains(s, key[:16]) {
			t.Errorf("the pair key is in output %d:\n%s", i, s)
		}
	}
	stop()
	files := 0
	err = filepath.WalkDir(data, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		files++
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte(key)) {
			t.Errorf("the pair key is in the clear in %s", path)
		}
		return nil
	})
	if err != nil || files < 4 {
		t.Fatalf("data folder search: %v, %d files", err, files)
	}
}
