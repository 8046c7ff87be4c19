// Command bench drives N simulated nodes through create → manage →
// provide → deploy → undeploy against a real coordinator process (durable
// Badger writes, embedded MQTT broker) and an edge agent with simulated
// nodes over real MQTT, and prints per-phase nodes/s, the latency from a
// verb's 202 to the first command for that node on the site's MQTT topics
// (p50/p99), and the coordinator's peak RSS. Then, every node available,
// it times the API from -api-clients (32) concurrent clients: GET
// /v1/nodes/detail?limit=1000 (-detail-requests times, also from one
// client) and a provision PUT (manage, then provide) on every node, with
// the PUTs' time in the engine and the group commits meanwhile (from the
// coordinator's /metrics) and the machine's load average. While the
// cycle runs, one more client sends hostile requests over and over (a
// JSON Patch at the operation cap, a manual clean at the step cap:
// hostile.go; -hostile=false leaves them out), and the report gives the
// longest single hold of the engine loop.
//
//	go run ./scripts/bench -nodes 1000
//	NODES=10000 make bench
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/lib/mqttlink"
	"github.com/bmedge/bmedge/lib/netbudget"
	"github.com/bmedge/bmedge/protocol"
	"github.com/bmedge/bmedge/scripts/internal/loadrig"
)

// site is the bench's site when it has one; with -sites S > 1 the sites
// are bench-0000 … and node i belongs to siteOf(i).
const site = "bench"

// siteName is the name of the bench's i-th site.
func (o options) siteName(i int) string {
	if o.sites == 1 {
		return site
	}
	return fmt.Sprintf("bench-%04d", i)
}

type options struct {
	nodes       int
	edgePlans   bool
	concurrency int
	poll        time.Duration
	stall       time.Duration
	tick        time.Duration
	coordBin    string
	keep        bool
	inprocess   bool
	cluster     int
	cpuprofile  string
	memprofile  string
	observe     bool
	failStep    string
	verbose     bool
	apiClients  int
	detailReqs  int
	apiProfile  string
	sites       int
	hostile     bool
}

func main() {
	var o options
	flag.IntVar(&o.nodes, "nodes", 1000, "simulated nodes to drive through the cycle")
	flag.IntVar(&o.concurrency, "concurrency", 8, "concurrent HTTP clients issuing verbs (more clients: more nodes/s, but both cores saturate and verb → command latency grows; see docs/benchmarks.md)")
	flag.DurationVar(&o.poll, "poll", 50*time.Millisecond, "shortest pause between counts of nodes in the target state (it grows to 10× the last count's duration, to keep polling under ~10% of one core)")
	flag.DurationVar(&o.stall, "stall", 60*time.Second, "fail a phase when no node moves for this long")
	flag.DurationVar(&o.tick, "tick", time.Second, "the coordinator's --tick")
	flag.StringVar(&o.coordBin, "coordinator", "", "coordinator binary to run (default: build ./coordinator/cmd/coordinator into a temp folder)")
	flag.BoolVar(&o.keep, "keep", false, "keep the temp folder (data dir, coordinator log)")
	flag.IntVar(&o.cluster, "cluster", 0, "run the coordinator as a cluster of this many members (3 or 5; docs/cluster.md) on 127.0.0.1 and drive its leader; coordinator CPU is then every member's")
	flag.BoolVar(&o.inprocess, "inprocess", false, "run the coordinator inside the benchmark process (for -cpuprofile; RSS is then of both)")
	flag.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of the benchmark process (with -inprocess: coordinator too)")
	flag.StringVar(&o.memprofile, "memprofile", "", "write a heap profile of the benchmark process after the last phase (with -inprocess: coordinator too)")
	flag.BoolVar(&o.observe, "observe", true, "subscribe a second MQTT client to the site's command topics to measure verb → command latency (-observe=false: no latency, less broker work)")
	flag.StringVar(&o.failStep, "inject-failure", "", "make the first node's simulated ramdisk fail this in-band step (e.g. erase_devices), to check that the benchmark stops with a clear report")
	flag.BoolVar(&o.verbose, "v", false, "log the edge agent's warnings to stderr and list the commands seen by action")
	flag.IntVar(&o.apiClients, "api-clients", 32, "concurrent HTTP clients of the API measurements after the cycle (GET /v1/nodes/detail?limit=1000, provision PUTs); 0 skips them")
	flag.IntVar(&o.detailReqs, "detail-requests", 50, "GET /v1/nodes/detail?limit=1000 requests measured with -api-clients clients")
	flag.StringVar(&o.apiProfile, "api-profile", "", "with -inprocess: write CPU, mutex and block profiles of the API measurements to this folder: detail.*, manage.*, provide.* (mutex and block profiles add up from the first: compare with go tool pprof -base)")
	flag.BoolVar(&o.edgePlans, "edge-plans", true, "the coordinator's --edge-plans: hand each phase's steps to the site as one plan (false: every step's command alone), to compare")
	flag.IntVar(&o.sites, "sites", 1, "spread the nodes over this many sites, each with its own edge agent and MQTT connection (node i at site i mod S); with more than one, no verb → command latency is observed")
	flag.BoolVar(&o.hostile, "hostile", true, "while the cycle runs, send hostile requests over and over from one more client (a JSON Patch at the 1000-operation cap, one that fits and one as large as the body cap allows, and a manual clean at the 100-step cap, to nodes of a site of their own) and report the longest single hold of the engine loop; -hostile=false measures the cycle alone (the longest hold is then reported too). Only with -sites 1")
	flag.Parse()
	if o.apiProfile != "" && (!o.inprocess || o.cpuprofile != "") {
		fmt.Fprintln(os.Stderr, "bench: -api-profile needs -inprocess (the coordinator must run in the benchmark process) and no -cpuprofile")
		os.Exit(2)
	}
	if o.nodes < 1 || o.concurrency < 1 || o.apiClients < 0 || o.detailReqs < 1 {
		fmt.Fprintln(os.Stderr, "bench: -nodes and -concurrency must be at least 1")
		os.Exit(2)
	}
	if o.cluster != 0 && (o.cluster < 3 || o.inprocess) {
		fmt.Fprintf(os.Stderr, "bench: -cluster %d: want 3 or more members, and no -inprocess (the members are processes)\n", o.cluster)
		os.Exit(2)
	}
	if o.sites < 1 || o.sites > o.nodes {
		fmt.Fprintf(os.Stderr, "bench: -sites %d: want 1 to -nodes (%d)\n", o.sites, o.nodes)
		os.Exit(2)
	}
	if o.sites > 1 {
		o.observe = false
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o)
	interrupted := ctx.Err() != nil
	stop()
	if err != nil {
		if interrupted {
			fmt.Fprintln(os.Stderr, "bench: interrupted; coordinator stopped and temp folder removed")
		} else {
			fmt.Fprintf(os.Stderr, "bench: FAILED: %v\n", err)
		}
		os.Exit(1)
	}
}

// nodeRec follows one node through the phases.
type nodeRec struct {
	uuid string
	mu   sync.Mutex
	// armed: a verb was sent and its first command is not yet seen.
	armed    bool
	sent     time.Time // verb request started
	accepted time.Time // 202 received
	cmd      time.Time // first command for the node seen on MQTT
	stamp    time.Time // that command's "sent" stamp (the coordinator's commit time)
	action   string    // that command's action
}

// observer watches the site's command topics with the site's credentials
// (a second client, "bench-observer") and stamps the first command of
// each armed node. The broker delivers each command to the edge agent and
// to the observer alike, so the stamp is when the site could act on it.
type observer struct {
	mu    sync.RWMutex
	byID  map[string]*nodeRec
	total atomic.Int64
	amu   sync.Mutex
	byAct map[string]int
}

func (ob *observer) handle(topic string, payload []byte) {
	if protocol.IsBundle(payload) {
		// The site's commands, bundled (docs/protocol.md, "Bundles"):
		// each counts as it would on its own.
		site, _, _, _ := protocol.ParseTopic(topic)
		recs, err := protocol.DecodeBundle(site, payload)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: observer: a bundle on %s does not decode: %v\n", topic, err)
			return
		}
		for _, r := range recs {
			ob.handle(r.Topic, r.Payload)
		}
		return
	}
	var m struct {
		Kind   string    `json:"kind"`
		Node   string    `json:"node"`
		Action string    `json:"action"`
		Sent   time.Time `json:"sent"`
	}
	now := time.Now()
	if json.Unmarshal(payload, &m) != nil || m.Kind != protocol.KindCommand {
		return
	}
	ob.total.Add(1)
	key := m.Action
	if m.Action == protocol.ActionPower || m.Action == protocol.ActionBootDev || m.Action == protocol.ActionOOBStep || m.Action == protocol.ActionInbandRun {
		var x struct {
			Args map[string]any `json:"args"`
			Step *struct {
				Interface string `json:"interface"`
				Step      string `json:"step"`
			} `json:"step"`
		}
		_ = json.Unmarshal(payload, &x)
		switch {
		case x.Step != nil:
			key += " " + x.Step.Interface + "." + x.Step.Step
		case m.Action == protocol.ActionPower:
			key += " " + protocol.PowerArgsOf(x.Args).State
		case m.Action == protocol.ActionBootDev:
			key += " " + protocol.BootDeviceArgsOf(x.Args).Device
		}
	}
	ob.amu.Lock()
	ob.byAct[key]++
	ob.amu.Unlock()
	ob.mu.RLock()
	r := ob.byID[m.Node]
	ob.mu.RUnlock()
	if r == nil {
		return
	}
	r.mu.Lock()
	if r.armed {
		r.armed, r.cmd, r.action, r.stamp = false, now, m.Action, m.Sent
	}
	r.mu.Unlock()
}

// phaseResult is one row of the table.
type phaseResult struct {
	name      string
	nodes     int
	elapsed   time.Duration
	issued    time.Duration // until the last verb's answer
	lat       []time.Duration
	reqLat    []time.Duration
	stampLat  []time.Duration // command's sent stamp → observer
	before202 int
	noCmd     int
	coordCPU  time.Duration
	benchCPU  time.Duration
	polls     int
	pollTime  time.Duration
	doneAt    time.Time
}

func pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	i := int(p*float64(len(d)) + 0.5)
	if i < 1 {
		i = 1
	}
	if i > len(d) {
		i = len(d)
	}
	return d[i-1]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }

type bench struct {
	o     options
	api   *loadrig.API
	co    *loadrig.Coord
	ob    *observer
	nodes []*nodeRec
	// sampled peaks of the coordinator's RSS, kB
	peakAnon, peakFile int64
	// the deploys' image, its checksum, and the bytes its origin served
	imageURL, imageSum string
	originBytes        *atomic.Int64
	// stored is what the coordinator committed to its store from its
	// start to the cycle's end (its metrics): bytes and commits.
	storedBytes, storedCommits float64
}

func run(ctx context.Context, o options) (err error) {
	tmp, err := os.MkdirTemp("", "bmbench-")
	if err != nil {
		return err
	}
	var co *loadrig.Coord
	defer func() { loadrig.Finish("bench", co, tmp, o.keep, err != nil && ctx.Err() == nil) }()
	if o.cpuprofile != "" {
		f, err := os.Create(o.cpuprofile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}

	if o.inprocess {
		co, err = loadrig.StartInProcess(ctx, tmp, loadrig.Settings{Tick: o.tick, NoEdgePlans: !o.edgePlans})
	} else {
		bin := o.coordBin
		if bin == "" {
			fmt.Fprintln(os.Stderr, "bench: building the coordinator…")
			if bin, err = loadrig.BuildCoordinator(ctx, tmp); err != nil {
				return err
			}
		}
		if o.cluster > 0 {
			co, err = loadrig.StartCluster(ctx, bin, tmp, loadrig.Settings{Tick: o.tick, NoEdgePlans: !o.edgePlans}, o.cluster)
		} else {
			co, err = loadrig.StartProcess(ctx, bin, tmp, loadrig.Settings{Tick: o.tick, NoEdgePlans: !o.edgePlans})
		}
	}
	if err != nil {
		return err
	}
	b := &bench{o: o, co: co, api: loadrig.NewAPI(co.APIURL, o.concurrency),
		ob: &observer{byID: map[string]*nodeRec{}, byAct: map[string]int{}}}

	// The image the deploys write: 64 KiB from an origin on loopback,
	// which counts what it serves.
	img := make([]byte, 64<<10)
	for i := range img {
		img[i] = byte(i * 7)
	}
	sum := sha256.Sum256(img)
	var served atomic.Int64
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(int64(len(img)))
		http.ServeContent(w, r, "bench.img", time.Time{}, bytes.NewReader(img))
	}))
	defer origin.Close()
	b.imageURL, b.imageSum, b.originBytes = origin.URL+"/bench.img", "sha256:"+hex.EncodeToString(sum[:]), &served

	// The sites, the observer, then each site's edge agent with its
	// share of the simulated nodes.
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	agentLog := quiet
	if o.verbose {
		agentLog = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	creds := make([]agent.Credentials, o.sites)
	for i := range o.sites {
		if err := b.api.Do(ctx, "POST", "/v1/sites", map[string]string{"name": o.siteName(i)}, &creds[i]); err != nil {
			return fmt.Errorf("register site %s: %w", o.siteName(i), err)
		}
	}
	var obs *mqttlink.Link
	if o.observe {
		c := creds[0]
		obs, err = mqttlink.Dial(ctx, mqttlink.Config{URL: c.BrokerURL, ClientID: "edge-" + c.Site + ".bench-observer", Username: c.Username,
			Password: c.Password, Subscriptions: []string{protocol.BMCCmdTopic(site), protocol.TopicPrefix + "/site/" + site + "/node/+/cmd"},
			Handler: b.ob.handle, Logger: quiet})
		if err != nil {
			return err
		}
		defer obs.Close()
	}
	actx, acancel := context.WithCancel(context.Background())
	agentErr := make(chan error, o.sites)
	agents := make([]*agent.Agent, o.sites)
	for i, c := range creds {
		per := o.nodes / o.sites
		if i < o.nodes%o.sites {
			per++
		}
		// The edge outbox on disk, as the agent program always has it;
		// with many sites in memory: a thousand agents on this one disk
		// would measure its syncs, which at real sites are a thousand
		// machines' own.
		stateDir := filepath.Join(tmp, "agent-state", c.Site)
		if o.sites > 1 {
			stateDir = ""
		}
		agents[i] = agent.New(agent.Config{Site: c.Site, BrokerURL: c.BrokerURL, Username: c.Username, Password: c.Password,
			StateDir: stateDir,
			// Each site's image cache: the simulated ramdisks' write_image
			// fetches the bench's image through it (one download a site).
			// Every simulated ramdisk fetches from 127.0.0.1, where a real
			// site's come from an address each: the per-source budgets
			// (agent.DefaultImageCacheConns) would refuse all but a few.
			Cache: agent.ImageCacheOptions{Dir: filepath.Join(tmp, "image-cache", c.Site), Listen: "127.0.0.1:0",
				// The bench's image server is on loopback.
				FetchAllow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
				Conns:      netbudget.Limits{MaxConns: per + 1024, MaxPerSource: per + 1024, MaxPendingPerSource: per + 1024}},
			Sim: agent.SimOptions{Nodes: per, StepDuration: 0, BootDelay: 0, BMCDelay: 0, Heartbeat: 30 * time.Second}, Log: agentLog})
		go func(a *agent.Agent) { agentErr <- a.Run(actx) }(agents[i])
	}
	defer func() {
		acancel()
		deadline := time.After(10 * time.Second)
		for range agents {
			select {
			case <-agentErr:
			case <-deadline:
				return
			}
		}
	}()
	wctx, wcancel := context.WithTimeout(ctx, 15*time.Second+time.Duration(o.sites)*20*time.Millisecond)
	for _, a := range agents {
		if err = a.AwaitUp(wctx); err != nil {
			break
		}
	}
	if err == nil && obs != nil {
		err = obs.AwaitUp(wctx)
	}
	wcancel()
	if err != nil {
		return fmt.Errorf("MQTT link of an edge agent or the observer: %w", err)
	}

	if o.sites > 1 {
		fmt.Println("bench: the edge agents' outboxes are in memory (with one site: on disk)")
	}
	fmt.Printf("bench: %d nodes at %d site(s), %d HTTP clients, coordinator pid %d (%s), GOMAXPROCS %d, nproc %d\n",
		o.nodes, o.sites, o.concurrency, co.PID, map[bool]string{true: "in this process", false: "separate process"}[o.inprocess]+
			map[bool]string{true: fmt.Sprintf(", the leader of a cluster of %d", o.cluster)}[o.cluster > 0],
		runtime.GOMAXPROCS(0), runtime.NumCPU())

	// Peak anonymous and file-backed RSS (Badger mmaps its files), sampled.
	var peakAnon, peakFile atomic.Int64
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	go func() {
		for {
			if v := loadrig.ProcStatusKB(co.PID, "RssAnon"); v > peakAnon.Load() {
				peakAnon.Store(v)
			}
			if v := loadrig.ProcStatusKB(co.PID, "RssFile"); v > peakFile.Load() {
				peakFile.Store(v)
			}
			select {
			case <-sctx.Done():
				return
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()

	var results []*phaseResult
	phase := func(r *phaseResult, err error) error {
		if !co.Alive() {
			return fmt.Errorf("the coordinator exited (%s): %v", co.ExitStatus(), err)
		}
		if err != nil {
			return err
		}
		results = append(results, r)
		fmt.Fprintf(os.Stderr, "bench: %-9s %6d nodes in %7.2fs\n", r.name, r.nodes, r.elapsed.Seconds())
		return nil
	}
	if err := phase(b.create(ctx)); err != nil {
		return err
	}
	var stopHostile func() (*hostileResult, error)
	if o.hostile && o.sites > 1 {
		fmt.Println("bench: no hostile requests with -sites > 1 (their site's nodes would be counted with the cycle's)")
	}
	if o.hostile && o.sites == 1 {
		if stopHostile, err = b.startHostile(ctx); err != nil {
			return err
		}
	}
	if err := phase(b.verb(ctx, "manage", "manage", fsm.Manageable, fsm.Enroll, fsm.Verifying)); err != nil {
		return err
	}
	if err := phase(b.verb(ctx, "provide", "provide", fsm.Available, fsm.Manageable, fsm.Cleaning, fsm.CleanWait)); err != nil {
		return err
	}
	if err := phase(b.setImage(ctx)); err != nil {
		return err
	}
	if err := phase(b.verb(ctx, "deploy", "active", fsm.Active, fsm.Available, fsm.Deploying, fsm.DeployWait)); err != nil {
		return err
	}
	if err := phase(b.verb(ctx, "undeploy", "deleted", fsm.Available, fsm.Active, fsm.Deleting, fsm.Cleaning, fsm.CleanWait)); err != nil {
		return err
	}
	if s, err := b.scrape(ctx, b.api); err == nil {
		b.storedBytes, b.storedCommits = s["bmedge_store_committed_bytes_total"], s["bmedge_store_commit_duration_seconds_count"]
	}
	var hr *hostileResult
	if stopHostile != nil {
		if hr, err = stopHostile(); err != nil {
			return fmt.Errorf("hostile requests: %w", err)
		}
	} else {
		hr = &hostileResult{}
		s, err := b.scrape(ctx, b.api)
		if err != nil {
			return fmt.Errorf("read the coordinator's metrics: %w", err)
		}
		hr.maxHold = time.Duration(s["bmedge_engine_loop_hold_max_seconds"] * float64(time.Second))
	}
	var ar *apiResult
	if o.apiClients > 0 {
		if ar, err = b.apiBench(ctx); err != nil {
			if !co.Alive() {
				return fmt.Errorf("the coordinator exited (%s): %v", co.ExitStatus(), err)
			}
			return err
		}
	}
	if o.memprofile != "" {
		if err := writeHeap(o.memprofile); err != nil {
			return err
		}
	}
	hwm := loadrig.ProcStatusKB(co.PID, "VmHWM")
	selfHWM := loadrig.ProcStatusKB(os.Getpid(), "VmHWM")
	scancel()
	b.peakAnon, b.peakFile = peakAnon.Load(), peakFile.Load()
	b.report(results, hwm, selfHWM)
	if stopHostile != nil {
		reportHostile(hr)
	} else {
		fmt.Printf("longest single hold of the engine loop during the cycle: %s ms (bmedge_engine_loop_hold_max_seconds; no hostile requests)\n", ms(hr.maxHold))
	}
	if ar != nil {
		b.reportAPI(ar)
	}
	return nil
}

func writeHeap(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	runtime.GC()
	return pprof.WriteHeapProfile(f)
}

type cpuMark struct{ coord, self time.Duration }

func (b *bench) cpu() cpuMark {
	return cpuMark{coord: b.co.CPU(), self: loadrig.ProcCPU(os.Getpid())}
}

func (b *bench) finish(r *phaseResult, start time.Time, c0 cpuMark) {
	r.elapsed = time.Since(start)
	c1 := b.cpu()
	r.coordCPU, r.benchCPU = c1.coord-c0.coord, c1.self-c0.self
	if b.o.inprocess {
		r.benchCPU = 0
	}
}

func (b *bench) create(ctx context.Context) (*phaseResult, error) {
	r := &phaseResult{name: "create", nodes: b.o.nodes}
	b.nodes = make([]*nodeRec, b.o.nodes)
	c0, start := b.cpu(), time.Now()
	err := loadrig.ForEach(ctx, b.o.concurrency, b.o.nodes, func(ctx context.Context, i int) error {
		var n struct {
			UUID string `json:"uuid"`
		}
		body := map[string]any{"name": fmt.Sprintf("bench-%06d", i), "driver": "fake", "conductor_group": b.o.siteName(i % b.o.sites)}
		if i == 0 && b.o.failStep != "" {
			body["driver_info"] = map[string]any{"fake_fail_step": b.o.failStep}
		}
		if err := loadrig.Retrying(ctx, func() error { return b.api.Do(ctx, "POST", "/v1/nodes", body, &n) }); err != nil {
			return fmt.Errorf("create node %d: %w", i, err)
		}
		if n.UUID == "" {
			return fmt.Errorf("create node %d: no uuid in the answer", i)
		}
		rec := &nodeRec{uuid: n.UUID}
		b.nodes[i] = rec
		b.ob.mu.Lock()
		b.ob.byID[n.UUID] = rec
		b.ob.mu.Unlock()
		return nil
	})
	r.issued = time.Since(start)
	b.finish(r, start, c0)
	return r, err
}

func (b *bench) setImage(ctx context.Context) (*phaseResult, error) {
	r := &phaseResult{name: "set image", nodes: b.o.nodes}
	c0, start := b.cpu(), time.Now()
	patch := []map[string]any{{"op": "add", "path": "/instance_info/image_source", "value": b.imageURL},
		{"op": "add", "path": "/instance_info/image_checksum", "value": b.imageSum}}
	err := loadrig.ForEach(ctx, b.o.concurrency, b.o.nodes, func(ctx context.Context, i int) error {
		return loadrig.Retrying(ctx, func() error { return b.api.Do(ctx, "PATCH", "/v1/nodes/"+b.nodes[i].uuid, patch, nil) })
	})
	r.issued = time.Since(start)
	b.finish(r, start, c0)
	return r, err
}

// verb sends target to every node, then waits until all are in want.
func (b *bench) verb(ctx context.Context, name, target string, want fsm.State, via ...fsm.State) (*phaseResult, error) {
	r := &phaseResult{name: name, nodes: b.o.nodes}
	c0, start := b.cpu(), time.Now()
	err := loadrig.ForEach(ctx, b.o.concurrency, b.o.nodes, func(ctx context.Context, i int) error {
		rec := b.nodes[i]
		return loadrig.Retrying(ctx, func() error {
			rec.mu.Lock()
			rec.armed, rec.sent, rec.accepted, rec.cmd, rec.action = true, time.Now(), time.Time{}, time.Time{}, ""
			rec.mu.Unlock()
			err := b.api.Do(ctx, "PUT", "/v1/nodes/"+rec.uuid+"/states/provision", map[string]any{"target": target}, nil)
			now := time.Now()
			rec.mu.Lock()
			if err == nil {
				rec.accepted = now
			} else {
				rec.armed = false
			}
			rec.mu.Unlock()
			if err != nil {
				return fmt.Errorf("%s on node %s: %w", target, rec.uuid, err)
			}
			return nil
		})
	})
	r.issued = time.Since(start)
	if err != nil {
		return nil, err
	}
	if err := b.await(ctx, r, want, via); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	b.finish(r, start, c0)
	r.elapsed = r.doneAt.Sub(start)
	for _, rec := range b.nodes {
		if !b.o.observe {
			break
		}
		rec.mu.Lock()
		switch {
		case rec.cmd.IsZero():
			r.noCmd++
		case rec.cmd.Before(rec.accepted):
			r.before202++
			r.lat = append(r.lat, 0)
			r.reqLat = append(r.reqLat, rec.cmd.Sub(rec.sent))
		default:
			r.lat = append(r.lat, rec.cmd.Sub(rec.accepted))
			r.reqLat = append(r.reqLat, rec.cmd.Sub(rec.sent))
		}
		if !rec.cmd.IsZero() && !rec.stamp.IsZero() {
			r.stampLat = append(r.stampLat, rec.cmd.Sub(rec.stamp))
		}
		rec.armed = false
		rec.mu.Unlock()
	}
	sort.Slice(r.lat, func(i, j int) bool { return r.lat[i] < r.lat[j] })
	sort.Slice(r.reqLat, func(i, j int) bool { return r.reqLat[i] < r.reqLat[j] })
	return r, nil
}

// list lists the nodes matching query, page by page (the API answers
// at most 1000 a page, as Ironic's max_limit).
func (b *bench) list(ctx context.Context, query string) (listed, error) {
	var all listed
	marker := ""
	for {
		var l listed
		q := "/v1/nodes?" + query + "&limit=1000"
		if marker != "" {
			q += "&marker=" + marker
		}
		if err := b.api.Do(ctx, "GET", q, nil, &l); err != nil {
			return all, err
		}
		all.Nodes = append(all.Nodes, l.Nodes...)
		if len(l.Nodes) < 1000 {
			return all, nil
		}
		marker = l.Nodes[len(l.Nodes)-1].UUID
	}
}

type listed struct {
	Nodes []struct {
		UUID      string  `json:"uuid"`
		State     string  `json:"provision_state"`
		Target    *string `json:"target_provision_state"`
		LastError *string `json:"last_error"`
	} `json:"nodes"`
}

// failedState tells a state from which the cycle cannot go on by itself.
func failedState(s string) bool {
	return strings.HasSuffix(s, "failed") || s == "error"
}

// histogram lists every node's state and fails on nodes that failed.
func (b *bench) histogram(ctx context.Context, want string) (map[string]int, error) {
	l, err := b.list(ctx, b.siteFilter()+"fields=uuid,provision_state,target_provision_state,last_error")
	if err != nil {
		return nil, err
	}
	h := map[string]int{}
	var bad []string
	for _, n := range l.Nodes {
		h[n.State]++
		resting := n.Target == nil || *n.Target == ""
		if failedState(n.State) || (resting && n.State != want && n.LastError != nil && *n.LastError != "") {
			if len(bad) < 3 {
				e := ""
				if n.LastError != nil {
					e = *n.LastError
				}
				bad = append(bad, fmt.Sprintf("%s in %q: %s", n.UUID, n.State, e))
			}
		}
	}
	if len(bad) > 0 {
		return h, fmt.Errorf("nodes failed (states %s), e.g.\n  %s", fmtHist(h), strings.Join(bad, "\n  "))
	}
	return h, nil
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

// failedStates are where a node stops by itself when something went wrong.
var failedStates = []fsm.State{fsm.CleanFailed, fsm.DeployFailed, fsm.Error, fsm.InspectFailed, fsm.RescueFailed, fsm.UnrescueFailed}

// siteFilter is the query filter for the bench's nodes: its site, or
// none with several sites (the bench's coordinator has no other nodes).
func (b *bench) siteFilter() string {
	if b.o.sites > 1 {
		return ""
	}
	return "conductor_group=" + site + "&"
}

// count returns how many nodes of the site are in state.
func (b *bench) count(ctx context.Context, state fsm.State) (int, error) {
	l, err := b.list(ctx, b.siteFilter()+"provision_state="+url.QueryEscape(string(state))+"&fields=uuid")
	if err != nil {
		return 0, err
	}
	return len(l.Nodes), nil
}

// await polls until every node is in want. The API renders every node it
// lists, so each poll asks for the smaller side: while fewer than half are
// done it counts the nodes in want, after that the nodes still on the way
// (the phase's other states, via, and the failed states). Between polls
// it pauses at least 10× the last poll's duration (polling costs the
// coordinator under ~10% of one core), and every 2 s it lists all states
// to catch failures early.
func (b *bench) await(ctx context.Context, r *phaseResult, want fsm.State, via []fsm.State) error {
	n := b.o.nodes
	remaining, lastRemaining, lastMove, lastHist := n, -1, time.Now(), time.Now()
	forceDone := false
	for {
		t0 := time.Now()
		if remaining > n/2 || forceDone {
			done, err := b.count(ctx, want)
			if err != nil {
				return err
			}
			remaining = n - done
		} else {
			sum := 0
			for _, st := range append(append([]fsm.State{}, via...), failedStates...) {
				k, err := b.count(ctx, st)
				if err != nil {
					return err
				}
				sum += k
			}
			remaining = sum
			if remaining == 0 {
				// Every node left the phase's states: confirm they are all
				// in want (and not in a state this benchmark did not expect).
				end := time.Now()
				done, err := b.count(ctx, want)
				if err != nil {
					return err
				}
				if done >= n {
					r.doneAt = end
					r.polls++
					r.pollTime += end.Sub(t0)
					return nil
				}
				forceDone, remaining = true, n-done
			}
		}
		took := time.Since(t0)
		r.polls++
		r.pollTime += took
		if remaining <= 0 {
			r.doneAt = time.Now()
			return nil
		}
		if remaining != lastRemaining {
			lastRemaining, lastMove = remaining, time.Now()
		}
		if !b.co.Alive() {
			return fmt.Errorf("the coordinator exited (%s)", b.co.ExitStatus())
		}
		if time.Since(lastHist) > 2*time.Second || time.Since(lastMove) > b.o.stall {
			lastHist = time.Now()
			h, err := b.histogram(ctx, string(want))
			if err != nil {
				return err
			}
			if time.Since(lastMove) > b.o.stall {
				return fmt.Errorf("no node moved for %s; %d of %d in %q; states: %s", b.o.stall, n-remaining, n, want, fmtHist(h))
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(max(b.o.poll, 10*took)):
		}
	}
}

func (b *bench) report(rs []*phaseResult, hwmKB, selfKB int64) {
	fmt.Println()
	fmt.Printf("%-9s %6s %8s %8s %9s %9s %9s %9s %10s %9s\n", "phase", "nodes", "seconds", "nodes/s", "p50 ms", "p99 ms", "max ms", "req p99", "coord CPU", "bench CPU")
	var total, cycle, coordCPU time.Duration
	var all, stamps []time.Duration
	notes := []string{}
	for _, r := range rs {
		total += r.elapsed
		coordCPU += r.coordCPU
		if r.name != "create" {
			cycle += r.elapsed
		}
		p50, p99, mx, rq := "-", "-", "-", "-"
		if r.lat != nil || r.noCmd > 0 {
			p50, p99, mx, rq = ms(pct(r.lat, 0.50)), ms(pct(r.lat, 0.99)), ms(pct(r.lat, 1)), ms(pct(r.reqLat, 0.99))
			all = append(all, r.lat...)
			stamps = append(stamps, r.stampLat...)
		}
		fmt.Printf("%-9s %6d %8.2f %8.1f %9s %9s %9s %9s %9.1fs %8.1fs\n", r.name, r.nodes, r.elapsed.Seconds(),
			float64(r.nodes)/r.elapsed.Seconds(), p50, p99, mx, rq, r.coordCPU.Seconds(), r.benchCPU.Seconds())
		if r.noCmd > 0 {
			notes = append(notes, fmt.Sprintf("%s: %d nodes had no command seen on MQTT", r.name, r.noCmd))
		}
		if r.before202 > 0 {
			notes = append(notes, fmt.Sprintf("%s: %d commands arrived before the client read the 202 (counted as 0 ms)", r.name, r.before202))
		}
		if r.polls > 0 {
			notes = append(notes, fmt.Sprintf("%s: verbs issued in %.2fs; %d polls, mean %.1f ms each", r.name, r.issued.Seconds(), r.polls,
				float64(r.pollTime)/float64(r.polls)/float64(time.Millisecond)))
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	fmt.Println()
	fmt.Printf("total (create … undeploy):              %.2f s\n", total.Seconds())
	fmt.Printf("cycle (manage … undeploy, with image):  %.2f s\n", cycle.Seconds())
	if len(all) > 0 {
		fmt.Printf("verb 202 → command on MQTT, all verbs:  p50 %s ms, p99 %s ms, max %s ms (%d samples)\n", ms(pct(all, .5)), ms(pct(all, .99)), ms(pct(all, 1)), len(all))
	}
	if len(stamps) > 0 {
		sort.Slice(stamps, func(i, j int) bool { return stamps[i] < stamps[j] })
		fmt.Printf("  the same, from the command's sent stamp: p50 %s ms, p99 %s ms (stamped when its batch began: includes the durable commit)\n", ms(pct(stamps, .5)), ms(pct(stamps, .99)))
	}
	who := "coordinator"
	if b.o.inprocess {
		who = "coordinator + bench (one process)"
	}
	fmt.Printf("%s peak RSS (VmHWM):   %.1f MiB\n", who, float64(hwmKB)/1024)
	fmt.Printf("  of which (peaks sampled every 250 ms): anonymous %.1f MiB, file-backed (Badger mmap) %.1f MiB\n",
		float64(b.peakAnon)/1024, float64(b.peakFile)/1024)
	if !b.o.inprocess {
		fmt.Printf("bench process peak RSS (%d agent(s), %d sims): %.1f MiB\n", b.o.sites, b.o.nodes, float64(selfKB)/1024)
	}
	if b.originBytes != nil {
		fmt.Printf("image origin served:                    %.1f KiB (%d site cache(s), each fetching the 64 KiB image once)\n", float64(b.originBytes.Load())/1024, b.o.sites)
	}
	fmt.Printf("coordinator CPU over the run:           %.1f s\n", coordCPU.Seconds())
	if b.storedCommits > 0 {
		fmt.Printf("committed to the store until the cycle's end: %.1f MB in %.0f commits (%.1f KB per commit, %.1f KB per node)\n",
			b.storedBytes/1e6, b.storedCommits, b.storedBytes/b.storedCommits/1e3, b.storedBytes/float64(b.o.nodes)/1e3)
	}
	if b.o.observe {
		fmt.Printf("MQTT commands seen by the observer:     %d (%.1f per node)\n", b.ob.total.Load(), float64(b.ob.total.Load())/float64(b.o.nodes))
		if b.o.verbose {
			b.ob.amu.Lock()
			keys := make([]string, 0, len(b.ob.byAct))
			for k := range b.ob.byAct {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				fmt.Printf("  %-45s %7d\n", k, b.ob.byAct[k])
			}
			b.ob.amu.Unlock()
		}
	}
	if w, e, top := loadrig.LogLevels(b.co.LogFile); w+e > 0 {
		fmt.Printf("coordinator log: %d WARN, %d ERROR lines; most frequent %s\n", w, e, top)
	}
	for _, n := range notes {
		fmt.Println("note:", n)
	}
	fmt.Println()
	ok := func(b bool) string { return map[bool]string{true: "ok", false: "MISSED"}[b] }
	latOK := "n/a (-observe=false)"
	if len(all) > 0 {
		latOK = ok(pct(all, .99) <= 10*time.Millisecond)
	}
	fmt.Printf("targets: total ≤ 60 s at 10000 nodes: %s (%.1f s for %d); p99 ≤ 10 ms: %s; RSS ≤ 1 GiB: %s\n",
		map[bool]string{true: ok(total <= time.Minute), false: "n/a"}[b.o.nodes >= 10000], total.Seconds(), b.o.nodes,
		latOK, ok(hwmKB <= 1<<20))
}
