// Command bench-console measures the serial console relayed by a site:
// the coordinator program (its embedded broker and Badger) on the host
// and the edge agent program with -nodes simulated nodes (driver fake,
// console_interface fake: agent/console/sim.go) in a network namespace,
// joined by a link of -rtt round trip (scripts/bench-console/run.sh,
// make bench-console; root). It prints:
//
//   - the WAN bytes (IP packets on the link, both ways) per second while
//     no console is enabled and while every node's console is enabled and
//     idle, their difference per console, and the MQTT messages of the
//     console topics in each window (target: an idle enabled console
//     costs at most 1 KiB/s of WAN);
//   - the keystroke round trip: a byte typed on the coordinator's
//     WebSocket (GET /v1/nodes/{id}/console) until its echo from the
//     node's console comes back on it, with the other consoles idle and
//     with every console printing (target: at most 600 ms over 500 ms);
//   - the step results of a manual clean of every node at once (-steps
//     in-band steps each in the simulated ramdisk, run by the site's
//     plan) with no console open and with every console printing
//     `ticks`: each result (of a step or a BMC command) from the time the
//     site sent it to the time it reached the coordinator's broker, and
//     each node's clean from the verb to manageable, p50/p95 (target: 100
//     consoles do not delay them).
//
// The load average is printed beside every figure: the machine may be
// shared.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/lib/mqttlink"
	"github.com/bmedge/bmedge/protocol"
	"github.com/bmedge/bmedge/scripts/internal/loadrig"
)

const site = "site1"

type options struct {
	nodes    int
	rtt      time.Duration
	idle     time.Duration
	keys     int
	steps    int
	stepWait time.Duration
	keep     bool
}

func main() {
	var o options
	flag.IntVar(&o.nodes, "nodes", 100, "simulated nodes, each with its console")
	flag.DurationVar(&o.rtt, "rtt", 500*time.Millisecond, "round trip of the link between the site and the coordinator")
	flag.DurationVar(&o.idle, "idle", 120*time.Second, "length of each window of the idle WAN measurement")
	flag.IntVar(&o.keys, "keys", 40, "keystrokes timed in each keystroke measurement")
	flag.IntVar(&o.steps, "steps", 5, "in-band steps (deploy.erase_devices_metadata, in the simulated ramdisk) in each node's manual clean")
	flag.DurationVar(&o.stepWait, "step-duration", time.Second, "how long each of those steps takes in the simulated ramdisk (the agent's --step-duration)")
	flag.BoolVar(&o.keep, "keep", false, "keep the temp folder (logs, data)")
	flag.Parse()
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "bench-console needs root: it makes a network namespace and a link to it")
		os.Exit(1)
	}
	if o.nodes < 2 || o.nodes > 256 || o.keys < 1 || o.steps < 1 {
		fmt.Fprintln(os.Stderr, "bench-console: -nodes 2 to 256 (a site opens at most 256 consoles), -keys and -steps at least 1")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := runBench(ctx, o)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench-console: FAILED: %v\n", err)
		os.Exit(1)
	}
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

type bench struct {
	o     options
	w     *wan
	co    *loadrig.Coord
	api   *loadrig.API
	ids   []string
	names map[string]string
	obs   *observer
	agent *exec.Cmd
	alog  string
}

func runBench(ctx context.Context, o options) (err error) {
	tmp, err := os.MkdirTemp("", "bmbench-console-")
	if err != nil {
		return err
	}
	b := &bench{o: o, names: map[string]string{}}
	defer func() {
		if b.agent != nil && b.agent.Process != nil {
			_ = b.agent.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { _ = b.agent.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				_ = syscall.Kill(-b.agent.Process.Pid, syscall.SIGKILL)
				<-done
			}
		}
		if b.obs != nil {
			b.obs.link.Close()
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench-console: edge agent log tail:\n%s\n", loadrig.Tail(b.alog, 15))
		}
		loadrig.Finish("bench-console", b.co, tmp, o.keep, err != nil)
		if b.w != nil {
			b.w.close()
		}
	}()
	fmt.Fprintln(os.Stderr, "bench-console: building the coordinator and the edge agent…")
	coordBin, err := loadrig.BuildCoordinator(ctx, tmp)
	if err != nil {
		return err
	}
	agentBin, err := buildAgent(ctx, tmp)
	if err != nil {
		return err
	}
	if b.w, err = newWAN(o.rtt / 2); err != nil {
		return err
	}
	rtt := b.w.rtt()
	if rtt < o.rtt*9/10 {
		return fmt.Errorf("a round trip over the link took %s, want about %s", rtt, o.rtt)
	}
	mq, err := b.w.freeAddr()
	if err != nil {
		return err
	}
	if b.co, err = loadrig.StartProcess(ctx, coordBin, tmp, loadrig.Settings{Tick: time.Second, MQTTListen: mq, MQTTInsecure: true}); err != nil {
		return err
	}
	b.api = loadrig.NewAPI(b.co.APIURL, 16)
	var creds agent.Credentials
	if err := b.api.Do(ctx, "POST", "/v1/sites", map[string]string{"name": site}, &creds); err != nil {
		return fmt.Errorf("site add: %w", err)
	}
	if err := b.startAgent(ctx, agentBin, tmp, creds); err != nil {
		return err
	}
	if b.obs, err = observe(ctx, creds); err != nil {
		return err
	}
	fmt.Printf("bench-console: %d simulated nodes at one site; link: %s, %s round trip measured (target %s); load average at start %s\n",
		o.nodes, b.w.how, rtt.Round(time.Millisecond), o.rtt, loadavg())
	if err := b.enrol(ctx); err != nil {
		return err
	}

	// 1. Step results with no console open.
	quiet, err := b.stepBatch(ctx)
	if err != nil {
		return fmt.Errorf("step batch with no console open: %w", err)
	}
	// 2. The WAN while no console is enabled, then while all are
	// enabled and idle.
	off := b.idleWindow(ctx)
	if err := b.setConsoles(ctx, true); err != nil {
		return err
	}
	if err := b.awaitPrompts(ctx); err != nil {
		return err
	}
	on := b.idleWindow(ctx)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	// 3. Keystrokes on one console, the others idle.
	wss := make([]*wsConsole, len(b.ids))
	defer func() {
		for _, c := range wss {
			if c != nil {
				c.close()
			}
		}
	}()
	if wss[0], err = b.dial(ctx, b.ids[0]); err != nil {
		return err
	}
	keysIdle, err := keystrokes(ctx, wss[0], o.keys)
	if err != nil {
		return fmt.Errorf("keystrokes, consoles idle: %w", err)
	}
	keysIdleLoad := loadavg()
	// 4. Every console prints: logged in, `ticks 10000` (a line every
	// 0.2 s for 33 minutes).
	fmt.Fprintf(os.Stderr, "bench-console: logging in on %d consoles and starting ticks…\n", len(b.ids))
	streamStart := time.Now()
	if err := b.startTicks(ctx, wss); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "bench-console: every console logged in and printing (%.0f s)\n", time.Since(streamStart).Seconds())
	// Let the streams settle, then see how many consoles' ticks reach
	// the coordinator.
	settle := 30 * time.Second
	sleepCtx(ctx, settle)
	rates := b.streamRates(wss, 20*time.Second)
	keysBusy, kerr := keystrokes(ctx, wss[0], o.keys)
	keysBusyLoad := loadavg()
	busy, berr := b.stepBatch(ctx)
	rates2 := b.streamRates(wss, 20*time.Second)

	// The report.
	kib := func(v float64) float64 { return v / 1024 }
	fmt.Printf("\nThe WAN while idle (%s windows, %d nodes):\n", o.idle, o.nodes)
	fmt.Printf("  no console enabled:           %8.1f B/s on the link (%6.1f B/s per node); console messages: %s; load %s\n",
		off.rate(), off.rate()/float64(o.nodes), off.msgs, off.load)
	fmt.Printf("  %3d consoles enabled, idle:   %8.1f B/s on the link (%6.1f B/s per node); console messages: %s; load %s\n",
		o.nodes, on.rate(), on.rate()/float64(o.nodes), on.msgs, on.load)
	fmt.Printf("  cost of an idle enabled console: %.3f KiB/s of WAN (the difference per console; target ≤ 1 KiB/s); absolute %.3f KiB/s per node\n",
		kib((on.rate()-off.rate())/float64(o.nodes)), kib(on.rate()/float64(o.nodes)))
	fmt.Printf("\nKeystroke round trip (WebSocket → site → console echo → WebSocket), %d keys, %s link (target ≤ 600 ms):\n", o.keys, rtt.Round(time.Millisecond))
	fmt.Printf("  other consoles idle:      %s; load %s\n", keysIdle, keysIdleLoad)
	if kerr != nil {
		fmt.Printf("  every console printing:   FAILED: %v; load %s\n", kerr, keysBusyLoad)
	} else {
		fmt.Printf("  every console printing:   %s; load %s\n", keysBusy, keysBusyLoad)
	}
	fmt.Printf("\nConsoles printing `ticks` (a line every 0.2 s each), as the coordinator's WebSockets got them:\n")
	fmt.Printf("  before the step batch: %s\n  after it:              %s\n", rates, rates2)
	fmt.Printf("\nStep results: manual clean of %d nodes at once, %d in-band steps of %s each in the simulated ramdisk (ramdisk boot 2 s), results of steps and BMC commands (target: no delay from the consoles):\n", o.nodes, o.steps, o.stepWait)
	fmt.Printf("  no console open:        %s\n", quiet)
	if berr != nil {
		fmt.Printf("  %3d consoles printing: FAILED: %v\n", o.nodes, berr)
	} else {
		fmt.Printf("  %3d consoles printing: %s\n", o.nodes, busy)
	}
	warn, errs, top := loadrig.LogLevels(b.co.LogFile)
	fmt.Printf("\ncoordinator log: %d WARN, %d ERROR %s\n", warn, errs, top)
	if kerr != nil {
		return kerr
	}
	return berr
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

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

// startAgent runs the edge agent in the namespace with the simulated
// nodes and waits until the coordinator lists the site online.
func (b *bench) startAgent(ctx context.Context, bin, tmp string, creds agent.Credentials) error {
	credFile := filepath.Join(tmp, "site.json")
	cb, _ := json.Marshal(creds)
	if err := os.WriteFile(credFile, cb, 0o600); err != nil {
		return err
	}
	b.alog = filepath.Join(tmp, "agent.log")
	lf, err := os.Create(b.alog)
	if err != nil {
		return err
	}
	cmd := b.w.command(bin, "--credentials-file", credFile, "--state-dir", filepath.Join(tmp, "agent-state"),
		"--simulate", strconv.Itoa(b.o.nodes), "--bmc-delay", "50ms", "--heartbeat", "5s",
		"--boot-delay", "2s", "--step-duration", b.o.stepWait.String(),
		// Its metrics on the site's address (the link's far end), for the
		// uplink's times of each step batch.
		"--metrics-listen", net.JoinHostPort(b.w.siteIP, "9101"), "--metrics-listen-any")
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return fmt.Errorf("start the edge agent: %w", err)
	}
	b.agent = cmd
	deadline := time.Now().Add(60 * time.Second)
	for {
		var l struct {
			Sites []struct {
				Name   string `json:"name"`
				Online bool   `json:"online"`
			} `json:"sites"`
		}
		if b.api.Do(ctx, "GET", "/v1/sites", nil, &l) == nil {
			for _, s := range l.Sites {
				if s.Name == site && s.Online {
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return errors.New("the site did not come online within 60 s of starting the edge agent")
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(200 * time.Millisecond)
	}
}

type nodeRow struct {
	UUID      string `json:"uuid"`
	Name      string `json:"name"`
	State     string `json:"provision_state"`
	LastError string `json:"last_error"`
}

func (b *bench) list(ctx context.Context) (map[string]nodeRow, error) {
	var l struct {
		Nodes []nodeRow `json:"nodes"`
	}
	if err := b.api.Do(ctx, "GET", "/v1/nodes?fields=uuid,name,provision_state,last_error&limit=1000", nil, &l); err != nil {
		return nil, err
	}
	m := map[string]nodeRow{}
	for _, n := range l.Nodes {
		m[n.UUID] = n
	}
	return m, nil
}

// awaitState polls until every node is in state and returns when each
// got there (first poll that saw it); a node that fails fails the wait.
func (b *bench) awaitState(ctx context.Context, state string, within time.Duration) (map[string]time.Time, error) {
	at := map[string]time.Time{}
	deadline := time.Now().Add(within)
	for len(at) < len(b.ids) {
		m, err := b.list(ctx)
		if err != nil {
			return nil, err
		}
		now := time.Now()
		for _, id := range b.ids {
			n := m[id]
			if _, ok := at[id]; ok {
				continue
			}
			if n.State == state {
				at[id] = now
			} else if strings.HasSuffix(n.State, "failed") || n.State == "error" {
				return nil, fmt.Errorf("node %s went to %s: %s", n.Name, n.State, n.LastError)
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%d of %d nodes in %s after %s", len(at), len(b.ids), state, within)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		time.Sleep(100 * time.Millisecond)
	}
	return at, nil
}

// enrol creates the nodes with console_interface fake and manages them.
func (b *bench) enrol(ctx context.Context) error {
	b.ids = make([]string, b.o.nodes)
	err := loadrig.ForEach(ctx, 8, b.o.nodes, func(ctx context.Context, i int) error {
		var n nodeRow
		body := map[string]any{"name": fmt.Sprintf("c%03d", i), "driver": "fake", "conductor_group": site}
		if err := b.api.Do(ctx, "POST", "/v1/nodes", body, &n); err != nil {
			return err
		}
		b.ids[i] = n.UUID
		return b.api.Do(ctx, "PATCH", "/v1/nodes/"+n.UUID, []map[string]any{{"op": "replace", "path": "/console_interface", "value": "fake"}}, nil)
	})
	if err != nil {
		return fmt.Errorf("create the nodes: %w", err)
	}
	for i, id := range b.ids {
		b.names[id] = fmt.Sprintf("c%03d", i)
	}
	if err := loadrig.ForEach(ctx, 8, len(b.ids), func(ctx context.Context, i int) error {
		return loadrig.Retrying(ctx, func() error {
			return b.api.Do(ctx, "PUT", "/v1/nodes/"+b.ids[i]+"/states/provision", map[string]string{"target": "manage"}, nil)
		})
	}); err != nil {
		return fmt.Errorf("manage: %w", err)
	}
	_, err = b.awaitState(ctx, "manageable", 5*time.Minute)
	return err
}

// batch is the step results of one manual clean of every node.
type batch struct {
	results    []time.Duration // each result: sent at the site → at the coordinator's broker
	cleans     []time.Duration // each node: verb → manageable (polled every 100 ms)
	wall, load string
	// uplink is the agent's bmedge_agent_uplink_seconds over the batch:
	// where the site's publishes spent their time.
	uplink string
}

func pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(p*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func ms(d time.Duration) string { return fmt.Sprintf("%d ms", d.Milliseconds()) }

func (r batch) String() string {
	return fmt.Sprintf("%d results, result p50 %s p95 %s max %s; clean per node p50 %s p95 %s max %s; batch %s; load %s\n      the site's publishes: %s",
		len(r.results), ms(pct(r.results, .5)), ms(pct(r.results, .95)), ms(pct(r.results, 1)),
		ms(pct(r.cleans, .5)), ms(pct(r.cleans, .95)), ms(pct(r.cleans, 1)), r.wall, r.load, r.uplink)
}

// uplinkHist is the agent's bmedge_agent_uplink_seconds histogram now:
// for each stage, the cumulative count of each bucket's upper bound.
type uplinkHist map[string]map[float64]float64

func (b *bench) uplinkHist(ctx context.Context) (uplinkHist, error) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(rctx, "GET", "http://"+net.JoinHostPort(b.w.siteIP, "9101")+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, err
	}
	return parseUplinkHist(body)
}

// parseUplinkHist reads bmedge_agent_uplink_seconds out of an agent's
// metrics (Prometheus text format).
func parseUplinkHist(body []byte) (uplinkHist, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("the agent's metrics: %w", err)
	}
	h := uplinkHist{}
	for _, m := range fams["bmedge_agent_uplink_seconds"].GetMetric() {
		stage := ""
		for _, l := range m.GetLabel() {
			if l.GetName() == "stage" {
				stage = l.GetValue()
			}
		}
		hist := m.GetHistogram()
		if stage == "" || hist == nil {
			continue
		}
		h[stage] = map[float64]float64{math.Inf(1): float64(hist.GetSampleCount())}
		for _, b := range hist.GetBucket() {
			h[stage][b.GetUpperBound()] = float64(b.GetCumulativeCount())
		}
	}
	if len(h) == 0 {
		return nil, errors.New("no bmedge_agent_uplink_seconds in the agent's metrics")
	}
	return h, nil
}

// since says, per stage, how many publishes the histogram gained since
// before, and the bucket bounds of their p50 and p95 and the share over
// 250 ms.
func (h uplinkHist) since(before uplinkHist) string {
	var parts []string
	for _, stage := range []string{"waiting", "acknowledged"} {
		var bounds []float64
		for b := range h[stage] {
			bounds = append(bounds, b)
		}
		sort.Float64s(bounds)
		if len(bounds) == 0 {
			continue
		}
		cum := func(b float64) float64 { return h[stage][b] - before[stage][b] }
		total := cum(bounds[len(bounds)-1])
		if total == 0 {
			parts = append(parts, stage+" none")
			continue
		}
		q := func(p float64) string {
			for _, b := range bounds {
				if cum(b) >= p*total {
					if math.IsInf(b, 1) {
						return "> the last bucket"
					}
					return fmt.Sprintf("≤ %g s", b)
				}
			}
			return "?"
		}
		over := total - cum(0.25)
		parts = append(parts, fmt.Sprintf("%s: %.0f, p50 %s, p95 %s, %.1f %% over 0.25 s", stage, total, q(.5), q(.95), 100*over/total))
	}
	return strings.Join(parts, "; ")
}

// stepBatch runs a manual clean (-steps in-band steps in the simulated
// ramdisk, each its own result; the boot and power-off around them are
// BMC commands with results of their own) of every node at once and
// times its results.
func (b *bench) stepBatch(ctx context.Context) (batch, error) {
	steps := make([]map[string]any, b.o.steps)
	for i := range steps {
		steps[i] = map[string]any{"interface": "deploy", "step": "erase_devices_metadata"}
	}
	body := map[string]any{"target": "clean", "clean_steps": steps}
	before, uerr := b.uplinkHist(ctx)
	b.obs.startResults()
	start := time.Now()
	sent := make([]time.Time, len(b.ids))
	if err := loadrig.ForEach(ctx, 8, len(b.ids), func(ctx context.Context, i int) error {
		return loadrig.Retrying(ctx, func() error {
			sent[i] = time.Now()
			return b.api.Do(ctx, "PUT", "/v1/nodes/"+b.ids[i]+"/states/provision", body, nil)
		})
	}); err != nil {
		return batch{}, fmt.Errorf("clean: %w", err)
	}
	at, err := b.awaitState(ctx, "manageable", 10*time.Minute)
	r := batch{wall: fmt.Sprintf("%.1f s", time.Since(start).Seconds()), load: loadavg()}
	// Results may still arrive a moment after the node's state moved
	// (the last one moved it).
	sleepCtx(ctx, 2*time.Second)
	r.results = b.obs.stopResults()
	if after, aerr := b.uplinkHist(ctx); uerr == nil && aerr == nil {
		r.uplink = after.since(before)
	} else {
		r.uplink = fmt.Sprintf("not read: %v", errors.Join(uerr, aerr))
	}
	if err != nil {
		return r, err
	}
	for i, id := range b.ids {
		r.cleans = append(r.cleans, at[id].Sub(sent[i]))
	}
	if want := len(b.ids) * b.o.steps; len(r.results) < want {
		return r, fmt.Errorf("the observer saw %d step results, want at least %d", len(r.results), want)
	}
	return r, nil
}

// window is the WAN measured over one idle window.
type window struct {
	bytes int64
	d     time.Duration
	msgs  string
	load  string
}

func (w window) rate() float64 { return float64(w.bytes) / w.d.Seconds() }

func (b *bench) idleWindow(ctx context.Context) window {
	// What the last phase set off (acks, presence) settles first.
	sleepCtx(ctx, 5*time.Second)
	b.obs.startCount()
	b0, t0 := b.w.bytes(), time.Now()
	sleepCtx(ctx, b.o.idle)
	w := window{bytes: b.w.bytes() - b0, d: time.Since(t0), load: loadavg()}
	w.msgs = b.obs.stopCount()
	return w
}

func (b *bench) setConsoles(ctx context.Context, on bool) error {
	return loadrig.ForEach(ctx, 8, len(b.ids), func(ctx context.Context, i int) error {
		return loadrig.Retrying(ctx, func() error {
			return b.api.Do(ctx, "PUT", "/v1/nodes/"+b.ids[i]+"/states/console", map[string]bool{"enabled": on}, nil)
		})
	})
}

func (b *bench) consoleLog(ctx context.Context, id string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", b.co.APIURL+"/v1/nodes/"+id+"/console/log", nil)
	if err != nil {
		return "", err
	}
	resp, err := b.api.HC.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return "", fmt.Errorf("GET console/log: %d %s", resp.StatusCode, body)
	}
	return string(body), err
}

// awaitPrompts waits until every console's boot log and login prompt
// are at the coordinator.
func (b *bench) awaitPrompts(ctx context.Context) error {
	start := time.Now()
	deadline := start.Add(10 * time.Minute)
	for {
		missing := 0
		for _, id := range b.ids {
			l, err := b.consoleLog(ctx, id)
			if err != nil {
				return err
			}
			if !strings.Contains(l, " login: ") {
				missing++
			}
		}
		if missing == 0 {
			fmt.Fprintf(os.Stderr, "bench-console: every console's boot log and login prompt at the coordinator %.1f s after enabling\n", time.Since(start).Seconds())
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d consoles' login prompts not at the coordinator 10 minutes after enabling", missing, len(b.ids))
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(time.Second)
	}
}

// wsConsole is a WebSocket on a node's console that keeps all it got.
type wsConsole struct {
	c    *websocket.Conn
	mu   sync.Mutex
	buf  []byte
	seen chan struct{}
	err  error
}

func (b *bench) dial(ctx context.Context, id string) (*wsConsole, error) {
	url := "ws" + strings.TrimPrefix(b.co.APIURL, "http") + "/v1/nodes/" + id + "/console"
	c, resp, err := websocket.DefaultDialer.DialContext(ctx, url, nil)
	if err != nil {
		if resp != nil {
			return nil, fmt.Errorf("console WebSocket of %s: %v (%s)", b.names[id], err, resp.Status)
		}
		return nil, fmt.Errorf("console WebSocket of %s: %v", b.names[id], err)
	}
	w := &wsConsole{c: c, seen: make(chan struct{}, 1)}
	go func() {
		for {
			_, p, err := c.ReadMessage()
			w.mu.Lock()
			if err != nil {
				w.err = err
			} else {
				w.buf = append(w.buf, p...)
			}
			w.mu.Unlock()
			select {
			case w.seen <- struct{}{}:
			default:
			}
			if err != nil {
				return
			}
		}
	}()
	return w, nil
}

func (w *wsConsole) close() { w.c.Close() }

func (w *wsConsole) size() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.buf)
}

func (w *wsConsole) count(s string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Count(string(w.buf), s)
}

// await waits until what came after offset from contains s; it returns
// the offset after it.
func (w *wsConsole) await(ctx context.Context, from int, s string, within time.Duration) (int, error) {
	t := time.NewTimer(within)
	defer t.Stop()
	for {
		w.mu.Lock()
		i := strings.Index(string(w.buf[min(from, len(w.buf)):]), s)
		n, err := len(w.buf), w.err
		w.mu.Unlock()
		if i >= 0 {
			return from + i + len(s), nil
		}
		if err != nil {
			return n, fmt.Errorf("the WebSocket ended waiting for %q: %v", s, err)
		}
		select {
		case <-w.seen:
		case <-t.C:
			return n, fmt.Errorf("no %q on the console within %s", s, within)
		case <-ctx.Done():
			return n, ctx.Err()
		}
	}
}

func (w *wsConsole) send(s string) error {
	return w.c.WriteMessage(websocket.BinaryMessage, []byte(s))
}

// keys is the keystroke round trips of one measurement.
type keys []time.Duration

func (k keys) String() string {
	return fmt.Sprintf("p50 %s, p95 %s, max %s (%d keys)", ms(pct(k, .5)), ms(pct(k, .95)), ms(pct(k, 1)), len(k))
}

// keystrokes types n letters one at a time, each once the echo of the
// one before is back, and times each. The letters are none of those of
// the simulated console's `ticks` lines ("tick N of M"), so a line of
// ticks is never taken for an echo.
func keystrokes(ctx context.Context, w *wsConsole, n int) (keys, error) {
	const letters = "abdeghjlmnpqrsuvwxyz"
	var out keys
	for i := range n {
		c := string(letters[i%len(letters)])
		from := w.size()
		t0 := time.Now()
		if err := w.send(c); err != nil {
			return out, err
		}
		if _, err := w.await(ctx, from, c, 2*time.Minute); err != nil {
			return out, fmt.Errorf("keystroke %d: %w", i+1, err)
		}
		out = append(out, time.Since(t0))
	}
	// The typed line is left: ^C clears it.
	return out, w.send("\x03")
}

// startTicks opens a WebSocket on every console (the first is open),
// logs in and starts `ticks 10000` on each.
func (b *bench) startTicks(ctx context.Context, wss []*wsConsole) error {
	return loadrig.ForEach(ctx, len(wss), len(wss), func(ctx context.Context, i int) error {
		var err error
		if wss[i] == nil {
			if wss[i], err = b.dial(ctx, b.ids[i]); err != nil {
				return err
			}
		}
		w := wss[i]
		const within = 10 * time.Minute
		at := 0
		if i != 0 {
			if at, err = w.await(ctx, 0, " login: ", within); err != nil {
				return fmt.Errorf("%s: %w", b.names[b.ids[i]], err)
			}
		} else {
			// The first console's login prompt is back after the ^C.
			at = w.size()
			if err := w.send("\r"); err != nil {
				return err
			}
			if at, err = w.await(ctx, at, " login: ", within); err != nil {
				return fmt.Errorf("%s: %w", b.names[b.ids[i]], err)
			}
		}
		for _, step := range []struct{ typed, want string }{{"root\r", "Password: "}, {"bench\r", ":~# "}, {"ticks 10000\r", "tick 1 of 10000"}} {
			if err := w.send(step.typed); err != nil {
				return err
			}
			if at, err = w.await(ctx, at, step.want, within); err != nil {
				return fmt.Errorf("%s: %w", b.names[b.ids[i]], err)
			}
		}
		return nil
	})
}

// streamRates counts the tick lines each WebSocket gets over d: how
// many consoles got any, and the lines per second of the slowest and of
// all (each console prints 5 a second).
func (b *bench) streamRates(wss []*wsConsole, d time.Duration) string {
	before := make([]int, len(wss))
	for i, w := range wss {
		before[i] = w.count("\r\ntick ")
	}
	time.Sleep(d)
	got, total, slowest := 0, 0, -1
	for i, w := range wss {
		n := w.count("\r\ntick ") - before[i]
		total += n
		if n > 0 {
			got++
		}
		if slowest < 0 || n < slowest {
			slowest = n
		}
	}
	return fmt.Sprintf("%d of %d consoles' lines arrived in %s; %.1f lines/s per console on average (printed: 5), slowest console %.1f lines/s; load %s",
		got, len(wss), d, float64(total)/d.Seconds()/float64(len(wss)), float64(slowest)/d.Seconds(), loadavg())
}

// observer is a second client of the site on the coordinator's broker
// (on the host: its traffic does not cross the link) that sees what the
// site sends and the coordinator sends it: step results (their time
// from the site to the broker) and console messages.
type observer struct {
	link     *mqttlink.Link
	mu       sync.Mutex
	results  map[string]time.Duration
	counting bool
	counts   map[string]*[2]int64
}

func observe(ctx context.Context, creds agent.Credentials) (*observer, error) {
	o := &observer{results: nil, counts: map[string]*[2]int64{}}
	lg := slog.New(slog.DiscardHandler)
	settled := make(chan struct{})
	var once sync.Once
	link, err := mqttlink.Dial(ctx, mqttlink.Config{URL: creds.BrokerURL, ClientID: "edge-" + site + ".benchconsole",
		Username: creds.Username, Password: creds.Password, CleanStart: true,
		Subscriptions: []string{protocol.TopicPrefix + "/site/" + site + "/#"}, Logger: lg,
		Handler: func(topic string, payload []byte) {
			now := time.Now()
			if topic == protocol.SitePresenceTopic(site) {
				once.Do(func() { close(settled) })
			}
			o.mu.Lock()
			defer o.mu.Unlock()
			if o.counting && strings.Contains(topic, "/console/") {
				leaf := topic[strings.LastIndex(topic, "/console/")+1:]
				c := o.counts[leaf]
				if c == nil {
					c = &[2]int64{}
					o.counts[leaf] = c
				}
				c[0]++
				c[1] += int64(len(payload))
			}
			if o.results == nil || !strings.HasSuffix(topic, "/evt") || strings.Contains(topic, "/console/") {
				return
			}
			recs := []protocol.BundleRecord{{Topic: topic, Payload: payload}}
			if protocol.IsBundle(payload) {
				var err error
				if recs, err = protocol.DecodeBundle(site, payload); err != nil {
					return
				}
			}
			for _, r := range recs {
				m, err := protocol.Decode(r.Payload)
				if err != nil || m.Kind != protocol.KindResult {
					continue
				}
				if _, dup := o.results[m.ID]; !dup {
					o.results[m.ID] = now.Sub(m.Sent)
				}
			}
		}})
	if err != nil {
		return nil, err
	}
	o.link = link
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := link.AwaitUp(wctx); err != nil {
		link.Close()
		return nil, err
	}
	select {
	case <-settled:
	case <-wctx.Done():
		link.Close()
		return nil, errors.New("the observer got no retained presence of the site within 30 s")
	}
	return o, nil
}

func (o *observer) startResults() {
	o.mu.Lock()
	o.results = map[string]time.Duration{}
	o.mu.Unlock()
}

func (o *observer) stopResults() []time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	var d []time.Duration
	for _, v := range o.results {
		d = append(d, v)
	}
	o.results = nil
	return d
}

func (o *observer) startCount() {
	o.mu.Lock()
	o.counting, o.counts = true, map[string]*[2]int64{}
	o.mu.Unlock()
}

func (o *observer) stopCount() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.counting = false
	if len(o.counts) == 0 {
		return "none"
	}
	var parts []string
	for k, v := range o.counts {
		parts = append(parts, fmt.Sprintf("%s %d (%d B)", k, v[0], v[1]))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}
