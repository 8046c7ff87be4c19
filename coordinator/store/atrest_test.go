package store

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// secretLike returns a distinctive string to look for in files.
func secretLike(t *testing.T, what string) string {
	t.Helper()
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return what + "-" + hex.EncodeToString(b)
}

// filesContaining lists the files under dir that hold needle.
func filesContaining(t *testing.T, dir string, needle []byte) []string {
	t.Helper()
	var found []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(b, needle) {
			found = append(found, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// checkPrivate fails for any folder under dir that is not 0700 and any
// file that is not 0600.
func checkPrivate(t *testing.T, dir string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		want := fs.FileMode(0o600)
		if d.IsDir() {
			want = 0o700
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s has mode %04o, want %04o", path, fi.Mode().Perm(), want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A value in the LSM tree (small) and one in the value log (large) are
// found in no file of the database, in its write-ahead logs, tables and
// value log alike, and every file is private.
func TestEncryptedAtRestAndPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	small := secretLike(t, "small-secret")
	large := secretLike(t, "large-secret")
	s := openTest(t, dir)
	var b Batch
	b.Set(NodePrefix+"small", []byte(`{"password":"`+small+`"}`))
	b.Set(NodePrefix+"large", []byte(`{"password":"`+large+`","pad":"`+strings.Repeat("x", 2*ValueThreshold)+`"}`))
	if err := s.Commit(&b); err != nil {
		t.Fatal(err)
	}
	// The values are really there (so that not finding them below is
	// not a test that cannot fail).
	for k, want := range map[string]string{"small": small, "large": large} {
		v, found, err := s.Get(NodePrefix + k)
		if err != nil || !found || !bytes.Contains(v, []byte(want)) {
			t.Fatalf("%s: %q %v %v", k, v, found, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{small, large} {
		if f := filesContaining(t, dir, []byte(secret)); len(f) > 0 {
			t.Errorf("%s found in the clear in %v", secret, f)
		}
	}
	checkPrivate(t, dir)
}

// The same check, unencrypted, finds the secrets: the search above can
// fail.
func TestUnencryptedDatabaseShowsSecrets(t *testing.T) {
	dir := t.TempDir()
	secret := secretLike(t, "plain")
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(txn *badger.Txn) error { return txn.Set([]byte("k"), []byte(secret)) }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if f := filesContaining(t, dir, []byte(secret)); len(f) == 0 {
		t.Fatal("an unencrypted Badger database does not show its value in any file: the at-rest search cannot fail")
	}
}

func TestLoadKey(t *testing.T) {
	data := t.TempDir()
	path, dbDir := filepath.Join(data, "db.key"), filepath.Join(data, "db")
	key, err := LoadKey(path, dbDir)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Size() != KeySize || len(key) != KeySize {
		t.Fatalf("key file: %v, mode %04o, %d bytes; key %d bytes", err, fi.Mode().Perm(), fi.Size(), len(key))
	}
	again, err := LoadKey(path, dbDir)
	if err != nil || !bytes.Equal(again, key) {
		t.Fatalf("second load: %v, same key %v", err, bytes.Equal(again, key))
	}
	if other, _ := LoadKey(filepath.Join(t.TempDir(), "db.key"), dbDir); bytes.Equal(other, key) {
		t.Fatal("two new key files hold the same key")
	}

	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKey(path, dbDir); err == nil || !strings.Contains(err.Error(), "chmod 600 "+path) {
		t.Fatalf("key file readable by the group: %v, want an error that says to chmod 600 it", err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, key[:16], 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKey(path, dbDir); err == nil || !strings.Contains(err.Error(), "holds 16 bytes, not 32") || !strings.Contains(err.Error(), "restore") {
		t.Fatalf("short key file: %v, want an error that names the size and says to restore the file", err)
	}
}

// A database whose key file is gone is not given a new key.
func TestMissingKeyOfEncryptedDatabase(t *testing.T) {
	data := t.TempDir()
	path, dbDir := filepath.Join(data, "db.key"), filepath.Join(data, "db")
	key, err := LoadKey(path, dbDir)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(dbDir, key, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	_, err = LoadKey(path, dbDir)
	if err == nil || !strings.Contains(err.Error(), "is encrypted but its key file") || !strings.Contains(err.Error(), "restore db.key") {
		t.Fatalf("key file removed: %v", err)
	}
	if _, err := os.Stat(path); err == nil {
		t.Fatal("a new key file was written for an existing database")
	}
}

func TestWrongKeyRefused(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	s.Close()
	other := bytes.Repeat([]byte{9}, KeySize)
	_, err := Open(dir, other, slog.Default())
	if err == nil || !strings.Contains(err.Error(), "not the key this database was encrypted with") {
		t.Fatalf("wrong key: %v", err)
	}
	if _, err := Open(dir, testKey[:16], slog.Default()); err == nil || !strings.Contains(err.Error(), "16 bytes, want 32") {
		t.Fatalf("short key: %v", err)
	}
}

// A database of an earlier version, written without encryption, is
// refused, both when it has no key file (LoadKey) and when one was put
// next to it (Open), with what to do.
func TestUnencryptedDatabaseRefused(t *testing.T) {
	data := t.TempDir()
	dbDir := filepath.Join(data, "db")
	db, err := badger.Open(badger.DefaultOptions(dbDir).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(txn *badger.Txn) error { return txn.Set([]byte(NodePrefix+"a"), []byte("{}")) }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	want := []string{"without encryption", "move the data folder away", "empty --data-dir"}
	_, err = LoadKey(filepath.Join(data, "db.key"), dbDir)
	for _, w := range want {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Fatalf("LoadKey next to an unencrypted database: %v, want %q in it", err, w)
		}
	}
	_, err = Open(dbDir, testKey, slog.Default())
	for _, w := range want {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Fatalf("Open of an unencrypted database: %v, want %q in it", err, w)
		}
	}
}

func TestRestrict(t *testing.T) {
	root := t.TempDir()
	sub := filepath.Join(root, "db")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{filepath.Join(root, "secret"), filepath.Join(sub, "000001.vlog")} {
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(f, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Restrict(root, slog.Default()); err != nil {
		t.Fatal(err)
	}
	checkPrivate(t, root)
}

// Overwritten values in the value log are reclaimed: CollectGarbage
// rewrites files once compaction has counted their stale values, and the
// value log shrinks.
func TestCollectGarbageReclaimsValueLog(t *testing.T) {
	dir := t.TempDir()
	s, err := open(dir, testKey, slog.Default(), func(o badger.Options) badger.Options {
		// Small sizes, so that a few MB fill several files and memtables.
		return o.WithValueLogFileSize(1 << 20).WithMemTableSize(1 << 20)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	vlogSize := func() (n int64, files int) {
		m, _ := filepath.Glob(filepath.Join(dir, "*.vlog"))
		for _, f := range m {
			if fi, err := os.Stat(f); err == nil {
				n += fi.Size()
			}
		}
		return n, len(m)
	}
	large := bytes.Repeat([]byte("v"), 2*ValueThreshold) // value log
	small := bytes.Repeat([]byte("h"), ValueThreshold/2) // LSM tree
	for round := 0; round < 40; round++ {
		var b Batch
		for i := 0; i < 50; i++ { // the same keys each round: all but the last round go stale
			b.Set(fmt.Sprintf("%sn%03d", NodePrefix, i), large)
		}
		for i := 0; i < 200; i++ { // new keys: they fill memtables, so that compactions run
			b.Set(fmt.Sprintf("%sr%03d-%03d", HistoryPrefix, round, i), small)
		}
		if err := s.Commit(&b); err != nil {
			t.Fatal(err)
		}
	}
	before, files := vlogSize()
	if files < 3 {
		t.Fatalf("only %d value-log files were written; the test must fill several", files)
	}
	rewritten := 0
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		n, err := s.CollectGarbage()
		if err != nil {
			t.Fatal(err)
		}
		if rewritten += n; rewritten > 0 {
			break
		}
	}
	after, filesAfter := vlogSize()
	if rewritten == 0 || after >= before {
		t.Fatalf("value log GC rewrote %d files; value log %d bytes in %d files before, %d in %d after", rewritten, before, files, after, filesAfter)
	}
	// What was live is still there.
	for i := 0; i < 50; i++ {
		if v, found, err := s.Get(fmt.Sprintf("%sn%03d", NodePrefix, i)); err != nil || !found || !bytes.Equal(v, large) {
			t.Fatalf("n%03d after GC: %v %v (%d bytes)", i, found, err, len(v))
		}
	}
}
