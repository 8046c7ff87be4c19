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
)

// Store is the Badger database.
type Store struct {
	db *badger.DB
	// large counts the bytes of values written to the value log, so that
	// callers can collect garbage by volume written, not only by time.
	large atomic.Int64
	// parts is how many transactions the last Commit took (for tests).
	parts int
}

// Sizes of the database's parts; see Open for why.
const (
	// ValueThreshold: values of at least this size go to the value log.
	ValueThreshold = 1 << 10
	// ValueLogFileSize is the size of one value-log file, the unit that
	// value-log GC reclaims.
	ValueLogFileSize = 16 << 20
	memTableSize     = 4 << 20
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
func Open(dir string, key []byte, log *slog.Logger) (*Store, error) {
	return open(dir, key, log, nil)
}

// open is Open with a hook that lets tests shrink Badger's sizes.
func open(dir string, key []byte, log *slog.Logger, tweak func(badger.Options) badger.Options) (*Store, error) {
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
	// table), keep that count current, and small value-log files let GC
	// reclaim space in small steps. With 16 MiB memtables, five level-0
	// tables and 64 MiB files, 1000 nodes' data folder grew by ~37 MB a
	// deploy/undeploy cycle, and RSS with it (Badger mmaps the files).
	opts := badger.DefaultOptions(dir).
		WithSyncWrites(true).
		WithLogger(badgerLogger{log}).
		WithMemTableSize(memTableSize).
		WithNumMemtables(2).
		WithNumLevelZeroTables(1).
		WithValueLogFileSize(ValueLogFileSize).
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
	return &Store{db: db}, nil
}

// Close flushes and closes the database.
func (s *Store) Close() error { return s.db.Close() }

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
	err = s.db.View(func(txn *badger.Txn) error {
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
	return s.db.View(func(txn *badger.Txn) error {
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
	return s.db.View(func(txn *badger.Txn) error {
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

// CollectGarbage reclaims space in the value log: Badger rewrites each
// value-log file of which at least half is stale (overwritten or deleted
// values) and removes it, until no file qualifies. It returns how many
// files were rewritten. Values that stale are known only after compaction
// has dropped their keys' older versions, so a file is reclaimed some
// time after its values went stale, not at once.
func (s *Store) CollectGarbage() (rewritten int, err error) {
	// Bounded, so that a database written faster than it is collected
	// cannot keep the caller here forever; the next run goes on.
	for rewritten < 64 {
		err := s.db.RunValueLogGC(0.5)
		switch {
		case errors.Is(err, badger.ErrNoRewrite), errors.Is(err, badger.ErrRejected):
			// Nothing (more) to reclaim, or a GC already runs or the
			// database is closing.
			return rewritten, nil
		case err != nil:
			return rewritten, fmt.Errorf("value log GC: %w", err)
		}
		rewritten++
	}
	return rewritten, nil
}

// DeletePrefix removes every key under prefix.
func (s *Store) DeletePrefix(prefix string) error {
	return s.db.DropPrefix([]byte(prefix))
}

type badgerLogger struct{ log *slog.Logger }

func (l badgerLogger) Errorf(f string, a ...any) {
	l.log.Error("badger: " + strings.TrimSpace(fmt.Sprintf(f, a...)))
}
func (l badgerLogger) Warningf(f string, a ...any) {
	l.log.Warn("badger: " + strings.TrimSpace(fmt.Sprintf(f, a...)))
}
func (l badgerLogger) Infof(string, ...any)  {}
func (l badgerLogger) Debugf(string, ...any) {}
