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
	// parts is how many transactions the last Commit took (for tests).
	parts int
}

// Open opens (creating if needed) the database in dir. Every commit is
// synced to disk: a kill -9 loses nothing that was acknowledged.
func Open(dir string, log *slog.Logger) (*Store, error) {
	opts := badger.DefaultOptions(dir).
		WithSyncWrites(true).
		WithLogger(badgerLogger{log}).
		WithMemTableSize(16 << 20).
		WithNumMemtables(2).
		WithValueLogFileSize(64 << 20).
		WithBlockCacheSize(16 << 20).
		WithIndexCacheSize(16 << 20).
		WithNumCompactors(2).
		WithValueThreshold(1 << 10)
	db, err := badger.Open(opts)
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
		err := set(txn, k, b.vals[i])
		if errors.Is(err, badger.ErrTxnTooBig) {
			if err := txn.Commit(); err != nil {
				return fmt.Errorf("commit: %w", err)
			}
			s.parts++
			txn = s.db.NewTransaction(true)
			err = set(txn, k, b.vals[i])
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

func set(txn *badger.Txn, k string, v []byte) error {
	if v == nil {
		return txn.Delete([]byte(k))
	}
	return txn.Set([]byte(k), v)
}

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
