// Package metrics defines the coordinator's Prometheus metrics and serves
// them (GET /metrics on the API listener, in Prometheus' text format).
// The engine calls the hooks (every method is safe on a nil *Metrics, so
// an engine without metrics calls them too); what the nodes and sites
// are now is read from the engine when Prometheus scrapes, through the
// functions given to Census. Only the health series (health.go) are
// labelled with a node, a bounded number per node; every other label
// value is a state, site, verb, outcome or step name, all bounded.
package metrics

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/protocol"
)

// Namespace prefixes every metric of the coordinator.
const Namespace = "bmedge"

// maxStepNames bounds the step label's values: steps are declared by
// drivers and ramdisks, so a misbehaving ramdisk could offer any number
// of names. Past the bound, steps are counted as "other".
const maxStepNames = 256

// Metrics are one coordinator's metrics, in a registry of their own (so
// that several coordinators in one test process do not mix).
type Metrics struct {
	reg *prometheus.Registry

	transitions   *prometheus.CounterVec
	verbs         *prometheus.CounterVec
	verbSeconds   *prometheus.HistogramVec
	stepSeconds   *prometheus.HistogramVec
	sent          prometheus.Counter
	resent        prometheus.Counter
	acked         prometheus.Counter
	commitSeconds prometheus.Histogram
	commitBytes   prometheus.Counter
	holdSeconds   prometheus.Histogram
	bmcWarnings   *prometheus.CounterVec
	discovery     *prometheus.CounterVec

	// holdMax is the longest single hold of the engine loop since start,
	// in nanoseconds.
	holdMax atomic.Int64

	mu sync.Mutex
	// steps holds each node's running step, for its duration.
	steps     map[string]stepRun
	stepNames map[string]bool
	rescue    rescueRefusals
	// sensors holds each node's sensor summary (health.go).
	sensors map[string]*sensorSummary
}

// stepRun is a node's running step as last seen.
type stepRun struct {
	opStart time.Time // identifies the operation
	index   int       // and the step within its plan
	name    string
	start   time.Time
	// timed is false for a step that was running when the coordinator
	// started: its start is not known, so its duration is not observed.
	timed bool
}

// New returns the coordinator's metrics, with Go runtime and process
// metrics in the same registry.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), steps: map[string]stepRun{}, stepNames: map[string]bool{}, sensors: map[string]*sensorSummary{},
		rescue: rescueRefusals{last: map[string]rescueLast{}, totals: map[string]int64{}}}
	f := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: Namespace, Name: name, Help: help}
	}
	m.transitions = prometheus.NewCounterVec(prometheus.CounterOpts(f("transitions_total",
		"Provision state transitions made by nodes, by the state left and the state entered.")), []string{"from", "to"})
	m.verbs = prometheus.NewCounterVec(prometheus.CounterOpts(f("verb_requests_total",
		"Provision verbs asked of the engine (PUT /v1/nodes/{node}/states/provision), by verb and outcome: accepted, or why not: invalid (the API answers 400), not_found (404), conflict (409), unavailable (503) or internal (500).")),
		[]string{"verb", "outcome"})
	m.verbSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "verb_duration_seconds",
		Help:    "Time from a provision verb reaching the engine to its answer, the change durably committed, by verb.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}, []string{"verb"})
	m.stepSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "step_duration_seconds",
		Help:    "Duration of clean, deploy and other steps of nodes' operations, from the step becoming current to the next action or the operation's end, by step (interface.step) and outcome (done or failed).",
		Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200}}, []string{"step", "outcome"})
	m.sent = prometheus.NewCounter(prometheus.CounterOpts(f("commands_sent_total",
		"Commands published to edge agents and ramdisks, resends included.")))
	m.resent = prometheus.NewCounter(prometheus.CounterOpts(f("commands_resent_total",
		"Commands sent again because neither a heartbeat nor a result answered them within the resend interval.")))
	m.acked = prometheus.NewCounter(prometheus.CounterOpts(f("commands_acked_total",
		"Command results received and acknowledged to the agent after they were committed (duplicates included).")))
	m.commitSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Name: "store_commit_duration_seconds",
		Help:    "Duration of the engine's synced Badger commits, one per batch of changes (group commit).",
		Buckets: prometheus.ExponentialBuckets(0.00025, 2, 14)})
	m.commitBytes = prometheus.NewCounter(prometheus.CounterOpts(f("store_committed_bytes_total",
		"Bytes (keys and values) of the engine's commits: what each change of state writes to the store and, in a cluster, to every member's log.")))
	m.holdSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Name: "engine_loop_hold_seconds",
		Help:    "Time one request (an API change, an agent message, a clock tick) held the engine's single loop, its batch's commit not included: what other requests and agent messages may wait behind one request.",
		Buckets: prometheus.ExponentialBuckets(0.00001, 4, 12)})
	m.bmcWarnings = prometheus.NewCounterVec(prometheus.CounterOpts(f("bmc_warnings_total",
		"Warnings that edge agents' BMC command results carried (media that did not eject, a reading that lost a field), each also a WARNING in its node's history, by the history's event type.")), []string{"event_type"})
	m.discovery = prometheus.NewCounterVec(prometheus.CounterOpts(f("discovery_reports_total",
		"Discovery reports of machines that belong to no node, received from edge agents, by site and outcome: enrolled (a node was made), seen_again (the machine is a node already: matched by MAC, serial or BMC address), or why it was refused: discovery_off, cap (the site has its cap of discovered nodes), invalid; or rate: deferred, not acknowledged, as the site enrolled its discovery rate's worth of nodes in the last minute (its agent sends the report again).")),
		[]string{"site", "outcome"})
	holdMax := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: Namespace, Name: "engine_loop_hold_max_seconds",
		Help: "The longest time one request held the engine's single loop since the coordinator started (engine_loop_hold_seconds' largest observation)."},
		func() float64 { return time.Duration(m.holdMax.Load()).Seconds() })
	m.reg.MustRegister(m.bmcWarnings, m.discovery, m.transitions, m.verbs, m.verbSeconds, m.stepSeconds, m.sent, m.resent, m.acked, m.commitSeconds, m.commitBytes, m.holdSeconds, holdMax,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry is where the metrics are registered (for tests and for
// adding collectors).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Census gives the metrics read at scrape time: nodes calls its argument
// for every node (engine.Each), sites returns every site and whether its
// edge agent is connected.
func (m *Metrics) Census(nodes func(func(*fsm.Node) bool), sites func() map[string]bool) {
	m.reg.MustRegister(&census{m: m, nodes: nodes, sites: sites, health: newHealthDescs(),
		nodesDesc: prometheus.NewDesc(Namespace+"_nodes", "Nodes by provision state and site (conductor_group), now.", []string{"provision_state", "site"}, nil),
		onlineDesc: prometheus.NewDesc(Namespace+"_site_online",
			"Whether the site's edge agent is connected to the broker (1) or not (0), now.", []string{"site"}, nil),
		maintDesc: prometheus.NewDesc(Namespace+"_nodes_maintenance", "Nodes in maintenance by site, now.", []string{"site"}, nil),
	})
}

type census struct {
	m                                *Metrics
	health                           healthDescs
	nodes                            func(func(*fsm.Node) bool)
	sites                            func() map[string]bool
	nodesDesc, onlineDesc, maintDesc *prometheus.Desc
}

func (c *census) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.nodesDesc
	ch <- c.onlineDesc
	ch <- c.maintDesc
	c.health.describe(ch)
}

func (c *census) Collect(ch chan<- prometheus.Metric) {
	type key struct{ state, site string }
	count := map[key]int{}
	maint := map[string]int{}
	// The sensor summaries are read from a copy: the engine's loop holds
	// its lock when it takes c.m.mu, never the other way round.
	c.m.mu.Lock()
	summaries := make(map[string]*sensorSummary, len(c.m.sensors))
	for k, v := range c.m.sensors {
		summaries[k] = v
	}
	c.m.mu.Unlock()
	seen := map[string]bool{}
	health := map[[2]string]int{}
	c.nodes(func(n *fsm.Node) bool {
		count[key{string(n.ProvisionState), n.Site}]++
		if n.Maintenance {
			maint[n.Site]++
		}
		c.collectHealth(ch, n, summaries[n.UUID], seen, health)
		return true
	})
	// The summaries of nodes deleted since are let go.
	c.m.mu.Lock()
	for k, v := range summaries {
		if !seen[k] && c.m.sensors[k] == v {
			delete(c.m.sensors, k)
		}
	}
	c.m.mu.Unlock()
	for k, v := range health {
		ch <- prometheus.MustNewConstMetric(c.health.nodesHealth, prometheus.GaugeValue, float64(v), k[0], k[1])
	}
	for k, v := range count {
		ch <- prometheus.MustNewConstMetric(c.nodesDesc, prometheus.GaugeValue, float64(v), k.state, k.site)
	}
	for site, online := range c.sites() {
		v := 0.0
		if online {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.onlineDesc, prometheus.GaugeValue, v, site)
		ch <- prometheus.MustNewConstMetric(c.maintDesc, prometheus.GaugeValue, float64(maint[site]), site)
	}
}

// Handler serves the metrics in Prometheus' text format. With check set,
// a request needs HTTP Basic credentials that check accepts, as every
// other API request (api.BasicAuth.Check); without it the metrics are
// served to anybody, which the server allows only on a loopback API
// listener (--auth none).
func (m *Metrics) Handler(check func(user, password string) bool) http.Handler {
	h := promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "/metrics takes GET or HEAD", http.StatusMethodNotAllowed)
			return
		}
		if check != nil {
			user, pass, ok := r.BasicAuth()
			if !ok || !check(user, pass) {
				w.Header().Set("WWW-Authenticate", `Basic realm="bmedge"`)
				http.Error(w, "Authentication required: send a user name and password of the coordinator's htpasswd file as HTTP Basic credentials", http.StatusUnauthorized)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// History counts the transitions among a node's new history entries.
func (m *Metrics) History(h fsm.HistoryEntry) {
	if m == nil || h.From == "" || h.To == "" {
		return
	}
	m.transitions.WithLabelValues(string(h.From), string(h.To)).Inc()
}

// BMCWarnings counts the warnings of an edge agent's result (fsm
// Output.BMCWarnings), by the history event type they went under.
func (m *Metrics) BMCWarnings(eventType string, n int) {
	if m == nil || n <= 0 {
		return
	}
	m.bmcWarnings.WithLabelValues(eventType).Add(float64(n))
}

// Discovery counts a discovery report of a site by its outcome (fsm's
// discovery verdicts).
func (m *Metrics) Discovery(site, outcome string) {
	if m == nil {
		return
	}
	m.discovery.WithLabelValues(site, outcome).Inc()
}

// Verb records a provision verb's answer: its outcome is "accepted" or
// why it was not (the engine's error kinds: invalid, not_found,
// conflict, unavailable, internal).
func (m *Metrics) Verb(verb, outcome string, took time.Duration) {
	if m == nil {
		return
	}
	if !fsm.IsVerb(fsm.Event(verb)) {
		verb = "other" // refused as unknown; the label stays bounded
	}
	m.verbs.WithLabelValues(verb, outcome).Inc()
	m.verbSeconds.WithLabelValues(verb).Observe(took.Seconds())
}

// Published counts a message the engine published, if it is a command.
func (m *Metrics) Published(msg *protocol.Message, err error) {
	if m == nil || err != nil || msg.Kind != protocol.KindCommand {
		return
	}
	m.sent.Inc()
}

// Resent counts commands the engine sends again.
func (m *Metrics) Resent(n int) {
	if m == nil || n <= 0 {
		return
	}
	m.resent.Add(float64(n))
}

// Acked counts a command result the engine acknowledges.
func (m *Metrics) Acked() {
	if m == nil {
		return
	}
	m.acked.Inc()
}

// Committed records the duration of one Badger commit and its size in
// bytes.
func (m *Metrics) Committed(took time.Duration, bytes int) {
	if m == nil {
		return
	}
	m.commitSeconds.Observe(took.Seconds())
	m.commitBytes.Add(float64(bytes))
}

// LoopHeld records how long one request held the engine loop.
func (m *Metrics) LoopHeld(took time.Duration) {
	if m == nil {
		return
	}
	m.holdSeconds.Observe(took.Seconds())
	for {
		old := m.holdMax.Load()
		if int64(took) <= old || m.holdMax.CompareAndSwap(old, int64(took)) {
			return
		}
	}
}

// MaxLoopHold is the longest single hold of the engine loop so far.
func (m *Metrics) MaxLoopHold() time.Duration {
	if m == nil {
		return 0
	}
	return time.Duration(m.holdMax.Load())
}

// runningStep is the step n runs now, or ok false.
func runningStep(n *fsm.Node) (r stepRun, ok bool) {
	op := n.Op
	if op == nil || op.Index < 0 || op.Index >= len(op.Plan) {
		return r, false
	}
	a := op.Plan[op.Index]
	if a.Kind != fsm.ActStep || a.Step == nil {
		return r, false
	}
	return stepRun{opStart: op.StartedAt, index: op.Index, name: a.Step.Name()}, true
}

// Loaded notes a node read from the database at start: a step it runs
// began before this process, so its duration is not observed.
func (m *Metrics) Loaded(n *fsm.Node) {
	if m == nil {
		return
	}
	if r, ok := runningStep(n); ok {
		m.mu.Lock()
		m.steps[n.UUID] = r
		m.mu.Unlock()
	}
}

// Node is called after every event the engine runs through the machine
// for n: a step that is no longer running is observed.
func (m *Metrics) Node(n *fsm.Node, now time.Time) {
	if m == nil {
		return
	}
	cur, running := runningStep(n)
	m.mu.Lock()
	defer m.mu.Unlock()
	prev, had := m.steps[n.UUID]
	same := had && running && prev.opStart.Equal(cur.opStart) && prev.index == cur.index
	if same {
		return
	}
	if had {
		delete(m.steps, n.UUID)
		if prev.timed {
			outcome := "done"
			if !running && n.Op == nil && failed(n.ProvisionState) {
				outcome = "failed"
			}
			m.stepSeconds.WithLabelValues(m.stepLabel(prev.name), outcome).Observe(now.Sub(prev.start).Seconds())
		}
	}
	if running {
		cur.start, cur.timed = now, true
		m.steps[n.UUID] = cur
	}
}

// stepLabel bounds the step label's values; m.mu is held.
func (m *Metrics) stepLabel(name string) string {
	if m.stepNames[name] {
		return name
	}
	if len(m.stepNames) >= maxStepNames {
		return "other"
	}
	m.stepNames[name] = true
	return name
}

func failed(s fsm.State) bool {
	switch s {
	case fsm.InspectFailed, fsm.CleanFailed, fsm.DeployFailed, fsm.RescueFailed, fsm.UnrescueFailed, fsm.Error:
		return true
	}
	return false
}
