package agent

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// The durable outbox: every message the agent puts in its outbox (BMC
// results and power reports) is one record in Badger under the state
// folder, written and synced before the message is first published, so
// that a kill -9 right after publishing loses nothing. A result's record
// is also its done-record (the answer to a duplicate of its command): an
// ack marks it acked, and it is deleted when the done-record's retention
// ends (doneRetention); a power report's record is deleted when acked. At
// start the agent loads every record: the unacked ones are its outbox,
// resent in the order they were written once it is connected.
//
// The state folder (0700) holds outboxKeyFile (0600, created on first
// start) and the Badger database in outboxDBDir, encrypted at rest with
// that key; with the process umask made private, every file Badger
// creates is 0600.

const (
	outboxKeyFile = "outbox.key"
	outboxDBDir   = "outbox"
	outboxKeySize = 32 // AES-256
	// recordPrefix + 8-byte big-endian sequence number: keys sort in the
	// order the messages were produced.
	recordPrefix = "r/"
	// credPrefix + node UUID: the SHA-256 of the node's current boot
	// credential, for the site broker (relay.go).
	credPrefix = "c/"
	// outboxGCInterval is how often value-log GC runs.
	outboxGCInterval = 5 * time.Minute
)

// DefaultOutboxLimit is the default of Config.OutboxLimit.
const DefaultOutboxLimit = 100000

// record is one message of the outbox, as stored.
type record struct {
	ID       string    `json:"id"`
	Topic    string    `json:"topic"`
	Payload  []byte    `json:"payload"`
	Cmd      string    `json:"cmd,omitempty"` // the command a result answers
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
// cred is set, a node's boot credential hash.
type storeOp struct {
	seq  uint64
	rec  *record
	cred string
	hash []byte
}

// outboxStore writes records with group commit: writes queue up while a
// commit is under way and the next commit takes them all, so that many
// results share one disk sync.
type outboxStore struct {
	db       *badger.DB
	log      *slog.Logger
	dir      string // "" in memory
	mu       sync.Mutex
	queue    []storeOp
	waiters  []chan error
	closed   bool
	kick     chan struct{}
	stop     chan struct{}
	finished sync.WaitGroup
	// commits counts the transactions written (for tests).
	commits atomic.Int64
	// gcMu keeps value-log GC and commits apart: Badger v4.9.6's GC
	// reads the memtable's max version without its lock, racing with a
	// concurrent write (see coordinator/store's valueLogGC).
	gcMu sync.Mutex
}

var errStoreClosed = errors.New("the outbox store is closed")

// openOutboxStore opens (creating if needed) the durable outbox in the
// state folder dir, or an in-memory one when dir is "".
func openOutboxStore(dir string, log *slog.Logger) (*outboxStore, error) {
	var opts badger.Options
	if dir == "" {
		opts = badger.DefaultOptions("").WithInMemory(true)
	} else {
		privateUmask()
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("create the state folder (agent --state-dir): %w", err)
		}
		if fi, err := os.Stat(dir); err == nil && fi.Mode().Perm()&0o077 != 0 {
			if err := os.Chmod(dir, 0o700); err != nil {
				return nil, fmt.Errorf("make the state folder %s private: %w", dir, err)
			}
			log.Warn("state folder was open to others; made it private (0700)", "path", dir)
		}
		dbDir := filepath.Join(dir, outboxDBDir)
		key, err := loadOutboxKey(filepath.Join(dir, outboxKeyFile), dbDir)
		if err != nil {
			return nil, err
		}
		opts = badger.DefaultOptions(dbDir).
			WithSyncWrites(true).
			WithEncryptionKey(key).
			WithEncryptionKeyRotationDuration(7 * 24 * time.Hour).
			// Encryption needs the index cache.
			WithIndexCacheSize(4 << 20)
	}
	// Records are small (a result is a few hundred bytes) and live for
	// minutes: small memtables, flushed and compacted soon, drop deleted
	// records from the LSM tree; a rare large one (over the threshold)
	// goes to the value log, which value-log GC reclaims.
	opts = opts.WithLogger(badgerLogger{log}).
		WithMemTableSize(4 << 20).
		WithNumMemtables(2).
		WithNumLevelZeroTables(2).
		WithNumLevelZeroTablesStall(8).
		WithValueThreshold(4 << 10).
		WithValueLogFileSize(16 << 20).
		WithBlockCacheSize(1 << 20).
		WithNumCompactors(2)
	db, err := badger.Open(opts)
	if errors.Is(err, badger.ErrEncryptionKeyMismatch) {
		return nil, fmt.Errorf("open the outbox in %s: its key file %s is not the key this outbox was encrypted with; restore the original %s, or, if the unacked results in it may be lost, move the folder %s away and start again",
			filepath.Join(dir, outboxDBDir), filepath.Join(dir, outboxKeyFile), outboxKeyFile, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("open the outbox in %s: %w (is another edge agent using this --state-dir?)", dir, err)
	}
	s := &outboxStore{db: db, log: log, dir: dir, kick: make(chan struct{}, 1), stop: make(chan struct{})}
	s.finished.Add(1)
	go s.writer()
	if dir != "" {
		s.finished.Add(1)
		go s.gcLoop()
	}
	return s, nil
}

// loadOutboxKey reads the outbox key, creating it (mode 0600) when it is
// absent and there is no database yet.
func loadOutboxKey(path, dbDir string) ([]byte, error) {
	fi, err := os.Stat(path)
	switch {
	case err == nil:
		if fi.Mode().Perm()&0o077 != 0 {
			return nil, fmt.Errorf("the outbox key file %s has mode %04o, so users other than its owner may have read it: run 'chmod 600 %s'", path, fi.Mode().Perm(), path)
		}
		key, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read the outbox key file: %w", err)
		}
		if len(key) != outboxKeySize {
			return nil, fmt.Errorf("the outbox key file %s holds %d bytes, not %d: it is not a key this agent wrote; restore the original", path, len(key), outboxKeySize)
		}
		return key, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("read the outbox key file: %w", err)
	}
	if _, err := os.Stat(filepath.Join(dbDir, "MANIFEST")); err == nil {
		return nil, fmt.Errorf("the outbox in %s is encrypted but its key file %s is missing: restore it, or, if the unacked results in it may be lost, move the state folder away and start again", dbDir, path)
	}
	key := make([]byte, outboxKeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("generate the outbox key: %w", err)
	}
	// A temporary file linked into place: never a short key file, and
	// two agents started at once cannot replace each other's key.
	tmp, err := os.CreateTemp(filepath.Dir(path), ".outbox.key-*")
	if err != nil {
		return nil, fmt.Errorf("create the outbox key file: %w", err)
	}
	defer os.Remove(tmp.Name())
	err = tmp.Chmod(0o600)
	if err == nil {
		_, err = tmp.Write(key)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("write the outbox key file: %w", err)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return loadOutboxKey(path, dbDir)
		}
		return nil, fmt.Errorf("create the outbox key file: %w", err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return key, nil
}

// load returns every stored record by sequence number, in order.
func (s *outboxStore) load() (seqs []uint64, recs []record, err error) {
	err = s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(recordPrefix), PrefetchValues: true, PrefetchSize: 100})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().Key()
			if len(k) != len(recordPrefix)+8 {
				continue
			}
			var r record
			if err := it.Item().Value(func(v []byte) error { return json.Unmarshal(v, &r) }); err != nil {
				s.log.Warn("outbox record unreadable; skipped", "key", fmt.Sprintf("%x", k), "err", err)
				continue
			}
			seqs = append(seqs, binary.BigEndian.Uint64(k[len(recordPrefix):]))
			recs = append(recs, r)
		}
		return nil
	})
	return seqs, recs, err
}

// putCred writes a node's boot credential hash (nil: removes it) and
// waits until it is on disk: the ramdisk it belongs to may connect to
// the site broker of a restarted agent.
func (s *outboxStore) putCred(node string, hash []byte) {
	if s == nil {
		return
	}
	ch := make(chan error, 1)
	if !s.enqueue(storeOp{cred: node, hash: hash}, ch) {
		return
	}
	if err := <-ch; err != nil {
		s.log.Error("a boot credential could not be written to the state folder: after a restart the agent would not admit that ramdisk", "node", node, "err", err)
	}
}

// loadCreds returns the boot credential hashes kept (node → hash).
func (s *outboxStore) loadCreds() (map[string][]byte, error) {
	out := map[string][]byte{}
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(credPrefix), PrefetchValues: true, PrefetchSize: 100})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			node := string(it.Item().Key()[len(credPrefix):])
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			if len(v) == 32 {
				out[node] = v
			}
		}
		return nil
	})
	return out, err
}

// put writes a record and waits until it is on disk.
func (s *outboxStore) put(seq uint64, r *record) error {
	if s == nil {
		return nil
	}
	ch := make(chan error, 1)
	if !s.enqueue(storeOp{seq: seq, rec: r}, ch) {
		return errStoreClosed
	}
	return <-ch
}

// later queues a write without waiting for it (acks, deletions: losing
// one to a crash only means a message sent once more).
func (s *outboxStore) later(seq uint64, r *record) {
	if s == nil {
		return
	}
	s.enqueue(storeOp{seq: seq, rec: r}, nil)
}

func (s *outboxStore) enqueue(op storeOp, ch chan error) bool {
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

// writer commits what is queued, one transaction per round.
func (s *outboxStore) writer() {
	defer s.finished.Done()
	for {
		select {
		case <-s.kick:
		case <-s.stop:
			s.flush()
			return
		}
		s.flush()
	}
}

func (s *outboxStore) flush() {
	s.mu.Lock()
	ops, waiters := s.queue, s.waiters
	s.queue, s.waiters = nil, nil
	s.mu.Unlock()
	if len(ops) == 0 {
		return
	}
	err := s.commit(ops)
	if err != nil {
		s.log.Error("writing the outbox to the state folder failed; the results stay in memory and are still sent", "err", err, "writes", len(ops))
	}
	for _, ch := range waiters {
		ch <- err
	}
}

func (s *outboxStore) commit(ops []storeOp) error {
	s.gcMu.Lock()
	defer s.gcMu.Unlock()
	txn := s.db.NewTransaction(true)
	defer func() { txn.Discard() }()
	s.commits.Add(1)
	for _, op := range ops {
		err := s.apply(txn, op)
		if errors.Is(err, badger.ErrTxnTooBig) {
			if err := txn.Commit(); err != nil {
				return err
			}
			s.commits.Add(1)
			txn = s.db.NewTransaction(true)
			err = s.apply(txn, op)
		}
		if err != nil {
			return err
		}
	}
	return txn.Commit()
}

func (s *outboxStore) apply(txn *badger.Txn, op storeOp) error {
	if op.cred != "" {
		if op.hash == nil {
			return txn.Delete([]byte(credPrefix + op.cred))
		}
		return txn.Set([]byte(credPrefix+op.cred), op.hash)
	}
	if op.rec == nil {
		return txn.Delete(recordKey(op.seq))
	}
	b, err := json.Marshal(op.rec)
	if err != nil {
		return err
	}
	return txn.Set(recordKey(op.seq), b)
}

// gcLoop runs value-log GC now and then, until no file qualifies.
func (s *outboxStore) gcLoop() {
	defer s.finished.Done()
	tk := time.NewTicker(outboxGCInterval)
	defer tk.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tk.C:
		}
		for range 16 {
			s.gcMu.Lock()
			err := s.db.RunValueLogGC(0.5)
			s.gcMu.Unlock()
			if err != nil {
				if !errors.Is(err, badger.ErrNoRewrite) && !errors.Is(err, badger.ErrRejected) {
					s.log.Warn("outbox value-log GC failed", "err", err)
				}
				break
			}
		}
	}
}

// close writes what is queued and closes the database.
func (s *outboxStore) close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	close(s.stop)
	s.finished.Wait()
	return s.db.Close()
}

// badgerLogger passes Badger's warnings and errors to the agent's log.
type badgerLogger struct{ log *slog.Logger }

func (l badgerLogger) Errorf(f string, a ...any) {
	l.log.Error("badger: " + strings.TrimSpace(fmt.Sprintf(f, a...)))
}
func (l badgerLogger) Warningf(f string, a ...any) {
	l.log.Warn("badger: " + strings.TrimSpace(fmt.Sprintf(f, a...)))
}
func (l badgerLogger) Infof(string, ...any)  {}
func (l badgerLogger) Debugf(string, ...any) {}
