package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/lib/freeport"
	"github.com/bmedge/bmedge/scripts/internal/loadrig"
)

// edge is the site's edge agent with the simulated nodes: by default the
// agent program (./agent/cmd/agent, built like the coordinator) as a
// separate process, so that its RSS is its own; with -inprocess inside
// this process (then its RSS is this process's).
type edge struct {
	PID      int
	StateDir string
	LogFile  string
	inproc   bool
	cmd      *exec.Cmd
	exited   chan struct{}
	stop     func()
	// mu guards PID, cmd and exited, which a restart (-kill-agent-every)
	// replaces; killing is set while one is under way.
	mu      sync.Mutex
	killing bool
	// start runs the agent program once more (the same command).
	start func() error
	// Kills counts the SIGKILLs of -kill-agent-every, AfterPower those
	// that came right after a power command (-kill-after-power).
	Kills, AfterPower int
	// metrics is the agent's metrics address (the process agent).
	metrics string
}

// simulated nodes' settings, the same in both ways of running the agent:
// heartbeats every 30 s, and no pauses (in-band steps, ramdisk boot and
// BMC actions take no time), so that the cycles measure the
// coordinator's and the agent's own work.
const simHeartbeat = 30 * time.Second

// buildAgent builds ./agent/cmd/agent into dir.
func buildAgent(ctx context.Context, dir string) (string, error) {
	root, err := loadrig.ModuleRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "agent")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./agent/cmd/agent")
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build the edge agent: %w", err)
	}
	return out, nil
}

// startEdge runs the edge agent of the soak's site with o.nodes simulated
// nodes and its durable outbox under tmp/agent-state, and waits until
// the coordinator lists the site online.
func startEdge(ctx context.Context, o options, tmp string, creds agent.Credentials, api *loadrig.API) (*edge, error) {
	e := &edge{StateDir: filepath.Join(tmp, "agent-state"), LogFile: filepath.Join(tmp, "agent.log")}
	if o.inprocess {
		quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
		actx, acancel := context.WithCancel(context.Background())
		// The edge outbox on disk, as the agent program always has it
		// (an empty StateDir keeps it in memory, which only tests want).
		ag := agent.New(agent.Config{Site: creds.Site, BrokerURL: creds.BrokerURL, Username: creds.Username, Password: creds.Password,
			StateDir: e.StateDir, Sim: agent.SimOptions{Nodes: o.nodes, Heartbeat: simHeartbeat}, Log: quiet})
		done := make(chan error, 1)
		go func() { done <- ag.Run(actx) }()
		e.PID, e.inproc = os.Getpid(), true
		e.stop = func() {
			acancel()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
			}
		}
		wctx, wcancel := context.WithTimeout(ctx, 15*time.Second)
		defer wcancel()
		if err := ag.AwaitUp(wctx); err != nil {
			return e, fmt.Errorf("MQTT link of the edge agent: %w", err)
		}
		return e, nil
	}
	bin := o.agentBin
	var err error
	if bin == "" {
		fmt.Fprintln(os.Stderr, "soak: building the edge agent…")
		if bin, err = buildAgent(ctx, tmp); err != nil {
			return nil, err
		}
	}
	if e.metrics, err = freeAddr(); err != nil {
		return nil, err
	}
	credFile := filepath.Join(tmp, "site.json")
	b, _ := json.Marshal(creds)
	if err := os.WriteFile(credFile, b, 0o600); err != nil {
		return nil, err
	}
	e.start = func() error {
		lf, err := os.OpenFile(e.LogFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		cmd := exec.Command(bin, "--credentials-file", credFile, "--state-dir", e.StateDir,
			"--simulate", strconv.Itoa(o.nodes), "--heartbeat", simHeartbeat.String(),
			"--step-duration", o.stepDuration.String(), "--boot-delay", "0s", "--bmc-delay", "0s", "--metrics-listen", e.metrics)
		cmd.Stdout, cmd.Stderr = lf, lf
		// As the coordinator: its own process group, killed with the soak.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			lf.Close()
			return fmt.Errorf("start the edge agent: %w", err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); lf.Close(); close(exited) }()
		e.mu.Lock()
		e.cmd, e.PID, e.exited = cmd, cmd.Process.Pid, exited
		e.mu.Unlock()
		return nil
	}
	if err := e.start(); err != nil {
		return nil, err
	}
	e.stop = func() {
		e.mu.Lock()
		cmd, exited := e.cmd, e.exited
		e.mu.Unlock()
		select {
		case <-exited:
			return
		default:
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	return e, e.awaitOnline(ctx, api)
}

// awaitOnline waits until the coordinator lists the site online.
func (e *edge) awaitOnline(ctx context.Context, api *loadrig.API) error {
	e.mu.Lock()
	exited := e.exited
	e.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var l struct {
			Sites []struct {
				Name   string `json:"name"`
				Online bool   `json:"online"`
			} `json:"sites"`
		}
		if api.Do(ctx, "GET", "/v1/sites", nil, &l) == nil {
			for _, s := range l.Sites {
				if s.Name == site && s.Online {
					return nil
				}
			}
		}
		select {
		case <-exited:
			return fmt.Errorf("the edge agent exited at start:\n%s", loadrig.Tail(e.LogFile, 20))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the site did not come online within 30s of starting the edge agent:\n%s", loadrig.Tail(e.LogFile, 20))
		}
	}
}

// Pid is the agent process's pid (it changes at each restart).
func (e *edge) Pid() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.PID
}

// KillLoop kills the agent with SIGKILL every `every` and starts it
// again on the same state folder, until ctx ends (-kill-agent-every).
// Before each kill it prints what inFlight says (the nodes in flight).
func (e *edge) KillLoop(ctx context.Context, every time.Duration, afterPower bool, api *loadrig.API, inFlight func() string) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(every):
		}
		if afterPower && e.awaitPowerCommand(ctx, 30*time.Second) {
			e.AfterPower++
		}
		if ctx.Err() != nil {
			return nil // the cycles ended meanwhile
		}
		fmt.Printf("soak: SIGKILL #%d of the edge agent; nodes: %s\n", e.Kills+1, inFlight())
		e.mu.Lock()
		e.killing = true
		cmd, exited := e.cmd, e.exited
		e.mu.Unlock()
		// Its process group: the agent is the group's leader (Setpgid).
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		e.Kills++
		err := e.start()
		if err == nil {
			err = e.awaitOnline(ctx, api)
		}
		e.mu.Lock()
		e.killing = false
		e.mu.Unlock()
		if err != nil && ctx.Err() != nil && e.Alive() {
			return nil // the cycles ended while it came back; it runs
		}
		if err != nil {
			return fmt.Errorf("restart of the edge agent after its SIGKILL #%d: %w", e.Kills, err)
		}
	}
}

// awaitPowerCommand polls the agent's metrics until its count of power
// commands run goes up (one just returned from its BMC: its result may
// not be kept yet), for at most within; it tells whether it saw one.
func (e *edge) awaitPowerCommand(ctx context.Context, within time.Duration) bool {
	hc := &http.Client{Timeout: 2 * time.Second}
	last := -1.0
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		n := -1.0
		if resp, err := hc.Get("http://" + e.metrics + "/metrics"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			n = 0
			for _, l := range strings.Split(string(b), "\n") {
				if strings.HasPrefix(l, "bmedge_agent_bmc_operations_total{") && strings.Contains(l, `action="power"`) {
					if v, err := strconv.ParseFloat(l[strings.LastIndex(l, " ")+1:], 64); err == nil {
						n += v
					}
				}
			}
		}
		if last >= 0 && n > last {
			return true
		}
		if n >= 0 {
			last = n
		}
		time.Sleep(2 * time.Millisecond)
	}
	return false
}

// freeAddr is a 127.0.0.1 address nobody listens on now.
func freeAddr() (string, error) {
	return freeport.Addr("127.0.0.1")
}

// Alive tells whether the agent still runs.
func (e *edge) Alive() bool {
	if e == nil {
		return true
	}
	e.mu.Lock()
	exited, killing := e.exited, e.killing
	e.mu.Unlock()
	if exited == nil || killing {
		return true
	}
	select {
	case <-exited:
		return false
	default:
		return true
	}
}

// Stop ends the agent (SIGTERM, then SIGKILL after 5 s).
func (e *edge) Stop() {
	if e != nil && e.stop != nil {
		e.stop()
	}
}
