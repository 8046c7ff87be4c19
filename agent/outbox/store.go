package outbox

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/bmedge/bmedge/lib/clock"
	"github.com/bmedge/bmedge/lib/kvstore"
	"github.com/bmedge/bmedge/lib/ratelog"
)

// The durable outbox: every message the agent puts in its outbox (BMC
// results and power reports) is one record in Badger under the state
// folder, written and synced before the message is first published, so
// that a kill -9 right after publishing loses nothing. A result's record
// is also its done-record (what keeps a duplicate of its command from
// running): an ack marks it acked and drops its payload (the coordinator
// has the result), and it is deleted when the done-record's retention
// ends (DoneRetention); a power report's record is deleted when acked. At
// start the agent loads every record: the unacked ones are its outbox,
// resent in the order they were written once it is connected.
//
// The state folder (0700) holds KeyFile (0600, created on first
// start) and the Badger database in outboxDBDir, encrypted at rest with
// that key; with the process umask made private, every file Badger
// creates is 0600. Opening it, the key file, the failure latch and the
// garbage collection's flush and value-log GC are lib/kvstore's,
// shared with the coordinator's store.

const (
	// KeyFile is the key file's name in the state folder.
	KeyFile     = "outbox.key"
	outboxDBDir = "outbox"
	// KeySize is the key's size in bytes.
	KeySize = kvstore.KeySize // AES-256
	// recordPrefix + 8-byte big-endian sequence number: keys sort in the
	// order the messages were produced.
	recordPrefix = "r/"
	// credPrefix + node UUID: the SHA-256 of the node's current boot
	// credential, for the site broker (agent/relay).
	credPrefix = "c/"
	// simPrefix + node UUID: a simulated node's state (agent/sim), which
	// a real node keeps in its own hardware across an agent restart.
	simPrefix = "s/"
	// planPrefix + node UUID: a node's plan and its progress
	// (agent/plan), kept before each of its steps starts.
	planPrefix = "p/"
	// vmediaPrefix + node UUID: a node's virtual-media boot (agent/boot):
	// that its media are to be ejected when the boot ends, and its
	// parameters image while it is served (it holds the boot's
	// credential: only in this encrypted store).
	vmediaPrefix = "v/"
	// polledPrefix + node UUID: a node whose BMC power sync polls
	// (agent/bmc): its driver and driver_info (which hold the BMC's
	// password: only in this encrypted store), so that a restarted agent
	// polls every such node at once.
	polledPrefix = "b/"
	// intentPrefix + command id: a command that must not run twice (a
	// reboot) was started: kept on disk before it runs, removed with its
	// result (Command.Intent).
	intentPrefix = "i/"
	// consolePrefix + node: the node's kept console output (agent/console).
	consolePrefix = "k/"
	// discoveryKey: the site's discovery configuration as the
	// coordinator last gave it (agent/discover), so that a restarted
	// agent discovers, or does not, while the WAN is down.
	discoveryKey = "d/config"
	// termKey: the highest coordinator cluster term seen (8 bytes, big
	// endian), so that a restarted agent still refuses a deposed leader.
	termKey = "t/term"
	// outboxGCInterval is how often value-log GC runs, besides after
	// each flush (see collectGarbage).
	outboxGCInterval = 5 * time.Minute
	// outboxFlushAfter, outboxGarbageShare and outboxQuietFor: the
	// memtable is flushed and the tables compacted (see flushMemtable)
	// once records of this many bytes were deleted or overwritten (acks)
	// since the last flush, and at least 1/outboxGarbageShare of the
	// tables' size, and no write came for outboxQuietFor. A deletion
	// counts as outboxDeleteWeight bytes (what a result's record takes,
	// about). 1000 nodes' deploy and undeploy write ~1 MiB of records.
	outboxFlushAfter   = 256 << 10
	outboxGarbageShare = 8
	outboxQuietFor     = time.Second
	outboxDeleteWeight = 512
	// outboxFlushRetry: after a failed flush, the next is tried no
	// sooner than this.
	outboxFlushRetry = 30 * time.Second
)

// outboxNames word the shared store's errors for the edge agent.
var outboxNames = kvstore.Names{
	Program:    "edge agent",
	DirFlag:    "--state-dir",
	Database:   "the outbox",
	KeyFile:    "outbox key file",
	RestoreKey: "restore the original",
	KeyMissing: "restore it, or, if the unacked results in it may be lost, move the state folder away and start again",
}

// DefaultLimit is the default of Config.Limit.
const DefaultLimit = 100000

// Record is one message of the outbox, as stored.
type Record struct {
	ID      string `json:"id"`
	Topic   string `json:"topic"`
	Payload []byte `json:"payload"`
	Cmd     string `json:"cmd,omitempty"`     // the command a result answers
	CmdSeq  uint64 `json:"cmd_seq,omitempty"` // that command's Seq
	// Node is the node it is about: an acked result keeps no payload to
	// read it from.
	Node     string    `json:"node,omitempty"`
	At       time.Time `json:"at"`
	Deadline time.Time `json:"deadline,omitzero"`
	Acked    time.Time `json:"acked,omitzero"`
}

func recordKey(seq uint64) []byte {
	k := make([]byte, len(recordPrefix)+8)
	copy(k, recordPrefix)
	binary.BigEndian.PutUint64(k[len(recordPrefix):], seq)
	return k
}

// storeOp is one write: a record (rec != nil) or a deletion, or, when
// key is set, a value under key (nil val: its deletion): a node's boot
// credential hash or a simulated node's state.
type storeOp struct {
	seq uint64
	rec *Record
	key string
	val []byte
	// barrier writes nothing: its waiter returns once everything queued
	// before it is on disk (Sync).
	barrier bool
}

// Store writes records with group commit: writes queue up while a
// commit is under way and the next commit takes them all, so that many
// results share one disk sync.
type Store struct {
	db    *kvstore.DB
	log   *slog.Logger
	clock clock.Clock // its GC's timers
	dir   string      // "" in memory
	// big holds, in memory only, the values larger than an in-memory
	// Badger takes (memValueMax), by key; Badger has none of those keys.
	bigMu    sync.Mutex
	big      map[string][]byte
	mu       sync.Mutex
	queue    []storeOp
	waiters  []chan error
	closed   bool
	kick     chan struct{}
	stop     chan struct{}
	finished sync.WaitGroup
	// commits counts the transactions written (for tests).
	commits atomic.Int64

	// Garbage collection (see collectGarbage). Only the writer
	// goroutine touches these and calls Badger's writes, flush and
	// value-log GC (kvstore also keeps them apart).
	//
	// garbage is about how many bytes of records were deleted or
	// overwritten since the last flush (what a flush reclaims);
	// lastWrite when the last commit ended.
	garbage   int64
	lastWrite time.Time
	// retryAt: after a failed flush, none is tried before this (the
	// periodic run or a write after it tries again).
	retryAt time.Time
	// brokenOnce logs the store's failure once (see broken).
	brokenOnce sync.Once
	// flushes counts the memtable flushes (for tests); gcNow asks the
	// writer to flush and collect at once (tests).
	flushes atomic.Int64
	gcNow   chan chan error
	// warn logs failures of a background flush or collection at a
	// bounded rate.
	warn *ratelog.Limiter
}

var ErrClosed = errors.New("the outbox store is closed")

// memValueMax is the largest value the in-memory Badger holds: without a
// value log it refuses values over its value threshold, which its 4 MiB
// memtables bound (a batch is at most 15 % of one). A larger record (a
// result of up to protocol.MaxMessageBytes) is kept in a map beside it:
// in memory either way.
const memValueMax = 4 << 10

// OpenStore opens (creating if needed) the durable outbox in the
// state folder dir, or an in-memory one when dir is "". Tests inject
// Badger failures with kvstore.WithFaults: commits are op "commit", the
// flush's steps "write", "flush" (DropPrefix) and "flatten".
func OpenStore(dir string, log *slog.Logger, opt ...kvstore.Option) (*Store, error) {
	return OpenStoreClock(dir, log, nil, opt...)
}

// OpenStoreClock is OpenStore with the clock of its garbage collection's
// timers (nil: clock.Real).
func OpenStoreClock(dir string, log *slog.Logger, clk clock.Clock, opt ...kvstore.Option) (*Store, error) {
	cfg := kvstore.Config{InMemory: dir == "", Log: log, Names: outboxNames, What: "the outbox", Where: dir}
	if dir != "" {
		if err := kvstore.PrivateDir(dir, "state folder", "agent --state-dir", log); err != nil {
			return nil, err
		}
		cfg.Dir = filepath.Join(dir, outboxDBDir)
		key, err := kvstore.LoadKey(filepath.Join(dir, KeyFile), cfg.Dir, outboxNames)
		if err != nil {
			return nil, err
		}
		cfg.Key = key
		cfg.KeyMismatch = fmt.Sprintf("open the outbox in %s: its key file %s is not the key this outbox was encrypted with; restore the original %s, or, if the unacked results in it may be lost, move the folder %s away and start again",
			cfg.Dir, filepath.Join(dir, KeyFile), KeyFile, dir)
	}
	// Records are small (a result is a few hundred bytes) and live for
	// minutes: small memtables, flushed and compacted soon, drop deleted
	// records from the LSM tree; a rare large one (over the threshold)
	// goes to the value log, which value-log GC reclaims.
	cfg.Tune = func(opts badger.Options) badger.Options {
		if !opts.InMemory {
			opts = opts.WithIndexCacheSize(4 << 20) // encryption needs it
		}
		return opts.WithMemTableSize(4 << 20).
			WithNumMemtables(2).
			WithNumLevelZeroTables(2).
			WithNumLevelZeroTablesStall(8).
			WithValueThreshold(memValueMax).
			WithValueLogFileSize(16 << 20).
			WithBlockCacheSize(1 << 20).
			WithNumCompactors(2)
	}
	db, err := kvstore.Open(cfg, opt...)
	if err != nil {
		return nil, err
	}
	s := &Store{db: db, log: log, clock: clock.Or(clk), dir: dir, big: map[string][]byte{}, kick: make(chan struct{}, 1), stop: make(chan struct{}),
		gcNow: make(chan chan error), warn: ratelog.New(log, time.Minute)}
	s.finished.Add(1)
	go s.writer()
	return s, nil
}

// Load returns every stored record by sequence number, in order.
func (s *Store) Load() (seqs []uint64, recs []Record, err error) {
	err = s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(recordPrefix), PrefetchValues: true, PrefetchSize: 100})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().Key()
			if len(k) != len(recordPrefix)+8 {
				continue
			}
			var r Record
			if err := it.Item().Value(func(v []byte) error { return json.Unmarshal(v, &r) }); err != nil {
				s.log.Warn("outbox record unreadable; skipped", "key", fmt.Sprintf("%x", k), "err", err)
				continue
			}
			seqs = append(seqs, binary.BigEndian.Uint64(k[len(recordPrefix):]))
			recs = append(recs, r)
		}
		return nil
	})
	s.bigMu.Lock()
	defer s.bigMu.Unlock()
	if len(s.big) == 0 {
		return seqs, recs, err
	}
	for k, v := range s.big {
		if len(k) != len(recordPrefix)+8 || !strings.HasPrefix(k, recordPrefix) {
			continue
		}
		var r Record
		if uerr := json.Unmarshal(v, &r); uerr != nil {
			continue
		}
		seqs = append(seqs, binary.BigEndian.Uint64([]byte(k[len(recordPrefix):])))
		recs = append(recs, r)
	}
	idx := make([]int, len(seqs))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return seqs[idx[a]] < seqs[idx[b]] })
	oseqs, orecs := make([]uint64, len(seqs)), make([]Record, len(recs))
	for i, j := range idx {
		oseqs[i], orecs[i] = seqs[j], recs[j]
	}
	return oseqs, orecs, err
}

// PutCred writes a node's boot credential hash (nil: removes it) and
// waits until it is on disk: the ramdisk it belongs to may connect to
// the site broker of a restarted agent.
func (s *Store) PutCred(node string, hash []byte) {
	if s == nil {
		return
	}
	ch := make(chan error, 1)
	if !s.enqueue(storeOp{key: credPrefix + node, val: hash}, ch) {
		return
	}
	if err := <-ch; err != nil {
		s.log.Error("a boot credential could not be written to the state folder: after a restart the agent would not admit that ramdisk", "node", node, "err", err)
	}
}

// LoadCreds returns the boot credential hashes kept (node → hash).
func (s *Store) LoadCreds() (map[string][]byte, error) {
	out, err := s.loadPrefix(credPrefix)
	for node, v := range out {
		if len(v) != 32 {
			delete(out, node)
		}
	}
	return out, err
}

// PutSim writes a simulated node's state (nil: removes it); with wait it
// returns once it is on disk, else it goes with the next group commit
// (agent/sim's Store).
func (s *Store) PutSim(node string, state []byte, wait bool) {
	if s == nil {
		return
	}
	if !wait {
		s.enqueue(storeOp{key: simPrefix + node, val: state}, nil)
		return
	}
	ch := make(chan error, 1)
	if !s.enqueue(storeOp{key: simPrefix + node, val: state}, ch) {
		return
	}
	if err := <-ch; err != nil {
		s.warn.Warn("sim state", "a simulated node's state could not be written to the state folder: after a restart its simulated ramdisk would not go on", "node", node, "err", err)
	}
}

// LoadSims returns the simulated nodes' states kept (node → state).
func (s *Store) LoadSims() (map[string][]byte, error) { return s.loadPrefix(simPrefix) }

// PutPlan queues a node's plan (nil: removes it) for the next group
// commit, without waiting for it (agent/plan's Store): a plan's
// progress lost to a crash only makes the restarted agent hand out a
// step it had finished, which the ramdisk (its kept result) or the
// outbox (the step's done-record) answers without running it again; a
// plan lost whole leaves its steps to the coordinator's resends. A
// failed write is logged by the writer.
func (s *Store) PutPlan(node string, plan []byte) {
	if s == nil {
		return
	}
	s.enqueue(storeOp{key: planPrefix + node, val: plan}, nil)
}

// Sync returns once everything queued before it (plans, simulated
// nodes' states, records) is on disk, or the write failed: the agent
// calls it before the MQTT acknowledgement of a message whose effect it
// queued without waiting (a plan received), so that a kill after the
// acknowledgement cannot lose what the coordinator takes as delivered.
// One Sync after a bundle of many plans costs one group commit.
func (s *Store) Sync() error {
	if s == nil {
		return nil
	}
	ch := make(chan error, 1)
	if !s.enqueue(storeOp{barrier: true}, ch) {
		return ErrClosed
	}
	return <-ch
}

// LoadPlans returns the plans kept (node → plan).
func (s *Store) LoadPlans() (map[string][]byte, error) { return s.loadPrefix(planPrefix) }

// PutVMedia writes a node's virtual-media boot (nil: removes it) and
// waits until it is on disk (agent/boot's kept state): a restarted agent
// ends that boot as the first one would, ejecting its media.
func (s *Store) PutVMedia(node string, state []byte) {
	if s == nil {
		return
	}
	ch := make(chan error, 1)
	if !s.enqueue(storeOp{key: vmediaPrefix + node, val: state}, ch) {
		return
	}
	if err := <-ch; err != nil {
		s.warn.Warn("vmedia state", "a node's virtual-media boot could not be written to the state folder: after a restart the agent would not eject its virtual media at the boot's end", "node", node, "err", err)
	}
}

// PutIntent writes that command cmd starts (its Intent) and waits until
// it is on disk: a kill while the command runs leaves it, and the
// restarted agent knows the command may have acted.
func (s *Store) PutIntent(cmd string, intent []byte) error {
	if s == nil {
		return nil
	}
	ch := make(chan error, 1)
	if !s.enqueue(storeOp{key: intentPrefix + cmd, val: intent}, ch) {
		return ErrClosed
	}
	return <-ch
}

// DropIntent removes command cmd's intent with the next group commit
// (its result is written before; a lost removal leaves an intent that
// Load drops once the command's deadline passed).
func (s *Store) DropIntent(cmd string) {
	if s == nil {
		return
	}
	s.enqueue(storeOp{key: intentPrefix + cmd, val: nil}, nil)
}

// LoadIntents returns the intents kept (command id → intent).
func (s *Store) LoadIntents() (map[string][]byte, error) { return s.loadPrefix(intentPrefix) }

// LoadVMedia returns the virtual-media boots kept (node → state).
func (s *Store) LoadVMedia() (map[string][]byte, error) { return s.loadPrefix(vmediaPrefix) }

// PutPolled writes a node polled by power sync (nil: removes it) with
// the next group commit, without waiting (agent/bmc's kept state): lost
// to a crash, the node is polled again after its next command.
func (s *Store) PutPolled(node string, rec []byte) {
	if s == nil {
		return
	}
	s.enqueue(storeOp{key: polledPrefix + node, val: rec}, nil)
}

// PutDiscovery writes the site's discovery configuration and waits
// until it is on disk.
func (s *Store) PutDiscovery(conf []byte) {
	if s == nil {
		return
	}
	ch := make(chan error, 1)
	if !s.enqueue(storeOp{key: discoveryKey, val: conf}, ch) {
		return
	}
	if err := <-ch; err != nil {
		s.warn.Warn("discovery config", "the site's discovery configuration could not be written to the state folder: a restarted agent would go by the one before", "err", err)
	}
}

// PutTerm writes the highest coordinator term seen, with the next
// group commit.
func (s *Store) PutTerm(term uint64) {
	if s == nil {
		return
	}
	s.enqueue(storeOp{key: termKey, val: binary.BigEndian.AppendUint64(nil, term)}, nil)
}

// LoadTerm returns the highest coordinator term kept (0: none).
func (s *Store) LoadTerm() uint64 {
	m, err := s.loadPrefix(termKey)
	if err != nil || len(m[""]) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(m[""])
}

// LoadDiscovery returns the discovery configuration kept (nil: none).
func (s *Store) LoadDiscovery() ([]byte, error) {
	m, err := s.loadPrefix(discoveryKey)
	return m[""], err
}

// PutConsole writes a node's kept console output (nil: removes it) with
// the next group commit, without waiting (agent/console's Store).
func (s *Store) PutConsole(node string, state []byte) {
	if s == nil {
		return
	}
	s.enqueue(storeOp{key: consolePrefix + node, val: state}, nil)
}

// LoadConsoles returns the console output kept (node → state).
func (s *Store) LoadConsoles() (map[string][]byte, error) { return s.loadPrefix(consolePrefix) }

// LoadPolled returns the nodes polled by power sync (node → record).
func (s *Store) LoadPolled() (map[string][]byte, error) { return s.loadPrefix(polledPrefix) }

// loadPrefix returns every value under prefix, by the rest of its key.
func (s *Store) loadPrefix(prefix string) (map[string][]byte, error) {
	out := map[string][]byte{}
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(prefix), PrefetchValues: true, PrefetchSize: 100})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			out[string(it.Item().Key()[len(prefix):])] = v
		}
		return nil
	})
	s.bigMu.Lock()
	for k, v := range s.big {
		if rest, ok := strings.CutPrefix(k, prefix); ok {
			out[rest] = append([]byte(nil), v...)
		}
	}
	s.bigMu.Unlock()
	return out, err
}

// Put writes a record and waits until it is on disk.
func (s *Store) Put(seq uint64, r *Record) error {
	if s == nil {
		return nil
	}
	ch := make(chan error, 1)
	if !s.enqueue(storeOp{seq: seq, rec: r}, ch) {
		return ErrClosed
	}
	return <-ch
}

// Later queues a write without waiting for it (acks, deletions: losing
// one to a crash only means a message sent once more).
func (s *Store) Later(seq uint64, r *Record) {
	if s == nil {
		return
	}
	s.enqueue(storeOp{seq: seq, rec: r}, nil)
}

func (s *Store) enqueue(op storeOp, ch chan error) bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	s.queue = append(s.queue, op)
	if ch != nil {
		s.waiters = append(s.waiters, ch)
	}
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
	return true
}

// writer commits what is queued, one transaction per round, and
// collects garbage when writing has stopped (see collectGarbage).
func (s *Store) writer() {
	defer s.finished.Done()
	var tick <-chan time.Time
	if s.dir != "" {
		tk := s.clock.NewTicker(outboxGCInterval)
		defer tk.Stop()
		tick = tk.C()
	}
	// quiet fires outboxQuietFor after a commit that left enough
	// changes for a flush; nil when none is due.
	var quiet clock.Timer
	var quietC <-chan time.Time
	for {
		select {
		case <-s.kick:
			s.flush()
		case <-s.stop:
			if quiet != nil {
				quiet.Stop()
			}
			s.flush()
			return
		case <-quietC:
			quietC = nil
			if idle := clock.Since(s.clock, s.lastWrite); idle < outboxQuietFor {
				// Written to meanwhile: wait until writing stops.
				quiet.Reset(outboxQuietFor - idle)
				quietC = quiet.C()
				continue
			}
			s.collectGarbage(false)
		case <-tick:
			s.collectGarbage(false)
		case ch := <-s.gcNow:
			s.flush() // what was queued before the call
			ch <- s.collectGarbage(true)
		}
		if quietC == nil && s.flushDue() {
			if quiet == nil {
				quiet = s.clock.NewTimer(outboxQuietFor)
			} else {
				quiet.Reset(outboxQuietFor)
			}
			quietC = quiet.C()
		}
	}
}

func (s *Store) flush() {
	s.mu.Lock()
	ops, waiters := s.queue, s.waiters
	s.queue, s.waiters = nil, nil
	s.mu.Unlock()
	if len(ops) == 0 {
		return
	}
	var err error
	if !allBarriers(ops) {
		// Barriers alone wait for nothing: the commits before this
		// one (the writer's, one at a time) hold what came before them.
		err = s.commit(ops)
	}
	if err != nil {
		s.warn.Warn("outbox write", "writing the outbox to the state folder failed; the results stay in memory and are still sent", "err", err, "writes", len(ops))
	}
	for _, ch := range waiters {
		ch <- err
	}
}

func (s *Store) commit(ops []storeOp) error {
	if err := s.broken(); err != nil {
		return err
	}
	defer func() { s.lastWrite = s.clock.Now() }()
	err := s.db.Write("commit", func(db *badger.DB) error {
		txn := db.NewTransaction(true)
		defer func() { txn.Discard() }()
		s.commits.Add(1)
		for _, op := range ops {
			err := s.apply(txn, op)
			if errors.Is(err, badger.ErrTxnTooBig) {
				if err := txn.Commit(); err != nil {
					return err
				}
				s.commits.Add(1)
				txn = db.NewTransaction(true)
				err = s.apply(txn, op)
			}
			if err != nil {
				return err
			}
		}
		return txn.Commit()
	})
	if berr := s.broken(); berr != nil {
		return berr // a panic in Badger
	}
	return err
}

func allBarriers(ops []storeOp) bool {
	for _, op := range ops {
		if !op.barrier {
			return false
		}
	}
	return true
}

func (s *Store) apply(txn *badger.Txn, op storeOp) error {
	if op.barrier {
		return nil
	}
	if op.key != "" {
		s.garbage += int64(len(op.key) + max(len(op.val), 32)) // replaces or deletes the node's previous value, mostly
		return s.set(txn, []byte(op.key), op.val)
	}
	if op.rec == nil {
		s.garbage += outboxDeleteWeight
		return s.set(txn, recordKey(op.seq), nil)
	}
	b, err := json.Marshal(op.rec)
	if err != nil {
		return err
	}
	if !op.rec.Acked.IsZero() {
		// The ack of a record written before: its first version is
		// garbage now. (A new record makes none: an outbox that only
		// grows, during a WAN outage, is never flushed for nothing.)
		s.garbage += int64(len(b))
	}
	return s.set(txn, recordKey(op.seq), b)
}

// set writes (nil: deletes) one value: in Badger, or, in memory, a value
// larger than memValueMax in the map beside it.
func (s *Store) set(txn *badger.Txn, key, val []byte) error {
	s.bigMu.Lock()
	if s.dir == "" && len(val) > memValueMax {
		s.big[string(key)] = val
		s.bigMu.Unlock()
		return txn.Delete(key)
	}
	delete(s.big, string(key))
	s.bigMu.Unlock()
	if val == nil {
		return txn.Delete(key)
	}
	return txn.Set(key, val)
}

// flushDue tells whether enough was written or deleted since the last
// flush for the next quiet moment to flush; writer only.
func (s *Store) flushDue() bool {
	if s.dir == "" || s.db.Err() != nil || s.garbage < outboxFlushAfter || s.clock.Now().Before(s.retryAt) {
		return false
	}
	// Flatten rewrites every table: only once the garbage is a fair
	// part of them, so that a large outbox is not rewritten for a little.
	lsm, _ := s.db.Size()
	return s.garbage*outboxGarbageShare >= lsm
}

// collectGarbage reclaims the space of deleted and overwritten records;
// writer only. It decides when, as coordinator/store's CollectGarbage
// does for the coordinator; how (the flush, Flatten, value-log GC) is
// lib/kvstore's, shared by both.
//
// A record lives a few minutes: written before it is sent, rewritten
// when acked, deleted when its done-record's retention ends. Records are
// small (under the 4 KiB value threshold), so they live in the LSM tree,
// where compaction drops overwritten and deleted versions; but the
// newest versions and the deletions wait in the memtable until it is
// full (4 MiB), and a table's records are dropped only by a compaction
// that meets their deletions. So when writing stops (an idle site) the
// tables keep every record written since, deleted or not, for as long as
// it stays stopped: the state folder grew by ~1.3 MiB per deploy and
// undeploy of 1000 nodes and did not shrink after 13 idle minutes
// (issue 17). When records of at least outboxFlushAfter bytes, and an
// eighth of the tables' size, were deleted or overwritten since the last
// flush and no write came for outboxQuietFor (force: at once), it flushes the memtable (flushMemtable: Badger
// writes it to a level-0 table and compacts level 0 into the tree, which
// drops what the deletions and rewrites made stale), then runs value-log
// GC (for the rare record over the value threshold) until no file
// qualifies.
func (s *Store) collectGarbage(force bool) error {
	if s.dir == "" {
		return nil
	}
	if err := s.broken(); err != nil {
		return err
	}
	if s.garbage > 0 && (force || s.flushDue()) {
		if err := s.flushMemtable(); err != nil {
			return err
		}
	}
	if _, err := s.db.CollectValueLog(16); err != nil {
		if berr := s.broken(); berr != nil {
			return berr
		}
		s.warn.Warn("outbox gc", "outbox value-log GC failed; it is tried again later", "err", err)
		return err
	}
	return nil
}

// flushMemtable writes Badger's memtables to a level-0 table and compacts
// the tables (kvstore's FlushMemtable with Flatten, the coordinator's
// flush plus the compaction that drops the deleted records); writer only.
//
// A failed write of its key (a full disk, no file descriptor left) or a
// failed Flatten is logged and the flush given up for outboxFlushRetry:
// DropPrefix is never called after a failed write. A failed DropPrefix
// may leave Badger unusable (kvstore's failure.go says how): kvstore then
// fails the store for good, and it touches Badger no more (broken).
func (s *Store) flushMemtable() error {
	err := s.db.FlushMemtable(true)
	s.lastWrite = s.clock.Now()
	if berr := s.broken(); berr != nil {
		return berr
	}
	switch {
	case errors.Is(err, kvstore.ErrFlatten):
		s.retryAt = s.clock.Now().Add(outboxFlushRetry)
		s.warn.Warn("outbox compaction", "compacting the outbox's tables failed; it is tried again later (meanwhile the state folder keeps the space of forgotten results)", "err", err)
		return fmt.Errorf("compact the outbox: %w", err)
	case err != nil:
		s.retryAt = s.clock.Now().Add(outboxFlushRetry)
		s.warn.Warn("outbox flush", "flushing the outbox's memtable failed; it is tried again later (meanwhile the state folder keeps the space of forgotten results)", "err", err)
		return fmt.Errorf("flush the outbox memtable: %w", err)
	}
	s.garbage = 0
	s.flushes.Add(1)
	return nil
}

// broken is the store's error once Badger failed in a way that may have
// left it unusable (a failed DropPrefix, a panic in Badger: kvstore's
// failure latch), else nil. From then on the store touches Badger no
// more: writes fail with an error that says to restart the agent (the
// agent keeps their results in memory and sends them), and close does
// not close the database (Badger's Close would flush the memtables it
// may have released); the next start opens it from its files and
// memtable logs. The failure is logged once, at error level.
func (s *Store) broken() error {
	fe := s.db.Failure()
	if fe == nil {
		return nil
	}
	s.brokenOnce.Do(func() {
		what := "the outbox store failed"
		if fe.Op == "flush" {
			what += " while flushing its memtable"
		}
		s.log.Error(what+"; results are no longer written to the state folder until the edge agent is restarted", "state_dir", s.dir, "err", fe.Err,
			"what_to_do", "free disk space or file descriptors, then restart the edge agent; it reopens the outbox from disk")
	})
	return fmt.Errorf("the outbox store in %s failed (%v) and is no longer written: restart the edge agent, which reopens it from disk (results produced meanwhile are kept in memory and sent, but not on disk)", s.dir, fe.Err)
}

// CollectNow flushes the memtable and collects at once (for tests).
func (s *Store) CollectNow() error {
	ch := make(chan error, 1)
	select {
	case s.gcNow <- ch:
		return <-ch
	case <-s.stop:
		return ErrClosed
	}
}

// Close writes what is queued and closes the database.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	close(s.stop)
	s.finished.Wait()
	err := s.db.Close() // leaves a failed Badger alone
	if berr := s.broken(); berr != nil {
		return berr
	}
	return err
}

// Commits is how many transactions were written (for tests).
func (s *Store) Commits() int64 { return s.commits.Load() }
