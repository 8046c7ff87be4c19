package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/hashicorp/raft"

	"github.com/bmedge/bmedge/lib/kvstore"
)

// logStore is raft's log and its stable store (current term, last vote)
// in a Badger database of its own, encrypted at rest with the member's
// database key as the store is (lib/kvstore): a log entry is a batch of
// the store's writes, BMC and rescue passwords among them.
//
// Keys: logPrefix and the entry's index (8 bytes big-endian, so that
// keys sort as indexes do); stablePrefix and raft's own key.
type logStore struct {
	db *kvstore.DB
}

const (
	logPrefix    = "l/"
	stablePrefix = "s/"
)

var (
	_ raft.LogStore    = (*logStore)(nil)
	_ raft.StableStore = (*logStore)(nil)
)

func openLogStore(dir string, key []byte, cfg kvstore.Config) (*logStore, error) {
	cfg.Dir, cfg.Key = dir, key
	cfg.What = "replicated log"
	cfg.FatalWrites = true
	cfg.Tune = func(o badger.Options) badger.Options {
		return o.WithMemTableSize(8 << 20).WithNumMemtables(2).WithValueLogFileSize(64 << 20).
			WithBlockCacheSize(8 << 20).WithNumCompactors(2)
	}
	db, err := kvstore.Open(cfg)
	if err != nil {
		return nil, err
	}
	return &logStore{db: db}, nil
}

func (s *logStore) Close() error { return s.db.Close() }

func logKey(i uint64) []byte {
	k := make([]byte, len(logPrefix)+8)
	copy(k, logPrefix)
	binary.BigEndian.PutUint64(k[len(logPrefix):], i)
	return k
}

// edge is the first (reverse false) or last log index, 0 when empty.
func (s *logStore) edge(reverse bool) (uint64, error) {
	var idx uint64
	err := s.db.View(func(txn *badger.Txn) error {
		opts := badger.DefaultIteratorOptions
		opts.PrefetchValues = false
		opts.Reverse = reverse
		opts.Prefix = []byte(logPrefix)
		it := txn.NewIterator(opts)
		defer it.Close()
		seek := []byte(logPrefix)
		if reverse {
			seek = append([]byte(logPrefix), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
		}
		it.Seek(seek)
		if it.Valid() {
			idx = binary.BigEndian.Uint64(it.Item().Key()[len(logPrefix):])
		}
		return nil
	})
	return idx, err
}

func (s *logStore) FirstIndex() (uint64, error) { return s.edge(false) }
func (s *logStore) LastIndex() (uint64, error)  { return s.edge(true) }

// An entry's value: term, type (1 byte), appended-at (UnixNano, 8
// bytes), then the data's and the extensions' lengths (uvarints) and
// bytes.
func encodeLog(l *raft.Log) []byte {
	out := make([]byte, 0, 8+1+8+2*binary.MaxVarintLen64+len(l.Data)+len(l.Extensions))
	out = binary.BigEndian.AppendUint64(out, l.Term)
	out = append(out, byte(l.Type))
	var at int64
	if !l.AppendedAt.IsZero() {
		at = l.AppendedAt.UnixNano()
	}
	out = binary.BigEndian.AppendUint64(out, uint64(at))
	out = binary.AppendUvarint(out, uint64(len(l.Data)))
	out = append(out, l.Data...)
	out = binary.AppendUvarint(out, uint64(len(l.Extensions)))
	out = append(out, l.Extensions...)
	return out
}

var errBadEntry = errors.New("cluster: a damaged entry in the replicated log")

func decodeLog(index uint64, b []byte, l *raft.Log) error {
	if len(b) < 17 {
		return errBadEntry
	}
	l.Index = index
	l.Term = binary.BigEndian.Uint64(b)
	l.Type = raft.LogType(b[8])
	if at := int64(binary.BigEndian.Uint64(b[9:])); at != 0 {
		l.AppendedAt = time.Unix(0, at)
	} else {
		l.AppendedAt = time.Time{}
	}
	b = b[17:]
	next := func() ([]byte, error) {
		n, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < n {
			return nil, errBadEntry
		}
		v := b[k : k+int(n)]
		b = b[k+int(n):]
		return v, nil
	}
	var err error
	if l.Data, err = next(); err != nil {
		return err
	}
	if l.Extensions, err = next(); err != nil {
		return err
	}
	if len(l.Extensions) == 0 {
		l.Extensions = nil
	}
	return nil
}

func (s *logStore) GetLog(index uint64, l *raft.Log) error {
	return s.db.View(func(txn *badger.Txn) error {
		it, err := txn.Get(logKey(index))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return raft.ErrLogNotFound
		}
		if err != nil {
			return err
		}
		v, err := it.ValueCopy(nil)
		if err != nil {
			return err
		}
		return decodeLog(index, v, l)
	})
}

func (s *logStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// StoreLogs writes the entries in one synced transaction (a batch too
// big for one is split, each part synced).
func (s *logStore) StoreLogs(logs []*raft.Log) error {
	return s.db.Write("append to the replicated log", func(db *badger.DB) error {
		wb := db.NewWriteBatch()
		defer wb.Cancel()
		for _, l := range logs {
			if err := wb.Set(logKey(l.Index), encodeLog(l)); err != nil {
				return err
			}
		}
		return wb.Flush()
	})
}

// DeleteRange removes the entries min..max, both included.
func (s *logStore) DeleteRange(min, max uint64) error {
	if min > max {
		return nil
	}
	return s.db.Write("trim the replicated log", func(db *badger.DB) error {
		wb := db.NewWriteBatch()
		defer wb.Cancel()
		err := db.View(func(txn *badger.Txn) error {
			opts := badger.DefaultIteratorOptions
			opts.PrefetchValues = false
			opts.Prefix = []byte(logPrefix)
			it := txn.NewIterator(opts)
			defer it.Close()
			for it.Seek(logKey(min)); it.Valid(); it.Next() {
				k := it.Item().KeyCopy(nil)
				if binary.BigEndian.Uint64(k[len(logPrefix):]) > max {
					break
				}
				if err := wb.Delete(k); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		return wb.Flush()
	})
}

func (s *logStore) Set(key, val []byte) error {
	return s.db.Write("write the replicated log's state", func(db *badger.DB) error {
		return db.Update(func(txn *badger.Txn) error {
			return txn.Set(append([]byte(stablePrefix), key...), append([]byte{}, val...))
		})
	})
}

// Get returns an empty value for a key never set, as raft expects of
// its stable store ("not found" is not an error there).
func (s *logStore) Get(key []byte) ([]byte, error) {
	var out []byte
	err := s.db.View(func(txn *badger.Txn) error {
		it, err := txn.Get(append([]byte(stablePrefix), key...))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		out, err = it.ValueCopy(nil)
		return err
	})
	return out, err
}

func (s *logStore) SetUint64(key []byte, val uint64) error {
	return s.Set(key, binary.BigEndian.AppendUint64(nil, val))
}

func (s *logStore) GetUint64(key []byte) (uint64, error) {
	b, err := s.Get(key)
	if err != nil || len(b) == 0 {
		return 0, err
	}
	if len(b) != 8 {
		return 0, fmt.Errorf("cluster: the replicated log's value %q has %d bytes, want 8", key, len(b))
	}
	return binary.BigEndian.Uint64(b), nil
}
