// Command bench-bmc measures the edge agent driving real Redfish BMCs: N
// virtual Redfish BMCs (drivers/redfish/vbmc, in-memory machines, no
// VMs), each on its own 127.0.0.1 port, served from this process; a real
// coordinator (a separate process, as make bench runs it); and the real
// edge agent of one site in real mode (no simulated nodes) with power
// sync every -sync-interval. It creates N redfish nodes, one per BMC, and
// measures manage, power on and power off of all of them (nodes/s,
// Redfish requests/s, per-node latency from the API call to the node at
// rest with the state reached), then counts the MQTT messages between
// the coordinator and the edge agent during one idle power-sync interval
// (the target is 0: a quiet site sends nothing).
//
//	go run ./scripts/bench-bmc -nodes 200 -sync-interval 2s
//
// See docs/benchmarks.md, "BMC operations (make bench-bmc)".
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/lib/mqttlink"
	"github.com/bmedge/bmedge/protocol"
	"github.com/bmedge/bmedge/scripts/internal/loadrig"
)

const site = "bmcbench"

type options struct {
	nodes          int
	syncInterval   time.Duration
	syncConc       int
	bmcConc        int
	idleIntervals  int
	concurrency    int
	poll           time.Duration
	stall          time.Duration
	tls            bool
	powerDelay     time.Duration
	latency        time.Duration
	sessionLimit   int
	coordBin       string
	inprocess      bool
	keep           bool
	verbose        bool
	settleInterval int
}

func main() {
	var o options
	flag.IntVar(&o.nodes, "nodes", 200, "virtual Redfish BMCs, one redfish node each")
	flag.DurationVar(&o.syncInterval, "sync-interval", 2*time.Second, "the edge agent's power-sync interval (agent --power-sync-interval; its default is 60 s)")
	flag.IntVar(&o.syncConc, "sync-concurrency", 8, "BMCs the edge agent reads at once during power sync (agent.Config.PowerSyncConcurrency)")
	flag.IntVar(&o.bmcConc, "bmc-concurrency", 32, "BMC commands the edge agent runs at once (agent --bmc-concurrency, default 32)")
	flag.IntVar(&o.idleIntervals, "idle-intervals", 1, "power-sync intervals over which the idle site's MQTT messages are counted")
	flag.IntVar(&o.settleInterval, "settle-intervals", 2, "power-sync intervals to wait after the last phase before the idle count (first readings are reported once)")
	flag.IntVar(&o.concurrency, "concurrency", 8, "concurrent HTTP clients issuing the verbs")
	flag.DurationVar(&o.poll, "poll", 10*time.Millisecond, "shortest pause between listings of the nodes (it grows to 2× the last listing's duration)")
	flag.DurationVar(&o.stall, "stall", 60*time.Second, "fail a phase when no node finishes for this long")
	flag.BoolVar(&o.tls, "tls", true, "serve the BMCs over https with a lab CA (redfish_verify_ca = its file), as real BMCs are; -tls=false: plain http")
	flag.DurationVar(&o.powerDelay, "power-delay", 0, "vBMC fault: a reset shows in PowerState this much later (the driver polls after 0.25 s, backing off to every 2 s)")
	flag.DurationVar(&o.latency, "bmc-latency", 0, "vBMC fault: every Redfish answer is this much late")
	flag.IntVar(&o.sessionLimit, "session-limit", 4, "sessions each vBMC allows at once")
	flag.StringVar(&o.coordBin, "coordinator", "", "coordinator binary to run (default: build ./coordinator/cmd/coordinator into a temp folder)")
	flag.BoolVar(&o.inprocess, "inprocess", false, "run the coordinator inside this process (no build; CPU and RSS are then of both)")
	flag.BoolVar(&o.keep, "keep", false, "keep the temp folder (coordinator data and log, lab CA)")
	flag.BoolVar(&o.verbose, "v", false, "log the edge agent's warnings to stderr and list the MQTT messages of each phase by kind and action")
	driver := flag.String("driver", "", "measure the Redfish driver alone against one BMC instead: a fixture of drivers/redfish/recorded (e.g. dmtf-public-rackmount1) or vbmc; prints requests and seconds per manage, inspect and power action")
	driverDelay := flag.Duration("driver-delay", 2*time.Second, "with -driver: how late the BMC answers each request")
	flag.Parse()
	if *driver != "" {
		if err := driverBench(*driver, *driverDelay, o.verbose); err != nil {
			fmt.Fprintf(os.Stderr, "bench-bmc: FAILED: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if o.nodes < 1 || o.concurrency < 1 || o.syncInterval <= 0 || o.idleIntervals < 1 || o.syncConc < 1 || o.settleInterval < 0 {
		fmt.Fprintln(os.Stderr, "bench-bmc: -nodes, -concurrency, -sync-concurrency and -idle-intervals must be at least 1, -sync-interval positive")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o)
	interrupted := ctx.Err() != nil
	stop()
	if err != nil {
		if interrupted {
			fmt.Fprintln(os.Stderr, "bench-bmc: interrupted; coordinator and BMCs stopped, temp folder removed")
		} else {
			fmt.Fprintf(os.Stderr, "bench-bmc: FAILED: %v\n", err)
		}
		os.Exit(1)
	}
}

// event is one MQTT message seen by the observer on the site's tree.
type event struct {
	at     time.Time
	leaf   string // bmc/cmd, bmc/evt, presence, node/…
	kind   string
	action string // a command's action (and power state), or a result's
	node   string
}

// observer subscribes to the whole topic tree of the site (bm/v1/site/S/#)
// with the site's credentials as a client of its own: every message the
// coordinator and the edge agent exchange passes through the broker to it.
type observer struct {
	mu     sync.Mutex
	events []event
}

func (ob *observer) handle(topic string, payload []byte) {
	if protocol.IsBundle(payload) {
		// Several messages in one publish (protocol/bundle.go): each
		// counts as the message it carries, on its own topic.
		s, _, _, _ := protocol.ParseTopic(topic)
		if recs, err := protocol.DecodeBundle(s, payload); err == nil {
			for _, r := range recs {
				ob.handle(r.Topic, r.Payload)
			}
			return
		}
	}
	now := time.Now()
	_, node, leaf, err := protocol.ParseTopic(topic)
	if err != nil {
		leaf = topic
	}
	if node != "" {
		leaf = "node/" + leaf
	}
	e := event{at: now, leaf: leaf}
	if m, err := protocol.Decode(payload); err == nil {
		e.kind, e.node, e.action = m.Kind, m.Node, m.Action
		switch {
		case m.Kind == protocol.KindCommand && m.Action == protocol.ActionPower:
			e.action += " " + protocol.PowerArgsOf(m.Args).State
		case m.Kind == protocol.KindPower && m.Error != "":
			e.action = "error"
		case m.Kind == protocol.KindPower:
			e.action = m.PowerState
		}
	} else {
		e.kind = "undecodable"
	}
	ob.mu.Lock()
	ob.events = append(ob.events, e)
	ob.mu.Unlock()
}

// between returns the events seen in [from, to).
func (ob *observer) between(from, to time.Time) []event {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	var out []event
	for _, e := range ob.events {
		if !e.at.Before(from) && e.at.Before(to) {
			out = append(out, e)
		}
	}
	return out
}

// byKind counts events by kind (and action), for -v and for the notes.
func byKind(es []event) string {
	c := map[string]int{}
	for _, e := range es {
		k := e.leaf + " " + e.kind
		if e.action != "" {
			k += " " + e.action
		}
		c[k]++
	}
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s ×%d", k, c[k]))
	}
	return strings.Join(parts, ", ")
}

// phaseResult is one row of the summary.
type phaseResult struct {
	name     string
	nodes    int
	elapsed  time.Duration
	issued   time.Duration   // until the last verb's 202
	lat      []time.Duration // API call → at rest, by the coordinator's updated_at
	listLat  []time.Duration // API call → the listing that showed it at rest
	resLat   []time.Duration // API call → the node's first result on MQTT
	bmcLat   []time.Duration // API call → the vBMC changed the power
	requests int64           // Redfish requests to the BMCs in the phase
	msgs     []event
	coordCPU time.Duration
	selfCPU  time.Duration
	polls    int
	pollTime time.Duration
	idle     bool
}

type bench struct {
	o     options
	api   *loadrig.API
	co    *loadrig.Coord
	ob    *observer
	lab   *lab
	uuid  []string // node i's UUID; node i is behind BMC i
	notes []string
}

func run(ctx context.Context, o options) (err error) {
	tmp, err := os.MkdirTemp("", "bmbenchbmc-")
	if err != nil {
		return err
	}
	var co *loadrig.Coord
	defer func() { loadrig.Finish("bench-bmc", co, tmp, o.keep, err != nil && ctx.Err() == nil) }()

	settings := loadrig.Settings{Tick: time.Second}
	if o.inprocess {
		co, err = loadrig.StartInProcess(ctx, tmp, settings)
	} else {
		bin := o.coordBin
		if bin == "" {
			fmt.Fprintln(os.Stderr, "bench-bmc: building the coordinator…")
			if bin, err = loadrig.BuildCoordinator(ctx, tmp); err != nil {
				return err
			}
		}
		co, err = loadrig.StartProcess(ctx, bin, tmp, settings)
	}
	if err != nil {
		return err
	}

	lb, err := startLab(tmp, o)
	if err != nil {
		return err
	}
	defer lb.close()

	b := &bench{o: o, co: co, api: loadrig.NewAPI(co.APIURL, o.concurrency), ob: &observer{}, lab: lb}
	var creds agent.Credentials
	if err := b.api.Do(ctx, "POST", "/v1/sites", map[string]string{"name": site}, &creds); err != nil {
		return fmt.Errorf("register site: %w", err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	agentLog := quiet
	if o.verbose {
		agentLog = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	obs, err := mqttlink.Dial(ctx, mqttlink.Config{URL: creds.BrokerURL, ClientID: "edge-" + creds.Site + ".bench-observer",
		Username: creds.Username, Password: creds.Password, Subscriptions: []string{protocol.SiteTree(site)},
		Handler: b.ob.handle, Logger: quiet})
	if err != nil {
		return err
	}
	defer obs.Close()

	// The edge agent in real mode: no simulated nodes, power sync on.
	actx, acancel := context.WithCancel(context.Background())
	ag := agent.New(agent.Config{Site: creds.Site, BrokerURL: creds.BrokerURL, Username: creds.Username, Password: creds.Password,
		PowerSyncInterval: o.syncInterval, PowerSyncConcurrency: o.syncConc, BMCConcurrency: o.bmcConc, Log: agentLog})
	agentErr := make(chan error, 1)
	go func() { agentErr <- ag.Run(actx) }()
	defer func() {
		acancel()
		select {
		case <-agentErr:
		case <-time.After(35 * time.Second):
		}
	}()
	wctx, wcancel := context.WithTimeout(ctx, 15*time.Second)
	err = ag.AwaitUp(wctx)
	if err == nil {
		err = obs.AwaitUp(wctx)
	}
	wcancel()
	if err != nil {
		return fmt.Errorf("MQTT link of the edge agent or observer: %w", err)
	}

	scheme := "http"
	if o.tls {
		scheme = "https (lab CA)"
	}
	fmt.Printf("bench-bmc: %d virtual Redfish BMCs (%s, one in-memory system each, each on its own 127.0.0.1 port), site %s, edge agent in real mode with power sync every %s (%d at once)\n",
		o.nodes, scheme, site, o.syncInterval, o.syncConc)
	fmt.Printf("bench-bmc: coordinator pid %d (%s), %d HTTP clients, GOMAXPROCS %d, nproc %d\n",
		co.PID, map[bool]string{true: "in this process", false: "separate process"}[o.inprocess], o.concurrency, runtime.GOMAXPROCS(0), runtime.NumCPU())

	var results []*phaseResult
	step := func(r *phaseResult, err error) error {
		if !co.Alive() {
			return fmt.Errorf("the coordinator exited (%s): %v", co.ExitStatus(), err)
		}
		if err != nil {
			return err
		}
		results = append(results, r)
		fmt.Fprintf(os.Stderr, "bench-bmc: %-10s %5d nodes in %6.2fs\n", r.name, r.nodes, r.elapsed.Seconds())
		return nil
	}
	if err := b.create(ctx); err != nil {
		return err
	}
	manageFrom := time.Now()
	if err := step(b.phase(ctx, "manage", manageVerb, atManageable)); err != nil {
		return err
	}
	// A BMC is polled once a command on it succeeded, and its first
	// reading is reported once: wait for those before the power phases,
	// so that they measure power operations only.
	if err := b.firstReadings(ctx, manageFrom); err != nil {
		return err
	}
	if err := step(b.phase(ctx, "power on", powerVerb(protocol.PowerOn), atPower(protocol.PowerOn))); err != nil {
		return err
	}
	if err := step(b.phase(ctx, "power off", powerVerb(protocol.PowerOff), atPower(protocol.PowerOff))); err != nil {
		return err
	}
	settleFrom := time.Now()
	settle := time.Duration(o.settleInterval) * o.syncInterval
	fmt.Fprintf(os.Stderr, "bench-bmc: settling for %s (%d sync intervals), then counting MQTT messages over %d idle interval(s)…\n", settle, o.settleInterval, o.idleIntervals)
	if err := sleep(ctx, settle); err != nil {
		return err
	}
	settleMsgs := b.ob.between(settleFrom, time.Now())
	if err := step(b.idle(ctx)); err != nil {
		return err
	}
	b.report(results, settleMsgs, settle)
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// create makes one redfish node per BMC.
func (b *bench) create(ctx context.Context) error {
	b.uuid = make([]string, b.o.nodes)
	start := time.Now()
	err := loadrig.ForEach(ctx, b.o.concurrency, b.o.nodes, func(ctx context.Context, i int) error {
		var n struct {
			UUID string `json:"uuid"`
		}
		body := map[string]any{"name": fmt.Sprintf("bmc-%04d", i), "driver": "redfish", "conductor_group": site, "driver_info": b.lab.driverInfo(i)}
		if err := loadrig.Retrying(ctx, func() error { return b.api.Do(ctx, "POST", "/v1/nodes", body, &n) }); err != nil {
			return fmt.Errorf("create node %d: %w", i, err)
		}
		if n.UUID == "" {
			return fmt.Errorf("create node %d: no uuid in the answer", i)
		}
		b.uuid[i] = n.UUID
		return nil
	})
	if err == nil {
		fmt.Fprintf(os.Stderr, "bench-bmc: %d redfish nodes created in %.2fs\n", b.o.nodes, time.Since(start).Seconds())
	}
	return err
}

// verb sends a node its phase's request.
type verb func(ctx context.Context, api *loadrig.API, uuid string) error

var manageVerb verb = func(ctx context.Context, api *loadrig.API, uuid string) error {
	return api.Do(ctx, "PUT", "/v1/nodes/"+uuid+"/states/provision", map[string]any{"target": "manage"}, nil)
}

func powerVerb(target string) verb {
	return func(ctx context.Context, api *loadrig.API, uuid string) error {
		return api.Do(ctx, "PUT", "/v1/nodes/"+uuid+"/states/power", map[string]any{"target": target}, nil)
	}
}

// listedNode is a node as the bench lists it.
type listedNode struct {
	UUID        string    `json:"uuid"`
	State       string    `json:"provision_state"`
	Target      *string   `json:"target_provision_state"`
	Power       *string   `json:"power_state"`
	TargetPower *string   `json:"target_power_state"`
	Reservation *string   `json:"reservation"`
	LastError   *string   `json:"last_error"`
	UpdatedAt   time.Time `json:"updated_at"`
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// atRest tells whether a node has no operation under way: unlocked, no
// power target, and no provision target unless it rests in a stable
// state (a failed state keeps its target, as in Ironic).
func (n listedNode) atRest() bool {
	transient := strings.HasSuffix(n.State, "ing") || strings.Contains(n.State, "wait")
	return (str(n.Target) == "" || !transient) && str(n.TargetPower) == "" && str(n.Reservation) == ""
}

// done tells whether a node reached a phase's end; failed that it came to
// rest elsewhere with an error.
type doneFunc func(n listedNode) (done, failed bool)

func atManageable(n listedNode) (bool, bool) {
	if !n.atRest() {
		return false, false
	}
	if n.State == "manageable" {
		return true, false
	}
	return false, str(n.LastError) != ""
}

func atPower(want string) doneFunc {
	return func(n listedNode) (bool, bool) {
		if !n.atRest() {
			return false, false
		}
		if str(n.Power) == want {
			return true, false
		}
		return false, str(n.LastError) != ""
	}
}

func (b *bench) list(ctx context.Context) ([]listedNode, error) {
	var l struct {
		Nodes []listedNode `json:"nodes"`
	}
	q := fmt.Sprintf("/v1/nodes?conductor_group=%s&fields=uuid,provision_state,target_provision_state,power_state,target_power_state,reservation,last_error,updated_at&limit=%d",
		site, b.o.nodes+1)
	err := b.api.Do(ctx, "GET", q, nil, &l)
	return l.Nodes, err
}

type cpuMark struct{ coord, self time.Duration }

func (b *bench) cpu() cpuMark {
	return cpuMark{coord: loadrig.ProcCPU(b.co.PID), self: loadrig.ProcCPU(os.Getpid())}
}

// phase sends v to every node (concurrency clients) and lists the nodes
// until every one is done (listings at most max(-poll, 2× a listing)
// apart). A node's latency runs from the moment its first request was
// sent to its updated_at in the listing that first showed it done: the
// coordinator's stamp of the change that put it at rest. The phase runs
// from the first request to the last such stamp.
func (b *bench) phase(ctx context.Context, name string, v verb, done doneFunc) (*phaseResult, error) {
	n := b.o.nodes
	r := &phaseResult{name: name, nodes: n}
	// sent[i] is when node i's first request went out (UnixNano; 0: not yet).
	sent := make([]atomic.Int64, n)
	restAt := make([]time.Time, n) // the node's updated_at when first listed done
	listAt := make([]time.Time, n) // that listing's answer
	index := make(map[string]int, n)
	for i, u := range b.uuid {
		index[u] = i
	}
	powerMark := b.lab.powerMarks()
	req0, c0, start := b.lab.requests(), b.cpu(), time.Now()

	type issued struct {
		err error
		at  time.Time
	}
	verbsDone := make(chan issued, 1)
	go func() {
		err := loadrig.ForEach(ctx, b.o.concurrency, n, func(ctx context.Context, i int) error {
			return loadrig.Retrying(ctx, func() error {
				sent[i].CompareAndSwap(0, time.Now().UnixNano())
				if err := v(ctx, b.api, b.uuid[i]); err != nil {
					return fmt.Errorf("%s on node %s: %w", name, b.uuid[i], err)
				}
				return nil
			})
		})
		verbsDone <- issued{err, time.Now()}
	}()
	// Listing starts at once, so that the first nodes' rest is seen early;
	// a node counts only after its request went out (and a node is done
	// only in a state its request leads to, never the one it left).
	verbsOpen := true
	verbsEnd := func(is issued) error {
		verbsOpen = false
		r.issued = is.at.Sub(start)
		return is.err
	}
	remaining, lastMove := n, time.Now()
	var doneAt time.Time
	for remaining > 0 {
		if verbsOpen {
			select {
			case is := <-verbsDone:
				if err := verbsEnd(is); err != nil {
					return nil, err
				}
			default:
			}
		}
		t0 := time.Now()
		nodes, err := b.list(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s: list nodes: %w", name, err)
		}
		seen := time.Now()
		took := seen.Sub(t0)
		r.polls++
		r.pollTime += took
		var failed []string
		for _, nd := range nodes {
			i, ok := index[nd.UUID]
			if !ok || !restAt[i].IsZero() {
				continue
			}
			if sent[i].Load() == 0 {
				continue
			}
			ok, bad := done(nd)
			switch {
			case ok:
				// updated_at is the coordinator's stamp of the change
				// that put the node at rest (its batch's start, before
				// the durable commit); a later change (a power reading)
				// can only move it towards the listing.
				listAt[i], restAt[i] = seen, seen
				if !nd.UpdatedAt.IsZero() && nd.UpdatedAt.Before(seen) {
					restAt[i] = nd.UpdatedAt
				}
				remaining--
				lastMove = seen
				doneAt = seen
			case bad && len(failed) < 3:
				failed = append(failed, fmt.Sprintf("%s: %s (power %s): %s", nd.UUID, nd.State, str(nd.Power), str(nd.LastError)))
			}
		}
		if len(failed) > 0 {
			return nil, fmt.Errorf("%s: nodes failed, e.g.\n  %s", name, strings.Join(failed, "\n  "))
		}
		if remaining == 0 {
			break
		}
		if !b.co.Alive() {
			return nil, fmt.Errorf("the coordinator exited (%s)", b.co.ExitStatus())
		}
		if time.Since(lastMove) > b.o.stall {
			return nil, fmt.Errorf("%s: no node finished for %s; %d of %d done; states: %s", name, b.o.stall, n-remaining, n, histogram(nodes))
		}
		if err := sleep(ctx, max(b.o.poll, 2*took)); err != nil {
			return nil, err
		}
	}
	c1, req1 := b.cpu(), b.lab.requests()
	if verbsOpen {
		if err := verbsEnd(<-verbsDone); err != nil {
			return nil, err
		}
	}
	// The phase ends when the last node came to rest (its updated_at).
	var lastRest time.Time
	for _, t := range restAt {
		if t.After(lastRest) {
			lastRest = t
		}
	}
	r.elapsed = lastRest.Sub(start)
	r.coordCPU, r.selfCPU = c1.coord-c0.coord, c1.self-c0.self
	r.requests = req1 - req0
	// Results the observer gets just after the last node was listed done.
	if err := sleep(ctx, time.Second); err != nil {
		return nil, err
	}
	r.msgs = b.ob.between(start, doneAt)

	sentAt := make([]time.Time, n)
	for i := range sent {
		sentAt[i] = time.Unix(0, sent[i].Load())
	}
	// Each node's first result on MQTT after its request. The observer
	// may get it a little after the coordinator committed it (both are
	// subscribers of the broker), so results up to a second after the
	// phase count too.
	firstResult := make([]time.Time, n)
	for _, e := range b.ob.between(start, doneAt.Add(time.Second)) {
		if e.kind != protocol.KindResult {
			continue
		}
		if i, ok := index[e.node]; ok && e.at.After(sentAt[i]) && firstResult[i].IsZero() {
			firstResult[i] = e.at
		}
	}
	powerAt := b.lab.powerMarks()
	for i := 0; i < n; i++ {
		r.lat = append(r.lat, restAt[i].Sub(sentAt[i]))
		r.listLat = append(r.listLat, listAt[i].Sub(sentAt[i]))
		if !firstResult[i].IsZero() {
			r.resLat = append(r.resLat, firstResult[i].Sub(sentAt[i]))
		}
		if !powerAt[i].Equal(powerMark[i]) && powerAt[i].After(sentAt[i]) {
			r.bmcLat = append(r.bmcLat, powerAt[i].Sub(sentAt[i]))
		}
	}
	for _, s := range [][]time.Duration{r.lat, r.listLat, r.resLat, r.bmcLat} {
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	}
	return r, nil
}

func histogram(nodes []listedNode) string {
	h := map[string]int{}
	for _, n := range nodes {
		k := n.State + "/" + str(n.Power)
		if !n.atRest() {
			k += " (busy)"
		}
		h[k]++
	}
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

// firstReadings waits until the edge agent reported the first power
// reading of every node since from (at most 3 sync intervals + 10 s).
func (b *bench) firstReadings(ctx context.Context, from time.Time) error {
	deadline := time.Now().Add(3*b.o.syncInterval + 10*time.Second)
	for {
		var last time.Time
		seen := map[string]bool{}
		for _, e := range b.ob.between(from, time.Now().Add(time.Hour)) {
			if e.kind == protocol.KindPower && !seen[e.node] {
				seen[e.node] = true
				last = e.at
			}
		}
		if len(seen) >= b.o.nodes {
			b.notes = append(b.notes, fmt.Sprintf("first power readings: the edge agent reported all %d, the last %.2fs after manage began (reported once; a changed or failed reading only after that)",
				len(seen), last.Sub(from).Seconds()))
			return nil
		}
		if time.Now().After(deadline) {
			b.notes = append(b.notes, fmt.Sprintf("first power readings: only %d of %d nodes reported within %s", len(seen), b.o.nodes, 3*b.o.syncInterval+10*time.Second))
			return nil
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

// idle counts what an idle site does over -idle-intervals sync intervals:
// the Redfish reads of power sync and the MQTT messages (target 0).
func (b *bench) idle(ctx context.Context) (*phaseResult, error) {
	w := time.Duration(b.o.idleIntervals) * b.o.syncInterval
	r := &phaseResult{name: "idle sync", nodes: b.o.nodes, idle: true}
	req0, c0, start := b.lab.requests(), b.cpu(), time.Now()
	if err := sleep(ctx, w); err != nil {
		return nil, err
	}
	end := time.Now()
	r.elapsed = end.Sub(start)
	c1 := b.cpu()
	r.coordCPU, r.selfCPU = c1.coord-c0.coord, c1.self-c0.self
	r.requests = b.lab.requests() - req0
	r.msgs = b.ob.between(start, end)
	return r, nil
}

func pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	i := int(p*float64(len(d)) + 0.5)
	i = min(max(i, 1), len(d))
	return d[i-1]
}

func ms(d []time.Duration, p float64) string {
	if len(d) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", float64(pct(d, p))/float64(time.Millisecond))
}

func (b *bench) report(rs []*phaseResult, settleMsgs []event, settle time.Duration) {
	fmt.Println()
	for _, r := range rs {
		if r.polls > 0 {
			fmt.Printf("note: %s: verbs issued in %.2fs; %d listings, mean %.1f ms each; API call → first listing that showed the node at rest: p50 %s ms, p99 %s ms\n",
				r.name, r.issued.Seconds(), r.polls, float64(r.pollTime)/float64(r.polls)/float64(time.Millisecond), ms(r.listLat, .5), ms(r.listLat, .99))
		}
		if len(r.resLat) < r.nodes && !r.idle {
			fmt.Printf("note: %s: %d of %d nodes had no result seen on MQTT inside the phase\n", r.name, r.nodes-len(r.resLat), r.nodes)
		}
		if b.o.verbose || r.idle && len(r.msgs) > 0 {
			fmt.Printf("note: %s: MQTT messages by topic, kind and action: %s\n", r.name, orNone(byKind(r.msgs)))
		}
	}
	for _, n := range b.notes {
		fmt.Println("note:", n)
	}
	fmt.Printf("note: settling %s after power off: %d MQTT messages%s\n", settle, len(settleMsgs), func() string {
		if len(settleMsgs) == 0 {
			return ""
		}
		return " (" + byKind(settleMsgs) + ")"
	}())
	if w, e, top := loadrig.LogLevels(b.co.LogFile); w+e > 0 {
		fmt.Printf("note: coordinator log: %d WARN, %d ERROR lines; most frequent %s\n", w, e, top)
	}
	who := "coordinator"
	if b.o.inprocess {
		who = "coordinator + bench (one process)"
	}
	fmt.Printf("note: %s peak RSS %.1f MiB", who, float64(loadrig.ProcStatusKB(b.co.PID, "VmHWM"))/1024)
	if !b.o.inprocess {
		fmt.Printf("; bench process (edge agent, %d vBMCs, observer) peak RSS %.1f MiB", b.o.nodes, float64(loadrig.ProcStatusKB(os.Getpid(), "VmHWM"))/1024)
	}
	fmt.Println()
	var idle *phaseResult
	for _, r := range rs {
		if r.idle {
			idle = r
		}
	}
	if idle != nil {
		verdict := "ok"
		if len(idle.msgs) > 0 {
			verdict = "MISSED"
		}
		reads := "the window held no Redfish request: did power sync run?"
		if idle.requests > 0 {
			reads = fmt.Sprintf("power sync read the BMCs %d times in it", idle.requests)
		}
		fmt.Printf("target: an idle site sends 0 MQTT messages per power-sync interval: %s (%d in %s; %s)\n", verdict, len(idle.msgs), idle.elapsed.Round(time.Millisecond), reads)
	}

	fmt.Println()
	fmt.Println("ops/s: nodes done per second (one BMC operation each: validate, power on, power off); BMC reqs: Redfish requests the vBMCs answered")
	fmt.Println("latency from a node's API call: p50/p99/max to the node at rest with the state reached (its updated_at, the coordinator's stamp of that change); result p99 to its edge agent's result on MQTT; BMC p99 to the vBMC changing the power")
	fmt.Printf("%-10s %5s %7s %7s %8s %7s %8s %8s %8s %10s %8s %9s %9s %9s\n",
		"phase", "nodes", "seconds", "ops/s", "BMC reqs", "reqs/s", "p50 ms", "p99 ms", "max ms", "result p99", "BMC p99", "MQTT msgs", "coord CPU", "bench CPU")
	for _, r := range rs {
		ops := fmt.Sprintf("%.1f", float64(r.nodes)/r.elapsed.Seconds())
		if r.idle {
			ops = "-"
		}
		fmt.Printf("%-10s %5d %7.2f %7s %8d %7.1f %8s %8s %8s %10s %8s %9d %8.2fs %8.2fs\n",
			r.name, r.nodes, r.elapsed.Seconds(), ops, r.requests, float64(r.requests)/r.elapsed.Seconds(),
			ms(r.lat, .5), ms(r.lat, .99), ms(r.lat, 1), ms(r.resLat, .99), ms(r.bmcLat, .99), len(r.msgs), r.coordCPU.Seconds(), r.selfCPU.Seconds())
	}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
