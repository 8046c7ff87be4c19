package engine

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"

	"github.com/bmedge/bmedge/coordinator/engine/backups"
	"github.com/bmedge/bmedge/coordinator/store"
)

// Backup writes an encrypted backup of the database as of one moment,
// with the coordinator's secret, to w (store.Backup has the format):
// the engine goes on meanwhile, and changes after that moment are not in
// it. The backup is encrypted with a key derived from the data folder's
// db.key, which restores it. ctx ends it early, and so does Close.
func (e *Engine) Backup(ctx context.Context, w io.Writer) (store.BackupInfo, error) {
	if err := e.Stopped(); err != nil {
		return store.BackupInfo{}, err
	}
	key, err := store.ReadKey(filepath.Join(e.cfg.DataDir, backups.KeyFile))
	if err != nil {
		return store.BackupInfo{}, err
	}
	return e.st.Backup(ctx, w, key, map[string][]byte{backups.SecretFile: e.auth.Secret()})
}

// Restore makes a new data folder dataDir from the backup in the file
// from (backups.Restore).
func Restore(from, dataDir, keyPath string, log *slog.Logger) (store.BackupInfo, error) {
	return backups.Restore(from, dataDir, keyPath, log)
}
