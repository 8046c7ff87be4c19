package consolee2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/coordinator/server"
	"github.com/bmedge/bmedge/drivers/consoletest"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// binDir holds the programs built once for the package's tests.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "consolee2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var (
	buildMu sync.Mutex
	built   = map[string]error{}
)

// program builds the command at import path pkg (once per run) and returns
// its binary.
func program(t *testing.T, pkg string) string {
	t.Helper()
	bin := filepath.Join(binDir, filepath.Base(pkg))
	buildMu.Lock()
	defer buildMu.Unlock()
	err, done := built[pkg]
	if !done {
		goTool, lerr := exec.LookPath("go")
		if lerr != nil {
			t.Fatalf("the go command is needed to build %s: %v", pkg, lerr)
		}
		out, berr := exec.Command(goTool, "build", "-o", bin, pkg).CombinedOutput()
		if berr != nil {
			err = fmt.Errorf("go build %s: %v\n%s", pkg, berr, out)
		}
		built[pkg] = err
	}
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// needPython skips (fails with BM_REQUIRE_ALL=1) without Debian's
// python3-websocket.
func needPython(t *testing.T) string {
	t.Helper()
	py := "/usr/bin/python3"
	out, err := exec.Command(py, "-c", "import websocket").CombinedOutput()
	if err != nil {
		err = fmt.Errorf("%v: %s (Debian python3-websocket; scripts/install-test-deps.sh installs it)", err, strings.TrimSpace(string(out)))
	}
	consoletest.Need(t, "python3-websocket", err)
	return py
}

// rig is a coordinator with HTTP Basic and one site, site1, whose edge
// agent (the agent program, a process of its own, in real mode: no
// simulated nodes) reaches the coordinator's broker through a WAN link
// the test can cut.
type rig struct {
	t          *testing.T
	c          *server.Coordinator
	cl         *testrig.Client
	wan        *testrig.WANLink
	agentLog   string
	user, pass string
}

func newRig(t *testing.T) *rig {
	t.Helper()
	agentBin := program(t, "github.com/bmedge/bmedge/agent/cmd/agent")
	r := &rig{t: t, user: "op", pass: "console-e2e-pw"}
	r.c = testrig.Coordinator(t, testrig.Options{Users: map[string]string{r.user: r.pass},
		Machine: fsm.Config{WaitTimeout: 10 * time.Minute, CommandTimeout: 2 * time.Minute, ResendInterval: time.Second}})
	r.cl = testrig.NewClient(t, r.c)
	var creds agent.Credentials
	if code := r.cl.Do("POST", "/v1/sites", map[string]string{"name": "site1"}, &creds); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	u, err := url.Parse(creds.BrokerURL)
	if err != nil {
		t.Fatal(err)
	}
	r.wan = testrig.NewWANLink(t, u.Host)
	u.Host = r.wan.Addr()
	creds.BrokerURL = u.String()
	dir := t.TempDir()
	credFile := filepath.Join(dir, "site1.json")
	b, _ := json.Marshal(creds)
	if err := os.WriteFile(credFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	r.agentLog = filepath.Join(dir, "agent.log")
	logf, err := os.OpenFile(r.agentLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(agentBin, "--credentials-file", credFile, "--state-dir", filepath.Join(dir, "state"),
		"--power-sync-interval", "0", "--resend-interval", "1s")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			b, _ := os.ReadFile(r.agentLog)
			t.Logf("agent.log:\n%s", tail(string(b), 60))
		}
	})
	r.waitFor(2*time.Minute, "the edge agent connects", func() (bool, string) {
		b, _ := os.ReadFile(r.agentLog)
		return strings.Contains(string(b), "edge agent connected"), "no 'edge agent connected' in its log"
	})
	return r
}

// waitFor polls cond every 100 ms until it holds or timeout passes.
func (r *rig) waitFor(timeout time.Duration, what string, cond func() (bool, string)) {
	r.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, detail := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%s: not within %s (%s)", what, timeout, detail)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// createNode enrols a node of driver at site1 with console_interface iface
// and returns its UUID.
func (r *rig) createNode(name, driver, iface string, info map[string]any) string {
	r.t.Helper()
	var n testrig.Node
	body := map[string]any{"name": name, "driver": driver, "conductor_group": "site1", "driver_info": info, "console_interface": iface}
	if code := r.cl.Do("POST", "/v1/nodes", body, &n); code != 201 {
		r.t.Fatalf("create node %s: %d", name, code)
	}
	return n.UUID
}

// manage runs the manage verb: the site checks the BMC's credentials.
func (r *rig) manage(id string) {
	r.t.Helper()
	r.cl.MustVerb(id, "manage", nil)
	if n := r.cl.WaitRest(id, 3*time.Minute); n.State != "manageable" {
		r.t.Fatalf("manage: %q, last_error %q", n.State, n.LastError)
	}
}

// enableConsole enables the node's console through the API and returns
// the WebSocket URL of its console_info.
func (r *rig) enableConsole(id string) string {
	r.t.Helper()
	path := "/v1/nodes/" + id + "/states/console"
	if code := r.cl.Do("PUT", path, map[string]any{"enabled": true}, nil); code != 202 {
		r.t.Fatalf("PUT states/console enabled: %d, want 202", code)
	}
	st := r.consoleState(id)
	want := "ws" + strings.TrimPrefix(r.c.APIURL, "http") + "/v1/nodes/" + id + "/console"
	if !st.Enabled || st.Info.Type != "websocket" || st.Info.URL != want {
		r.t.Fatalf("GET states/console after enable: %+v, want enabled, websocket %s", st, want)
	}
	return st.Info.URL
}

type consoleState struct {
	Enabled bool `json:"console_enabled"`
	Info    struct {
		Type string `json:"type"`
		URL  string `json:"url"`
	} `json:"console_info"`
}

func (r *rig) consoleState(id string) consoleState {
	r.t.Helper()
	var st consoleState
	if code := r.cl.Do("GET", "/v1/nodes/"+id+"/states/console", nil, &st); code != 200 {
		r.t.Fatalf("GET states/console: %d", code)
	}
	return st
}

// stillEnabled fails the test when the site gave the console up (the
// agent sets console_enabled back to false with last_error saying why).
func (r *rig) stillEnabled(id string) {
	r.t.Helper()
	if st := r.consoleState(id); !st.Enabled {
		r.t.Fatalf("the console was disabled by the site: last_error %q", r.cl.Get(id).LastError)
	}
}

// log is GET console/log: what the coordinator kept of the console.
func (r *rig) log(id string) string {
	r.t.Helper()
	req, _ := http.NewRequest("GET", r.c.APIURL+"/v1/nodes/"+id+"/console/log", nil)
	req.SetBasicAuth(r.user, r.pass)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		r.t.Fatalf("GET console/log: %d %s", resp.StatusCode, b)
	}
	return string(b)
}

// waitLog waits until the coordinator's console log holds every one of
// want.
func (r *rig) waitLog(id string, timeout time.Duration, want ...string) {
	r.t.Helper()
	r.waitFor(timeout, fmt.Sprintf("%q in the console log", want), func() (bool, string) {
		l := r.log(id)
		for _, w := range want {
			if !strings.Contains(l, w) {
				return false, "the log ends " + fmt.Sprintf("%q", tail(l, 8))
			}
		}
		return true, ""
	})
}

// powerOn powers the node on through the API.
func (r *rig) powerOn(id string) {
	r.t.Helper()
	if code := r.cl.Do("PUT", "/v1/nodes/"+id+"/states/power", map[string]string{"target": "power on"}, nil); code != 202 {
		r.t.Fatalf("power on: %d", code)
	}
	if n := r.cl.WaitRest(id, 3*time.Minute); n.LastError != "" || n.PowerState != "power on" {
		r.t.Fatalf("power on: power_state %q, last_error %q", n.PowerState, n.LastError)
	}
}

// cliConsole attaches `coordinator node console NAME` in a pty: it must
// show the kernel's boot messages and the guest's login prompt (the
// coordinator's kept output), log in (the guest welcomes the name with
// its quotes removed) and run a typed line, then leave on ~. with exit
// status 0.
func (r *rig) cliConsole(name string) {
	r.t.Helper()
	t := r.t
	coord := program(t, "github.com/bmedge/bmedge/coordinator/cmd/coordinator")
	cmd := exec.Command(coord, "--url", r.c.APIURL, "node", "console", name)
	cmd.Env = append(os.Environ(), "OS_USERNAME="+r.user, "OS_PASSWORD="+r.pass)
	f, err := pty.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	left := false
	defer func() {
		if !left {
			_ = cmd.Process.Kill()
			<-exited
		}
		f.Close()
	}()
	screen := consoletest.Collect(f)
	screen.WaitFor(t, "Linux version", 2*time.Minute, nil)
	screen.WaitFor(t, consoletest.GuestLogin, 2*time.Minute, nil)
	screen.WaitFor(t, "Type ~. at the start of a line to leave", 2*time.Minute, nil)
	type_ := func(s string) func() { return func() { _, _ = f.Write([]byte(s)) } }
	screen.WaitFor(t, "Welcome, cliuser", 2*time.Minute, type_("cli''user\r"))
	screen.WaitFor(t, "climarker", 2*time.Minute, type_("echo cli''marker\r"))
	_, _ = f.Write([]byte("~."))
	select {
	case err := <-exited:
		left = true
		if err != nil {
			t.Fatalf("coordinator node console after ~.: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("coordinator node console did not leave on ~.")
	}
}

// wsConsole runs the independent WebSocket client on the console: the
// boot messages, the login prompt, and a typed line the guest answers.
func (r *rig) wsConsole(py, wsURL string) {
	r.t.Helper()
	script, err := filepath.Abs(filepath.Join("testdata", "guest_ws.py"))
	if err != nil {
		r.t.Fatal(err)
	}
	out, err := exec.Command(py, script, wsURL, r.user, r.pass, "marker").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "OK") {
		r.t.Fatalf("python3-websocket client: %v\n%s", err, out)
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
