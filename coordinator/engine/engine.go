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
	"hash/fnv"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/coordinator/store"
	"github.com/bmedge/bmedge/drivers"
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
	// MaxConcurrentClean and MaxConcurrentDeploy cap the nodes in cleaning
	// or deploying at once; a verb over the cap gets 503, as in Ironic.
	MaxConcurrentClean  int
	MaxConcurrentDeploy int
	TickInterval        time.Duration
	Log                 *slog.Logger
	Now                 func() time.Time
	// OnFatal is called when the database cannot be written; the process
	// must exit (crash-only: a restart recovers from what is on disk).
	OnFatal func(error)
}

// Error is an error with the HTTP status the API answers.
type Error struct {
	Code int
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

func errorf(code int, f string, a ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(f, a...)}
}

// Port is a network port of a node (Ironic's port).
type Port struct {
	UUID      string         `json:"uuid"`
	Address   string         `json:"address"`
	NodeUUID  string         `json:"node_uuid"`
	Extra     map[string]any `json:"extra,omitempty"`
	PXE       bool           `json:"pxe_enabled"`
	CreatedAt time.Time      `json:"created_at"`
	UpdatedAt *time.Time     `json:"updated_at"`
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
	m   *fsm.Machine
	st  *store.Store
	pub Publisher

	mu         sync.RWMutex
	nodes      map[string]*fsm.Node
	names      map[string]string
	ports      map[string]*Port
	macs       map[string]string
	sites      map[string]*Site
	siteOnline map[string]bool
	phaseCount map[string]int

	secret   []byte
	reqs     chan *request
	sendq    []sendQueue
	stopped  chan struct{}
	stopOnce sync.Once
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	histSeq  uint64
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
	if cfg.OnFatal == nil {
		cfg.OnFatal = func(err error) {
			cfg.Log.Error("fatal: cannot write the database; exiting so that a restart recovers", "err", err)
			os.Exit(3)
		}
	}
	if cfg.Machine.Drivers == nil {
		reg, err := drivers.NewRegistry(drivers.Builtin()...)
		if err != nil {
			return nil, err
		}
		cfg.Machine.Drivers = reg
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
	secret, err := loadSecret(filepath.Join(cfg.DataDir, "secret"))
	if err != nil {
		return nil, err
	}
	st, err := store.Open(filepath.Join(cfg.DataDir, "db"), cfg.Log)
	if err != nil {
		return nil, err
	}
	e := &Engine{cfg: cfg, log: cfg.Log, st: st, secret: secret,
		nodes: map[string]*fsm.Node{}, names: map[string]string{}, ports: map[string]*Port{}, macs: map[string]string{},
		sites: map[string]*Site{}, siteOnline: map[string]bool{}, phaseCount: map[string]int{},
		reqs: make(chan *request, 8192), stopped: make(chan struct{})}
	if cfg.Machine.AgentCredentials == nil {
		cfg.Machine.AgentCredentials = e.NodeCredentials
	}
	e.m = fsm.New(cfg.Machine)
	if err := e.load(); err != nil {
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
	err := e.st.Scan(store.NodePrefix, func(_ string, v []byte) error {
		var n fsm.Node
		if err := json.Unmarshal(v, &n); err != nil {
			return fmt.Errorf("corrupt node record: %w", err)
		}
		e.nodes[n.UUID] = &n
		if n.Name != "" {
			e.names[n.Name] = n.UUID
		}
		e.phaseCount[phaseOf(&n)]++
		return nil
	})
	if err != nil {
		return err
	}
	err = e.st.Scan(store.PortPrefix, func(_ string, v []byte) error {
		var p Port
		if err := json.Unmarshal(v, &p); err != nil {
			return err
		}
		e.ports[p.UUID] = &p
		e.macs[p.Address] = p.UUID
		return nil
	})
	if err != nil {
		return err
	}
	return e.st.Scan(store.SitePrefix, func(_ string, v []byte) error {
		var s Site
		if err := json.Unmarshal(v, &s); err != nil {
			return err
		}
		e.sites[s.Name] = &s
		return nil
	})
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
	e.wg.Add(2)
	go e.loop()
	go e.ticker()
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
	return n.Op.Phase
}

// apply records the machine's output for n in the batch.
func (t *tx) apply(n *fsm.Node, out fsm.Output) {
	switch {
	case out.Reject != "" && out.Late:
		t.e.log.Info("message ignored", "node", n.Ident(), "reason", out.Reject)
	case out.Reject != "":
		t.e.log.Warn("message rejected", "node", n.Ident(), "reason", out.Reject)
	}
	if out.Changed {
		t.dirty[n.UUID] = n
	}
	for _, h := range out.History {
		t.e.histSeq++
		b, _ := json.Marshal(h)
		t.batch.Set(fmt.Sprintf("%s%s/%020d-%08d", store.HistoryPrefix, n.UUID, h.Time.UnixNano(), t.e.histSeq%100000000), b)
		if h.Severity == "ERROR" {
			t.e.log.Warn("node error", "node", n.Ident(), "event", h.Event)
		} else {
			t.e.log.Debug("node event", "node", n.Ident(), "event", h.Event)
		}
	}
	if out.Inventory != nil {
		b, _ := json.Marshal(out.Inventory)
		t.batch.Set(store.InventoryPrefix+n.UUID, b)
	}
	t.sends = append(t.sends, out.Send...)
}

// run applies fn to n while accounting for phase changes (for the
// concurrency caps).
func (t *tx) run(n *fsm.Node, fn func() fsm.Output) {
	before := phaseOf(n)
	out := fn()
	after := phaseOf(n)
	if before != after {
		t.e.phaseCount[before]--
		t.e.phaseCount[after]++
	}
	t.apply(n, out)
}

func (e *Engine) commit(t *tx) error {
	for _, n := range t.dirty {
		b, err := json.Marshal(n)
		if err != nil {
			return err
		}
		t.batch.Set(store.NodePrefix+n.UUID, b)
	}
	if err := e.st.Commit(&t.batch); err != nil {
		e.cfg.OnFatal(err)
		return err
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

func (e *Engine) enqueue(o fsm.Outgoing, urgent bool) {
	// One queue per node keeps a node's messages in order. Acks name no
	// node; their topic spreads them instead.
	key := o.Msg.Node
	if key == "" {
		key = o.Topic
	}
	h := fnv.New32a()
	h.Write([]byte(key))
	sq := e.sendq[int(h.Sum32())%len(e.sendq)]
	q := sq.normal
	if urgent {
		q = sq.urgent
	}
	select {
	case q <- o:
	default:
		// A full queue means the broker is far behind; the resend loop
		// delivers the command later, so dropping here loses nothing.
		e.log.Warn("send queue full; message left to the resend loop", "topic", o.Topic)
	}
}

func (e *Engine) publisher(q sendQueue) {
	defer e.wg.Done()
	for {
		var o fsm.Outgoing
		select {
		case o = <-q.urgent:
		default:
			select {
			case <-e.stopped:
				return
			case o = <-q.urgent:
			case o = <-q.normal:
			}
		}
		b, err := protocol.Encode(o.Msg)
		if err != nil {
			e.log.Error("not sending invalid message", "topic", o.Topic, "err", err)
			continue
		}
		ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
		if err := e.pub.Publish(ctx, o.Topic, b, false); err != nil {
			e.log.Debug("publish failed; the resend loop will retry", "topic", o.Topic, "err", err)
		}
		cancel()
	}
}

func (e *Engine) loop() {
	defer e.wg.Done()
	for {
		var first *request
		select {
		case <-e.stopped:
			return
		case first = <-e.reqs:
		}
		batch := []*request{first}
	more:
		for len(batch) < 1024 {
			select {
			case r := <-e.reqs:
				batch = append(batch, r)
			default:
				break more
			}
		}
		e.mu.Lock()
		t := e.newTx()
		errs := make([]error, len(batch))
		for i, r := range batch {
			errs[i] = r.fn(t)
		}
		err := e.commit(t)
		e.mu.Unlock()
		for i, r := range batch {
			if r.done == nil {
				continue
			}
			if err != nil {
				r.done <- errorf(503, "the coordinator could not store the change: %v", err)
			} else {
				r.done <- errs[i]
			}
		}
	}
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
					if n.Op == nil {
						continue
					}
					online := e.siteOnline[n.Site]
					t.run(n, func() fsm.Output { return e.m.Tick(n, t.now, online) })
				}
				return nil
			}, false)
		}
	}
}

// submit queues fn for the loop; with wait it returns fn's error after
// the batch is durably committed.
func (e *Engine) submit(fn func(t *tx) error, wait bool) error {
	r := &request{fn: fn}
	if wait {
		r.done = make(chan error, 1)
	}
	select {
	case e.reqs <- r:
	case <-e.stopped:
		return errorf(503, "the coordinator is shutting down")
	}
	if !wait {
		return nil
	}
	select {
	case err := <-r.done:
		return err
	case <-e.stopped:
		return errorf(503, "the coordinator is shutting down")
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
	return nil, errorf(404, "Node %s could not be found.", ident)
}

// NodeCredentials returns the MQTT username and password of a node's
// ramdisk agent. The password is derived from the coordinator's secret,
// so nothing needs storing.
func (e *Engine) NodeCredentials(nodeUUID string) (user, password string) {
	return "node:" + nodeUUID, e.derive("node:" + nodeUUID)
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

// Check implements broker.Credentials.
func (e *Engine) Check(user, password string) bool {
	switch {
	case user == "coordinator":
		return hmac.Equal([]byte(password), []byte(e.derive("coordinator")))
	case strings.HasPrefix(user, "site:"):
		e.mu.RLock()
		s, ok := e.sites[strings.TrimPrefix(user, "site:")]
		e.mu.RUnlock()
		return ok && hmac.Equal([]byte(hashPassword(password)), []byte(s.PasswordHash))
	case strings.HasPrefix(user, "node:"):
		id := strings.TrimPrefix(user, "node:")
		e.mu.RLock()
		_, ok := e.nodes[id]
		e.mu.RUnlock()
		return ok && hmac.Equal([]byte(password), []byte(e.derive(user)))
	}
	return false
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
		e.mu.RLock()
		n, ok := e.nodes[id]
		site := ""
		if ok {
			site = n.Site
		}
		e.mu.RUnlock()
		if !ok {
			return "", false
		}
		return protocol.TopicPrefix + "/site/" + site + "/node/" + id + "/", true
	}
	return "", false
}
