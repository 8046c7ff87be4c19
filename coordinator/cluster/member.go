// Package cluster makes three (or five) coordinators one: every batch
// the engine commits is an entry of a replicated log (hashicorp/raft),
// applied in order to every member's Badger store; only the leader runs
// the engine, and the other members answer the API by forwarding to it.
// It holds no business rules, and it never changes the store except by
// applying the log (or restoring a snapshot of it).
package cluster

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/bmedge/bmedge/coordinator/store"
	"github.com/bmedge/bmedge/lib/kvstore"
)

// Peer is a member's name and cluster-link address.
type Peer struct {
	Name string `json:"name"`
	Addr string `json:"address"`
}

// ParsePeers reads --cluster-peers: NAME=HOST:PORT,... (every member,
// this one included).
func ParsePeers(s string) ([]Peer, error) {
	var out []Peer
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, addr, ok := strings.Cut(part, "=")
		if !ok || name == "" || addr == "" {
			return nil, fmt.Errorf("--cluster-peers: %q is not NAME=HOST:PORT", part)
		}
		if err := CheckName(name); err != nil {
			return nil, fmt.Errorf("--cluster-peers: %w", err)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("--cluster-peers: %s=%s: %v", name, addr, err)
		}
		if seen[name] {
			return nil, fmt.Errorf("--cluster-peers: member %s is named twice", name)
		}
		seen[name] = true
		out = append(out, Peer{Name: name, Addr: addr})
	}
	if len(out) == 0 {
		return nil, errors.New("--cluster-peers: no member given; list every member, this one included: NAME=HOST:PORT,...")
	}
	return out, nil
}

// CheckName checks a member's name: letters, digits, '-', '_', '.', at
// most 63.
func CheckName(name string) error {
	if name == "" || len(name) > 63 {
		return fmt.Errorf("member name %q: give 1 to 63 letters, digits, '-', '_' or '.'", name)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return fmt.Errorf("member name %q: give 1 to 63 letters, digits, '-', '_' or '.'", name)
		}
	}
	return nil
}

// Config configures a member.
type Config struct {
	// Name is the member's name (--cluster-member), Listen its cluster
	// link (--cluster-listen), Peers every member (--cluster-peers).
	Name   string
	Listen string
	Peers  []Peer
	// BrokerURL is this member's MQTT broker as the sites reach it: the
	// Server Reference a follower's broker gives a site while this
	// member leads.
	BrokerURL string
	// DataDir is the member's data folder: db (the store), db.key,
	// secret, and raft (the replicated log and its snapshots).
	DataDir string
	// TLS is the link's mutual TLS (LoadTLS).
	TLS *tls.Config
	Log *slog.Logger
	// Timing: raft's heartbeat and election timeouts (default 1 s) and
	// leader lease (default 500 ms); tests shorten them.
	HeartbeatTimeout, ElectionTimeout, LeaderLease time.Duration
	// SnapshotThreshold is how many entries after the last snapshot make
	// raft take another (default 8192); TrailingLogs how many entries a
	// snapshot leaves in the log for slow followers (default 10240).
	SnapshotThreshold, TrailingLogs uint64
	// StoreOptions are passed to store.Open (tests).
	StoreOptions []store.Option
	// transport replaces the link (tests with raft's in-memory
	// transport).
	transport raft.Transport
}

// Member is a running cluster member: its store, the replicated log and
// the link.
type Member struct {
	cfg   Config
	st    *store.Store
	logs  *walLog
	snaps raft.SnapshotStore
	fsm   *fsm
	raft  *raft.Raft
	link  *link
	trans raft.Transport
	log   *slog.Logger
	// leading gets raft's leadership changes.
	leading chan bool
	// api serves the link's forwarded API requests and the members'
	// own questions (status, configuration).
	api     *http.Server
	handler struct {
		sync.Mutex
		h http.Handler
	}
	client *http.Client
	// fingerprint names the member's db.key and secret (keys.go).
	fingerprint string
	stats       memberStats
	// ref is the leader's broker URL last asked (LeaderBrokerURL).
	refMu     sync.Mutex
	ref       leaderRef
	closeOnce sync.Once
	failed    chan struct{}
	stopped   chan struct{}
}

type leaderRef struct {
	name string
	term uint64
	url  string
}

// Open opens the member's store and log, joins or forms the cluster
// (the first start of members with the same --cluster-peers forms it)
// and returns once raft runs; Leading then says when this member leads.
func Open(cfg Config) (*Member, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if err := CheckName(cfg.Name); err != nil {
		return nil, fmt.Errorf("--cluster-member: %w", err)
	}
	self := slices.IndexFunc(cfg.Peers, func(p Peer) bool { return p.Name == cfg.Name })
	if self < 0 {
		return nil, fmt.Errorf("--cluster-peers does not name this member %s: list every member, this one included (%s=%s)", cfg.Name, cfg.Name, cfg.Listen)
	}
	if cfg.transport == nil && cfg.TLS == nil {
		return nil, errors.New("a cluster member needs its member certificate: --cluster-cert, --cluster-cert-key and --cluster-ca ('coordinator certs --dir DIR --member NAME')")
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	dbDir := filepath.Join(cfg.DataDir, "db")
	if err := needKeys(cfg.DataDir); err != nil {
		return nil, err
	}
	key, err := store.ReadKey(filepath.Join(cfg.DataDir, keyFile))
	if err != nil {
		return nil, err
	}
	if err := store.Restrict(cfg.DataDir, cfg.Log); err != nil {
		return nil, err
	}
	fp, err := fingerprint(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	m := &Member{fingerprint: fp, cfg: cfg, log: cfg.Log, leading: make(chan bool, 16), failed: make(chan struct{}), stopped: make(chan struct{})}
	ok := false
	defer func() {
		if !ok {
			m.closeParts()
		}
	}()
	// The store is not synced on each commit: the synced raft log is the
	// durable record (an entry is on a majority's disks before the engine
	// sends what it caused), and every start rebuilds the store from the
	// latest snapshot and the log after it (raft restores the snapshot,
	// then applies the entries again; a batch only sets and deletes keys,
	// so applying it twice is harmless).
	stOpts := append([]store.Option{store.WithoutSync()}, cfg.StoreOptions...)
	if m.st, err = store.Open(dbDir, key, cfg.Log, stOpts...); err != nil {
		return nil, err
	}
	raftDir := filepath.Join(cfg.DataDir, "raft")
	if err := os.MkdirAll(raftDir, 0o700); err != nil {
		return nil, err
	}
	hl := hclog.New(&hclog.LoggerOptions{Name: "raft", Level: hclog.Warn, Output: &slogWriter{log: cfg.Log}, DisableTime: true})
	if m.logs, err = openLog(raftDir, key, m.kvNames(), hl, cfg.Log); err != nil {
		return nil, err
	}
	if m.snaps, err = raft.NewFileSnapshotStoreWithLogger(raftDir, 2, hl); err != nil {
		return nil, err
	}
	m.fsm = &fsm{stats: &m.stats, st: m.st, key: key, dataDir: cfg.DataDir, spool: raftDir, secret: func() ([]byte, error) {
		b, err := os.ReadFile(filepath.Join(cfg.DataDir, secretFile))
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return b, err
	}}
	m.trans = cfg.transport
	if m.trans == nil {
		if m.link, err = newLink(cfg.Listen, cfg.Peers[self].Addr, cfg.TLS, cfg.Log); err != nil {
			return nil, err
		}
		m.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
			Stream: raftLayer{connQueue: m.link.raft, l: m.link}, MaxPool: 3, Timeout: 10 * time.Second, Logger: hl})
		m.client = &http.Client{Transport: &http.Transport{
			DialTLSContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
				return m.link.dial(addr, linkAPI, 5*time.Second)
			},
			MaxIdleConnsPerHost: 16, IdleConnTimeout: time.Minute, ResponseHeaderTimeout: 5 * time.Minute,
		}}
		m.api = &http.Server{Handler: http.HandlerFunc(m.serveLink), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
			ErrorLog: slog.NewLogLogger(cfg.Log.Handler(), slog.LevelInfo)}
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.Name)
	rc.Logger = hl
	rc.NotifyCh = m.leading
	rc.HeartbeatTimeout = or(cfg.HeartbeatTimeout, time.Second)
	rc.ElectionTimeout = or(cfg.ElectionTimeout, time.Second)
	rc.LeaderLeaseTimeout = or(cfg.LeaderLease, 500*time.Millisecond)
	if cfg.SnapshotThreshold > 0 {
		rc.SnapshotThreshold = cfg.SnapshotThreshold
	}
	if cfg.TrailingLogs > 0 {
		rc.TrailingLogs = cfg.TrailingLogs
	}
	has, err := raft.HasExistingState(m.logs, m.logs, m.snaps)
	if err != nil {
		return nil, err
	}
	if !has {
		if err := m.bootstrap(rc); err != nil {
			return nil, err
		}
	}
	// The last entries stay in memory as raft made them: the leader
	// sends each to every follower (and again to one that lags) without
	// reading and unsealing it from the log files.
	cached, err := raft.NewLogCache(logCacheEntries, m.logs)
	if err != nil {
		return nil, err
	}
	if m.raft, err = raft.NewRaft(rc, m.fsm, cached, m.logs, m.snaps, m.trans); err != nil {
		return nil, err
	}
	if m.api != nil {
		// Served once raft runs: its answers are raft's.
		go func() { _ = m.api.Serve(m.link.api) }()
	}
	m.observe()
	go m.watchStore()
	go m.promote()
	go m.collect()
	ok = true
	return m, nil
}

func or(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// bootstrap forms the cluster on a member's first start, unless another
// member already belongs to one: a member added later (add-member) waits
// for the leader to send it the log, and one that an existing cluster
// does not list is refused.
func (m *Member) bootstrap(rc *raft.Config) error {
	for _, p := range m.cfg.Peers {
		if p.Name == m.cfg.Name || m.client == nil {
			continue
		}
		var self MemberStatus
		if err := m.ask(p.Addr, "/cluster/self", &self); err != nil {
			continue // down
		}
		if self.Fingerprint != m.fingerprint {
			return fmt.Errorf("member %s (%s) holds another db.key or secret than this member's data folder %s: copy both files from a member of the cluster, then start again", p.Name, p.Addr, m.cfg.DataDir)
		}
		conf, err := m.peerConfiguration(p.Addr)
		if err != nil || len(conf) == 0 {
			continue // not formed either
		}
		if slices.ContainsFunc(conf, func(q Peer) bool { return q.Name == m.cfg.Name }) {
			m.log.Info("joining the existing cluster", "member", m.cfg.Name, "asked", p.Name)
			return nil
		}
		return fmt.Errorf("member %s (%s) belongs to a cluster that does not list %s: run 'coordinator cluster add-member %s %s' against the cluster first, then start this member again",
			p.Name, p.Addr, m.cfg.Name, m.cfg.Name, m.cfg.Listen)
	}
	// A store that holds data no log entry carries (a single
	// coordinator's, or a restored backup) can only start a cluster of
	// one, which then copies it into the log (Seed) before its engine
	// runs; among several members an empty one could lead and the data
	// would diverge.
	empty := true
	if err := m.st.Keys("", "", func(string) bool { empty = false; return false }); err != nil {
		return err
	}
	if !empty {
		if len(m.cfg.Peers) > 1 {
			return fmt.Errorf("the data folder %s holds a database but no replicated log: a coordinator's data becomes a cluster as a cluster of one. "+
				"Start it with --cluster-peers %s=%s (itself alone), then add the other members with 'coordinator cluster add-member' (their data folders empty but for db.key and secret)",
				m.cfg.DataDir, m.cfg.Name, m.cfg.Listen)
		}
		if err := writeFileSynced(filepath.Join(m.cfg.DataDir, "raft", seedFile), []byte("the store's data is not in the log yet\n")); err != nil {
			return err
		}
	}
	var servers []raft.Server
	for _, p := range m.cfg.Peers {
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.Name), Address: raft.ServerAddress(p.Addr)})
	}
	if m.cfg.transport != nil {
		// In-memory transports name themselves.
		for i := range servers {
			servers[i].Address = raft.ServerAddress(m.cfg.Peers[i].Addr)
		}
	}
	if err := raft.BootstrapCluster(rc, m.logs, m.logs, m.snaps, m.trans, raft.Configuration{Servers: servers}); err != nil {
		return fmt.Errorf("form the cluster: %w", err)
	}
	m.log.Info("formed the cluster", "member", m.cfg.Name, "members", len(servers))
	return nil
}

func (m *Member) kvNames() (cfg kvstore.Config) {
	cfg.Log = m.log
	cfg.FailOnLoggedErrors = true
	return cfg
}

// Store is the member's store (the engine's, when it leads).
func (m *Member) Store() *store.Store { return m.st }

// Committer is the engine's seam (engine.Config.Committer) on this
// member.
func (m *Member) Committer(*store.Store) store.Committer {
	return &committer{r: m.raft, timeout: 10 * time.Second}
}

// Leading delivers true when this member becomes the leader and false
// when it stops being it.
func (m *Member) Leading() <-chan bool { return m.leading }

// IsLeader says whether raft has this member as the leader.
func (m *Member) IsLeader() bool { return m.raft.State() == raft.Leader }

// Barrier returns once every entry committed before it is applied to
// this member's store: a new leader loads its engine after it.
func (m *Member) Barrier(timeout time.Duration) error { return m.raft.Barrier(timeout).Error() }

// VerifyLeader returns once a majority has confirmed that this member
// still leads (one round of heartbeats), or with the error that it does
// not: a read answered after it cannot miss a write another leader
// committed.
func (m *Member) VerifyLeader() error { return m.raft.VerifyLeader().Error() }

// Leader is the leader's name and link address ("" when there is none).
func (m *Member) Leader() Peer {
	addr, id := m.raft.LeaderWithID()
	return Peer{Name: string(id), Addr: string(addr)}
}

// Name is the member's name.
func (m *Member) Name() string { return m.cfg.Name }

// Term is the member's current raft term: on the leader, the term it
// leads in, which the engine stamps on what it sends the sites.
func (m *Member) Term() uint64 { return m.raft.CurrentTerm() }

// LeaderBrokerURL is the leader's broker URL as the leader reports it
// (its Config.BrokerURL; "" while there is no leader, or it did not
// answer), asked over the link once per leader and term.
func (m *Member) LeaderBrokerURL() string {
	l := m.Leader()
	if l.Name == "" {
		return ""
	}
	if l.Name == m.cfg.Name {
		return m.cfg.BrokerURL
	}
	term := m.raft.CurrentTerm()
	m.refMu.Lock()
	ref := m.ref
	m.refMu.Unlock()
	if ref.name == l.Name && ref.term == term && ref.url != "" {
		return ref.url
	}
	if m.client == nil {
		return ""
	}
	var got MemberStatus
	if err := m.ask(l.Addr, "/cluster/self", &got); err != nil || got.Name != l.Name {
		return ""
	}
	m.refMu.Lock()
	m.ref = leaderRef{name: l.Name, term: term, url: got.BrokerURL}
	m.refMu.Unlock()
	return got.BrokerURL
}

// Failed is closed when the member's store failed: the process must end
// (crash-only, as a single coordinator's).
func (m *Member) Failed() <-chan struct{} { return m.failed }

func (m *Member) watchStore() {
	select {
	case <-m.st.Failed():
		m.log.Error("the member's store failed; this member stops (start it again once the cause is fixed)", "err", m.st.Err())
		close(m.failed)
	case <-m.stopped:
	}
}

// SetHandler sets what answers the API requests that followers forward
// over the link (the leader's API), nil for none.
func (m *Member) SetHandler(h http.Handler) {
	m.handler.Lock()
	m.handler.h = h
	m.handler.Unlock()
}

// Close stops raft and closes the log and the store. Other members see
// this one go, as if it had crashed.
func (m *Member) Close() error {
	m.closeOnce.Do(func() {
		close(m.stopped)
		m.closeParts()
	})
	return nil
}

func (m *Member) closeParts() {
	if m.raft != nil {
		_ = m.raft.Shutdown().Error()
	}
	if m.api != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = m.api.Shutdown(ctx)
		cancel()
	}
	if c, ok := m.trans.(io.Closer); ok && c != nil {
		_ = c.Close()
	}
	if m.link != nil {
		_ = m.link.Close()
	}
	if m.logs != nil {
		_ = m.logs.Close()
	}
	if m.st != nil {
		_ = m.st.Close()
	}
}

// slogWriter takes hclog's lines into the coordinator's log.
type slogWriter struct{ log *slog.Logger }

func (w *slogWriter) Write(p []byte) (int, error) {
	sc := bufio.NewScanner(bytes.NewReader(p))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		switch {
		case strings.Contains(line, "[ERROR]"):
			w.log.Error(line)
		default:
			w.log.Warn(line)
		}
	}
	return len(p), nil
}

// sortPeers orders peers by name.
func sortPeers(p []Peer) { sort.Slice(p, func(i, j int) bool { return p[i].Name < p[j].Name }) }

// peerConfiguration asks the member at addr for the cluster's members as
// it knows them (none: it formed no cluster yet).
func (m *Member) peerConfiguration(addr string) ([]Peer, error) {
	var conf []Peer
	err := m.ask(addr, "/cluster/configuration", &conf)
	return conf, err
}

// ask gets a member's own answer over the link.
func (m *Member) ask(addr, path string, v any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+path, nil)
	if err != nil {
		return err
	}
	resp, err := m.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("member %s answered %s", addr, resp.Status)
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(v)
}

// Recover makes a stopped member's data the whole of a new cluster of
// one member (name at listen), after the loss of a majority: every entry
// in its log counts as committed (entries the lost members had and it
// lacks are lost), its store is rebuilt from its snapshot and log, and
// the next start with --cluster-peers NAME=HOST:PORT (itself alone) leads
// at once; add-member then brings in new members with empty data
// folders. The member must not be running.
func Recover(dataDir, name, listen string, log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
	if err := CheckName(name); err != nil {
		return fmt.Errorf("--cluster-member: %w", err)
	}
	if _, _, err := net.SplitHostPort(listen); err != nil {
		return fmt.Errorf("--cluster-listen %s: %v", listen, err)
	}
	dbDir := filepath.Join(dataDir, "db")
	raftDir := filepath.Join(dataDir, "raft")
	if !hasLog(raftDir) {
		return fmt.Errorf("%s holds no replicated log (no %s): recover runs on the data folder of a cluster member", dataDir, filepath.Join(raftDir, walDir))
	}
	key, err := store.ReadKey(filepath.Join(dataDir, "db.key"))
	if err != nil {
		return err
	}
	st, err := store.Open(dbDir, key, log)
	if err != nil {
		return err
	}
	defer st.Close()
	m := &Member{log: log}
	hl := hclog.New(&hclog.LoggerOptions{Name: "raft", Level: hclog.Warn, Output: &slogWriter{log: log}, DisableTime: true})
	logs, err := openLog(raftDir, key, m.kvNames(), hl, log)
	if err != nil {
		return err
	}
	defer logs.Close()
	snaps, err := raft.NewFileSnapshotStoreWithLogger(raftDir, 2, hl)
	if err != nil {
		return err
	}
	f := &fsm{st: st, key: key, dataDir: dataDir, spool: raftDir}
	_, trans := raft.NewInmemTransport(raft.ServerAddress(listen))
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(name)
	rc.Logger = hl
	conf := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(name), Address: raft.ServerAddress(listen)}}}
	if err := raft.RecoverCluster(rc, f, logs, logs, snaps, trans, conf); err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	return nil
}

// seedFile marks a member whose store holds data that is not in the
// log yet (bootstrap).
const seedFile = "seed"

// seedBatchBytes bounds one entry of the seed.
const seedBatchBytes = 2 << 20

// Seed copies the whole store into the log, in entries of at most
// seedBatchBytes, when the cluster was formed from a store that held
// data (bootstrap); the leader calls it before its engine runs, and
// again after a crash until it finishes (the writes set each key to the
// value it has, so doing it twice is harmless).
func (m *Member) Seed() error {
	marker := filepath.Join(m.cfg.DataDir, "raft", seedFile)
	if _, err := os.Stat(marker); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	c := m.Committer(m.st)
	var b store.Batch
	size, keys := 0, 0
	flush := func() error {
		if b.Len() == 0 {
			return nil
		}
		err := c.Commit(context.Background(), &b)
		b, size = store.Batch{}, 0
		return err
	}
	err := m.st.Scan("", func(k string, v []byte) error {
		if strings.HasPrefix(k, kvstore.FlushPrefix) {
			return nil
		}
		b.Set(k, v)
		size += len(k) + len(v)
		keys++
		if size >= seedBatchBytes {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err != nil {
		return fmt.Errorf("copy the store into the replicated log: %w", err)
	}
	m.log.Info("copied the store into the replicated log", "member", m.cfg.Name, "keys", keys)
	return os.Remove(marker)
}

// collectEvery is how often a follower reclaims stale space in its
// store's value log (the leader's engine does it while it runs).
const collectEvery = 10 * time.Minute

func (m *Member) collect() {
	tick := time.NewTicker(collectEvery)
	defer tick.Stop()
	for {
		select {
		case <-m.stopped:
			return
		case <-tick.C:
		}
		if m.IsLeader() {
			continue
		}
		if _, err := m.st.CollectGarbage(); err != nil {
			m.log.Warn("value-log garbage collection of the member's store failed", "err", err)
		}
	}
}
