package cluster

import (
	"encoding/binary"
	"errors"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/hashicorp/raft"

	"github.com/bmedge/bmedge/lib/kvstore"
)

// logStore reads the Badger database that held raft's log and its
// stable store (current term, last vote) before the log moved to
// raft-wal (wal.go): openLog copies one into a new WAL and removes it.
// It is encrypted with the member's database key as the store is
// (lib/kvstore).
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

// eachStable hands every key and value of the stable store to set.
func (s *logStore) eachStable(set func(k, v []byte) error) error {
	return s.db.View(func(txn *badger.Txn) error {
		opts := badger.DefaultIteratorOptions
		opts.Prefix = []byte(stablePrefix)
		it := txn.NewIterator(opts)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			if err := set(it.Item().KeyCopy(nil)[len(stablePrefix):], v); err != nil {
				return err
			}
		}
		return nil
	})
}
