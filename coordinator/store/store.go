// Package store keeps the coordinator's state in Badger on disk: nodes,
// ports, sites, node history, inventories. Writes come in batches, one
// synced transaction per batch, so that many nodes' transitions share one
// disk sync (group commit). It must never hold business rules.
package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/bmedge/bmedge/lib/kvstore"
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
	// PortGroupPrefix holds the port groups (Ironic's portgroups),
	// AllocationPrefix the allocations.
	PortGroupPrefix  = "pg/"
	AllocationPrefix = "al/"
)

// Store is the Badger database (lib/kvstore: encrypted at rest,
// behind the failure latch).
type Store struct {
	db  *kvstore.DB
	log *slog.Logger
	// large counts the bytes of values written to the value log, so that
	// callers can collect garbage by volume written, not only by time.
	large atomic.Int64
	// lastCommit is when the last Commit ended (UnixNano).
	lastCommit atomic.Int64

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

	// snaps are the running backups' reads, which Close ends first
	// (backup.go).
	snaps snapshots
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
	flushPrefix = kvstore.FlushPrefix
)

// KeyRotation is how often Badger starts a new data key (see
// kvstore.KeyRotation).
const KeyRotation = kvstore.KeyRotation

// Open opens (creating if needed) the database in dir, encrypted at rest
// with key (KeySize bytes, from LoadKey). Every commit is synced to disk:
// a kill -9 loses nothing that was acknowledged.
//
// Open makes the process's umask private (077) for good, so that every
// file Badger creates now and later is 0600 and every folder 0700; see
// lib/kvstore's privateUmask. An existing database written without encryption is
// refused with an error that says what to do.
//
// Any error of Badger while writing, and any panic in Badger, fails the
// store for good (failure.go): see Err and Failed.
func Open(dir string, key []byte, log *slog.Logger, opt ...Option) (*Store, error) {
	return open(dir, key, log, nil, opt...)
}

// open is Open with a hook that lets tests shrink Badger's sizes.
func open(dir string, key []byte, log *slog.Logger, tweak func(badger.Options) badger.Options, opt ...Option) (*Store, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("open database in %s: the encryption key has %d bytes, want %d (use store.LoadKey)", dir, len(key), KeySize)
	}
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
	// An error Badger logs from its own goroutines fails the store
	// (kvstore's FailOnLoggedErrors), as does every failed write.
	db, err := kvstore.Open(kvstore.Config{
		Dir:                dir,
		Key:                key,
		Log:                log,
		Names:              names,
		What:               "database",
		KeyMismatch:        fmt.Sprintf("open database in %s: the key file is not the key this database was encrypted with; restore the data folder's original db.key from your backup (the database cannot be read without it)", dir),
		FatalWrites:        true,
		FailOnLoggedErrors: true,
		Tune: func(opts badger.Options) badger.Options {
			opts = opts.
				WithMemTableSize(memTableSize).
				WithNumMemtables(2).
				WithNumLevelZeroTables(1).
				WithValueLogFileSize(ValueLogFileSize).
				WithValueLogMaxEntries(valueLogMaxEntries).
				WithBlockCacheSize(16 << 20).
				WithIndexCacheSize(16 << 20).
				WithNumCompactors(2).
				WithValueThreshold(ValueThreshold)
			if tweak != nil {
				opts = tweak(opts)
			}
			return opts
		},
	}, opt...)
	if err != nil {
		return nil, err
	}
	return &Store{db: db, log: log}, nil
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
	s.snaps.stop()
	// (A test's injected failure leaves Badger sound: kvstore closes
	// it, and the test opens the folder again in the same process.)
	return s.db.Close()
}

// Committer is the one way a change of the coordinator's state reaches
// the database: every write the engine makes (a loop's batch of node
// transitions, a catalog entry, the trimming of history) is one Batch
// given to Commit, applied whole, in the order Commit is called, and
// durable when Commit returns. *Store is the implementation on Badger; a
// replicated log carries the same batches (MarshalBinary) and applies
// each to every member's Store.
type Committer interface {
	Commit(ctx context.Context, b *Batch) error
}

// LeaderVerifier is what a Committer of a replicated log adds: a
// confirmation, from a majority of its members, that this member still
// leads. The engine asks it before it answers from a batch that
// committed nothing (a refusal decided from its memory): a commit proves
// the leadership by itself, a batch without one does not, and a leader
// cut off from the others could otherwise answer from a state that a
// newer leader has changed since. *Store, alone, does not implement it:
// a single coordinator answers at once.
type LeaderVerifier interface {
	// VerifyLeader returns nil once a majority has confirmed that this
	// member leads, or the error that it does not (ErrNotLeading in it)
	// or that ctx ended first.
	VerifyLeader(ctx context.Context) error
}

// ErrNotLeading is in the error of a commit that a cluster's replicated
// log refused because this member no longer leads: nothing of the batch
// is stored here, the store is sound, and the engine stops as for a
// failure while the member goes on as a follower.
var ErrNotLeading = errors.New("this coordinator no longer leads its cluster")

// Reader is what the engine reads of the database besides what it keeps
// in memory: records scanned at start, history, inventories, readings.
type Reader interface {
	Get(key string) (val []byte, found bool, err error)
	Scan(prefix string, fn func(key string, val []byte) error) error
	Keys(prefix, after string, fn func(key string) bool) error
}

var (
	_ Committer = (*Store)(nil)
	_ Reader    = (*Store)(nil)
)

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

// Size is the bytes of the batch's keys and values.
func (b *Batch) Size() int {
	n := 0
	for i, k := range b.keys {
		n += len(k) + len(b.vals[i])
	}
	return n
}

// Each calls fn for every write in order; val is nil for a deletion.
func (b *Batch) Each(fn func(key string, val []byte)) {
	for i, k := range b.keys {
		fn(k, b.vals[i])
	}
}

// MarshalBinary encodes the batch (for a log that carries it): per write
// the key's length and bytes, then a flag (0 delete, 1 set) and for a set
// the value's length and bytes, lengths as uvarints.
func (b *Batch) MarshalBinary() ([]byte, error) {
	n := 0
	for i, k := range b.keys {
		n += len(k) + len(b.vals[i]) + 2*binary.MaxVarintLen64 + 1
	}
	out := make([]byte, 0, n)
	for i, k := range b.keys {
		out = binary.AppendUvarint(out, uint64(len(k)))
		out = append(out, k...)
		if b.vals[i] == nil {
			out = append(out, 0)
			continue
		}
		out = append(out, 1)
		out = binary.AppendUvarint(out, uint64(len(b.vals[i])))
		out = append(out, b.vals[i]...)
	}
	return out, nil
}

// UnmarshalBinary decodes what MarshalBinary made, replacing b's writes.
func (b *Batch) UnmarshalBinary(data []byte) error {
	b.keys, b.vals = nil, nil
	next := func() ([]byte, error) {
		l, k := binary.Uvarint(data)
		if k <= 0 || uint64(len(data)-k) < l {
			return nil, errors.New("store: truncated batch")
		}
		v := data[k : k+int(l)]
		data = data[k+int(l):]
		return v, nil
	}
	for len(data) > 0 {
		k, err := next()
		if err != nil {
			return err
		}
		if len(data) == 0 {
			return errors.New("store: truncated batch")
		}
		flag := data[0]
		data = data[1:]
		switch flag {
		case 0:
			b.Delete(string(k))
		case 1:
			v, err := next()
			if err != nil {
				return err
			}
			b.Set(string(k), append([]byte{}, v...))
		default:
			return fmt.Errorf("store: bad write flag %d in batch", flag)
		}
	}
	return nil
}

// Commit writes the batch durably (Committer). A batch too big for one
// transaction is split; each part is synced before Commit returns. ctx
// is not waited on: a commit begun is finished, so that what the caller
// was told matches the disk.
func (s *Store) Commit(_ context.Context, b *Batch) error {
	if b.Len() == 0 {
		return nil
	}
	defer s.lastCommit.Store(time.Now().UnixNano())
	return s.db.Write("write", func(db *badger.DB) error {
		txn := db.NewTransaction(true)
		defer func() { txn.Discard() }()
		s.parts = 1
		for i, k := range b.keys {
			err := s.set(txn, k, b.vals[i])
			if errors.Is(err, badger.ErrTxnTooBig) {
				if err := txn.Commit(); err != nil {
					return fmt.Errorf("commit: %w", err)
				}
				s.parts++
				txn = db.NewTransaction(true)
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
	return s.db.View(fn)
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

// collect runs Badger's value-log GC until no file qualifies, at most
// 64 rounds (kvstore's CollectValueLog: each round with commits held
// off); s.gc held.
func (s *Store) collect() (rewritten int, err error) {
	return s.db.CollectValueLog(64)
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
	// Commits wait meanwhile; a DropPrefix after a failed one is what
	// crashed (kvstore's failure.go), so the latch is checked first.
	return s.db.FlushMemtable(false)
}

// DeletePrefix removes every key under prefix. Commits wait while it runs.
func (s *Store) DeletePrefix(prefix string) error {
	return s.db.DropPrefix(prefix)
}
