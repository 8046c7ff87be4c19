package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestFDExhaustionEndsTheCoordinatorCleanly runs the real coordinator
// binary, takes away its file descriptors the way issue 17's flood of
// idle connections did (its NOFILE limit is lowered, with prlimit(2), to
// the number it has open, so the next file Badger opens fails with "too
// many open files"), and writes enough to the value log that the
// collector's memtable flush needs a new table file: the path that
// crashed (SIGSEGV in Badger's DropPrefix). The coordinator must end with
// one clear fatal line and exit status 3, never a panic; started again
// with its normal limit it serves every node, with every acknowledged
// change.
func TestFDExhaustionEndsTheCoordinatorCleanly(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("needs Linux: prlimit(2) on another process and /proc/PID/fd")
	}
	bin := buildCoordinator(t)
	data := t.TempDir()

	c := startCoordinator(t, bin, data)
	if code, body := c.do("POST", "/v1/sites", `{"name": "rack1"}`); code != 201 {
		t.Fatalf("create site: %d %s", code, body)
	}
	const nodes = 20
	for i := range nodes {
		if code, body := c.do("POST", "/v1/nodes", fmt.Sprintf(`{"driver": "fake", "name": "n%d", "conductor_group": "rack1"}`, i)); code != 201 {
			t.Fatalf("create n%d: %d %s", i, code, body)
		}
	}

	// No descriptor left: the limit becomes the lowest free descriptor
	// number, the one the kernel would hand out next (the process keeps
	// those it has). The client's one kept-alive connection is already
	// open.
	free := lowestFreeFD(t, c.cmd.Process.Pid)
	lim := unix.Rlimit{Cur: uint64(free), Max: uint64(free)}
	if err := unix.Prlimit(c.cmd.Process.Pid, unix.RLIMIT_NOFILE, &lim, nil); err != nil {
		if os.Getenv("BM_REQUIRE_ALL") == "1" {
			t.Fatalf("cannot lower the coordinator's NOFILE limit with prlimit(2): %v (BM_REQUIRE_ALL=1)", err)
		}
		t.Skipf("cannot lower the coordinator's NOFILE limit with prlimit(2): %v", err)
	}
	t.Logf("coordinator's NOFILE limit lowered to %d, its lowest free descriptor", free)

	// ~1.2 MiB of node records to the value log (appends to open files):
	// the collector flushes the memtable once writes stop, and that flush
	// needs a new table file.
	blob := strings.Repeat("x", 50<<10)
	want := map[string]string{}
	for i := range 24 {
		name := fmt.Sprintf("n%d", i%nodes)
		val := fmt.Sprintf("%d-%s", i, blob)
		code, body := c.do("PATCH", "/v1/nodes/"+name, fmt.Sprintf(`[{"op": "add", "path": "/extra/blob", "value": %q}]`, val))
		if code != 200 {
			// The store may fail on a write already; then the answer
			// is 503, nothing more is acknowledged.
			if code != 503 {
				t.Fatalf("PATCH %s: %d %s", name, code, body)
			}
			t.Logf("PATCH %s: 503 %s", name, body)
			break
		}
		want[name] = val
	}

	code, logs := c.wait(t, 90*time.Second)
	t.Logf("coordinator's log:\n%s", tail(logs, 40))
	if m := regexp.MustCompile(`(?m)^(panic:|fatal error:|goroutine \d+ \[|\[signal SIGSEGV)`).FindString(logs); m != "" {
		t.Fatalf("the coordinator crashed (%q in its output), want a controlled stop", m)
	}
	if code != 3 {
		t.Fatalf("exit status %d, want 3 (store failed)", code)
	}
	fatal := regexp.MustCompile(`(?m)^.*level=ERROR msg="store \w[\w ]* failed: .*$`).FindAllString(logs, -1)
	if len(fatal) != 1 {
		t.Fatalf("%d fatal lines, want one:\n%s", len(fatal), strings.Join(fatal, "\n"))
	}
	for _, s := range []string{"too many open files", "LimitNOFILE", "start it again"} {
		if !strings.Contains(fatal[0], s) {
			t.Errorf("the fatal line does not say %q: %s", s, fatal[0])
		}
	}

	// Started again with its normal limit: every node, every change.
	c2 := startCoordinator(t, bin, data)
	code2, body := c2.do("GET", "/v1/nodes?detail=True", "")
	if code2 != 200 {
		t.Fatalf("list nodes after the restart: %d %s", code2, body)
	}
	var list struct {
		Nodes []struct {
			Name  string         `json:"name"`
			Extra map[string]any `json:"extra"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(body), &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Nodes) != nodes {
		t.Fatalf("%d nodes after the restart, want %d", len(list.Nodes), nodes)
	}
	for _, n := range list.Nodes {
		if w, ok := want[n.Name]; ok && n.Extra["blob"] != w {
			got, _ := n.Extra["blob"].(string)
			t.Errorf("%s: extra.blob %.12q… after the restart, want the acknowledged %.12q…", n.Name, got, w)
		}
	}
	if code, logs := c2.stop(t); code != 0 {
		t.Fatalf("second run: exit status %d after SIGTERM\n%s", code, tail(logs, 20))
	}
}

// lowestFreeFD is the lowest descriptor number that process pid has not
// open.
func lowestFreeFD(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	open := map[int]bool{}
	for _, e := range ents {
		var n int
		if _, err := fmt.Sscan(e.Name(), &n); err == nil {
			open[n] = true
		}
	}
	n := 0
	for open[n] {
		n++
	}
	return n
}

// buildCoordinator builds this command into a temporary folder.
func buildCoordinator(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "coordinator")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// coordinatorProc is a running coordinator serve and a client that keeps
// one connection to its API.
type coordinatorProc struct {
	cmd    *exec.Cmd
	api    string
	client *http.Client
	logs   *lockedBuffer
	exited chan struct{}
	err    error
}

func startCoordinator(t *testing.T, bin, data string) *coordinatorProc {
	t.Helper()
	cmd := exec.Command(bin, "serve", "--data-dir", data, "--api-listen", "127.0.0.1:0", "--mqtt-listen", "127.0.0.1:0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &coordinatorProc{cmd: cmd, logs: &lockedBuffer{}, exited: make(chan struct{}),
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1}}}
	serving := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		re := regexp.MustCompile(`msg="coordinator serving" api=(\S+)`)
		for sc.Scan() {
			line := sc.Text()
			c.logs.WriteLine(line)
			if m := re.FindStringSubmatch(line); m != nil {
				serving <- m[1]
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		c.err = cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-c.exited:
		default:
			_ = cmd.Process.Kill()
			<-c.exited
		}
	})
	select {
	case c.api = <-serving:
	case <-c.exited:
		t.Fatalf("coordinator ended before serving: %v\n%s", c.err, c.logs.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("coordinator not serving after 60 s\n%s", c.logs.String())
	}
	return c
}

// do sends one request on the kept connection; a request the closed
// coordinator cannot answer is status 0.
func (c *coordinatorProc) do(method, path, body string) (int, string) {
	req, err := http.NewRequest(method, c.api+path, strings.NewReader(body))
	if err != nil {
		return 0, err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-OpenStack-Ironic-API-Version", "latest")
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// wait waits for the process to end by itself and returns its exit
// status (-1: killed by a signal) and its log.
func (c *coordinatorProc) wait(t *testing.T, limit time.Duration) (int, string) {
	t.Helper()
	select {
	case <-c.exited:
	case <-time.After(limit):
		t.Fatalf("the coordinator still runs %v after its store lost its file descriptors; want it to stop\n%s", limit, tail(c.logs.String(), 40))
	}
	return exitStatus(c.err), c.logs.String()
}

// stop ends the process with SIGTERM.
func (c *coordinatorProc) stop(t *testing.T) (int, string) {
	t.Helper()
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	return c.wait(t, 60*time.Second)
}

func exitStatus(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -2
	}
	return 0
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	for i, l := range lines {
		if len(l) > 400 {
			lines[i] = l[:400] + "…"
		}
	}
	return strings.Join(lines, "\n")
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) WriteLine(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.WriteString(s)
	l.b.WriteByte('\n')
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
