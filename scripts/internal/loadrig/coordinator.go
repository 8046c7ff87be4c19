// Package loadrig holds what the many-node programs under scripts/ (bench
// and soak) share: a coordinator run as a separate process (or, for
// profiling, in-process), a small client of its HTTP API, and readers of
// /proc for RSS and CPU. It must never be imported by the programs
// themselves or by tests.
package loadrig

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/coordinator/server"
	"github.com/bmedge/bmedge/lib/freeport"
	"github.com/bmedge/bmedge/lib/netbudget"
)

// Settings are the coordinator's knobs that the load programs vary.
type Settings struct {
	// Tick is the coordinator's --tick.
	Tick time.Duration
	// HistoryMaxEntries is --history-max-entries (0: the coordinator's
	// default).
	HistoryMaxEntries int
	// NoEdgePlans is --edge-plans=false: every step's command goes alone.
	NoEdgePlans bool
	// MQTTListen is the embedded broker's --mqtt-listen (empty: a free
	// 127.0.0.1 port), for a site behind a link of its own;
	// MQTTInsecure is --mqtt-insecure, plain MQTT on such a link (a
	// network namespace's, which nobody else reaches).
	MQTTListen   string
	MQTTInsecure bool
}

// Coord is the coordinator under test: a separate process (the default,
// so that its RSS is its own) or, for profiling, one inside this process.
type Coord struct {
	APIURL string
	// PID is whose /proc entry tells RSS and CPU.
	PID int
	// LogFile is the coordinator's log.
	LogFile string
	// DataDir is the coordinator's --data-dir.
	DataDir string
	cmd     *exec.Cmd
	exited  chan struct{}
	inproc  *server.Coordinator
	// members are the other members of a cluster whose leader this is
	// (StartCluster).
	members []*Coord
}

// FreeAddr returns a free 127.0.0.1 address.
func FreeAddr() (string, error) {
	return freeport.Addr("127.0.0.1")
}

// ModuleRoot is the folder of the go.mod of github.com/bmedge/bmedge
// above the working directory.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.Contains(b, []byte("module github.com/bmedge/bmedge\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run this inside the bmedge module (no go.mod of github.com/bmedge/bmedge above the working directory)")
		}
		dir = parent
	}
}

// BuildCoordinator builds ./coordinator/cmd/coordinator into dir.
func BuildCoordinator(ctx context.Context, dir string) (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "coordinator")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./coordinator/cmd/coordinator")
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build the coordinator: %w", err)
	}
	return out, nil
}

// brokerAddrAndLog picks a free loopback address for the embedded broker
// and creates the coordinator's log file in tmp.
func brokerAddrAndLog(tmp string) (mq, logf string, lf *os.File, err error) {
	if mq, err = FreeAddr(); err != nil {
		return "", "", nil, err
	}
	logf = filepath.Join(tmp, "coordinator.log")
	lf, err = os.Create(logf)
	return mq, logf, lf, err
}

// StartProcess runs `coordinator serve` with the load programs' flags (no
// concurrency caps, 30 s resends) and waits until its API answers.
func StartProcess(ctx context.Context, bin, tmp string, s Settings) (*Coord, error) {
	api, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	mq, logf, lf, err := brokerAddrAndLog(tmp)
	if err != nil {
		return nil, err
	}
	if s.MQTTListen != "" {
		mq = s.MQTTListen
	}
	data := filepath.Join(tmp, "data")
	cmd := exec.Command(bin, serveArgs(data, api, mq, s)...)
	cmd.Stdout, cmd.Stderr = lf, lf
	// Own process group: a Ctrl-C at the terminal reaches only the load
	// program, which then stops the coordinator itself; and the
	// coordinator dies with the load program even on kill -9.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("start the coordinator: %w", err)
	}
	c := &Coord{APIURL: "http://" + api, PID: cmd.Process.Pid, LogFile: logf, DataDir: data, cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); lf.Close(); close(c.exited) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(c.APIURL + "/v1")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return c, nil
			}
		}
		select {
		case <-c.exited:
			return c, fmt.Errorf("the coordinator exited at start:\n%s", Tail(logf, 20))
		case <-ctx.Done():
			return c, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return c, fmt.Errorf("the coordinator's API did not answer within 30s:\n%s", Tail(logf, 20))
		}
	}
}

// serveArgs are `coordinator serve`'s flags of the load programs.
func serveArgs(data, api, mq string, s Settings) []string {
	args := []string{"serve", "--data-dir", data, "--api-listen", api, "--mqtt-listen", mq,
		"--max-concurrent-clean", "1000000", "--max-concurrent-deploy", "1000000", "--resend-interval", "30s", "--tick", s.Tick.String()}
	// The load program and its simulated sites all come from 127.0.0.1:
	// the per-source budgets are for strangers, not for it (the
	// descriptor pool, NOFILE less --fd-reserve, still applies).
	for _, l := range []string{"api", "mqtt"} {
		args = append(args, "--"+l+"-max-connections", strconv.Itoa(benchConns.MaxConns),
			"--"+l+"-max-connections-per-source", strconv.Itoa(benchConns.MaxPerSource),
			"--"+l+"-max-pending-per-source", strconv.Itoa(benchConns.MaxPendingPerSource))
	}
	if s.HistoryMaxEntries > 0 {
		args = append(args, "--history-max-entries", strconv.Itoa(s.HistoryMaxEntries))
	}
	if s.NoEdgePlans {
		args = append(args, "--edge-plans=false")
	}
	if s.MQTTInsecure {
		args = append(args, "--mqtt-insecure")
	}
	return args
}

// benchConns are the listeners' budgets under load: the load program
// and its simulated sites (up to thousands of edge agents) all come from
// 127.0.0.1.
var benchConns = netbudget.Limits{MaxConns: 1 << 20, MaxPerSource: 1 << 20, MaxPendingPerSource: 1 << 20}

// StartInProcess runs the coordinator inside this process, with the same
// settings as StartProcess, so that CPU and heap profiles see it.
func StartInProcess(ctx context.Context, tmp string, s Settings) (*Coord, error) {
	mq, logf, lf, err := brokerAddrAndLog(tmp)
	if err != nil {
		return nil, err
	}
	data := filepath.Join(tmp, "data")
	log := slog.New(slog.NewTextHandler(lf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	co, err := server.Start(ctx, server.Options{DataDir: data, APIListen: "127.0.0.1:0", MQTTListen: mq,
		Machine: fsm.Config{WaitTimeout: 30 * time.Minute, CommandTimeout: 5 * time.Minute, ResendInterval: 30 * time.Second,
			AutomatedClean: true},
		MaxConcurrentClean: 1000000, MaxConcurrentDeploy: 1000000, TickInterval: s.Tick, HistoryMaxEntries: s.HistoryMaxEntries, Log: log,
		APIConns: benchConns, MQTTConns: benchConns, NoEdgePlans: s.NoEdgePlans})
	if err != nil {
		return nil, err
	}
	return &Coord{APIURL: "http://" + co.APIAddr, PID: os.Getpid(), LogFile: logf, DataDir: data, inproc: co}, nil
}

// InProcess tells whether the coordinator runs inside this process.
func (c *Coord) InProcess() bool { return c != nil && c.inproc != nil }

// Stop ends the coordinator: SIGTERM, then SIGKILL after 5 s.
func (c *Coord) Stop() {
	if c == nil {
		return
	}
	for _, m := range c.members {
		m.Stop()
	}
	if c.inproc != nil {
		c.inproc.Close()
		return
	}
	if c.cmd == nil || c.cmd.Process == nil {
		return
	}
	select {
	case <-c.exited:
		return
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(5 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
}

// ExitStatus says how the coordinator process ended (after Alive is false).
func (c *Coord) ExitStatus() string {
	if c.cmd == nil || c.cmd.ProcessState == nil {
		return "unknown status"
	}
	return c.cmd.ProcessState.String()
}

// Alive tells whether the coordinator still runs.
func (c *Coord) Alive() bool {
	if c.exited == nil {
		return true
	}
	select {
	case <-c.exited:
		return false
	default:
		return true
	}
}

// ProcStatusKB reads a "Name:  N kB" line of /proc/PID/status (-1 when
// it cannot).
func ProcStatusKB(pid int, key string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, key+":") {
			f := strings.Fields(line)
			if len(f) >= 2 {
				v, _ := strconv.ParseInt(f[1], 10, 64)
				return v
			}
		}
	}
	return -1
}

var clockTicks = 100.0 // USER_HZ on Linux

// ProcCPU is the user+system CPU time of pid so far.
func ProcCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	// Fields after the ")" that ends the command name: state is field 3,
	// utime 14, stime 15.
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return time.Duration((u + st) / clockTicks * float64(time.Second))
}

// Finish ends a run of program name: it prints the coordinator's log tail
// when the run failed, stops the coordinator (co may be nil) and removes
// the run's temporary folder unless keep.
func Finish(name string, co *Coord, tmp string, keep, failed bool) {
	if failed && co != nil {
		fmt.Fprintf(os.Stderr, "%s: coordinator log tail:\n%s\n", name, Tail(co.LogFile, 10))
	}
	co.Stop()
	if keep {
		fmt.Fprintf(os.Stderr, "%s: temp folder kept (-keep): %s\n", name, tmp)
		return
	}
	os.RemoveAll(tmp)
}

// Tail returns the last n lines of a file.
func Tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  " + strings.Join(lines, "\n  ")
}

// LogLevels counts WARN and ERROR lines of a slog text log, and the most
// frequent messages among them.
func LogLevels(path string) (warn, errs int, top string) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, ""
	}
	defer f.Close()
	msgs := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.Contains(line, "level=WARN"):
			warn++
		case strings.Contains(line, "level=ERROR"):
			errs++
		default:
			continue
		}
		if i := strings.Index(line, "msg="); i >= 0 {
			m := line[i+4:]
			if strings.HasPrefix(m, `"`) {
				if j := strings.Index(m[1:], `"`); j >= 0 {
					m = m[1 : j+1]
				}
			} else if j := strings.IndexByte(m, ' '); j >= 0 {
				m = m[:j]
			}
			msgs[m]++
		}
	}
	best, bestN := "", 0
	for m, k := range msgs {
		if k > bestN {
			best, bestN = m, k
		}
	}
	if bestN > 0 {
		top = fmt.Sprintf("%q ×%d", best, bestN)
	}
	return warn, errs, top
}
