package cluster

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"

	"github.com/bmedge/bmedge/lib/kvstore"
)

// The replicated log and raft's stable state (current term, last vote)
// are hashicorp/raft-wal's: append-only segment files, one synced write
// per append and a whole file dropped when the log is trimmed, in
// DATA/raft/wal. Each entry is sealed with AES-256-GCM under a key
// derived from the member's database key (an entry is a batch of the
// store's writes, BMC and rescue passwords among them); its index, term
// and type are bound to it as additional data, so an entry cannot be
// moved to another place in the log unnoticed. The stable state (terms and a member's name)
// holds no secret and is raft-wal's own meta file.
//
// Before, the log was a second Badger database (DATA/raft/log); a
// member that finds one copies it into a new WAL at its start (openLog).
const (
	walDir       = "wal"
	badgerLogDir = "log"
	// walSegmentSize bounds one segment file (preallocated); an entry
	// may be larger, it then has a segment of its own.
	walSegmentSize = 32 << 20
	// logCacheEntries is how many of the last entries raft keeps in
	// memory (raft.LogCache) in front of the WAL.
	logCacheEntries = 256
)

// sealer seals each entry's data (and raft's extensions) with
// AES-256-GCM: the stored Data is nonce (12 bytes) and the sealed
// plaintext, which is the length of the data (uvarint), the data and the
// extensions. The entry's index, term and type are the additional data,
// so an entry moved to another index or term does not open. (raft-wal's
// own codec hook is not used: v0.4 records every segment as its
// built-in codec and then refuses to reopen one written by another.)
type sealer struct{ aead cipher.AEAD }

func newSealer(dbKey []byte) (*sealer, error) {
	k, err := hkdf.Key(sha256.New, dbKey, nil, "bmedge replicated log v1", 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(k)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &sealer{aead: aead}, nil
}

func entryAD(l *raft.Log) []byte {
	var ad [17]byte
	binary.BigEndian.PutUint64(ad[:8], l.Index)
	binary.BigEndian.PutUint64(ad[8:16], l.Term)
	ad[16] = byte(l.Type)
	return ad[:]
}

// seal returns a copy of l with its data and extensions sealed.
func (s *sealer) seal(l *raft.Log) (*raft.Log, error) {
	ns := s.aead.NonceSize()
	plain := make([]byte, 0, binary.MaxVarintLen64+len(l.Data)+len(l.Extensions))
	plain = binary.AppendUvarint(plain, uint64(len(l.Data)))
	plain = append(plain, l.Data...)
	plain = append(plain, l.Extensions...)
	out := make([]byte, ns, ns+len(plain)+s.aead.Overhead())
	if _, err := rand.Read(out); err != nil {
		return nil, err
	}
	c := *l
	c.Data = s.aead.Seal(out, out, plain, entryAD(l))
	c.Extensions = nil
	return &c, nil
}

var errSealedEntry = errors.New("cluster: an entry of the replicated log does not open with this member's db.key (another key, moved, or damaged)")

// open turns a sealed entry back in place.
func (s *sealer) open(l *raft.Log) error {
	ns := s.aead.NonceSize()
	if len(l.Data) < ns+s.aead.Overhead() || len(l.Extensions) != 0 {
		return fmt.Errorf("entry %d: %w", l.Index, errSealedEntry)
	}
	plain, err := s.aead.Open(nil, l.Data[:ns], l.Data[ns:], entryAD(l))
	if err != nil {
		return fmt.Errorf("entry %d: %w", l.Index, errSealedEntry)
	}
	n, k := binary.Uvarint(plain)
	if k <= 0 || n > uint64(len(plain)-k) {
		return fmt.Errorf("entry %d: %w", l.Index, errSealedEntry)
	}
	l.Data = plain[k : k+int(n)]
	l.Extensions = nil
	if rest := plain[k+int(n):]; len(rest) > 0 {
		l.Extensions = rest
	}
	return nil
}

// privateFS is raft-wal's file system with every segment file made
// private (0600) when it is created, before anything is written to it.
type privateFS struct{ *walfs.FS }

func (p privateFS) Create(dir, name string, size uint64) (types.WritableFile, error) {
	f, err := p.FS.Create(dir, name, size)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(filepath.Join(dir, name), 0o600); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// openLog opens the member's log in raftDir/wal, first moving the
// entries and the stable state of a Badger log (raftDir/log) of an
// earlier version into it.
func openLog(raftDir string, key []byte, names kvstore.Config, hl hclog.Logger, log *slog.Logger) (*walLog, error) {
	dir := filepath.Join(raftDir, walDir)
	old := filepath.Join(raftDir, badgerLogDir)
	_, werr := os.Stat(dir)
	_, oerr := os.Stat(old)
	switch {
	case werr == nil && oerr == nil:
		// Moved, but stopped before the old log was removed.
		if err := os.RemoveAll(old); err != nil {
			return nil, err
		}
	case errors.Is(werr, os.ErrNotExist) && oerr == nil:
		if err := moveBadgerLog(old, dir, key, names, hl, log); err != nil {
			return nil, fmt.Errorf("move the replicated log from %s to %s: %w", old, dir, err)
		}
	}
	return openWAL(dir, key, hl)
}

// walLog is the WAL with its entries sealed and its meta file, which
// raft-wal's Close leaves open (and locked): Close here closes both. It
// is raft's log store and stable store.
type walLog struct {
	*wal.WAL
	meta *metadb.BoltMetaDB
	seal *sealer
}

func (l *walLog) GetLog(index uint64, out *raft.Log) error {
	if err := l.WAL.GetLog(index, out); err != nil {
		return err
	}
	return l.seal.open(out)
}

func (l *walLog) StoreLog(e *raft.Log) error { return l.StoreLogs([]*raft.Log{e}) }

func (l *walLog) StoreLogs(es []*raft.Log) error {
	sealed := make([]*raft.Log, len(es))
	for i, e := range es {
		c, err := l.seal.seal(e)
		if err != nil {
			return err
		}
		sealed[i] = c
	}
	return l.WAL.StoreLogs(sealed)
}

func (l *walLog) Close() error {
	err := l.WAL.Close()
	if merr := l.meta.Close(); err == nil {
		err = merr
	}
	return err
}

func openWAL(dir string, key []byte, hl hclog.Logger) (*walLog, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	seal, err := newSealer(key)
	if err != nil {
		return nil, err
	}
	meta := &metadb.BoltMetaDB{}
	w, err := wal.Open(dir, wal.WithLogger(hl.Named("wal")),
		wal.WithSegmentSize(walSegmentSize), wal.WithMetaStore(meta),
		wal.WithSegmentFiler(segment.NewFiler(dir, privateFS{walfs.New()})))
	if err != nil {
		meta.Close()
		return nil, fmt.Errorf("open the replicated log in %s: %w", dir, err)
	}
	l := &walLog{WAL: w, meta: meta, seal: seal}
	if err := os.Chmod(filepath.Join(dir, metadb.FileName), 0o600); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// moveBadgerLog copies a Badger log's entries and stable state into a
// new WAL at dir (made as dir.new, renamed when complete), then removes
// the Badger log.
func moveBadgerLog(old, dir string, key []byte, names kvstore.Config, hl hclog.Logger, log *slog.Logger) error {
	src, err := openLogStore(old, key, names)
	if err != nil {
		return err
	}
	tmp := dir + ".new"
	n, err := copyBadgerLog(src, tmp, key, hl)
	if cerr := src.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return err
	}
	if err := syncDir(filepath.Dir(dir)); err != nil {
		return err
	}
	log.Info("moved the replicated log out of Badger", "entries", n, "from", old, "to", dir)
	return os.RemoveAll(old)
}

func copyBadgerLog(src *logStore, tmp string, key []byte, hl hclog.Logger) (n uint64, err error) {
	if err := os.RemoveAll(tmp); err != nil {
		return 0, err
	}
	dst, err := openWAL(tmp, key, hl)
	if err != nil {
		return 0, err
	}
	defer func() {
		if cerr := dst.Close(); err == nil {
			err = cerr
		}
	}()
	first, err := src.FirstIndex()
	if err != nil {
		return 0, err
	}
	last, err := src.LastIndex()
	if err != nil {
		return 0, err
	}
	var chunk []*raft.Log
	for i := first; first > 0 && i <= last; i++ {
		l := new(raft.Log)
		if err := src.GetLog(i, l); err != nil {
			return n, fmt.Errorf("entry %d: %w", i, err)
		}
		chunk = append(chunk, l)
		if len(chunk) == 64 || i == last {
			if err := dst.StoreLogs(chunk); err != nil {
				return n, err
			}
			n += uint64(len(chunk))
			chunk = chunk[:0]
		}
	}
	return n, src.eachStable(func(k, v []byte) error {
		// raft keeps its terms with SetUint64: the Badger log wrote
		// them big-endian, raft-wal reads them little-endian.
		if uint64Stable[string(k)] {
			if len(v) != 8 {
				return fmt.Errorf("stable value %q has %d bytes, want 8", k, len(v))
			}
			return dst.SetUint64(k, binary.BigEndian.Uint64(v))
		}
		return dst.Set(k, v)
	})
}

// uint64Stable names the keys raft writes with SetUint64.
var uint64Stable = map[string]bool{"CurrentTerm": true, "LastVoteTerm": true}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// hasLog reports whether raftDir holds a replicated log (a WAL, or a
// Badger log of an earlier version).
func hasLog(raftDir string) bool {
	for _, d := range []string{walDir, badgerLogDir} {
		if _, err := os.Stat(filepath.Join(raftDir, d)); err == nil {
			return true
		}
	}
	return false
}
