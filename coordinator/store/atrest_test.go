package store

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
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
	if err := s.Commit(context.Background(), &b); err != nil {
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

// vlogSize is the size of the value-log files in dir but the one being
// written (Badger makes that one twice ValueLogFileSize, sparse), and
// the number of all.
func vlogSize(dir string) (closed int64, files int) {
	m, _ := filepath.Glob(filepath.Join(dir, "*.vlog"))
	sort.Strings(m) // numbered with leading zeros: the last is the newest
	for i, f := range m {
		if fi, err := os.Stat(f); err == nil && i < len(m)-1 {
			closed += fi.Size()
		}
	}
	return closed, len(m)
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
		if err := s.Commit(context.Background(), &b); err != nil {
			t.Fatal(err)
		}
	}
	before, files := vlogSize(dir)
	if files < 3 {
		t.Fatalf("only %d value-log files were written; the test must fill several", files)
	}
	// Either CollectGarbage itself or the flush it puts off while commits
	// are recent (and the collection after it) reclaims files.
	after, filesAfter := before, files
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && after >= before; time.Sleep(100 * time.Millisecond) {
		if _, err := s.CollectGarbage(); err != nil {
			t.Fatal(err)
		}
		after, filesAfter = vlogSize(dir)
	}
	if after >= before {
		t.Fatalf("value log GC reclaimed nothing: %d bytes in %d files before, %d in %d after", before, files, after, filesAfter)
	}
	checkValues(t, s, 50, large)
}

// checkValues fails unless keys n000… n(count-1) under NodePrefix hold val.
func checkValues(t *testing.T, s *Store, count int, val []byte) {
	t.Helper()
	for i := 0; i < count; i++ {
		if v, found, err := s.Get(fmt.Sprintf("%sn%03d", NodePrefix, i)); err != nil || !found || !bytes.Equal(v, val) {
			t.Fatalf("n%03d: %v %v (%d bytes)", i, found, err, len(v))
		}
	}
}

// overwriteLarge writes rounds × count values to the value log, the same
// count keys each round, so that all but the last round go stale. With
// default sizes the memtable holds only their pointers (~100 bytes
// each) and is never full, so no compaction counts them stale.
func overwriteLarge(t *testing.T, s *Store, rounds, count int, val []byte) {
	t.Helper()
	for round := 0; round < rounds; round++ {
		var b Batch
		for i := 0; i < count; i++ {
			b.Set(fmt.Sprintf("%sn%03d", NodePrefix, i), val)
		}
		if err := s.Commit(context.Background(), &b); err != nil {
			t.Fatal(err)
		}
	}
}

// When writing has stopped, the values it left stale are only in the
// memtable's newer versions; CollectGarbage flushes it, so that
// compaction counts them, and then reclaims their files. Badger's GC
// alone finds nothing to reclaim.
func TestCollectGarbageFlushesWhenWritesStop(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	defer s.Close()
	large := bytes.Repeat([]byte("v"), 2*ValueThreshold)
	overwriteLarge(t, s, 40, 100, large) // 4000 values, ~8 MB, 4+ files
	before, files := vlogSize(dir)
	if files < 4 {
		t.Fatalf("only %d value-log files were written; the test must fill several", files)
	}
	s.gc.Lock()
	n, err := s.collect() // Badger's GC without the flush
	s.gc.Unlock()
	if err != nil || n != 0 {
		t.Fatalf("value log GC before any flush rewrote %d files (%v); the test needs stale values that no compaction counted", n, err)
	}

	// Writes stopped a while ago.
	s.lastCommit.Store(time.Now().Add(-time.Minute).UnixNano())
	n, err = s.CollectGarbage()
	if err != nil {
		t.Fatal(err)
	}
	after, filesAfter := vlogSize(dir)
	if s.flushes != 1 || n == 0 || after >= before/2 {
		t.Fatalf("CollectGarbage flushed %d times, rewrote %d files; value log %d bytes in %d files before, %d in %d after, want less than half",
			s.flushes, n, before, files, after, filesAfter)
	}
	checkValues(t, s, 100, large)
	var keys []string
	if err := s.Scan("", func(k string, _ []byte) error { keys = append(keys, k); return nil }); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if strings.HasPrefix(k, flushPrefix) {
			t.Fatalf("the flush left its key %s", k)
		}
	}

	// Nothing new written: no second flush.
	if _, err := s.CollectGarbage(); err != nil || s.flushes != 1 {
		t.Fatalf("second CollectGarbage: %v, %d flushes, want 1", err, s.flushes)
	}
	// The data survives a reopen.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, dir)
	checkValues(t, s, 100, large)
}

// Called while commits go on, CollectGarbage does not flush, but flushes
// and collects by itself once they have stopped for quietFor; Close
// cancels that.
func TestCollectGarbagePutsOffFlushWhileWriting(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	large := bytes.Repeat([]byte("v"), 2*ValueThreshold)
	overwriteLarge(t, s, 40, 100, large)
	before, _ := vlogSize(dir)
	s.lastCommit.Store(time.Now().UnixNano())
	if _, err := s.CollectGarbage(); err != nil {
		t.Fatal(err)
	}
	s.gc.Lock()
	flushes, pending := s.flushes, s.pending != nil
	s.gc.Unlock()
	if flushes != 0 || !pending {
		t.Fatalf("CollectGarbage right after a commit flushed %d times, flush put off: %v; want 0, true", flushes, pending)
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && flushes == 0; time.Sleep(50 * time.Millisecond) {
		s.gc.Lock()
		flushes = s.flushes
		s.gc.Unlock()
	}
	if after, _ := vlogSize(dir); flushes != 1 || after >= before/2 {
		t.Fatalf("after writes stopped: %d flushes, value log %d bytes before, %d after; want 1 flush and less than half", flushes, before, after)
	}
	checkValues(t, s, 100, large)

	// Put off again, then closed: the timer is stopped.
	overwriteLarge(t, s, 10, 100, large)
	if _, err := s.CollectGarbage(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s.gc.Lock()
	pending = s.pending != nil
	s.gc.Unlock()
	if pending {
		t.Fatal("Close left the put-off flush pending")
	}
	if n, err := s.CollectGarbage(); n != 0 || err != nil {
		t.Fatalf("CollectGarbage after Close: %d, %v", n, err)
	}
}

// Badger's DropPrefix, behind flushMemtable and DeletePrefix, refuses
// writes while it runs; commits meanwhile wait instead of failing (a
// failed commit stops the coordinator).
func TestCommitsDuringDropPrefix(t *testing.T) {
	s := openTest(t, t.TempDir())
	defer s.Close()
	large := bytes.Repeat([]byte("v"), 2*ValueThreshold)
	stop := make(chan struct{})
	errs := make(chan error, 1)
	go func() {
		defer close(errs)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			var b Batch
			b.Set(fmt.Sprintf("%sn%03d", NodePrefix, i%100), large)
			b.Set(fmt.Sprintf("%sx/%06d", HistoryPrefix, i), []byte("h"))
			if err := s.Commit(context.Background(), &b); err != nil {
				errs <- err
				return
			}
		}
	}()
	for i := 0; i < 20; i++ {
		var err error
		if i%2 == 0 {
			s.gc.Lock()
			err = s.flushMemtable()
			s.gc.Unlock()
		} else {
			err = s.DeletePrefix(HistoryPrefix + "x/")
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	if err := <-errs; err != nil {
		t.Fatalf("a commit during DropPrefix failed: %v", err)
	}
}
