// Package store keeps the coordinator's state in Badger on disk: nodes,
// ports, sites, node history, inventories. Writes come in batches, one
// synced transaction per batch, so that many nodes' transitions share one
// disk sync (group commit). It must never hold business rules.
package store

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// Key prefixes.
const (
	NodePrefix      = "n/"
	HistoryPrefix   = "h/"
	InventoryPrefix = "i/"
	PortPrefix      = "p/"
	SitePrefix      = "s/"
	MetaPrefix      = "m/"
	// ReachPrefix holds each site's reachability: when it was last heard
	// and since when it is unreachable.
	ReachPrefix = "r/"
)

// Store is the Badger database.
type Store struct {
	db  *badger.DB
	log *slog.Logger
	// large counts the bytes of values written to the value log, so that
	// callers can collect garbage by volume written, not only by time.
	large atomic.Int64
	// lastCommit is when the last Commit ended (UnixNano).
	lastCommit atomic.Int64
	// writes is held for reading by Commit and for writing by whatever
	// calls Badger's DropPrefix (flushMemtable, DeletePrefix): DropPrefix
	// refuses the writes that arrive while it runs (ErrBlockedWrites), so
	// they wait here instead.
	writes sync.RWMutex

	// gc serializes garbage collection and guards what follows.
	gc sync.Mutex
	// flushedAt is large when the last flush began; flushes counts them
	// (for tests).
	flushedAt int64
	flushes   int
	// pending is set while a flush waits for writes to stop.
	pending *time.Timer
	closed  bool

	// parts is how many transactions the last Commit took (for tests).
	parts int

	// failure is the store's first failure; failed is closed with it
	// (failure.go). faults are a test's injected failures (nil in
	// production).
	failure atomic.Pointer[FailedError]
	failed  chan struct{}
	faults  Faults
	// current is the write that runs (its Op), for errors Badger logs.
	current atomic.Pointer[string]
}

// Sizes of the database's parts; see Open for why.
const (
	// ValueThreshold: values of at least this size go to the value log.
	ValueThreshold = 1 << 10
	// ValueLogFileSize is the most a value-log file holds, and so the
	// largest value the database takes (Badger refuses larger ones).
	ValueLogFileSize = 16 << 20
	// valueLogMaxEntries: a value-log file is closed after this many
	// values (once the transaction that passes it is written), ~1 MB of
	// node records, long before it holds ValueLogFileSize.
	valueLogMaxEntries = 1000
	memTableSize       = 4 << 20
)

// When the memtable is flushed for garbage collection; see
// CollectGarbage.
const (
	// flushAfter: at least this many bytes of values went to the value
	// log since the last flush.
	flushAfter = 1 << 20
	// quietFor: no Commit for this long, so that the flush, during which
	// commits wait, does not hold up a busy coordinator.
	quietFor = time.Second
	// flushPrefix is the prefix of the key that flushMemtable writes and
	// drops. '~' sorts after every other prefix, so no table holds it.
	flushPrefix = "~flush/"
)

// KeyRotation is how often Badger starts a new data key. Data keys
// encrypt the files and are themselves encrypted with the key from
// LoadKey in the key registry, which grows by one key (~60 bytes) per
// rotation: weekly bounds how much data one data key covers at ~3 KB of
// registry a year.
const KeyRotation = 7 * 24 * time.Hour

// Open opens (creating if needed) the database in dir, encrypted at rest
// with key (KeySize bytes, from LoadKey). Every commit is synced to disk:
// a kill -9 loses nothing that was acknowledged.
//
// Open makes the process's umask private (077) for good, so that every
// file Badger creates now and later is 0600 and every folder 0700; see
// privateUmask. An existing database written without encryption is
// refused with an error that says what to do.
//
// Any error of Badger while writing, and any panic in Badger, fails the
// store for good (failure.go): see Err and Failed.
func Open(dir string, key []byte, log *slog.Logger, opt ...Option) (*Store, error) {
	return open(dir, key, log, nil, opt...)
}

// open is Open with a hook that lets tests shrink Badger's sizes.
func open(dir string, key []byte, log *slog.Logger, tweak func(badger.Options) badger.Options, opt ...Option) (*Store, error) {
	var o options
	for _, f := range opt {
		f(&o)
	}
	if len(key) != KeySize {
		return nil, fmt.Errorf("open database in %s: the encryption key has %d bytes, want %d (use store.LoadKey)", dir, len(key), KeySize)
	}
	privateUmask()
	// Space is reclaimed in two ways (docs/benchmarks.md, "Soak", has the
	// measurements behind these numbers). Values under ValueThreshold
	// (history entries, small records) live in the LSM tree, where
	// compaction drops overwritten and deleted versions. Larger values
	// (most node records, rewritten on every transition) go to the value
	// log, whose files only value-log GC reclaims, and only once
	// compaction has counted their stale values; so small memtables
	// flushed often, with every flush compacted at once (one level-0
	// table), keep that count current (CollectGarbage also flushes when
	// writing stops). GC never collects the file being written, nor a
	// file less than half stale, so what stays on disk besides live data
	// is about one file's worth: files are closed after
	// valueLogMaxEntries values (~1 MB) rather than at ValueLogFileSize,
	// which stays large because it is also the largest value Badger
	// takes. With 16 MiB memtables, five level-0 tables and 64 MiB files,
	// 1000 nodes' data folder grew by ~37 MB a deploy/undeploy cycle, and
	// RSS with it (Badger mmaps the files); with 16 MiB files and no
	// flush when writing stops, the value log at rest held 8–25 MB for
	// 1 MB of live values. Each file ever written keeps a 16-byte slot in
	// Badger's DISCARD file (~0.3 bytes per node deployed and undeployed).
	// The logger learns of the store once it is open: an error Badger
	// logs from its own goroutines then fails the store.
	bl := &badgerLogger{log: log}
	opts := badger.DefaultOptions(dir).
		WithSyncWrites(true).
		WithLogger(bl).
		WithMemTableSize(memTableSize).
		WithNumMemtables(2).
		WithNumLevelZeroTables(1).
		WithValueLogFileSize(ValueLogFileSize).
		WithValueLogMaxEntries(valueLogMaxEntries).
		WithBlockCacheSize(16 << 20).
		// Encryption needs the index cache: decrypted table indexes live
		// there instead of in the mmapped files.
		WithIndexCacheSize(16 << 20).
		WithNumCompactors(2).
		WithValueThreshold(ValueThreshold).
		WithEncryptionKey(key).
		WithEncryptionKeyRotationDuration(KeyRotation)
	if tweak != nil {
		opts = tweak(opts)
	}
	db, err := badger.Open(opts)
	if errors.Is(err, badger.ErrEncryptionKeyMismatch) {
		if unencrypted(dir) {
			return nil, errUnencrypted(dir)
		}
		return nil, fmt.Errorf("open database in %s: the key file is not the key this database was encrypted with; restore the data folder's original db.key from your backup (the database cannot be read without it)", dir)
	}
	if err != nil {
		return nil, fmt.Errorf("open database in %s: %w (is another coordinator using this --data-dir?)", dir, err)
	}
	s := &Store{db: db, log: log, failed: make(chan struct{}), faults: o.faults}
	bl.store.Store(s)
	return s, nil
}

// Close flushes and closes the database. A failed store is left as it is
// (Close returns its failure): Badger's Close flushes the memtables,
// which is what may crash after a failure (failure.go), and nothing is
// lost without it, as every commit is in the write-ahead log, which the
// next Open replays; the process ends soon after.
func (s *Store) Close() error {
	s.gc.Lock()
	s.closed = true
	if s.pending != nil {
		s.pending.Stop()
		s.pending = nil
	}
	s.gc.Unlock()
	s.writes.Lock()
	defer s.writes.Unlock()
	if fe := s.failure.Load(); fe != nil && fe.injected {
		// A test's injected failure: Badger is sound, and the test
		// opens the folder again in the same process.
		_ = s.db.Close()
		return fe
	}
	return s.badger("close", true, s.db.Close)
}

// Batch collects writes for one commit.
type Batch struct {
	keys []string
	vals [][]byte // nil: delete
}

// Set adds a write.
func (b *Batch) Set(key string, val []byte) {
	b.keys = append(b.keys, key)
	b.vals = append(b.vals, val)
}

// Delete adds a deletion.
func (b *Batch) Delete(key string) {
	b.keys = append(b.keys, key)
	b.vals = append(b.vals, nil)
}

// Len is the number of writes.
func (b *Batch) Len() int { return len(b.keys) }

// Commit writes the batch durably. A batch too big for one transaction is
// split; each part is synced before Commit returns.
func (s *Store) Commit(b *Batch) error {
	if b.Len() == 0 {
		return nil
	}
	s.writes.RLock()
	defer s.writes.RUnlock()
	defer s.lastCommit.Store(time.Now().UnixNano())
	return s.badger("write", true, func() error {
		txn := s.db.NewTransaction(true)
		defer func() { txn.Discard() }()
		s.parts = 1
		for i, k := range b.keys {
			err := s.set(txn, k, b.vals[i])
			if errors.Is(err, badger.ErrTxnTooBig) {
				if err := txn.Commit(); err != nil {
					return fmt.Errorf("commit: %w", err)
				}
				s.parts++
				txn = s.db.NewTransaction(true)
				err = s.set(txn, k, b.vals[i])
			}
			if err != nil {
				return fmt.Errorf("write %s: %w", k, err)
			}
		}
		if err := txn.Commit(); err != nil {
			return fmt.Errorf("commit: %w", err)
		}
		return nil
	})
}

func (s *Store) set(txn *badger.Txn, k string, v []byte) error {
	if v == nil {
		return txn.Delete([]byte(k))
	}
	if len(v) >= ValueThreshold {
		s.large.Add(int64(len(v)))
	}
	return txn.Set([]byte(k), v)
}

// ValueLogWritten is how many bytes of values were written to the value
// log by Commit since Open.
func (s *Store) ValueLogWritten() int64 { return s.large.Load() }

// Get reads one key; found is false when it is absent.
func (s *Store) Get(key string) (val []byte, found bool, err error) {
	err = s.view(func(txn *badger.Txn) error {
		it, err := txn.Get([]byte(key))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		found = true
		val, err = it.ValueCopy(nil)
		return err
	})
	return val, found, err
}

// Scan calls fn for every key with prefix, in key order.
func (s *Store) Scan(prefix string, fn func(key string, val []byte) error) error {
	return s.view(func(txn *badger.Txn) error {
		opts := badger.DefaultIteratorOptions
		opts.Prefix = []byte(prefix)
		it := txn.NewIterator(opts)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			v, err := item.ValueCopy(nil)
			if err != nil {
				return err
			}
			if err := fn(string(item.Key()), v); err != nil {
				return err
			}
		}
		return nil
	})
}

// Keys calls fn for every key with prefix that sorts after after (all
// of them when after is ""), in key order, without reading the values,
// until fn returns false.
func (s *Store) Keys(prefix, after string, fn func(key string) bool) error {
	return s.view(func(txn *badger.Txn) error {
		opts := badger.DefaultIteratorOptions
		opts.Prefix = []byte(prefix)
		opts.PrefetchValues = false
		it := txn.NewIterator(opts)
		defer it.Close()
		start := []byte(prefix)
		if after != "" {
			// The smallest key after "after": seeking there skips the
			// deleted keys before it without visiting them.
			start = append([]byte(after), 0)
		}
		for it.Seek(start); it.Valid(); it.Next() {
			if !fn(string(it.Item().Key())) {
				return nil
			}
		}
		return nil
	})
}

// view runs fn in a read-only transaction; a panic fails the store, and
// a failed store is not read (Badger's reads can crash after a failure).
func (s *Store) view(fn func(txn *badger.Txn) error) error {
	return s.badger("read", false, func() error { return s.db.View(fn) })
}

// CollectGarbage reclaims space in the value log: Badger rewrites each
// value-log file of which at least half is stale (overwritten or deleted
// values) and removes it, until no file qualifies. It returns how many
// files were rewritten.
//
// Badger knows that a value is stale only once compaction has met the
// newer version of its key, and the newest versions wait in the memtable
// until it is full (memTableSize of keys and small values: ~10 MB of
// node records written to the value log). When writing stops, the values
// they made stale would stay uncounted, and their files on disk, for as
// long as it stays stopped (measured without this: 8–25 MB of value log
// at rest after deploy/undeploy cycles of 1000 nodes whose live records
// take 1 MB; docs/benchmarks.md, "Soak").
// So once at least flushAfter bytes went to the value log since the last
// flush, CollectGarbage first flushes the memtable (flushMemtable), which
// compacts it at once (one level-0 table) and so counts what it made
// stale. It does so only when no Commit came for quietFor: a flush holds
// commits up. Called while commits go on, it arranges instead to flush
// and collect by itself once they have stopped for quietFor.
func (s *Store) CollectGarbage() (rewritten int, err error) {
	s.gc.Lock()
	defer s.gc.Unlock()
	if s.closed {
		return 0, nil
	}
	if err := s.Err(); err != nil {
		return 0, err
	}
	if _, err := s.flushWhenQuiet(); err != nil {
		return 0, err
	}
	return s.collect()
}

// collect runs Badger's value-log GC until no file qualifies; s.gc held.
func (s *Store) collect() (rewritten int, err error) {
	// Bounded, so that a database written faster than it is collected
	// cannot keep the caller here forever; the next run goes on.
	for rewritten < 64 {
		err := s.valueLogGC()
		switch {
		case errors.Is(err, badger.ErrNoRewrite), errors.Is(err, badger.ErrRejected):
			// Nothing (more) to reclaim, or a GC already runs or the
			// database is closing.
			return rewritten, nil
		case err != nil:
			return rewritten, err // the store's failure
		}
		rewritten++
	}
	return rewritten, nil
}

// valueLogGC runs one round of Badger's value-log GC with commits held
// off: Badger v4.9.6's rewrite reads the memtable's max version without
// its lock (DB.MaxVersion, added with the fix for deleted keys coming
// back after GC), which races with a concurrent write (the race detector
// caught it in TestWANImpaired). One round rewrites one file, so commits
// wait a few milliseconds at most.
func (s *Store) valueLogGC() error {
	s.writes.Lock()
	defer s.writes.Unlock()
	var benign error
	err := s.badger("value log GC", true, func() error {
		err := s.db.RunValueLogGC(0.5)
		if errors.Is(err, badger.ErrNoRewrite) || errors.Is(err, badger.ErrRejected) {
			benign, err = err, nil
		}
		return err
	})
	if err != nil {
		return err
	}
	return benign
}

// flushWhenQuiet flushes the memtable when flushAfter bytes went to the
// value log since the last flush and no Commit came for quietFor. When
// only the second is missing, it sets a timer (if none is set) to try
// again then (later). It reports whether it flushed; s.gc held.
func (s *Store) flushWhenQuiet() (flushed bool, err error) {
	written := s.large.Load()
	if written-s.flushedAt < flushAfter {
		return false, nil
	}
	if idle := time.Since(time.Unix(0, s.lastCommit.Load())); idle < quietFor {
		if s.pending == nil {
			s.pending = time.AfterFunc(quietFor-idle, s.later)
		}
		return false, nil
	}
	if err := s.flushMemtable(); err != nil {
		return false, err
	}
	s.flushedAt = written
	s.flushes++
	return true, nil
}

// later is the flush that CollectGarbage put off while commits went on,
// and the collection after it.
func (s *Store) later() {
	s.gc.Lock()
	defer s.gc.Unlock()
	s.pending = nil
	if s.closed {
		return
	}
	flushed, err := s.flushWhenQuiet() // sets the timer again if commits came meanwhile
	if err == nil && flushed {
		_, err = s.collect()
	}
	// An error here has failed the store (failure.go): Failed tells the
	// engine, which stops.
	_ = err
}

// flushMemtable writes Badger's memtables to a level-0 table and compacts
// it into the tree. Badger v4 has no call for this alone; DropPrefix does
// it (it flushes every memtable, then compacts level 0, then drops the
// prefix from the tables that hold it), so flushMemtable writes a key of
// its own prefix, which no table holds, and drops that prefix. The flush
// is as durable as Badger's own: the memtable's write-ahead log is
// removed only once its table is written and synced.
func (s *Store) flushMemtable() error {
	s.writes.Lock()
	defer s.writes.Unlock()
	key := []byte(flushPrefix + "memtable")
	// Synced, like every write: DropPrefix does nothing when no key has
	// the prefix, so the key must be there first.
	// Each call checks first that the store has not failed: a DropPrefix
	// after a failed one is what crashed (failure.go).
	err := s.badger("write", true, func() error {
		return s.db.Update(func(txn *badger.Txn) error { return txn.Set(key, []byte{1}) })
	})
	if err != nil {
		return err
	}
	return s.badger("flush", true, func() error { return s.db.DropPrefix([]byte(flushPrefix)) })
}

// DeletePrefix removes every key under prefix. Commits wait while it runs.
func (s *Store) DeletePrefix(prefix string) error {
	s.writes.Lock()
	defer s.writes.Unlock()
	return s.badger("drop", true, func() error { return s.db.DropPrefix([]byte(prefix)) })
}

// badgerLogger takes Badger's log lines into the coordinator's log. An
// error Badger logs once the store is open fails the store: some come
// from Badger's own goroutines, where no caller hears of them (a memtable
// flush that fails is retried every second, forever, while writes pile
// up behind it until they block). Once the store has failed, Badger's
// lines (that retry, mostly) go to the debug level: the store's failure
// is the line that matters.
type badgerLogger struct {
	log   *slog.Logger
	store atomic.Pointer[Store]
}

func (l *badgerLogger) Errorf(f string, a ...any) {
	msg := strings.TrimSpace(fmt.Sprintf(f, a...))
	s := l.store.Load()
	if s != nil && s.failure.Load() != nil {
		l.log.Debug("badger: " + msg)
		return
	}
	l.log.Error("badger: " + msg)
	if s != nil {
		op := "background write"
		if cur := s.current.Load(); cur != nil {
			op = *cur
		} else if strings.Contains(msg, "flush") {
			op = "background flush"
		}
		s.fail(op, errors.New(msg))
	}
}

// Warningf: a warning that names a failure of the system (a compaction
// that cannot open a file: "too many open files") fails the store too.
// Badger retries such a compaction at once, forever (~20 lines a
// second), and the memtable flushes behind it soon block writes.
func (l *badgerLogger) Warningf(f string, a ...any) {
	msg := strings.TrimSpace(fmt.Sprintf(f, a...))
	s := l.store.Load()
	if s != nil && s.failure.Load() != nil {
		l.log.Debug("badger: " + msg)
		return
	}
	l.log.Warn("badger: " + msg)
	if s != nil && systemFailure(msg) != "" {
		op := "background write"
		if strings.Contains(msg, "ompact") {
			op = "compaction"
		}
		s.fail(op, errors.New(msg))
	}
}
func (l *badgerLogger) Infof(string, ...any)  {}
func (l *badgerLogger) Debugf(string, ...any) {}
