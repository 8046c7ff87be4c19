package cluster

import (
	"encoding/binary"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/hashicorp/raft"
)

// The writers of the Badger log of earlier versions, for the test of its
// move into the WAL.

// encodeLog is the inverse of decodeLog.
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

func (s *logStore) Set(key, val []byte) error {
	return s.db.Write("write the replicated log's state", func(db *badger.DB) error {
		return db.Update(func(txn *badger.Txn) error {
			return txn.Set(append([]byte(stablePrefix), key...), append([]byte{}, val...))
		})
	})
}
