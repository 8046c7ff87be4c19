package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bmedge/bmedge/coordinator/testrig"
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
	}
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
	// The deploys went through the site cache, which fetched the image
	// from make run's image server.
	if b, err := os.ReadFile(filepath.Join(run, "imageserver.log")); err != nil || !strings.Contains(string(b), "GET /demo.raw") {
		t.Errorf("the image server was not asked for the image (%v):\n%s", err, b)
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
