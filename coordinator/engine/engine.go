// Package engine runs the node state machine for real: it owns the nodes
// in memory and in Badger, feeds the machine with operator requests, agent
// messages and clock ticks from one loop, commits every batch of changes
// in one synced transaction, and only then publishes commands and answers
// callers. It must never decide lifecycle rules itself: that is fsm's job.
package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/google/uuid"

	"github.com/bmedge/bmedge/coordinator/engine/backups"
	"github.com/bmedge/bmedge/coordinator/engine/brokerauth"
	"github.com/bmedge/bmedge/coordinator/engine/catalog"
	"github.com/bmedge/bmedge/coordinator/engine/reach"
	"github.com/bmedge/bmedge/coordinator/engine/readings"
	"github.com/bmedge/bmedge/coordinator/engine/sites"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/coordinator/inspectrules"
	"github.com/bmedge/bmedge/coordinator/metrics"
	"github.com/bmedge/bmedge/coordinator/store"
	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/lib/clock"
	"github.com/bmedge/bmedge/lib/ratelog"
)

// Publisher sends MQTT messages.
type Publisher interface {
	Publish(ctx context.Context, topic string, payload []byte, retain bool) error
}

// Config configures an engine.
type Config struct {
	DataDir string
	Machine fsm.Config
	// Term is the coordinator cluster's current term, stamped on all the
	// engine sends the sites (protocol.Message.Term), so that their edge
	// agents refuse a deposed leader's messages; nil for a coordinator
	// that is no cluster member.
	Term func() uint64
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
	// Clock is the engine's time: the loop's batches, the ticks, the
	// catalog's stamps (nil: the system clock).
	Clock clock.Clock
	// Committer, if set, wraps the database as the seam of every write
	// (store.Committer): the engine gives it each batch instead of the
	// store (a replicated log applies the batch to the store itself).
	Committer func(*store.Store) store.Committer
	// Store, if set, is the database, already open: New does not open
	// the data folder's, and Close leaves it open (a cluster member's
	// store, to which the replicated log is applied whether or not this
	// member's engine runs).
	Store *store.Store
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
	// PhysicalNetwork (API 1.34) is the operator's, or set by an
	// inspection rule: the network the NIC is cabled to.
	PhysicalNetwork string     `json:"physical_network,omitempty"`
	CreatedAt       time.Time  `json:"created_at"`
	UpdatedAt       *time.Time `json:"updated_at"`
}

// Site is a registered edge site.
type Site = sites.Site

// Engine is the running coordinator core: the loop and its transaction
// (commit, then send), and the parts that own the rest, each under its
// own lock.
type Engine struct {
	cfg Config
	// rejects logs refused messages (a stale token, a wrong topic) at a
	// bounded rate: a cycling fleet makes some in every cycle (a
	// ramdisk's last heartbeat crossing its power-off), and an agent gone
	// wrong could make them without end.
	rejects *ratelog.Limiter
	m       *fsm.Machine
	// st is the database the engine reads; every write goes to commits
	// (store.Committer), the one seam of the engine's writes.
	st      *store.Store
	commits store.Committer
	// reg is the node registry (registry.go).
	reg *registry
	// auth is the broker's authorization (its lock-free copies), sites
	// the register of edge sites.
	auth  *brokerauth.Book
	sites *sites.Book
	// siteSt is what the engine knows of its sites besides their
	// register: reachability and the image pre-seeds.
	siteSt siteState
	// views are the readers' published views of the nodes (views.go).
	views viewCache
	// cat holds the deploy templates and runbooks (catalog.go).
	cat *catalog.Book
	// rules are the inspection rules (inspectrules.go).
	rules *inspectrules.Set
	// run is the loop's machinery (loop.go).
	run loopState
	// cons relays the nodes' serial consoles (console.go).
	cons *consoleHub
	// discSt is the discovery bookkeeping (discovery.go).
	discSt *discoveryState
}

// New opens the store, loads every node and recovers the ones that were
// busy when the coordinator stopped. Start must be called to run.
func New(cfg Config) (*Engine, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	cfg.Clock = clock.Or(cfg.Clock)
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
	dbDir := filepath.Join(cfg.DataDir, backups.DBFolder)
	secret, err := loadSecret(filepath.Join(cfg.DataDir, backups.SecretFile))
	if err != nil {
		return nil, err
	}
	st := cfg.Store
	if st == nil {
		key, err := store.LoadKey(filepath.Join(cfg.DataDir, backups.KeyFile), dbDir)
		if err != nil {
			return nil, err
		}
		if err := store.Restrict(cfg.DataDir, cfg.Log); err != nil {
			return nil, err
		}
		if st, err = store.Open(dbDir, key, cfg.Log, cfg.StoreOptions...); err != nil {
			return nil, err
		}
	}
	e := &Engine{cfg: cfg, st: st, commits: st, reg: newRegistry(), sites: sites.New(),
		siteSt: siteState{reach: reach.New(reachSaveInterval), cache: &cacheBook{byID: map[string]*CacheStatus{}}},
		cons:   newConsoleHub(),
		discSt: &discoveryState{dirty: map[string]bool{}, kick: make(chan struct{}, 1), seen: map[string]bool{}}}
	e.run = loopState{reqs: make(chan *request, 8192), stopped: make(chan struct{}), fatal: newFatalState()}
	e.auth = brokerauth.New(secret, e.reach().RunsSiteBroker)
	e.cat = catalog.New(e.saveRecord, cfg.Clock.Now)
	if cfg.Committer != nil {
		e.commits = cfg.Committer(st)
	}
	// The network burn-in's pair keys derive from the engine's secret.
	cfg.Machine.BurninPair = e.burninPair
	e.cfg.Machine.BurninPair = e.burninPair
	if !cfg.NoEdgePlans && cfg.Machine.SitePlans == nil {
		cfg.Machine.SitePlans = e.sitePlans
		e.cfg.Machine.SitePlans = e.sitePlans
	}
	if err := e.openInspectionRules(&cfg); err != nil {
		e.closeStore()
		return nil, err
	}
	e.m = fsm.New(cfg.Machine)
	e.rejects = ratelog.New(cfg.Log, 0)
	if err := e.load(); err != nil {
		e.closeStore()
		return nil, err
	}
	if err := e.loadHistory(); err != nil {
		e.closeStore()
		return nil, err
	}
	e.views.publishAll(e.reg.nodes)
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
	if err := e.checkFormat(); err != nil {
		return err
	}
	if err := e.loadStepCats(); err != nil {
		return err
	}
	if err := e.loadPlans(); err != nil {
		return err
	}
	err := e.st.Scan(store.NodePrefix, func(_ string, v []byte) error {
		n, err := e.decodeNode(v)
		if err != nil {
			return fmt.Errorf("corrupt node record: %w", err)
		}
		e.reg.nodes[n.UUID] = n
		e.auth.SetNode(n.UUID, n.Site, n.BootNonce)
		e.cfg.Metrics.Loaded(n)
		if n.Name != "" {
			e.reg.names[n.Name] = n.UUID
		}
		e.reg.phaseCount[phaseOf(n)]++
		return nil
	})
	if err != nil {
		return err
	}
	if err := e.dropUnusedStepCats(); err != nil {
		return err
	}
	if err := e.dropUnusedPlans(); err != nil {
		return err
	}
	if e.cfg.Metrics != nil {
		for id := range e.reg.nodes {
			s, err := readings.LoadSensors(e.st, id)
			if err != nil {
				e.cfg.Log.Warn("the node's kept sensor readings could not be read; /metrics shows none until its next health report", "node", id, "err", err)
			}
			if s != nil {
				e.cfg.Metrics.Sensors(id, s.Sensors)
			}
		}
	}
	err = e.st.Scan(store.PortPrefix, func(_ string, v []byte) error {
		var p Port
		if err := json.Unmarshal(v, &p); err != nil {
			return err
		}
		e.reg.ports[p.UUID] = &p
		e.reg.macs[p.Address] = p.UUID
		e.auth.NotePort(p.NodeUUID, p.Address, p.PXE, true)
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
		e.sites.Put(&s)
		e.auth.SetSite(s.Name, s.PasswordHash)
		return nil
	})
	if err != nil {
		return err
	}
	if err := e.cat.Load(e.st); err != nil {
		return err
	}
	return e.reach().Load(e.st)
}

// Machine returns the state machine (for read-only views).
func (e *Engine) Machine() *fsm.Machine { return e.m }

// Start recovers busy nodes and runs the loop, the ticker and the
// publishers until Close.
func (e *Engine) Start(pub Publisher) error {
	e.run.pub = pub
	e.run.ctx, e.run.cancel = context.WithCancel(context.Background())
	for i := 0; i < 8; i++ {
		q := sendQueue{urgent: make(chan fsm.Outgoing, 1024), normal: make(chan fsm.Outgoing, 4096)}
		e.run.sendq = append(e.run.sendq, q)
		e.run.wg.Add(1)
		go e.publisher(q)
	}
	// Recovery is the first batch: nothing else runs before it commits.
	t := e.newTx()
	recovered := 0
	for _, n := range e.reg.nodes {
		if n.Op != nil || n.Reservation != "" {
			t.apply(n, e.m.Recover(n, t.now))
			recovered++
		}
	}
	if err := e.commit(t); err != nil {
		return err
	}
	if recovered > 0 {
		e.cfg.Log.Info("recovered busy nodes after start", "nodes", recovered)
	}
	e.run.wg.Add(5)
	go e.loop()
	go e.ticker()
	go e.collector()
	go e.watchStore()
	go e.reachSaver(e.siteSt.reach.SaveEvery)
	e.run.wg.Add(1)
	go e.discoveryPublisher()
	return nil
}

// Close stops the loop and closes the database.
func (e *Engine) Close() {
	e.run.stopOnce.Do(func() {
		if e.run.cancel != nil {
			e.run.cancel()
		}
		close(e.run.stopped)
		e.run.wg.Wait()
		e.closeStore()
	})
}

// closeStore closes the database unless it was given open (Config.Store).
func (e *Engine) closeStore() {
	if e.cfg.Store == nil {
		e.st.Close()
	}
}

// lookup finds a node by UUID or name; callers hold e.reg.mu.
func (e *Engine) lookup(ident string) (*fsm.Node, error) {
	if n, ok := e.reg.nodes[ident]; ok {
		return n, nil
	}
	if id, ok := e.reg.names[ident]; ok {
		return e.reg.nodes[id], nil
	}
	return nil, errorf(NotFound, "Node %s could not be found.", ident)
}
