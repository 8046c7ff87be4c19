// Package backups restores the coordinator's data folder from a backup
// (the backup itself is the store's: store.Backup writes it while the
// engine runs). It knows the data folder's layout and nothing of the
// engine's state.
package backups

import (
	//DELETEME
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/bmedge/bmedge/coordinator/store"
)

// The data folder: the database, its key file and the coordinator's
// secret (broker and ramdisk credentials are derived from it).
const (
	DBFolder   = "db"
	KeyFile    = "db.key"
	SecretFile = "secret"
)

// Restore makes a new data folder dataDir from the backup in the file
// from, which keyFile (the db.key of the data folder that was backed up)
// opens; the new folder's database is encrypted with that key, which it
// keeps as its db.key. dataDir must not exist or be empty, and its parent
// must exist. The whole backup is checked before anything is written.
// A new folder is made beside dataDir and renamed into place once it is
// whole; into an existing empty folder (a systemd StateDirectory=, whose
// parent the service may not write) the restore is made in a hidden
// folder inside it, whose entries are moved up once it is whole, and
// the folder is made 0700. On any error nothing is left.
func Restore(from, dataDir, keyPath string, log *slog.Logger) (store.BackupInfo, error) {
	var info store.BackupInfo
	if log == nil {
		log = slog.Default()
	}
	key, err := store.ReadKey(keyPath)
	if err != nil {
		return info, err
	}
	dataDir = filepath.Clean(dataDir)
	if err := emptyOrAbsent(dataDir); err != nil {
		return info, err
	}
	parent := filepath.Dir(dataDir)
	if fi, err := os.Stat(parent); err != nil || !fi.IsDir() {
		return info, fmt.Errorf("the folder %s, where %s is to be made, does not exist: create it first", parent, filepath.Base(dataDir))
	}
	// An existing (empty) folder is kept, its owner too: the restore is
	// made inside it.
	_, err = os.Lstat(dataDir)
	inside := err == nil
	where := parent
	if inside {
		where = dataDir
	}
	f, err := os.Open(from)
	if err != nil {
		return info, fmt.Errorf("open the backup: %w", err)
	}
	defer f.Close()
	// First the whole file, with nothing written: a truncated, damaged or
	// changed backup, or the wrong key, is refused here.
	if info, err = store.VerifyBackup(f, key); err != nil {
		return info, fmt.Errorf("%s: %w; nothing was written", from, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return info, err
	}
	tmp, err := os.MkdirTemp(where, "."+filepath.Base(dataDir)+".restoring-")
	if err != nil {
		return info, fmt.Errorf("make a folder in %s for the restore: %w", where, err)
	}
	done := false
	defer func() {
		if !done {
			os.RemoveAll(tmp)
		}
	}()
	if err := os.Chmod(tmp, 0o700); err != nil {
		return info, err
	}
	if err := writeSynced(filepath.Join(tmp, KeyFile), key); err != nil {
		return info, err
	}
	info, files, err := store.RestoreBackup(f, key, filepath.Join(tmp, DBFolder), log)
	if err != nil {
		return info, fmt.Errorf("%s: %w; nothing was written", from, err)
	}
	for name, b := range files {
		if name != SecretFile {
			return info, fmt.Errorf("%s holds a file %q that this coordinator does not know; restore it with the version that made it; nothing was written", from, name)
		}
		if len(b) < 32 {
			return info, fmt.Errorf("%s holds a secret of %d bytes, too short to be a coordinator's; nothing was written", from, len(b))
		}
		if err := writeSynced(filepath.Join(tmp, name), b); err != nil {
			return info, err
		}
	}
	if _, ok := files[SecretFile]; !ok {
		return info, fmt.Errorf("%s holds no coordinator secret; nothing was written", from)
	}
	if err := store.Restrict(tmp, log); err != nil {
		return info, err
	}
	syncDir(tmp)
	if inside {
		if err := moveUp(tmp, dataDir); err != nil {
			return info, err
		}
		done = true
		return info, nil
	}
	if err := os.Rename(tmp, dataDir); err != nil {
		return info, fmt.Errorf("move the restored folder to %s: %w; nothing was written", dataDir, err)
	}
	done = true
	syncDir(parent)
	return info, nil
}

// moveUp moves the entries of the whole restored folder tmp (inside
// dataDir) into dataDir, removes tmp and makes dataDir 0700; on an error
// the entries already moved are removed again.
func moveUp(tmp, dataDir string) error {
	ents, err := os.ReadDir(tmp)
	if err != nil {
		return err
	}
	var moved []string
	undo := func(err error) error {
		for _, m := range moved {
			os.RemoveAll(m)
		}
		return fmt.Errorf("move the restored files into %s: %w; nothing was left", dataDir, err)
	}
	for _, e := range ents {
		to := filepath.Join(dataDir, e.Name())
		if err := os.Rename(filepath.Join(tmp, e.Name()), to); err != nil {
			return undo(err)
		}
		moved = append(moved, to)
	}
	if err := os.Chmod(dataDir, 0o700); err != nil {
		return undo(err)
	}
	if err := os.Remove(tmp); err != nil {
		return undo(err)
	}
	syncDir(dataDir)
	return nil
}

// emptyOrAbsent refuses a data folder that holds anything: a restore
// never mixes with what is there, and a running coordinator's folder
// holds its database.
func emptyOrAbsent(dir string) error {
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a folder: give a new, empty data folder", dir)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	if len(ents) > 0 {
		what := "it holds " + ents[0].Name()
		if _, err := os.Stat(filepath.Join(dir, DBFolder, "MANIFEST")); err == nil {
			what = "it holds a coordinator's database (perhaps of a coordinator that runs)"
		}
		return fmt.Errorf("refusing to restore into %s: %s; restore into a new, empty folder, then point --data-dir at it (or move this one away first)", dir, what)
	}
	return nil
}

// writeSynced writes a private file and syncs it.
func writeSynced(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}
