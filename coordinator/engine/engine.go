// Package engine runs the node state machine for real: it owns the nodes
// in memory and in Badger, feeds the machine with operator requests, agent
// messages and clock ticks from one loop, commits every batch of changes
// in one synced transaction, and only then publishes commands and answers
// callers. It must never decide lifecycle rules itself: that is fsm's job.
package engine

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/coordinator/inspectrules"
	"github.com/bmedge/bmedge/coordinator/metrics"
	"github.com/bmedge/bmedge/coordinator/store"
	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/lib/mqttbroker"
	"github.com/bmedge/bmedge/lib/ratelog"
	"github.com/bmedge/bmedge/protocol"
)

// Publisher sends MQTT messages.
type Publisher interface {
	Publish(ctx context.Context, topic string, payload []byte, retain bool) error
}

// Config configures an engine.
type Config struct {
	DataDir string
	Machine fsm.Config
	// BuiltInInspectionRules are the coordinator's built-in inspection
	// rules (serve's --inspection-rules file), run with the stored ones.
	BuiltInInspectionRules []inspectrules.Rule
	// MaxConcurrentClean and MaxConcurrentDeploy cap the nodes in cleaning
	// (or deleting) and deploying at once; a manual clean, undeploy,
	// deploy or rebuild over the cap gets 500, as in Ironic (provide is
	// not capped).
	MaxConcurrentClean  int
	MaxConcurrentDeploy int
	TickInterval        time.Duration
	Log                 *slog.Logger
	Now                 func() time.Time
	// OnFatal, if set, is called once when the database fails (a
	// *store.FailedError); the engine then takes no more work and the
	// process must exit (crash-only: a restart recovers from what is on
	// disk). Failed is closed at the same time (storefail.go).
	OnFatal func(error)
	// StoreOptions are passed to store.Open: tests inject failures with
	// store.WithFaults.
	StoreOptions []store.Option
	// HistoryMaxEntries caps each node's history: past it, the oldest
	// entries are deleted (Ironic's node_history_max_entries; default
	// DefaultHistoryMaxEntries).
	HistoryMaxEntries int
	// ValueLogGCInterval is how often stale space in the database's value
	// log is reclaimed (default DefaultValueLogGCInterval).
	ValueLogGCInterval time.Duration
	// Metrics receives the engine's hook calls (nil: none).
	Metrics *metrics.Metrics
	// NoEdgePlans keeps every step's command going alone, even to sites
	// whose edge agent runs plans (coordinator serve --edge-plans=false).
	NoEdgePlans bool
	// DefaultSite is the site of a node created without conductor_group
	// (serve --default-site); "" places such a node only when exactly
	// one site is registered.
	DefaultSite string
}

// Kind says what went wrong with a request; the API maps it to an HTTP
// status (coordinator/api), nothing else does.
type Kind int

const (
	// Invalid: the request is wrong, or cannot apply to the node as it
	// is.
	Invalid Kind = iota + 1
	// NotFound: what it names does not exist.
	NotFound
	// Conflict: it conflicts with what exists (a name taken, a node
	// busy or retired).
	Conflict
	// Unavailable: the coordinator cannot take it now (shutting down).
	Unavailable
	// Internal: the coordinator failed (the database).
	Internal
)

func (k Kind) String() string {
	switch k {
	case Invalid:
		return "invalid"
	case NotFound:
		return "not_found"
	case Conflict:
		return "conflict"
	case Unavailable:
		return "unavailable"
	case Internal:
		return "internal"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Error is a request's failure: its kind and a message for the caller.
type Error struct {
	Kind Kind
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

func errorf(kind Kind, f string, a ...any) *Error {
	return &Error{Kind: kind, Msg: fmt.Sprintf(f, a...)}
}

// refused is the engine's error for a state machine's refusal.
func refused(r *fsm.Refusal) *Error {
	k := Invalid
	if r.Reason == fsm.Conflict {
		k = Conflict
	}
	return &Error{Kind: k, Msg: r.Msg}
}

// Port is a network port of a node (Ironic's port).
type Port struct {
	UUID     string         `json:"uuid"`
	Address  string         `json:"address"`
	NodeUUID string         `json:"node_uuid"`
	Extra    map[string]any `json:"extra,omitempty"`
	PXE      bool           `json:"pxe_enabled"`
	// PortGroupUUID is the port group the port is in, "" for none.
	PortGroupUUID string `json:"portgroup_uuid,omitempty"`
	// Description (API 1.97), Vendor (1.100) and Category (1.101) are
	// the operator's, kept and shown as given.
	Description string `json:"description,omitempty"`
	Vendor      string `json:"vendor,omitempty"`
	Category    string `json:"category,omitempty"`
	// LocalLinkConnection is the switch port the NIC is cabled to
	// (switch_id, port_id, switch_info): the operator's, or filled by
	// inspection from the LLDP frame the NIC heard (inspectrules.go).
	LocalLinkConnection map[string]any `json:"local_link_connection,omitempty"`
	CreatedAt           time.Time      `json:"created_at"`
	UpdatedAt           *time.Time     `json:"updated_at"`
}

// Site is a registered edge site.
type Site struct {
	Name         string    `json:"name"`
	PasswordHash string    `json:"password_hash"`
	CreatedAt    time.Time `json:"created_at"`
}

// Engine is the running coordinator core.
type Engine struct {
	cfg Config
	log *slog.Logger
	// rejects logs refused messages (a stale token, a wrong topic) at a
	// bounded rate: a cycling fleet makes some in every cycle (a
	// ramdisk's last heartbeat crossing its power-off), and an agent gone
	// wrong could make them without end.
	rejects *ratelog.Limiter
	m       *fsm.Machine
	st      *store.Store
	// rules are the inspection rules (inspectrules.go).
	rules *inspectrules.Set
	pub   Publisher

	mu    sync.RWMutex
	nodes map[string]*fsm.Node
	names map[string]string
	ports map[string]*Port
	// pgroups are the port groups, allocs the allocations (resources.go).
	pgroups    map[string]*PortGroup
	allocs     map[string]*Allocation
	macs       map[string]string
	sites      map[string]*Site
	siteOnline map[string]bool
	// relaying holds the sites (name → true) whose edge agent said in
	// its presence that it relays its ramdisks: their messages go bundled.
	relaying sync.Map
	// planning holds the sites whose edge agent said in its presence
	// that it runs plans (run_plan).
	planning sync.Map
	// revoker closes the broker connections of a revoked credential.
	revoker    atomic.Pointer[func(user string) int]
	phaseCount map[string]int

	secret []byte
	// Lock-free copies for the broker's authentication (see Authenticate).
	sitePass sync.Map // site → password hash
	nodeSite sync.Map // node UUID → site
	boots    sync.Map // node UUID → nonce of the current ramdisk boot
	// bootMACs holds each node's PXE-enabled port addresses ([]string,
	// replaced, never changed in place), for boot commands: the edge
	// agent answers network boot requests from these MACs only.
	bootMACs sync.Map
	reqs     chan *request
	sendq    []sendQueue
	stopped  chan struct{}
	stopOnce sync.Once
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	histSeq  uint64
	// hist is the bookkeeping of each node's history, to keep it under
	// the cap; used in the loop only.
	hist map[string]*histState
	// reachBk is what the engine knows of its sites' reachability
	// (reach.go); cacheBk the sites' image pre-seeds (sitecache.go).
	reachBk *reachBook
	cacheBk *cacheBook
	// software is what each site's edge agent said it runs (siteview.go).
	software sync.Map
	// views are the readers' kept views of the nodes (views.go).
	views viewCache
	// fatal is the database failure that stopped the engine
	// (storefail.go).
	fatal fatalState
	// cat holds the deploy templates and runbooks (catalog.go).
	cat catalog
	// cats are the step lists ramdisks offered, stored once each
	// (stepcat.go).
	cats *stepCats
}

type request struct {
	fn   func(tx *tx) error
	done chan error
}

// tx is one batch of work: what changed, what to send, whom to ack.
type tx struct {
	e     *Engine
	now   time.Time
	batch store.Batch
	dirty map[string]*fsm.Node
	sends []fsm.Outgoing
	// urgent are the first commands of verbs on idle nodes: they go out
	// ahead of the stream of other nodes' step commands, so a verb's
	// latency does not depend on how busy the site is.
	urgent []fsm.Outgoing
	acks   map[string][]string
	// histNew are the history keys this batch adds, per node.
	histNew map[string][]string
}

// sendQueue is one publisher's queue; urgent messages go first.
type sendQueue struct {
	urgent, normal chan fsm.Outgoing
}

// New opens the store, loads every node and recovers the ones that were
// busy when the coordinator stopped. Start must be called to run.
func New(cfg Config) (*Engine, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.TickInterval == 0 {
		cfg.TickInterval = time.Second
	}
	if cfg.MaxConcurrentClean == 0 {
		cfg.MaxConcurrentClean = 1000
	}
	if cfg.MaxConcurrentDeploy == 0 {
		cfg.MaxConcurrentDeploy = 1000
	}
	if cfg.HistoryMaxEntries <= 0 {
		cfg.HistoryMaxEntries = DefaultHistoryMaxEntries
	}
	if cfg.ValueLogGCInterval <= 0 {
		cfg.ValueLogGCInterval = DefaultValueLogGCInterval
	}
	if cfg.Machine.Drivers == nil {
		reg, err := drivers.NewRegistry(drivers.Builtin()...)
		if err != nil {
			return nil, err
		}
		cfg.Machine.Drivers = reg
	}
	// Clean step priority overrides that clash are refused at start, as
	// the cleaning seed says, not when a cleaning starts.
	if err := cfg.Machine.Check(); err != nil {
		return nil, err
	}
	if cfg.Machine.NewID == nil {
		cfg.Machine.NewID = func() string { return uuid.NewString() }
	}
	if cfg.Machine.NewToken == nil {
		cfg.Machine.NewToken = randomHex
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	// The database is encrypted at rest with a key of its own in the data
	// folder (db.key): the database holds BMC and rescue passwords.
	dbDir := filepath.Join(cfg.DataDir, "db")
	key, err := store.LoadKey(filepath.Join(cfg.DataDir, "db.key"), dbDir)
	if err != nil {
		return nil, err
	}
	secret, err := loadSecret(filepath.Join(cfg.DataDir, "secret"))
	if err != nil {
		return nil, err
	}
	if err := store.Restrict(cfg.DataDir, cfg.Log); err != nil {
		return nil, err
	}
	st, err := store.Open(dbDir, key, cfg.Log, cfg.StoreOptions...)
	if err != nil {
		return nil, err
	}
	e := &Engine{cfg: cfg, log: cfg.Log, st: st, secret: secret,
		nodes: map[string]*fsm.Node{}, names: map[string]string{}, ports: map[string]*Port{}, macs: map[string]string{},
		pgroups: map[string]*PortGroup{}, allocs: map[string]*Allocation{},
		sites: map[string]*Site{}, siteOnline: map[string]bool{}, phaseCount: map[string]int{},
		reqs: make(chan *request, 8192), stopped: make(chan struct{}), hist: map[string]*histState{}, fatal: newFatalState(),
		reachBk: &reachBook{sites: map[string]*siteReach{}, saveEvery: reachSaveInterval}, cacheBk: &cacheBook{byID: map[string]*CacheStatus{}}}
	// The network burn-in's pair keys derive from the engine's secret.
	cfg.Machine.BurninPair = e.burninPair
	e.cfg.Machine.BurninPair = e.burninPair
	if !cfg.NoEdgePlans && cfg.Machine.SitePlans == nil {
		cfg.Machine.SitePlans = e.sitePlans
		e.cfg.Machine.SitePlans = e.sitePlans
	}
	if err := e.openInspectionRules(&cfg); err != nil {
		st.Close()
		return nil, err
	}
	e.m = fsm.New(cfg.Machine)
	e.rejects = ratelog.New(cfg.Log, 0)
	e.cats = newStepCats()
	if err := e.load(); err != nil {
		st.Close()
		return nil, err
	}
	if err := e.loadHistory(); err != nil {
		st.Close()
		return nil, err
	}
	return e, nil
}

func randomHex() string {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func loadSecret(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err == nil && len(b) >= 32 {
		return b, nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	s := []byte(randomHex())
	if err := os.WriteFile(path, s, 0o600); err != nil {
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	return s, nil
}

func (e *Engine) load() error {
	if err := e.loadStepCats(); err != nil {
		return err
	}
	err := e.st.Scan(store.NodePrefix, func(_ string, v []byte) error {
		n, err := e.decodeNode(v)
		if err != nil {
			return fmt.Errorf("corrupt node record: %w", err)
		}
		e.nodes[n.UUID] = n
		e.publishAuth(n)
		e.cfg.Metrics.Loaded(n)
		if n.Name != "" {
			e.names[n.Name] = n.UUID
		}
		e.phaseCount[phaseOf(n)]++
		return nil
	})
	if err != nil {
		return err
	}
	if err := e.dropUnusedStepCats(); err != nil {
		return err
	}
	err = e.st.Scan(store.PortPrefix, func(_ string, v []byte) error {
		var p Port
		if err := json.Unmarshal(v, &p); err != nil {
			return err
		}
		e.ports[p.UUID] = &p
		e.macs[p.Address] = p.UUID
		e.notePort(&p, true)
		return nil
	})
	if err != nil {
		return err
	}
	if err := e.loadResources(); err != nil {
		return err
	}
	err = e.st.Scan(store.SitePrefix, func(_ string, v []byte) error {
		var s Site
		if err := json.Unmarshal(v, &s); err != nil {
			return err
		}
		e.sites[s.Name] = &s
		e.sitePass.Store(s.Name, s.PasswordHash)
		return nil
	})
	if err != nil {
		return err
	}
	if err := e.loadCatalog(); err != nil {
		return err
	}
	return e.loadReach()
}

// Machine returns the state machine (for read-only views).
func (e *Engine) Machine() *fsm.Machine { return e.m }

// Start recovers busy nodes and runs the loop, the ticker and the
// publishers until Close.
func (e *Engine) Start(pub Publisher) error {
	e.pub = pub
	e.ctx, e.cancel = context.WithCancel(context.Background())
	for i := 0; i < 8; i++ {
		q := sendQueue{urgent: make(chan fsm.Outgoing, 1024), normal: make(chan fsm.Outgoing, 4096)}
		e.sendq = append(e.sendq, q)
		e.wg.Add(1)
		go e.publisher(q)
	}
	// Recovery is the first batch: nothing else runs before it commits.
	t := e.newTx()
	recovered := 0
	for _, n := range e.nodes {
		if n.Op != nil || n.Reservation != "" {
			t.apply(n, e.m.Recover(n, t.now))
			recovered++
		}
	}
	if err := e.commit(t); err != nil {
		return err
	}
	if recovered > 0 {
		e.log.Info("recovered busy nodes after start", "nodes", recovered)
	}
	e.wg.Add(5)
	go e.loop()
	go e.ticker()
	go e.collector()
	go e.watchStore()
	go e.reachSaver(e.reachBk.saveEvery)
	return nil
}

// Close stops the loop and closes the database.
func (e *Engine) Close() {
	e.stopOnce.Do(func() {
		if e.cancel != nil {
			e.cancel()
		}
		close(e.stopped)
		e.wg.Wait()
		e.st.Close()
	})
}

func (e *Engine) newTx() *tx {
	return &tx{e: e, now: e.cfg.Now(), dirty: map[string]*fsm.Node{}, acks: map[string][]string{}}
}

func phaseOf(n *fsm.Node) string {
	if n.Op == nil {
		return ""
	}
	return string(n.Op.Phase)
}

// apply records the machine's output for n in the batch. Every change to
// a node goes through apply or t.dirty: both drop the readers' kept view
// of the node.
func (t *tx) apply(n *fsm.Node, out fsm.Output) {
	t.forget(n.UUID)
	switch {
	case out.Reject != "" && out.Late:
		t.e.rejects.Info("message ignored", "message ignored", "node", n.Ident(), "reason", out.Reject)
	case out.Reject != "":
		t.e.rejects.Warn("message rejected", "message rejected", "node", n.Ident(), "reason", out.Reject)
	}
	if out.Changed {
		t.dirty[n.UUID] = n
		// What a node keeps of a site's text stays bounded, whatever
		// the machine made of it (fsm.MaxText).
		n.LastError, n.MaintenanceReason = fsm.BoundText(n.LastError, 0), fsm.BoundText(n.MaintenanceReason, 0)
	}
	for _, h := range out.History {
		h.Event = fsm.BoundText(h.Event, 0)
		t.addHistory(n, h)
		t.e.cfg.Metrics.History(h)
		if h.Severity == "ERROR" {
			t.e.log.Warn("node error", "node", n.Ident(), "event", h.Event)
		} else {
			t.e.log.Debug("node event", "node", n.Ident(), "event", h.Event)
		}
	}
	if out.BMCWarnings > 0 {
		et := "power"
		for _, h := range out.History {
			if h.Severity == "WARNING" {
				et = h.EventType
				break
			}
		}
		t.e.cfg.Metrics.BMCWarnings(et, out.BMCWarnings)
	}
	if out.Inventory != nil {
		t.storeInventory(n, out)
	}
	if len(out.Ports) > 0 {
		t.inspectedPorts(n, out.Ports)
	}
	if out.Inventory != nil {
		t.linkPorts(n, out.Inventory)
	}
	t.sends = append(t.sends, out.Send...)
}

// run applies fn to n while accounting for phase changes (for the
// concurrency caps).
func (t *tx) run(n *fsm.Node, fn func() fsm.Output) {
	before := phaseOf(n)
	out := fn()
	t.e.cfg.Metrics.Node(n, t.now)
	after := phaseOf(n)
	if before != after {
		t.e.phaseCount[before]--
		t.e.phaseCount[after]++
	}
	t.apply(n, out)
}

func (e *Engine) commit(t *tx) error {
	for _, n := range t.dirty {
		t.forget(n.UUID)
		b, err := e.encodeNode(t, n)
		if err != nil {
			return err
		}
		t.batch.Set(store.NodePrefix+n.UUID, b)
	}
	start := time.Now()
	if err := e.st.Commit(&t.batch); err != nil {
		e.fail(err)
		return err
	}
	e.cfg.Metrics.Committed(time.Since(start))
	for _, n := range t.dirty {
		e.publishAuth(n)
	}
	for _, o := range t.urgent {
		e.enqueue(o, true)
	}
	for _, o := range t.sends {
		e.enqueue(o, false)
	}
	for topic, ids := range t.acks {
		e.enqueue(fsm.Outgoing{Topic: topic, Msg: &protocol.Message{V: protocol.Version, Kind: protocol.KindAck, ID: "ack", Sent: t.now, AckIDs: ids}}, false)
	}
	return nil
}

// maxBatch is the most requests one batch takes; callerBatchOthers is
// the most requests without a waiting caller (agent messages, ticks) that
// a batch with waiting callers takes.
const (
	maxBatch          = 1024
	callerBatchOthers = 64
)

func (e *Engine) loop() {
	defer e.wg.Done()
	var held []*request
	for {
		batch := held
		held = nil
		if len(batch) == 0 {
			select {
			case <-e.stopped:
				return
			case r := <-e.reqs:
				batch = append(batch, r)
			}
		}
	more:
		for len(batch) < maxBatch {
			select {
			case r := <-e.reqs:
				batch = append(batch, r)
			default:
				break more
			}
		}
		batch, held = callersFirst(batch)
		if e.Err() != nil {
			// Stopped for a database failure: no more work, and
			// callers hear why at once.
			for _, r := range append(batch, held...) {
				if r.done != nil {
					r.done <- e.stoppedError()
				}
			}
			held = nil
			continue
		}
		e.mu.Lock()
		t := e.newTx()
		errs := make([]error, len(batch))
		for i, r := range batch {
			errs[i] = e.runHeld(r.fn, t)
		}
		err := e.commit(t)
		e.mu.Unlock()
		for i, r := range batch {
			if r.done == nil {
				continue
			}
			switch {
			case err != nil && e.Err() != nil:
				r.done <- e.stoppedError()
			case err != nil:
				r.done <- errorf(Unavailable, "the coordinator could not store the change: %v", err)
			default:
				r.done <- errs[i]
			}
		}
	}
}

// callersFirst splits a batch that holds waiting callers (API requests)
// and more than callerBatchOthers other requests: the callers and the
// first callerBatchOthers others go now, the other others (in their
// order) first in the next batch. A batch's synced commit takes longer
// the more it writes (while nodes clean, a batch of agent messages
// rewrites a hundred node records), and a caller waits for the commit in
// flight and then for its own: its own is now a small one. Callers keep
// their order, and so do the others; a caller's request may go ahead of
// agent messages queued before it, as if it had come first (agent
// messages are handled asynchronously: nobody waits on their order with
// a caller's).
func callersFirst(batch []*request) (now, later []*request) {
	callers := 0
	for _, r := range batch {
		if r.done != nil {
			callers++
		}
	}
	if callers == 0 || len(batch)-callers <= callerBatchOthers {
		return batch, nil
	}
	now = make([]*request, 0, callers+callerBatchOthers)
	others := 0
	for _, r := range batch {
		switch {
		case r.done != nil:
			now = append(now, r)
		case others < callerBatchOthers:
			now = append(now, r)
			others++
		default:
			later = append(later, r)
		}
	}
	return now, later
}

func (e *Engine) ticker() {
	defer e.wg.Done()
	tk := time.NewTicker(e.cfg.TickInterval)
	defer tk.Stop()
	for {
		select {
		case <-e.stopped:
			return
		case <-tk.C:
			e.submit(func(t *tx) error {
				for _, n := range e.nodes {
					// A resting node is ticked only while it keeps its
					// ramdisk for fast track (powered off at the timeout).
					if n.Op == nil && n.FastTrackUntil.IsZero() {
						continue
					}
					online := e.siteOnline[n.Site]
					t.run(n, func() fsm.Output { out := e.m.Tick(n, t.now, online); e.cfg.Metrics.Resent(len(out.Send)); return out })
				}
				return nil
			}, false)
		}
	}
}

// submit queues fn for the loop; with wait it returns fn's error after
// the batch is durably committed.
func (e *Engine) submit(fn func(t *tx) error, wait bool) error {
	if e.Err() != nil {
		return e.stoppedError()
	}
	r := &request{fn: fn}
	if wait {
		r.done = make(chan error, 1)
	}
	select {
	case e.reqs <- r:
	case <-e.stopped:
		return errorf(Unavailable, "the coordinator is shutting down")
	case <-e.fatal.failed:
		return e.stoppedError()
	}
	if !wait {
		return nil
	}
	select {
	case err := <-r.done:
		return err
	case <-e.stopped:
		return errorf(Unavailable, "the coordinator is shutting down")
	case <-e.fatal.failed:
		// The loop may be stuck in the database that failed.
		return e.stoppedError()
	}
}

// Do runs fn in the loop and waits for its commit.
func (e *Engine) do(fn func(t *tx) error) error { return e.submit(fn, true) }

// lookup finds a node by UUID or name; callers hold e.mu.
func (e *Engine) lookup(ident string) (*fsm.Node, error) {
	if n, ok := e.nodes[ident]; ok {
		return n, nil
	}
	if id, ok := e.names[ident]; ok {
		return e.nodes[id], nil
	}
	return nil, errorf(NotFound, "Node %s could not be found.", ident)
}

// NodeCredentials returns the MQTT credential of the node's current
// ramdisk boot; ok is false when the node is not booting or running one.
func (e *Engine) NodeCredentials(nodeUUID string) (user, password string, ok bool) {
	v, ok := e.boots.Load(nodeUUID)
	if !ok {
		return "", "", false
	}
	return "node:" + nodeUUID, e.bootPassword(nodeUUID, v.(string)), true
}

// bootPassword derives a boot's credential from its nonce: the nonce is
// random per boot, the secret never leaves the coordinator, so the
// credential is fresh and unguessable, and nothing of it is stored.
func (e *Engine) bootPassword(nodeUUID, nonce string) string {
	return e.derive("boot:" + nodeUUID + ":" + nonce)
}

// CoordinatorCredentials are the coordinator's own MQTT credentials.
func (e *Engine) CoordinatorCredentials() (user, password string) {
	return "coordinator", e.derive("coordinator")
}

func (e *Engine) derive(what string) string {
	mac := hmac.New(sha256.New, e.secret)
	mac.Write([]byte(what))
	return hex.EncodeToString(mac.Sum(nil))
}

func hashPassword(p string) string {
	s := sha256.Sum256([]byte(p))
	return hex.EncodeToString(s[:])
}

// Client IDs: each identity has its own, so that nobody can resume (take
// over) another identity's session.
const (
	coordinatorClientID = "coordinator"
	edgeClientIDPrefix  = "edge-"
	nodeClientIDPrefix  = "ramdisk-"
)

// SiteClientID is the MQTT client ID of a site's edge agent. A site's
// other clients (tools, a second process) use SiteClientID + "." + suffix.
func SiteClientID(site string) string { return edgeClientIDPrefix + site }

// NodeClientID is the MQTT client ID of a node's ramdisk agent.
func NodeClientID(nodeUUID string) string { return nodeClientIDPrefix + nodeUUID }

// Authenticate implements broker.Credentials. It runs on the broker's
// connection goroutines for every CONNECT, publish and delivery, so it
// reads only the lock-free copies (sitePass, boots, the sites that run a
// site broker), never e.mu. Each refusal wraps its mqttbroker kind, by
// which the broker counts them in its bounded log.
func (e *Engine) Authenticate(user, password, clientID string) error {
	switch {
	case user == "coordinator":
		if !hmac.Equal([]byte(password), []byte(e.derive("coordinator"))) {
			return mqttbroker.ErrWrongPassword
		}
		if clientID != coordinatorClientID && !strings.HasPrefix(clientID, coordinatorClientID+".") {
			return fmt.Errorf("%w: %q does not belong to the coordinator (use %q)", mqttbroker.ErrClientID, clientID, coordinatorClientID)
		}
		return nil
	case strings.HasPrefix(user, "site:"):
		site := strings.TrimPrefix(user, "site:")
		h, ok := e.sitePass.Load(site)
		if !ok {
			return fmt.Errorf("%w: no such site", mqttbroker.ErrUnknownUser)
		}
		if !hmac.Equal([]byte(hashPassword(password)), []byte(h.(string))) {
			return mqttbroker.ErrWrongPassword
		}
		own := SiteClientID(site)
		if clientID != own && !strings.HasPrefix(clientID, own+".") {
			return fmt.Errorf("%w: %q does not belong to site %s (use %q)", mqttbroker.ErrClientID, clientID, site, own)
		}
		return nil
	case strings.HasPrefix(user, "node:"):
		id := strings.TrimPrefix(user, "node:")
		nonce, ok := e.boots.Load(id)
		if !ok {
			return fmt.Errorf("%w: no ramdisk boot of this node is under way (an earlier boot's credential, or an unknown node)", mqttbroker.ErrUnknownUser)
		}
		if !hmac.Equal([]byte(password), []byte(e.bootPassword(id, nonce.(string)))) {
			return fmt.Errorf("%w: not the credential of the node's current boot", mqttbroker.ErrWrongPassword)
		}
		if clientID != NodeClientID(id) {
			return fmt.Errorf("%w: %q does not belong to node %s (use %q)", mqttbroker.ErrClientID, clientID, id, NodeClientID(id))
		}
		if site, ok := e.nodeSite.Load(id); ok && e.reach().runsSiteBroker(site.(string)) {
			return fmt.Errorf("%w: site %s runs a site broker, which its ramdisks use; the coordinator's broker does not admit them", mqttbroker.ErrNotHere, site)
		}
		return nil
	}
	return mqttbroker.ErrUnknownUser
}

// Prefix implements broker.Credentials: the topic subtree of each user.
func (e *Engine) Prefix(user string) (string, bool) {
	switch {
	case user == "coordinator":
		return "", true
	case strings.HasPrefix(user, "site:"):
		return protocol.TopicPrefix + "/site/" + strings.TrimPrefix(user, "site:") + "/", true
	case strings.HasPrefix(user, "node:"):
		id := strings.TrimPrefix(user, "node:")
		site, ok := e.nodeSite.Load(id)
		if !ok {
			return "", false
		}
		return protocol.TopicPrefix + "/site/" + site.(string) + "/node/" + id + "/", true
	}
	return "", false
}

// publishAuth keeps the lock-free copies Authenticate reads in step with
// a node as committed: its site and its current boot's nonce.
func (e *Engine) publishAuth(n *fsm.Node) {
	e.nodeSite.Store(n.UUID, n.Site)
	if n.BootNonce == "" {
		e.boots.Delete(n.UUID)
	} else {
		e.boots.Store(n.UUID, n.BootNonce)
	}
}

// forgetAuth drops a deleted node's entries.
func (e *Engine) forgetAuth(nodeUUID string) {
	e.nodeSite.Delete(nodeUUID)
	e.boots.Delete(nodeUUID)
}

// withCredential replaces a boot command's nonce by the boot's credential,
// on a copy: the stored command keeps only the nonce.
func (e *Engine) withCredential(m *protocol.Message) *protocol.Message {
	nonce := protocol.PowerArgsOf(m.Args).BootNonce
	if nonce == "" {
		return m
	}
	c := *m
	c.Args = make(map[string]any, len(m.Args)+1)
	for k, v := range m.Args {
		if k != protocol.ArgBootNonce {
			c.Args[k] = v
		}
	}
	c.Args[protocol.ArgAgentUsername] = "node:" + m.Node
	c.Args[protocol.ArgAgentPassword] = e.bootPassword(m.Node, nonce)
	if macs, ok := e.bootMACs.Load(m.Node); ok {
		l := macs.([]string)
		a := make([]any, len(l))
		for i, x := range l {
			a[i] = x
		}
		c.Args[protocol.ArgBootMACs] = a
	}
	return &c
}

// notePort adds a PXE-enabled port's address to its node's boot MACs, or
// removes it. The caller holds e.mu for writing (or is loading).
func (e *Engine) notePort(p *Port, add bool) {
	if !p.PXE {
		return
	}
	var old []string
	if v, ok := e.bootMACs.Load(p.NodeUUID); ok {
		old = v.([]string)
	}
	l := make([]string, 0, len(old)+1)
	for _, x := range old {
		if x != p.Address {
			l = append(l, x)
		}
	}
	if add {
		l = append(l, p.Address)
	}
	if len(l) == 0 {
		e.bootMACs.Delete(p.NodeUUID)
		return
	}
	e.bootMACs.Store(p.NodeUUID, l)
}
