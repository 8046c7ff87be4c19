package kvstore

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"

	badger "github.com/dgraph-io/badger/v4"
)

var testNames = Names{
	Program:     "test program",
	DirFlag:     "--test-dir",
	Database:    "the test database",
	KeyFile:     "test key file",
	Exposed:     "; treat its secrets as exposed",
	RestoreKey:  "restore the test key",
	KeyMissing:  "restore the missing test key",
	Unencrypted: "the database in %s is not encrypted: move it away",
}

// openTest opens an encrypted store in dir with its key file beside it.
func openTest(t *testing.T, dir string, fatal bool, opt ...Option) *DB {
	t.Helper()
	key, err := LoadKey(filepath.Join(dir, "test.key"), filepath.Join(dir, "db"), testNames)
	if err != nil {
		t.Fatal(err)
	}
	d, err := Open(Config{Dir: filepath.Join(dir, "db"), Key: key, Log: slog.New(slog.DiscardHandler), Names: testNames,
		FatalWrites: fatal, KeyMismatch: "wrong test key"}, opt...)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func set(d *DB, k, v string) error {
	return d.Write("write", func(db *badger.DB) error {
		return db.Update(func(txn *badger.Txn) error { return txn.Set([]byte(k), []byte(v)) })
	})
}

func get(d *DB, k string) (v string, err error) {
	err = d.View(func(txn *badger.Txn) error {
		it, err := txn.Get([]byte(k))
		if err != nil {
			return err
		}
		b, err := it.ValueCopy(nil)
		v = string(b)
		return err
	})
	return v, err
}

// TestKeyFileRules: the key is created 0600 (and its database is
// encrypted with it: its text is in no file), read back the same; a key
// file others may read, of the wrong size, or missing beside its
// database is refused with what to do; so is a database written without
// encryption, and the wrong key.
func TestKeyFileRules(t *testing.T) {
	dir := t.TempDir()
	keyPath := filepath.Join(dir, "test.key")
	d := openTest(t, dir, true)
	if err := set(d, "k", "secret-value-7f3a"); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(keyPath)
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Size() != KeySize {
		t.Fatalf("key file: %v, mode %v", err, fi.Mode())
	}
	if m, _ := filepath.Glob(filepath.Join(dir, ".test.key-*")); len(m) != 0 {
		t.Fatalf("temporary key files left: %v", m)
	}
	_ = filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err == nil && !e.IsDir() {
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte("secret-value-7f3a")) {
				t.Errorf("%s holds the value in the clear", p)
			}
			if fi, _ := e.Info(); fi.Mode().Perm()&0o077 != 0 {
				t.Errorf("%s has mode %v", p, fi.Mode())
			}
		}
		return nil
	})
	key, _ := os.ReadFile(keyPath)
	again, err := LoadKey(keyPath, filepath.Join(dir, "db"), testNames)
	if err != nil || !bytes.Equal(again, key) {
		t.Fatalf("second LoadKey: %v (same key: %v)", err, bytes.Equal(again, key))
	}
	refused := func(what string, want ...string) {
		t.Helper()
		_, err := LoadKey(keyPath, filepath.Join(dir, "db"), testNames)
		for _, w := range want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v, want %q in it", what, err, w)
			}
		}
	}
	for _, mode := range []os.FileMode{0o640, 0o604, 0o660} {
		if err := os.Chmod(keyPath, mode); err != nil {
			t.Fatal(err)
		}
		refused(fmt.Sprintf("mode %04o", mode), "chmod 600", "treat its secrets as exposed")
	}
	if err := os.Chmod(keyPath, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, key[:5], 0o600); err != nil {
		t.Fatal(err)
	}
	refused("short key", "holds 5 bytes", "restore the test key")
	if err := os.Remove(keyPath); err != nil {
		t.Fatal(err)
	}
	refused("missing key", "key file", "restore the missing test key")

	// The wrong key.
	wrong := bytes.Repeat([]byte{7}, KeySize)
	if _, err := Open(Config{Dir: filepath.Join(dir, "db"), Key: wrong, Log: slog.New(slog.DiscardHandler), Names: testNames, KeyMismatch: "wrong test key"}); err == nil || err.Error() != "wrong test key" {
		t.Errorf("Open with the wrong key: %v", err)
	}

	// A database written without encryption.
	plain := filepath.Join(dir, "plain")
	db, err := badger.Open(badger.DefaultOptions(plain).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, err := LoadKey(filepath.Join(dir, "plain.key"), plain, testNames); err == nil || !strings.Contains(err.Error(), "not encrypted: move it away") {
		t.Errorf("LoadKey beside an unencrypted database: %v", err)
	}
	if _, err := Open(Config{Dir: plain, Key: key, Log: slog.New(slog.DiscardHandler), Names: testNames}); err == nil || !strings.Contains(err.Error(), "not encrypted: move it away") {
		t.Errorf("Open of an unencrypted database: %v", err)
	}
}

// TestPrivateDir: a folder open to others is made 0700, with a warning.
func TestPrivateDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := PrivateDir(dir, "state folder", "--state-dir", slog.New(slog.NewTextHandler(&buf, nil))); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 || !strings.Contains(buf.String(), "state folder was open to others") {
		t.Fatalf("mode %v, log %q", fi.Mode(), buf.String())
	}
}

// faults fails (or panics in) the calls of the ops in fail, and counts
// every call.
type faults struct {
	mu    sync.Mutex
	fail  map[string]error
	panic string
	calls []string
}

func (f *faults) Before(op string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, op)
	if op == f.panic {
		panic("injected: runtime error: invalid memory address or nil pointer dereference")
	}
	return f.fail[op]
}

func (f *faults) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

// checkLatched: every call returns the first failure and none reaches
// Badger.
func checkLatched(t *testing.T, d *DB, f *faults, fe *FailedError) {
	t.Helper()
	select {
	case <-d.Failed():
	default:
		t.Fatal("Failed is not closed")
	}
	before := f.count()
	_, gcErr := d.CollectValueLog(4)
	_, getErr := get(d, "k")
	for name, err := range map[string]error{"Write": set(d, "k", "v"), "View": getErr, "FlushMemtable": d.FlushMemtable(true),
		"DropPrefix": d.DropPrefix("x/"), "CollectValueLog": gcErr, "Err": d.Err()} {
		if err != fe {
			t.Errorf("%s after the failure: %v, want the first failure", name, err)
		}
	}
	if n := f.count() - before; n != 0 {
		t.Errorf("%d Badger calls after the failure, want none", n)
	}
}

// TestFailedWriteLatches: with FatalWrites, a failed write fails the
// store for good; its error names the cause and what to do.
func TestFailedWriteLatches(t *testing.T) {
	f := &faults{fail: map[string]error{}}
	d := openTest(t, t.TempDir(), true, WithFaults(f))
	if err := set(d, "k", "v"); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.fail["write"] = fmt.Errorf("injected: open 000042.vlog: %w", syscall.ENOSPC)
	f.mu.Unlock()
	var fe *FailedError
	if err := set(d, "k", "w"); !errors.As(err, &fe) {
		t.Fatalf("failed write: %v, want a *FailedError", err)
	}
	want := "store write failed: no space left on device; the test program stops so that nothing is acknowledged that is not stored; free disk space under --test-dir and start it again"
	if !strings.Contains(fe.Error(), want) {
		t.Errorf("failure %q, want %q in it", fe, want)
	}
	checkLatched(t, d, f, fe)
	if err := d.Close(); err != fe {
		t.Errorf("Close: %v, want the failure", err)
	}
}

// TestFlushWriteFailureIsNotFatalWithoutFatalWrites: without
// FatalWrites, a failed write (the flush's own) is returned, the flush
// stops there (no DropPrefix after it), and the store goes on; a failed
// DropPrefix then fails it for good.
func TestFlushWriteFailureIsNotFatalWithoutFatalWrites(t *testing.T) {
	f := &faults{fail: map[string]error{"write": errors.New("injected: too many open files")}}
	d := openTest(t, t.TempDir(), false, WithFaults(f))
	err := d.FlushMemtable(true)
	if err == nil || d.Err() != nil {
		t.Fatalf("flush with its write failing: %v, store failure %v; want the error, no failure", err, d.Err())
	}
	f.mu.Lock()
	calls := strings.Join(f.calls, ",")
	f.calls = nil
	f.fail = map[string]error{"flush": errors.New("injected: while trying to flush memtable: too many open files")}
	f.mu.Unlock()
	if calls != "write" {
		t.Fatalf("the failed flush went through %s, want write alone", calls)
	}
	if err := set(d, "k", "v"); err != nil {
		t.Fatalf("a write after a failed flush write: %v", err)
	}
	if v, err := get(d, "k"); err != nil || v != "v" {
		t.Fatalf("read after a failed flush write: %q %v", v, err)
	}
	var fe *FailedError
	if err := d.FlushMemtable(true); !errors.As(err, &fe) || fe.Op != "flush" || fe.Cause() != "too many open files" {
		t.Fatalf("flush with DropPrefix failing: %v, want the store's flush failure", err)
	}
	checkLatched(t, d, f, fe)
	d.Close()
}

// TestPanicInBadgerLatches: a panic in a Badger call (a read here)
// becomes the store's failure, not a crash.
func TestPanicInBadgerLatches(t *testing.T) {
	f := &faults{panic: "read"}
	d := openTest(t, t.TempDir(), false, WithFaults(f))
	defer d.Close()
	_, err := get(d, "k")
	var fe *FailedError
	if !errors.As(err, &fe) || !strings.Contains(fe.Error(), "store read failed: panic in Badger") || !strings.Contains(fe.Advice(), "report this line") {
		t.Fatalf("read that panics: %v", err)
	}
	f.panic = ""
	checkLatched(t, d, f, fe)
}

// TestLoggedErrorLatchesAndCloseLeavesBadger: with FailOnLoggedErrors, an
// error Badger logs fails the store; a failure that was not injected
// leaves Badger as it is at Close (its directory stays locked until the
// process ends), and later lines go to the debug level.
func TestLoggedErrorLatchesAndCloseLeavesBadger(t *testing.T) {
	dir := t.TempDir()
	key, err := LoadKey(filepath.Join(dir, "test.key"), filepath.Join(dir, "db"), testNames)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	var lg badger.Logger
	d, err := Open(Config{Dir: filepath.Join(dir, "db"), Key: key, Log: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})),
		Names: testNames, FailOnLoggedErrors: true,
		Tune: func(o badger.Options) badger.Options { lg = o.Logger; return o }})
	if err != nil {
		t.Fatal(err)
	}
	lg.Warningf("compaction: a warning of nothing in particular")
	if d.Err() != nil {
		t.Fatalf("a harmless warning failed the store: %v", d.Err())
	}
	lg.Warningf("while running compaction: open 000007.sst: too many open files")
	fe := d.Failure()
	if fe == nil || fe.Op != "compaction" || fe.Cause() != "too many open files" {
		t.Fatalf("after a compaction warning naming too many open files: %v", d.Err())
	}
	lg.Errorf("retrying flush")
	if strings.Contains(buf.String(), "retrying flush") {
		t.Error("a Badger line after the failure was logged above debug level")
	}
	if err := d.Close(); err != fe {
		t.Fatalf("Close: %v, want the failure", err)
	}
	if _, err := Open(Config{Dir: filepath.Join(dir, "db"), Key: key, Log: slog.New(slog.DiscardHandler), Names: testNames}); err == nil {
		t.Fatal("the folder opened again: Close closed a failed Badger")
	} else if !strings.Contains(err.Error(), "is another test program using this --test-dir?") {
		t.Errorf("second open: %v", err)
	}
	d.db.Close() // what the process's exit does
}

// vlogBytes is the size of the value-log files in dir but the newest.
func vlogBytes(dir string) int64 {
	m, _ := filepath.Glob(filepath.Join(dir, "*.vlog"))
	var n int64
	for i, f := range m {
		if fi, err := os.Stat(f); err == nil && i < len(m)-1 {
			n += fi.Size()
		}
	}
	return n
}

// TestFlushAndCollectValueLog: values overwritten in the value log are
// stale only for a compaction that met their newer versions; after
// FlushMemtable, CollectValueLog rewrites the files and the value log
// shrinks, the data intact and the flush's key gone.
func TestFlushAndCollectValueLog(t *testing.T) {
	dir := t.TempDir()
	key, err := LoadKey(filepath.Join(dir, "test.key"), filepath.Join(dir, "db"), testNames)
	if err != nil {
		t.Fatal(err)
	}
	d, err := Open(Config{Dir: filepath.Join(dir, "db"), Key: key, Log: slog.New(slog.DiscardHandler), Names: testNames, FatalWrites: true,
		Tune: func(o badger.Options) badger.Options {
			return o.WithValueThreshold(1 << 10).WithValueLogFileSize(1 << 20).WithValueLogMaxEntries(200)
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	val := strings.Repeat("v", 2<<10)
	for round := range 20 {
		for i := range 100 {
			if err := set(d, fmt.Sprintf("n/%03d", i), fmt.Sprint(round)+val); err != nil {
				t.Fatal(err)
			}
		}
	}
	db := filepath.Join(dir, "db")
	before := vlogBytes(db)
	if n, err := d.CollectValueLog(64); err != nil || n != 0 {
		t.Fatalf("value-log GC before any flush: %d, %v; the test needs stale values no compaction counted", n, err)
	}
	if err := d.FlushMemtable(true); err != nil {
		t.Fatal(err)
	}
	n, err := d.CollectValueLog(64)
	after := vlogBytes(db)
	if err != nil || n == 0 || after >= before/2 {
		t.Fatalf("after the flush: %d files rewritten (%v), value log %d bytes before, %d after; want less than half", n, err, before, after)
	}
	for i := range 100 {
		if v, err := get(d, fmt.Sprintf("n/%03d", i)); err != nil || v != "19"+val {
			t.Fatalf("n/%03d after GC: %v (%d bytes)", i, err, len(v))
		}
	}
	if _, err := get(d, FlushPrefix+"memtable"); !errors.Is(err, badger.ErrKeyNotFound) {
		t.Fatalf("the flush's key: %v, want it gone", err)
	}
}

// TestWithoutSync: a store is synced on every write unless opened
// WithoutSync.
func TestWithoutSync(t *testing.T) {
	d := openTest(t, t.TempDir(), false)
	if !d.db.Opts().SyncWrites {
		t.Fatal("a store opened without options does not sync its writes")
	}
	d.Close()
	u := openTest(t, t.TempDir(), false, WithoutSync())
	defer u.Close()
	if u.db.Opts().SyncWrites {
		t.Fatal("a store opened WithoutSync syncs its writes")
	}
}

// TestOpenAfterKillDuringValueLogRotation: a process killed between
// creating its next value-log file and sizing it leaves that file empty;
// Badger v4.9.6 then refuses to open the folder ("Open existing file ...:
// Create a new file"). Open starts anyway and keeps every write.
func TestOpenAfterKillDuringValueLogRotation(t *testing.T) {
	dir := t.TempDir()
	d := openTest(t, dir, false)
	if err := set(d, "k", "v"); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	vlogs, _ := filepath.Glob(filepath.Join(dir, "db", "*.vlog"))
	if len(vlogs) == 0 {
		t.Fatal("no value-log file written")
	}
	sort.Strings(vlogs)
	var fid int
	if _, err := fmt.Sscanf(filepath.Base(vlogs[len(vlogs)-1]), "%06d.vlog", &fid); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "db", fmt.Sprintf("%06d.vlog", fid+1))
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	d = openTest(t, dir, false)
	defer d.Close()
	if v, err := get(d, "k"); err != nil || v != "v" {
		t.Fatalf("after the reopen: %q, %v; want the write kept", v, err)
	}
	if err := set(d, "k2", "v2"); err != nil {
		t.Fatalf("a write after the reopen: %v", err)
	}
}
