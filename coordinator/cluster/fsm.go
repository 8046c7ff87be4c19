package cluster

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/bmedge/bmedge/coordinator/store"
)

// fsm applies the replicated log to the member's store: each entry is
// one store.Batch (the engine's commit), applied whole and in the log's
// order, on every member, whether its engine runs or not.
//
// Snapshots are the store's backup stream (store.Backup), encrypted with
// the database key (so every member needs the same db.key), and carry
// the engine's secret file. A snapshot is read while entries go on being
// applied, so it may hold writes of entries after its index; that is
// harmless because every write of a batch sets or deletes a key whole:
// restoring it and applying the entries after its index in order ends
// with each key's last write, and raft never lets a member that lacks a
// committed entry lead.
type fsm struct {
	st  *store.Store
	key []byte
	// dataDir receives the secret file of a restored snapshot; spool is
	// where a snapshot being restored is checked before it replaces the
	// store.
	dataDir, spool string
	// secret reads the engine's secret file for a snapshot.
	secret func() ([]byte, error)
	// mu: Restore runs alone.
	mu sync.Mutex
	// stats, if set, receives the time of each snapshot.
	stats *memberStats
}

// secretFile is the engine's secret, in the data folder
// (engine/backups.SecretFile).
const secretFile = "secret"

var (
	_ raft.FSM             = (*fsm)(nil)
	_ store.LeaderVerifier = (*committer)(nil)
)

// applied is what Apply returns for an entry: nil, or the error that
// failed the store (the member then stops, crash-only).
func (f *fsm) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	var b store.Batch
	if err := b.UnmarshalBinary(l.Data); err != nil {
		return fmt.Errorf("entry %d of the replicated log is not a batch: %w", l.Index, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.st.Commit(context.Background(), &b); err != nil {
		return err
	}
	return nil
}

func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	files := map[string][]byte{}
	if f.secret != nil {
		s, err := f.secret()
		if err != nil {
			return nil, err
		}
		if s != nil {
			files[secretFile] = s
		}
	}
	if f.stats != nil {
		f.stats.snapshotAt.Store(time.Now().UnixNano())
	}
	return &snapshot{st: f.st, key: f.key, files: files}, nil
}

func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	_, files, err := f.st.Replace(rc, f.key, f.spool)
	if err != nil {
		return fmt.Errorf("restore a snapshot of the replicated log: %w", err)
	}
	if f.stats != nil {
		f.stats.snapshotAt.Store(time.Now().UnixNano())
	}
	if s, ok := files[secretFile]; ok && f.dataDir != "" {
		if err := writeFileSynced(filepath.Join(f.dataDir, secretFile), s); err != nil {
			return err
		}
	}
	return nil
}

type snapshot struct {
	st    *store.Store
	key   []byte
	files map[string][]byte
}

func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	if _, err := s.st.Backup(ctx, sink, s.key, s.files); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s *snapshot) Release() {}

// writeFileSynced replaces path with b (mode 0600) through a renamed
// temporary file.
func writeFileSynced(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// committer is the engine's seam on a member: Commit hands the batch to
// the replicated log and returns once a majority holds it and this
// member applied it to its store (so the engine's reads see it), or with
// the error that stopped it (leadership lost: the engine then stops and
// this member follows).
type committer struct {
	r       *raft.Raft
	timeout time.Duration
}

func (c *committer) Commit(ctx context.Context, b *store.Batch) error {
	if b.Len() == 0 {
		return nil
	}
	data, err := b.MarshalBinary()
	if err != nil {
		return err
	}
	f := c.r.Apply(data, c.timeout)
	if err := f.Error(); err != nil {
		return fmt.Errorf("%w: replicate the commit: %v", store.ErrNotLeading, err)
	}
	if err, ok := f.Response().(error); ok && err != nil {
		return err
	}
	return nil
}

// VerifyLeader is store.LeaderVerifier: one round of heartbeats that a
// majority answers in this member's term, or the error that it no longer
// leads (raft gives that up once its lease passes without a majority).
func (c *committer) VerifyLeader(ctx context.Context) error {
	f := c.r.VerifyLeader()
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("%w: %v", store.ErrNotLeading, err)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
