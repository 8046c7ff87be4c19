package kvstore

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	badger "github.com/dgraph-io/badger/v4"
)

// KeySize is the size of a database's encryption key: 32 bytes select
// AES-256 in Badger.
const KeySize = 32

// LoadKey returns the database's encryption key from path, creating the
// file (KeySize random bytes, mode 0600) when it is absent and dbDir holds
// no database yet. A key file of the wrong size, or readable or writable
// by anybody but its owner, is an error: the key protects every secret
// the database holds at rest, so a key others could have read is not
// silently trusted. A database in dbDir without its key file is an error
// too (a fresh key would not open it). n words the errors.
func LoadKey(path, dbDir string, n Names) ([]byte, error) {
	kf := n.keyFile()
	fi, err := os.Stat(path)
	switch {
	case err == nil:
		if fi.Mode().Perm()&0o077 != 0 {
			return nil, fmt.Errorf("the %s %s has mode %04o, so users other than its owner may have read it: run 'chmod 600 %s'%s",
				kf, path, fi.Mode().Perm(), path, n.Exposed)
		}
		if !fi.Mode().IsRegular() || fi.Size() != KeySize {
			return nil, fmt.Errorf("the %s %s holds %d bytes, not %d: it is not a key this %s wrote; %s",
				kf, path, fi.Size(), KeySize, n.program(), n.RestoreKey)
		}
		key, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read the %s: %w", kf, err)
		}
		if len(key) != KeySize {
			return nil, fmt.Errorf("the %s %s changed while it was read (%d bytes); start the %s again", kf, path, len(key), n.program())
		}
		return key, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("read the %s: %w", kf, err)
	}
	// No key yet. A database that exists without its key was either
	// written by an earlier version, unencrypted, or its key was lost;
	// either way a fresh key would not open it.
	if HasDatabase(dbDir) {
		if n.Unencrypted != "" && Unencrypted(dbDir) {
			return nil, fmt.Errorf(n.Unencrypted, dbDir)
		}
		return nil, fmt.Errorf("%s in %s is encrypted but its key file %s is missing: %s", n.database(), dbDir, path, n.KeyMissing)
	}
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("generate the %s: %w", strings.TrimSuffix(kf, " file"), err)
	}
	// Written to a temporary file and linked into place, so that a crash
	// never leaves a short key file, and two programs started at once on
	// the same folder cannot replace each other's key (link fails when
	// the name exists; the loser reads the winner's key).
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*")
	if err != nil {
		return nil, fmt.Errorf("create the %s: %w", kf, err)
	}
	defer os.Remove(tmp.Name())
	err = tmp.Chmod(0o600)
	if err == nil {
		_, err = tmp.Write(key)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("write the %s: %w", kf, err)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return LoadKey(path, dbDir, n)
		}
		return nil, fmt.Errorf("create the %s: %w", kf, err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return key, nil
}

// HasDatabase tells whether dir holds a Badger database (its MANIFEST).
func HasDatabase(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "MANIFEST"))
	return err == nil
}

// Unencrypted tells whether the database in dir was written without an
// encryption key: Badger's key registry then starts with a 16-byte IV and
// its sanity text in the clear.
func Unencrypted(dir string) bool {
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

// PrivateDir makes the process umask private (as Open does), creates dir
// (0700) if needed and makes it private when it is open to others, with
// a warning. what names it ("state folder"), flag the flag that sets it
// ("agent --state-dir").
func PrivateDir(dir, what, flag string, log *slog.Logger) error {
	privateUmask()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create the %s (%s): %w", what, flag, err)
	}
	if fi, err := os.Stat(dir); err == nil && fi.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("make the %s %s private: %w", what, dir, err)
		}
		log.Warn(what+" was open to others; made it private (0700)", "path", dir)
	}
	return nil
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
