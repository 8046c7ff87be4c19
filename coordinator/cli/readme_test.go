package cli_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/coordinator/testrig"
)

func TestMain(m *testing.M) {
	testrig.AsCoordinator()
	os.Exit(m.Run())
}

// walkthrough returns the shell lines between the README's markers.
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
		case in && strings.HasPrefix(l, "bin/") || in && strings.HasPrefix(l, "echo "):
			lines = append(lines, l)
		}
	}
	if len(lines) < 20 {
		t.Fatalf("README walk-through has only %d command lines", len(lines))
	}
	return lines
}

// TestReadmeWalkthrough runs the README walk-through, line by line, with
// a coordinator and a simulated site set up as `make run` sets them up.
func TestReadmeWalkthrough(t *testing.T) {
	if testing.Short() {
		t.Skip("the walk-through takes about two minutes")
	}
	c := testrig.Coordinator(t, testrig.Options{})
	testrig.Site(t, c, "site1", agent.SimOptions{Nodes: 8, StepDuration: 3 * time.Second, BootDelay: time.Second,
		Heartbeat: 5 * time.Second, BMCDelay: 50 * time.Millisecond})
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	wrapper := fmt.Sprintf("#!/bin/sh\nBM_TEST_AS_COORDINATOR=1 exec %q \"$@\"\n", os.Args[0])
	if err := os.WriteFile(filepath.Join(dir, "bin", "coordinator"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs("../../docs")
	if err := os.Symlink(abs, filepath.Join(dir, "docs")); err != nil {
		t.Fatal(err)
	}
	for i, line := range walkthrough(t) {
		wantFail := strings.Contains(line, "# fails")
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		cmd := exec.CommandContext(ctx, "bash", "-c", line)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "COORDINATOR_URL=http://"+c.APIAddr)
		out, err := cmd.CombinedOutput()
		cancel()
		t.Logf("$ %s\n%s", line, out)
		if wantFail && err == nil {
			t.Fatalf("line %d should fail but succeeded: %s", i+1, line)
		}
		if !wantFail && err != nil {
			t.Fatalf("line %d failed (%v): %s\n%s", i+1, err, line, out)
		}
	}
	// The end state the walk-through promises.
	cl := testrig.NewClient(t, c)
	for name, want := range map[string]string{"n1": "available", "n2": "available", "n3": "manageable"} {
		if n := cl.Get(name); n.State != want {
			t.Errorf("after the walk-through %s is %q, want %q", name, n.State, want)
		}
	}
	if n := cl.Get("n1"); n.Properties["cpus"] == nil {
		t.Errorf("n1 properties not filled by inspection: %v", n.Properties)
	}
}
