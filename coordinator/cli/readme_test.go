package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

func TestMain(m *testing.M) {
	testrig.AsCoordinator()
	os.Exit(m.Run())
}

// walkthrough returns the shell lines between the README's markers: the
// commands (bin/…, echo …) and the files they source (". FILE").
func walkthrough(t *testing.T) []string {
	f, err := os.Open("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		switch {
		case strings.Contains(l, "<!-- walkthrough:start -->"):
			in = true
		case strings.Contains(l, "<!-- walkthrough:end -->"):
			in = false
		case in && (strings.HasPrefix(l, "bin/") || strings.HasPrefix(l, "echo ") || strings.HasPrefix(l, ". ")):
			lines = append(lines, l)
		}
	}
	if len(lines) < 20 {
		t.Fatalf("README walk-through has only %d command lines", len(lines))
	}
	return lines
}

// TestReadmeWalkthrough runs the README walk-through, line by line, as a
// new user does: against what scripts/run.sh (make run) starts, run
// itself with the programs make run builds — the coordinator, the edge
// agent of site1 with its 8 simulated nodes and its image cache, and the
// image server of the walk-through's image — on free loopback ports and
// in a folder of the test's own.
func TestReadmeWalkthrough(t *testing.T) {
	if testing.Short() {
		t.Skip("the walk-through takes about three minutes")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	run := filepath.Join(dir, "build", "run")
	if err := os.MkdirAll(run, 0o755); err != nil {
		t.Fatal(err)
	}
	buildRunPrograms(t, root, bin)
	if err := os.Symlink(filepath.Join(root, "docs"), filepath.Join(dir, "docs")); err != nil {
		t.Fatal(err)
	}
	api := testrig.FreeAddr(t)
	env := append(os.Environ(), "RUN="+run, "BIN="+bin, "API="+api, "MQTT="+testrig.FreeAddr(t),
		"IMAGE_CACHE="+testrig.FreeAddr(t), "IMAGE_SERVER="+testrig.FreeAddr(t))
	site, _ := startRunSh(t, filepath.Join(root, "scripts", "run.sh"), env)

	// Each line runs in a shell of its own, after the files sourced by
	// the lines before it (". build/run/image.env").
	var sourced []string
	rescue := &rescueCheck{}
	for i, line := range walkthrough(t) {
		wantFail := strings.Contains(line, "# fails")
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		cmd := exec.CommandContext(ctx, "bash", "-c", strings.Join(append(sourced, line), "\n"))
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "COORDINATOR_URL=http://"+api)
		out, err := cmd.CombinedOutput()
		cancel()
		t.Logf("$ %s\n%s", line, out)
		if wantFail && err == nil {
			t.Fatalf("line %d should fail but succeeded: %s", i+1, line)
		}
		if !wantFail && err != nil {
			t.Fatalf("line %d failed (%v): %s\n%s\nrun.sh:\n%s", i+1, err, line, out, site.String())
		}
		if strings.HasPrefix(line, ". ") {
			sourced = append(sourced, line)
		}
		rescue.after(t, line, string(out))
	}
	rescue.done(t)
	if len(sourced) == 0 {
		t.Errorf("the walk-through sources no image.env: its deploys do not use the image make run serves")
	}
	// The end state the walk-through promises.
	get := func(name string) testrig.Node {
		var n testrig.Node
		req, _ := http.NewRequest("GET", "http://"+api+"/v1/nodes/"+name, nil)
		req.Header.Set("X-OpenStack-Ironic-API-Version", "latest")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(&n); err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET node %s: %d %v", name, resp.StatusCode, err)
		}
		return n
	}
	for name, want := range map[string]string{"n1": "available", "n2": "available", "n3": "manageable"} {
		if n := get(name); n.State != want {
			t.Errorf("after the walk-through %s is %q, want %q", name, n.State, want)
		}
	}
	if n := get("n1"); n.Properties["cpus"] == nil {
		t.Errorf("n1 properties not filled by inspection: %v", n.Properties)
	}
	// The site's two machines that belong to no node were discovered.
	var site1 struct {
		Discovered int `json:"discovered"`
	}
	if resp, err := http.Get("http://" + api + "/v1/sites/site1"); err != nil {
		t.Fatal(err)
	} else {
		_ = json.NewDecoder(resp.Body).Decode(&site1)
		resp.Body.Close()
	}
	if site1.Discovered != 2 {
		t.Errorf("after the walk-through site1 has %d discovered nodes, want 2", site1.Discovered)
	}
	// The deploys went through the site cache, which fetched the image
	// from make run's image server.
	if b, err := os.ReadFile(filepath.Join(run, "imageserver.log")); err != nil || !strings.Contains(string(b), "GET /demo.raw") {
		t.Errorf("the image server was not asked for the image (%v):\n%s", err, b)
	}
}

// rescueCheck logs in to the walk-through's rescued node as its reader
// would, with OpenSSH's client: the password from the rescue line, the
// address from the line that shows the node's rescue login; a wrong
// password is refused, and after the unrescue line nothing listens.
type rescueCheck struct {
	password, addr, hostKey string
	loggedIn, closed        bool
}

var (
	rescuePasswordRE = regexp.MustCompile(`node rescue \S+ --rescue-password '([^']+)'`)
	rescueLoginRE    = regexp.MustCompile(`ssh -p (\d+) rescue@(127\.0\.0\.\d+) \(host key (SHA256:[^)\s]+)\)`)
)

func (c *rescueCheck) after(t *testing.T, line, out string) {
	t.Helper()
	if m := rescuePasswordRE.FindStringSubmatch(line); m != nil {
		c.password = m[1]
		return
	}
	if m := rescueLoginRE.FindStringSubmatch(out); m != nil && c.password != "" && c.addr == "" {
		c.addr, c.hostKey = net.JoinHostPort(m[2], m[1]), m[3]
		for _, tool := range []string{"ssh", "sshpass"} {
			if _, err := exec.LookPath(tool); err != nil {
				if os.Getenv("BM_REQUIRE_ALL") == "1" {
					t.Fatalf("%s is missing (scripts/install-test-deps.sh installs it): %v", tool, err)
				}
				t.Logf("%s is missing (scripts/install-test-deps.sh installs it): the rescue login is not tried", tool)
				c.loggedIn = true
				return
			}
		}
		out, err := c.ssh(t, c.password, "hostname; uname -a")
		if err != nil || !strings.Contains(out, "Linux ") {
			t.Fatalf("ssh -p %s rescue@%s with the walk-through's password: %v\n%s", m[1], m[2], err, out)
		}
		// The client saw the host key the node's history names.
		if !strings.Contains(out, "Server host key: ssh-ed25519 "+c.hostKey) {
			t.Errorf("the rescue login's host key is not %s, the one the history names:\n%s", c.hostKey, out)
		}
		if out, err := c.ssh(t, c.password+"-wrong", "echo logged-in"); err == nil || strings.Contains(out, "\nlogged-in") {
			t.Errorf("a wrong rescue password logged in: %v\n%s", err, out)
		}
		c.loggedIn = true
		return
	}
	if strings.Contains(line, "node unrescue ") && c.addr != "" {
		if conn, err := net.DialTimeout("tcp", c.addr, 2*time.Second); err == nil {
			conn.Close()
			t.Errorf("the rescue login at %s still listens after unrescue", c.addr)
		}
		c.closed = true
	}
}

func (c *rescueCheck) ssh(t *testing.T, password, command string) (string, error) {
	host, port, _ := net.SplitHostPort(c.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sshpass", "-p", password, "ssh", "-v", "-F", "/dev/null", "-o", "StrictHostKeyChecking=no",
		"-o", "UserKnownHostsFile=/dev/null", "-o", "PreferredAuthentications=password", "-o", "PubkeyAuthentication=no",
		"-o", "NumberOfPasswordPrompts=1", "-o", "ConnectTimeout=10", "-p", port, "rescue@"+host, command)
	out, err := cmd.CombinedOutput()
	t.Logf("$ sshpass -p *** ssh -p %s rescue@%s %q: %v\n%s", port, host, command, err, grepNot(string(out), "debug1:"))
	return string(out), err
}

// grepNot drops the lines that start with prefix.
func grepNot(s, prefix string) string {
	var keep []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(l, prefix) {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

func (c *rescueCheck) done(t *testing.T) {
	t.Helper()
	switch {
	case c.password == "":
		t.Errorf("the walk-through rescues no node with --rescue-password")
	case c.addr == "":
		t.Errorf("no walk-through line after the rescue shows where to log in (ssh -p PORT rescue@127.0.0.1 (host key ...))")
	case !c.loggedIn:
		t.Errorf("the rescue login was not tried")
	case !c.closed:
		t.Errorf("the walk-through does not unrescue the node after its rescue login")
	}
}

// buildRunPrograms builds the programs of make run (Makefile: build and
// run) into bin.
func buildRunPrograms(t *testing.T, root, bin string) {
	t.Helper()
	build := exec.Command("go", "build", "-o", bin+"/", "./coordinator/cmd/coordinator", "./agent/cmd/agent", "./scripts/imageserver")
	build.Dir = root
	build.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
}

// TestRunShOtherPorts: make run started again on other ports, with the
// state of the first run, keeps site1 online: run.sh re-issues the
// site's credentials for the new broker (the first run's name the old
// one, where nothing listens any more), says so, and the site's edge
// agent verifies a node's BMC.
func TestRunShOtherPorts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts make run twice")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	run := filepath.Join(dir, "run")
	buildRunPrograms(t, root, bin)
	start := func(name string) (api string, out *syncBuffer, stop func()) {
		api = testrig.FreeAddr(t)
		env := append(os.Environ(), "RUN="+run, "BIN="+bin, "API="+api, "MQTT="+testrig.FreeAddr(t),
			"IMAGE_CACHE="+testrig.FreeAddr(t), "IMAGE_SERVER="+testrig.FreeAddr(t))
		out, stop = startRunSh(t, filepath.Join(root, "scripts", "run.sh"), env)
		t.Logf("%s run.sh:\n%s", name, out)
		return api, out, stop
	}
	_, first, stop := start("first")
	stop()
	if !strings.Contains(first.String(), "site1: registered") {
		t.Fatalf("first run did not register site1:\n%s", first)
	}
	api, second, _ := start("second")
	if !strings.Contains(second.String(), "re-issued them (coordinator site rotate site1)") {
		t.Errorf("second run on another broker port does not say it re-issued site1's credentials:\n%s", second)
	}
	cli := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(bin, "coordinator"), args...)
		cmd.Env = append(os.Environ(), "COORDINATOR_URL=http://"+api)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := cli("node", "create", "--name", "n1", "--driver", "fake", "--site", "site1"); err != nil {
		t.Fatalf("node create: %v\n%s", err, out)
	}
	if out, err := cli("node", "manage", "n1", "--wait"); err != nil {
		b, _ := os.ReadFile(filepath.Join(run, "agent.log"))
		t.Fatalf("site1 is not online after make run on other ports: node manage: %v\n%s\nrun.sh:\n%s\nagent.log:\n%s", err, out, second, b)
	}
}

// startRunSh starts scripts/run.sh as make run does and waits for its
// banner. stop (also run at the test's end) stops it as Ctrl-C does
// (SIGTERM: run.sh stops what it started), waits for it, and kills
// whatever is left of its process group.
func startRunSh(t *testing.T, script string, env []string) (out *syncBuffer, stop func()) {
	t.Helper()
	out = &syncBuffer{}
	cmd := exec.Command("bash", script)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				t.Errorf("run.sh did not stop within 15 s of SIGTERM:\n%s", out)
			}
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		})
	}
	t.Cleanup(stop)
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(out.String(), "Ctrl-C stops them all") {
		select {
		case <-done:
			t.Fatalf("run.sh exited before its banner:\n%s", out)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no banner from run.sh within a minute:\n%s", out)
		}
	}
	return out, stop
}

// syncBuffer is a bytes.Buffer for a process's output read while it runs.
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
