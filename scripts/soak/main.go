// Command soak runs K deploy/undeploy cycles of N simulated nodes against
// a real coordinator process (durable, encrypted Badger writes, embedded
// MQTT broker) and a real edge agent process with simulated nodes over
// real MQTT, and prints after each cycle the RSS and the size of the data
// folder of each (the agent's state folder holds its durable outbox, also
// Badger), to show whether either keeps growing. They are measured at
// rest: after -settle, once both folders' sizes have stopped changing
// (each store's own flush and GC after a burst of writes); the peaks
// during the cycle are printed too.
//
//	go run ./scripts/soak -cycles 8 -nodes 1000
//	CYCLES=8 NODES=1000 make soak
//
// Target: after the last cycle, RSS and data folder of each within 1.25×
// of their values after cycle 2. Node history is capped at 40 entries (not the
// coordinator's default 300) so that it is full by cycle 2: growth up to
// the cap is by design, growth after it is what the soak looks for.
package main

import (
	"context"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/scripts/internal/loadrig"
)

const site = "soak"

type options struct {
	cycles      int
	nodes       int
	concurrency int
	settle      time.Duration
	stable      time.Duration
	settleMax   time.Duration
	stall       time.Duration
	tick        time.Duration
	histMax     int
	coordBin    string
	agentBin    string
	agentIdle   time.Duration
	cycleMin    time.Duration
	keep        bool
	inprocess   bool
	heapDir     string
	growth      float64
	// killEvery and stepDuration: -kill-agent-every, -step-duration.
	killEvery    time.Duration
	stepDuration time.Duration
	// killAfterPower: -kill-after-power.
	killAfterPower bool
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil && d >= 0 {
		return d
	}
	return def
}

func main() {
	var o options
	flag.IntVar(&o.cycles, "cycles", envInt("CYCLES", 8), "deploy/undeploy cycles (env CYCLES)")
	flag.IntVar(&o.nodes, "nodes", envInt("NODES", 1000), "simulated nodes (env NODES)")
	flag.IntVar(&o.concurrency, "concurrency", 8, "concurrent HTTP clients issuing verbs")
	flag.DurationVar(&o.settle, "settle", 5*time.Second, "pause after each cycle before measuring, so that the coordinator's background work after the cycle (its database flushes and collects about a second after writes stop) is in the numbers")
	flag.DurationVar(&o.stable, "stable", 2*time.Second, "after -settle, wait until the data folder's size has not changed for this long, then measure (at rest)")
	flag.DurationVar(&o.settleMax, "settle-max", 30*time.Second, "measure at the latest this long after the cycle ended, at rest or not (the table marks such a row with !)")
	flag.DurationVar(&o.stall, "stall", 60*time.Second, "fail a phase when no node moves for this long")
	flag.DurationVar(&o.tick, "tick", time.Second, "the coordinator's --tick")
	flag.IntVar(&o.histMax, "history-max-entries", 40, "the coordinator's --history-max-entries (0: its default, 300). A node gains 17 history entries a cycle (10 at setup), so 40 is reached in cycle 2 and what follows measures growth beyond the cap; at 300 the history grows, by design, until cycle 18")
	flag.StringVar(&o.coordBin, "coordinator", "", "coordinator binary to run (default: build ./coordinator/cmd/coordinator into a temp folder)")
	flag.BoolVar(&o.keep, "keep", false, "keep the temp folder (data dir, coordinator log)")
	flag.StringVar(&o.agentBin, "agent", "", "edge agent binary to run (default: build ./agent/cmd/agent into a temp folder)")
	flag.DurationVar(&o.agentIdle, "agent-idle", envDuration("AGENT_IDLE", 0), "after the last cycle, leave everything idle this long and measure once more (env AGENT_IDLE; 0: do not). The edge agent keeps each result 10 minutes after the coordinator's ack, to answer a late duplicate of its command, so its state folder holds the results of every cycle of the last 10 minutes: with -agent-idle 11m the last row shows what is left once they are forgotten")
	flag.DurationVar(&o.cycleMin, "cycle-min", envDuration("CYCLE_MIN", 0), "make setup and each cycle last at least this long, idle after its measurement (env CYCLE_MIN; 0: no pause): cycles spread over time, as a real fleet's are, instead of back to back")
	flag.BoolVar(&o.inprocess, "inprocess", false, "run the coordinator and the edge agent inside this process (for -heap-profiles; RSS is then of all three)")
	flag.StringVar(&o.heapDir, "heap-profiles", "", "write a heap profile of this process into this folder after each cycle (with -inprocess: the coordinator's too)")
	flag.Float64Var(&o.growth, "max-growth", 1.25, "target: RSS and data folder after the last cycle at most this many times their value after cycle 2")
	flag.DurationVar(&o.killEvery, "kill-agent-every", 0, "kill the edge agent with SIGKILL this often while the cycles run and start it again on the same state folder (0: never; not with -inprocess): every node must still end each cycle in its target state, with its in-flight ramdisk steps and results carried over the restarts")
	flag.DurationVar(&o.stepDuration, "step-duration", 0, "how long each simulated in-band step takes (the agent's --step-duration); with -kill-agent-every, a few seconds make the kills land in the middle of steps")
	flag.BoolVar(&o.killAfterPower, "kill-after-power", false, "with -kill-agent-every: after each interval, wait until the agent has just run a BMC power command (its metrics, read every few ms) and kill it then, so that kills land between a boot's power action and keeping its result")
	flag.Parse()
	if o.killAfterPower && o.killEvery <= 0 {
		fmt.Fprintln(os.Stderr, "soak: -kill-after-power goes with -kill-agent-every D")
		os.Exit(2)
	}
	if o.killEvery > 0 && o.inprocess {
		fmt.Fprintln(os.Stderr, "soak: -kill-agent-every needs the agent as a process of its own; drop -inprocess")
		os.Exit(2)
	}
	if o.cycles < 1 || o.nodes < 1 || o.concurrency < 1 {
		fmt.Fprintln(os.Stderr, "soak: -cycles, -nodes and -concurrency must be at least 1")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	ok, err := run(ctx, o)
	interrupted := ctx.Err() != nil
	stop()
	switch {
	case err != nil && interrupted:
		fmt.Fprintln(os.Stderr, "soak: interrupted; coordinator stopped and temp folder removed")
		os.Exit(1)
	case err != nil:
		fmt.Fprintf(os.Stderr, "soak: FAILED: %v\n", err)
		os.Exit(1)
	case !ok:
		os.Exit(1)
	}
}

// sample is what is measured after a cycle, and the peaks seen during it.
type sample struct {
	cycle                int
	took                 time.Duration
	rest                 time.Duration // from the end of the cycle to the measurement
	restless             bool          // the data folder still changed at -settle-max
	rss, anon, file      int64         // kB
	du                   int64         // bytes
	byKind               map[string]int64
	peakRSS, peakDU      int64 // kB, bytes: highest seen while the cycle ran
	coordCPU, selfRSSKB  int64
	historyOfFirstNode   int
	historyOfFirstNodeOK bool
	// The edge agent's: RSS (kB) and state folder (bytes) at rest, by
	// kind, their peaks during the cycle, its CPU time (ms).
	agentRSS, agentDU         int64
	agentByKind               map[string]int64
	peakAgentRSS, peakAgentDU int64
	agentCPU                  int64
	idle                      bool // measured after -agent-idle, not after a cycle
}

// peaks samples the RSS and the data folder's size of the coordinator
// and of the edge agent every 250 ms until stop is called, and returns
// the highest of each.
func (s *soak) peaks() (stop func(sm *sample)) {
	done := make(chan struct{})
	var rss, du, arss, adu int64
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for {
			rss = max(rss, loadrig.ProcStatusKB(s.co.PID, "VmRSS"))
			d, _ := diskUsage(s.co.DataDir)
			du = max(du, d)
			arss = max(arss, loadrig.ProcStatusKB(s.edge.Pid(), "VmRSS"))
			d, _ = diskUsage(s.edge.StateDir)
			adu = max(adu, d)
			select {
			case <-done:
				return
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	return func(sm *sample) {
		close(done)
		<-finished
		sm.peakRSS, sm.peakDU = max(rss, sm.rss), max(du, sm.du)
		sm.peakAgentRSS, sm.peakAgentDU = max(arss, sm.agentRSS), max(adu, sm.agentDU)
	}
}

type soak struct {
	o     options
	api   *loadrig.API
	co    *loadrig.Coord
	edge  *edge
	uuids []string
	// phases counts the verbs sent to every node whose boots were
	// counted.
	phases int
}

func run(ctx context.Context, o options) (ok bool, err error) {
	tmp, err := os.MkdirTemp("", "bmsoak-")
	if err != nil {
		return false, err
	}
	var co *loadrig.Coord
	defer func() { loadrig.Finish("soak", co, tmp, o.keep, err != nil && ctx.Err() == nil) }()
	settings := loadrig.Settings{Tick: o.tick, HistoryMaxEntries: o.histMax}
	if o.inprocess {
		co, err = loadrig.StartInProcess(ctx, tmp, settings)
	} else {
		bin := o.coordBin
		if bin == "" {
			fmt.Fprintln(os.Stderr, "soak: building the coordinator…")
			if bin, err = loadrig.BuildCoordinator(ctx, tmp); err != nil {
				return false, err
			}
		}
		co, err = loadrig.StartProcess(ctx, bin, tmp, settings)
	}
	if err != nil {
		return false, err
	}
	s := &soak{o: o, co: co, api: loadrig.NewAPI(co.APIURL, o.concurrency)}

	var creds agent.Credentials
	if err := s.api.Do(ctx, "POST", "/v1/sites", map[string]string{"name": site}, &creds); err != nil {
		return false, fmt.Errorf("register site: %w", err)
	}
	s.edge, err = startEdge(ctx, o, tmp, creds, s.api)
	// Stopped before the coordinator (deferred after it).
	defer func() {
		if err != nil && ctx.Err() == nil && s.edge != nil && !s.edge.inproc {
			fmt.Fprintf(os.Stderr, "soak: edge agent log tail:\n%s\n", loadrig.Tail(s.edge.LogFile, 10))
		}
		s.edge.Stop()
	}()
	if err != nil {
		return false, err
	}
	where := "separate processes"
	if o.inprocess {
		where = "both in this process: each RSS is of coordinator + agent + soak"
	}
	fmt.Printf("soak: %d cycles of %d nodes, coordinator pid %d, edge agent pid %d (%s), data %s, agent state %s, GOMAXPROCS %d\n",
		o.cycles, o.nodes, co.PID, s.edge.PID, where, co.DataDir, s.edge.StateDir, runtime.GOMAXPROCS(0))

	start := time.Now()
	if err := s.setup(ctx); err != nil {
		return false, err
	}
	fmt.Printf("soak: %d nodes created, managed and provided in %.1f s\n", o.nodes, time.Since(start).Seconds())
	killErr := make(chan error, 1)
	if o.killEvery > 0 {
		kctx, stopKills := context.WithCancel(ctx)
		defer stopKills()
		go func() {
			killErr <- s.edge.KillLoop(kctx, o.killEvery, o.killAfterPower, s.api, func() string { return s.states(kctx) })
		}()
		defer func() {
			stopKills()
			if kerr := <-killErr; kerr != nil && err == nil {
				err = kerr
			}
			fmt.Printf("soak: the edge agent was killed with SIGKILL %d times (every %s; right after a power command: %d) and started again on its state folder\n",
				s.edge.Kills, o.killEvery, s.edge.AfterPower)
		}()
	}
	base := s.measure(0, 0)
	printHeader()
	printSample(base)
	var samples []sample
	t0 := start
	for c := 1; c <= o.cycles; c++ {
		if err := s.pause(ctx, t0); err != nil {
			return false, err
		}
		t0 = time.Now()
		stopPeaks := s.peaks()
		if err := s.setImage(ctx); err != nil {
			return false, fmt.Errorf("cycle %d set image: %w", c, err)
		}
		if err := s.verb(ctx, "active", fsm.Active); err != nil {
			return false, fmt.Errorf("cycle %d deploy: %w", c, err)
		}
		if err := s.verb(ctx, "deleted", fsm.Available); err != nil {
			return false, fmt.Errorf("cycle %d undeploy: %w", c, err)
		}
		took := time.Since(t0)
		rest, restless, err := s.atRest(ctx)
		if err != nil {
			return false, err
		}
		if o.heapDir != "" {
			if err := writeHeap(filepath.Join(o.heapDir, fmt.Sprintf("heap-cycle%02d.pprof", c))); err != nil {
				return false, err
			}
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			fmt.Printf("       Go heap of this process after GC: live %.1f MiB, in use %.1f MiB, idle not returned %.1f MiB, runtime total %.1f MiB\n",
				mib(int64(ms.HeapAlloc)), mib(int64(ms.HeapInuse)), mib(int64(ms.HeapIdle-ms.HeapReleased)), mib(int64(ms.Sys)))
		}
		sm := s.measure(c, took)
		sm.rest, sm.restless = rest, restless
		stopPeaks(&sm)
		samples = append(samples, sm)
		printSample(sm)
	}
	if s.phases > 0 {
		fmt.Printf("soak: ramdisk boots counted in the agent's log in each of %d phases: no node booted more than once in any\n", s.phases)
	}
	var idle *sample
	if o.agentIdle > 0 {
		stopPeaks := s.peaks()
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(o.agentIdle):
		}
		sm := s.measure(o.cycles, 0)
		sm.idle, sm.rest = true, o.agentIdle
		stopPeaks(&sm)
		idle = &sm
		printSample(sm)
	}
	return s.report(base, samples, idle), nil
}

// pause waits until -cycle-min after since.
func (s *soak) pause(ctx context.Context, since time.Time) error {
	wait := time.Until(since.Add(s.o.cycleMin))
	if s.o.cycleMin <= 0 || wait <= 0 {
		return nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(wait):
		return nil
	}
}

func writeHeap(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	runtime.GC()
	return pprof.WriteHeapProfile(f)
}

// atRest waits -settle, then until the sizes of the coordinator's data
// folder and the edge agent's state folder have not changed for -stable
// (sampled every 250 ms), or until -settle-max after the end of the
// cycle, and returns how long it waited and whether a folder was still
// changing. The soak does nothing to either meanwhile: what it waits for
// is each store's own work after a burst of writes (memtable flush,
// compaction, value-log GC), so the sizes it then measures are what the
// disks hold while both are idle.
func (s *soak) atRest(ctx context.Context) (waited time.Duration, restless bool, err error) {
	start := time.Now()
	select {
	case <-ctx.Done():
		return 0, false, ctx.Err()
	case <-time.After(s.o.settle):
	}
	sizes := func() [2]int64 {
		a, _ := diskUsage(s.co.DataDir)
		b, _ := diskUsage(s.edge.StateDir)
		return [2]int64{a, b}
	}
	last := sizes()
	since := time.Now()
	for time.Since(since) < s.o.stable {
		if time.Since(start) >= s.o.settleMax {
			return time.Since(start), true, nil
		}
		select {
		case <-ctx.Done():
			return 0, false, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
		if now := sizes(); now != last {
			last, since = now, time.Now()
		}
	}
	return time.Since(start), false, nil
}

// setup creates the nodes and brings them to available.
func (s *soak) setup(ctx context.Context) error {
	s.uuids = make([]string, s.o.nodes)
	err := loadrig.ForEach(ctx, s.o.concurrency, s.o.nodes, func(ctx context.Context, i int) error {
		var n struct {
			UUID string `json:"uuid"`
		}
		body := map[string]any{"name": fmt.Sprintf("soak-%06d", i), "driver": "fake", "conductor_group": site,
			"driver_info": map[string]any{"fake_password": fmt.Sprintf("soak-password-%06d", i)}}
		if err := loadrig.Retrying(ctx, func() error { return s.api.Do(ctx, "POST", "/v1/nodes", body, &n) }); err != nil {
			return fmt.Errorf("create node %d: %w", i, err)
		}
		s.uuids[i] = n.UUID
		return nil
	})
	if err != nil {
		return err
	}
	if err := s.verb(ctx, "manage", fsm.Manageable); err != nil {
		return fmt.Errorf("manage: %w", err)
	}
	if err := s.verb(ctx, "provide", fsm.Available); err != nil {
		return fmt.Errorf("provide: %w", err)
	}
	return nil
}

// setImage gives every node an image to deploy (undeploy clears
// instance_info, as in Ironic).
func (s *soak) setImage(ctx context.Context) error {
	patch := []map[string]any{{"op": "add", "path": "/instance_info/image_source", "value": "http://127.0.0.1:1/soak.img"}}
	return loadrig.ForEach(ctx, s.o.concurrency, s.o.nodes, func(ctx context.Context, i int) error {
		return loadrig.Retrying(ctx, func() error { return s.api.Do(ctx, "PATCH", "/v1/nodes/"+s.uuids[i], patch, nil) })
	})
}

// verb sends target to every node and waits until all are in want;
// then (the agent a process of its own) it counts each node's ramdisk
// boots in the phase and fails when one booted more than once.
func (s *soak) verb(ctx context.Context, target string, want fsm.State) error {
	offset := int64(-1)
	if !s.edge.inproc {
		offset = s.edge.logOffset()
	}
	verr := s.verbOnly(ctx, target, want)
	if offset < 0 || ctx.Err() != nil {
		return verr
	}
	boots, err := s.edge.bootsSince(offset)
	if err != nil {
		return fmt.Errorf("count the ramdisk boots of %s in the agent's log: %w", target, err)
	}
	s.phases++
	c := checkBoots(fmt.Sprintf("phase %d (%s)", s.phases, target), s.uuids, boots)
	fmt.Printf("soak: %s\n", c)
	if verr != nil {
		// The phase failed (or stalled): its double boots, if any, are
		// part of why.
		if len(c.twice) > 0 {
			return fmt.Errorf("%w; %v", verr, c.err(false))
		}
		return verr
	}
	return c.err(target != "manage")
}

func (s *soak) verbOnly(ctx context.Context, target string, want fsm.State) error {
	err := loadrig.ForEach(ctx, s.o.concurrency, s.o.nodes, func(ctx context.Context, i int) error {
		return loadrig.Retrying(ctx, func() error {
			err := s.api.Do(ctx, "PUT", "/v1/nodes/"+s.uuids[i]+"/states/provision", map[string]any{"target": target}, nil)
			if err != nil {
				return fmt.Errorf("%s on node %s: %w", target, s.uuids[i], err)
			}
			return nil
		})
	})
	if err != nil {
		return err
	}
	return s.await(ctx, want)
}

// states is how many nodes are in each state, for the kill reports.
func (s *soak) states(ctx context.Context) string {
	var l listed
	q := fmt.Sprintf("/v1/nodes?conductor_group=%s&fields=uuid,provision_state&limit=%d", site, s.o.nodes+1)
	if err := s.api.Do(ctx, "GET", q, nil, &l); err != nil {
		return err.Error()
	}
	hist := map[string]int{}
	for _, n := range l.Nodes {
		hist[n.State]++
	}
	return fmtHist(hist)
}

type listed struct {
	Nodes []struct {
		UUID      string  `json:"uuid"`
		State     string  `json:"provision_state"`
		LastError *string `json:"last_error"`
	} `json:"nodes"`
}

// await polls until every node is in want; it fails as soon as a node is
// in a failed state, or when no node moved for -stall.
func (s *soak) await(ctx context.Context, want fsm.State) error {
	last, lastMove := -1, time.Now()
	for {
		var l listed
		q := fmt.Sprintf("/v1/nodes?conductor_group=%s&fields=uuid,provision_state,last_error&limit=%d", site, s.o.nodes+1)
		if err := s.api.Do(ctx, "GET", q, nil, &l); err != nil {
			return err
		}
		done := 0
		hist := map[string]int{}
		for _, n := range l.Nodes {
			hist[n.State]++
			if n.State == string(want) {
				done++
			}
			if strings.HasSuffix(n.State, "failed") || n.State == "error" {
				e := ""
				if n.LastError != nil {
					e = *n.LastError
				}
				return fmt.Errorf("node %s in %q: %s (states: %s)", n.UUID, n.State, e, fmtHist(hist))
			}
		}
		if done >= s.o.nodes {
			return nil
		}
		if done != last {
			last, lastMove = done, time.Now()
		}
		if !s.co.Alive() {
			return fmt.Errorf("the coordinator exited (%s)", s.co.ExitStatus())
		}
		if !s.edge.Alive() {
			return fmt.Errorf("the edge agent exited (see its log %s)", s.edge.LogFile)
		}
		if time.Since(lastMove) > s.o.stall {
			return fmt.Errorf("no node moved for %s; %d of %d in %q; states: %s", s.o.stall, done, s.o.nodes, want, fmtHist(hist))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func fmtHist(h map[string]int) string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, h[k]))
	}
	return strings.Join(parts, " ")
}

// measure reads the RSS and the data folder's size of the coordinator and
// of the edge agent.
func (s *soak) measure(cycle int, took time.Duration) sample {
	sm := sample{cycle: cycle, took: took,
		rss:  loadrig.ProcStatusKB(s.co.PID, "VmRSS"),
		anon: loadrig.ProcStatusKB(s.co.PID, "RssAnon"),
		file: loadrig.ProcStatusKB(s.co.PID, "RssFile"),
	}
	sm.du, sm.byKind = diskUsage(s.co.DataDir)
	sm.selfRSSKB = loadrig.ProcStatusKB(os.Getpid(), "VmRSS")
	sm.agentRSS = loadrig.ProcStatusKB(s.edge.Pid(), "VmRSS")
	sm.agentDU, sm.agentByKind = diskUsage(s.edge.StateDir)
	sm.agentCPU = int64(loadrig.ProcCPU(s.edge.Pid()) / time.Millisecond)
	sm.coordCPU = int64(loadrig.ProcCPU(s.co.PID) / time.Millisecond)
	var h struct {
		History []map[string]any `json:"history"`
	}
	if len(s.uuids) > 0 && s.api.Do(context.Background(), "GET", "/v1/nodes/"+s.uuids[0]+"/history", nil, &h) == nil {
		sm.historyOfFirstNode, sm.historyOfFirstNodeOK = len(h.History), true
	}
	return sm
}

// diskUsage is what du counts (allocated blocks) for every file under
// dir, and the same by kind of file (Badger's value log, tables,
// memtables; the rest). Allocated, not apparent, size: Badger allocates
// its active files sparsely at their full size.
func diskUsage(dir string) (du int64, byKind map[string]int64) {
	byKind = map[string]int64{}
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		used := fi.Size()
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			used = st.Blocks * 512
		}
		du += used
		kind := "other"
		switch filepath.Ext(path) {
		case ".vlog":
			kind = "vlog"
		case ".sst":
			kind = "sst"
		case ".mem":
			kind = "mem"
		}
		byKind[kind] += used
		return nil
	})
	return du, byKind
}

func mib(b int64) float64   { return float64(b) / (1 << 20) }
func kbMiB(k int64) float64 { return float64(k) / 1024 }

func printHeader() {
	fmt.Printf("\n%-5s %7s %6s | %7s %7s %7s %8s | %7s %7s %7s %7s %7s %8s | %9s %7s\n",
		"cycle", "seconds", "rest", "RSS", "anon", "file", "peak RSS", "du", "vlog", "sst", "mem", "other", "peak du", "coord CPU", "history")
}

func cycleName(sm sample) string {
	switch {
	case sm.idle:
		return "idle"
	case sm.cycle == 0:
		return "setup"
	}
	return strconv.Itoa(sm.cycle)
}

// restOf is the rest column: the wait before measuring, ! when the
// folders still changed at -settle-max.
func restOf(sm sample) string {
	if sm.cycle == 0 {
		return "-"
	}
	if sm.idle {
		return fmt.Sprintf("%.0f", sm.rest.Seconds())
	}
	r := fmt.Sprintf("%.1f", sm.rest.Seconds())
	if sm.restless {
		r += "!"
	}
	return r
}

func printSample(sm sample) {
	hist := "-"
	if sm.historyOfFirstNodeOK {
		hist = strconv.Itoa(sm.historyOfFirstNode)
	}
	peakRSS, peakDU := "-", "-"
	if sm.cycle > 0 {
		peakRSS, peakDU = fmt.Sprintf("%.1f", kbMiB(sm.peakRSS)), fmt.Sprintf("%.1f", mib(sm.peakDU))
	}
	fmt.Printf("%-5s %7.1f %6s | %7.1f %7.1f %7.1f %8s | %7.1f %7.1f %7.1f %7.1f %7.1f %8s | %8.1fs %7s\n",
		cycleName(sm), sm.took.Seconds(), restOf(sm), kbMiB(sm.rss), kbMiB(sm.anon), kbMiB(sm.file), peakRSS, mib(sm.du),
		mib(sm.byKind["vlog"]), mib(sm.byKind["sst"]), mib(sm.byKind["mem"]), mib(sm.byKind["other"]), peakDU,
		float64(sm.coordCPU)/1000, hist)
}

// printAgentTable prints the edge agent's numbers of every sample.
func printAgentTable(samples []sample) {
	fmt.Printf("\nedge agent:\n%-5s %6s | %7s %8s | %7s %7s %7s %7s %7s %8s | %9s\n",
		"cycle", "rest", "RSS", "peak RSS", "du", "vlog", "sst", "mem", "other", "peak du", "agent CPU")
	for _, sm := range samples {
		peakRSS, peakDU := "-", "-"
		if sm.cycle > 0 {
			peakRSS, peakDU = fmt.Sprintf("%.1f", kbMiB(sm.peakAgentRSS)), fmt.Sprintf("%.1f", mib(sm.peakAgentDU))
		}
		fmt.Printf("%-5s %6s | %7.1f %8s | %7.1f %7.1f %7.1f %7.1f %7.1f %8s | %8.1fs\n",
			cycleName(sm), restOf(sm), kbMiB(sm.agentRSS), peakRSS, mib(sm.agentDU),
			mib(sm.agentByKind["vlog"]), mib(sm.agentByKind["sst"]), mib(sm.agentByKind["mem"]), mib(sm.agentByKind["other"]), peakDU,
			float64(sm.agentCPU)/1000)
	}
}

// report prints the edge agent's table, compares the last cycle with
// cycle 2 and says whether the target is met.
func (s *soak) report(base sample, samples []sample, idle *sample) bool {
	all := append([]sample{base}, samples...)
	if idle != nil {
		all = append(all, *idle)
	}
	printAgentTable(all)
	fmt.Println()
	fmt.Printf("MiB throughout. seconds: the cycle; rest: then the wait before measuring: %s (-settle), then until the sizes of both data folders had\n", s.o.settle)
	fmt.Printf("not changed for %s (-stable), at most %s in all (-settle-max; ! when reached). The soak does nothing to the coordinator or the agent\n", s.o.stable, s.o.settleMax)
	fmt.Println("meanwhile: the wait lets each do its own work after the burst of writes (memtable flush, value-log GC), so what follows is measured at rest.")
	if s.o.cycleMin > 0 {
		fmt.Printf("Setup and each cycle took at least %s (-cycle-min): after its measurement the soak waited, sending nothing.\n", s.o.cycleMin)
	}
	if idle != nil {
		fmt.Printf("idle: measured after the last cycle's row and %s more (-agent-idle) with nothing sent.\n", s.o.agentIdle)
	}
	fmt.Println("RSS, anon, file: the coordinator's VmRSS, RssAnon, RssFile (Badger mmaps its files) at rest;")
	fmt.Println("du: allocated size of every file in the data folder at rest, then by kind (Badger's value log, tables, memtables, the rest);")
	fmt.Println("peak RSS / peak du: the highest seen, sampled every 250 ms, while the cycle ran and until the measurement; coord CPU: the coordinator's CPU time so far;")
	fmt.Println("history: entries in the first node's history.")
	if s.edge.inproc {
		fmt.Println("edge agent: in this process (-inprocess): its RSS is of the coordinator, the agent and the soak together; du is of its state folder (--state-dir).")
	} else {
		fmt.Println("edge agent: a separate process (the agent program with --simulate N): its own VmRSS; du of its state folder (--state-dir, its durable outbox).")
	}
	if w, e, top := loadrig.LogLevels(s.co.LogFile); w+e > 0 {
		fmt.Printf("coordinator log: %d WARN, %d ERROR lines; most frequent %s\n", w, e, top)
	}
	if !s.edge.inproc {
		if w, e, top := loadrig.LogLevels(s.edge.LogFile); w+e > 0 {
			fmt.Printf("edge agent log: %d WARN, %d ERROR lines; most frequent %s\n", w, e, top)
		}
	}
	if len(samples) < 3 {
		fmt.Println("target: n/a (needs at least 3 cycles to compare the last with cycle 2)")
		return true
	}
	ref, last := samples[1], samples[len(samples)-1]
	word := map[bool]string{true: "ok", false: "MISSED"}
	ok := true
	check := func(what string, a, b float64, unit string) {
		r := b / a
		good := r <= s.o.growth
		fmt.Printf("  %-44s %8.1f → %8.1f %s (%.2f×) %s\n", what, a, b, unit, r, word[good])
		ok = ok && good
	}
	fmt.Printf("target: after cycle %d within %.2f× of cycle 2\n", last.cycle, s.o.growth)
	check("coordinator RSS at rest after the cycle", kbMiB(ref.rss), kbMiB(last.rss), "MiB")
	check("coordinator data folder at rest", mib(ref.du), mib(last.du), "MiB")
	check("coordinator peak RSS during the cycle", kbMiB(ref.peakRSS), kbMiB(last.peakRSS), "MiB")
	check("coordinator peak data folder during the cycle", mib(ref.peakDU), mib(last.peakDU), "MiB")
	check("edge agent RSS at rest after the cycle", kbMiB(ref.agentRSS), kbMiB(last.agentRSS), "MiB")
	check("edge agent state folder at rest", mib(ref.agentDU), mib(last.agentDU), "MiB")
	check("edge agent peak RSS during the cycle", kbMiB(ref.peakAgentRSS), kbMiB(last.peakAgentRSS), "MiB")
	check("edge agent peak state folder during the cycle", mib(ref.peakAgentDU), mib(last.peakAgentDU), "MiB")
	if idle != nil {
		fmt.Printf("after %s idle: edge agent state folder %.1f MiB (%.2f× cycle 2), RSS %.1f MiB (%.2f× cycle 2)\n", s.o.agentIdle,
			mib(idle.agentDU), float64(idle.agentDU)/float64(ref.agentDU), kbMiB(idle.agentRSS), float64(idle.agentRSS)/float64(ref.agentRSS))
	}
	if !ok {
		fmt.Fprintln(os.Stderr, "soak: target missed")
	}
	return ok
}
