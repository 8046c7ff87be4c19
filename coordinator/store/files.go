package store

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	badger "github.com/dgraph-io/badger/v4"
)

// KeySize is the size of the database's encryption key: 32 bytes select
// AES-256 in Badger.
const KeySize = 32

// LoadKey returns the database's encryption key from path, creating the
// file (KeySize random bytes, mode 0600) when it is absent and dbDir holds
// no database yet. A key file of the wrong size, or readable or writable
// by anybody but its owner, is an error: the key protects every BMC and
// rescue password at rest, so a key others could have read is not
// silently trusted.
func LoadKey(path, dbDir string) ([]byte, error) {
	fi, err := os.Stat(path)
	switch {
	case err == nil:
		if fi.Mode().Perm()&0o077 != 0 {
			return nil, fmt.Errorf("the database key file %s has mode %04o, so users other than its owner may have read it: run 'chmod 600 %s'; if somebody else could have copied it, the secrets in the database (BMC passwords) should be treated as exposed and changed",
				path, fi.Mode().Perm(), path)
		}
		if !fi.Mode().IsRegular() || fi.Size() != KeySize {
			return nil, fmt.Errorf("the database key file %s holds %d bytes, not %d: it is not a key this coordinator wrote; restore the original db.key from your backup of the data folder (the database cannot be read without it)",
				path, fi.Size(), KeySize)
		}
		key, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read the database key file: %w", err)
		}
		if len(key) != KeySize {
			return nil, fmt.Errorf("the database key file %s changed while it was read (%d bytes); start the coordinator again", path, len(key))
		}
		return key, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("read the database key file: %w", err)
	}
	// No key yet. A database that exists without its key was either
	// written by an earlier version, unencrypted, or its key was lost;
	// either way a fresh key would not open it.
	if hasDatabase(dbDir) {
		if unencrypted(dbDir) {
			return nil, errUnencrypted(dbDir)
		}
		return nil, fmt.Errorf("the database in %s is encrypted but its key file %s is missing: restore db.key from your backup of the data folder (the database cannot be read without it)", dbDir, path)
	}
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("generate the database key: %w", err)
	}
	// Written to a temporary file and linked into place, so that a crash
	// never leaves a short key file, and two coordinators started at once
	// on the same folder cannot replace each other's key (link fails when
	// the name exists; the loser reads the winner's key).
	tmp, err := os.CreateTemp(filepath.Dir(path), ".db.key-*")
	if err != nil {
		return nil, fmt.Errorf("create the database key file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("create the database key file: %w", err)
	}
	if _, err := tmp.Write(key); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("write the database key file: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("write the database key file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return nil, fmt.Errorf("write the database key file: %w", err)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return LoadKey(path, dbDir)
		}
		return nil, fmt.Errorf("create the database key file: %w", err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return key, nil
}

// hasDatabase tells whether dir holds a Badger database (its MANIFEST).
func hasDatabase(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "MANIFEST"))
	return err == nil
}

// unencrypted tells whether the database in dir was written without an
// encryption key: Badger's key registry then starts with a 16-byte IV and
// its sanity text in the clear.
func unencrypted(dir string) bool {
	f, err := os.Open(filepath.Join(dir, badger.KeyRegistryFileName))
	if err != nil {
		return false
	}
	defer f.Close()
	head := make([]byte, 16+len(registrySanity))
	if _, err := f.Read(head); err != nil {
		return false
	}
	return bytes.Equal(head[16:], registrySanity)
}

// registrySanity is what Badger writes (encrypted when there is a key) at
// the start of its key registry to check the key on open.
var registrySanity = []byte("Hello Badger")

func errUnencrypted(dir string) error {
	return fmt.Errorf("the database in %s was written by an earlier version without encryption at rest, and this version does not run an unencrypted database: "+
		"stop here, move the data folder away (it holds BMC passwords in the clear: destroy it once you no longer need it), start the coordinator with an empty --data-dir, "+
		"then register the sites and enroll the nodes again", dir)
}

// Restrict makes root and everything under it private to the owner:
// folders 0700, files without any group or other permission. The umask
// that Open sets covers files created from then on; this covers files
// created before, by an earlier version or under another umask.
func Restrict(root string, log *slog.Logger) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		perm := fi.Mode().Perm()
		want := perm &^ 0o077
		if d.IsDir() {
			want = 0o700
		}
		if perm == want {
			return nil
		}
		if err := os.Chmod(path, want); err != nil {
			return fmt.Errorf("make %s private (chmod %04o): %w", path, want, err)
		}
		log.Warn("data file was readable by others; made it private", "path", path, "mode", fmt.Sprintf("%04o", perm), "now", fmt.Sprintf("%04o", want))
		return nil
	})
}
