package kvstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// KeyRotation is how often Badger starts a new data key. Data keys
// encrypt the files and are themselves encrypted with the key from
// LoadKey in the key registry, which grows by one key (~60 bytes) per
// rotation: weekly bounds how much data one data key covers at ~3 KB of
// registry a year.
const KeyRotation = 7 * 24 * time.Hour

// FlushPrefix is the prefix of the key that FlushMemtable writes and
// drops. '~' sorts after every other prefix, so no table holds it; a
// store's own keys must not use it.
const FlushPrefix = "~flush/"

// Config is how Open opens a store.
type Config struct {
	// Dir is the Badger folder; InMemory opens a database in memory
	// instead (unencrypted, nothing on disk: tests, a program without a
	// state folder).
	Dir      string
	InMemory bool
	// Key is the encryption key (KeySize bytes, from LoadKey).
	Key []byte
	Log *slog.Logger
	// Names word the errors.
	Names Names
	// What and Where name the database in Open's errors: "open <What> in
	// <Where>: ..." (default "database" and Dir).
	What, Where string
	// KeyMismatch is the error when Key is not the key the database was
	// encrypted with (default: a generic one).
	KeyMismatch string
	// FatalWrites: any failed write (Write, FlushMemtable's write and
	// flatten, a value-log GC round) fails the store for good, not only
	// a failed DropPrefix or a panic.
	FatalWrites bool
	// FailOnLoggedErrors: an error Badger logs from its own goroutines
	// (and a warning naming a failure of the system, such as "too many
	// open files") fails the store.
	FailOnLoggedErrors bool
	// Tune sets the program's sizes (memtables, value threshold, caches)
	// on Badger's options; Open has set the folder, synced writes, the
	// logger and the encryption (key, rotation, a 16 MiB index cache).
	Tune func(badger.Options) badger.Options
}

// DB is an open store: Badger behind the failure latch. Writes (Write)
// may run together; DropPrefix, FlushMemtable and value-log GC run alone
// (writes wait), as Badger needs.
type DB struct {
	db          *badger.DB
	log         *slog.Logger
	names       Names
	fatalWrites bool
	// writes is held for reading by Write and for writing by whatever
	// calls Badger's DropPrefix or value-log GC: DropPrefix refuses the
	// writes that arrive while it runs (ErrBlockedWrites), and Badger
	// v4.9.6's value-log GC reads the memtable's max version without its
	// lock (DB.MaxVersion), which races with a concurrent write.
	writes sync.RWMutex

	// failure is the store's first failure; failed is closed with it.
	// faults are a test's injected failures (nil in production).
	failure atomic.Pointer[FailedError]
	failed  chan struct{}
	faults  Faults
	// current is the write that runs (its op), for errors Badger logs.
	current atomic.Pointer[string]
}

// Open opens (creating if needed) the database. Every write is synced to
// disk: a kill -9 loses nothing that was acknowledged.
//
// On disk, Open makes the process's umask private (077) for good, so
// that every file Badger creates now and later is 0600 and every folder
// 0700 (see privateUmask), and the database is encrypted with Key. An
// existing database written without encryption is refused with
// Names.Unencrypted when set.
func Open(cfg Config, opt ...Option) (*DB, error) {
	var o options
	for _, f := range opt {
		f(&o)
	}
	what, where := cfg.What, cfg.Where
	if what == "" {
		what = "database"
	}
	if where == "" {
		where = cfg.Dir
	}
	l := &logger{log: cfg.Log, failOnErrors: cfg.FailOnLoggedErrors}
	var opts badger.Options
	if cfg.InMemory {
		opts = badger.DefaultOptions("").WithInMemory(true)
	} else {
		if len(cfg.Key) != KeySize {
			return nil, fmt.Errorf("open %s in %s: the encryption key has %d bytes, want %d (use LoadKey)", what, where, len(cfg.Key), KeySize)
		}
		privateUmask()
		opts = badger.DefaultOptions(cfg.Dir).
			WithSyncWrites(true).
			WithEncryptionKey(cfg.Key).
			WithEncryptionKeyRotationDuration(KeyRotation).
			// Encryption needs the index cache: decrypted table indexes
			// live there instead of in the mmapped files.
			WithIndexCacheSize(16 << 20)
	}
	opts = opts.WithLogger(l)
	if cfg.Tune != nil {
		opts = cfg.Tune(opts)
	}
	if o.noSync {
		opts = opts.WithSyncWrites(false)
	}
	if !cfg.InMemory {
		if err := removeEmptyValueLogs(cfg.Dir, cfg.Log); err != nil {
			return nil, fmt.Errorf("open %s in %s: %w", what, where, err)
		}
	}
	db, err := badger.Open(opts)
	if errors.Is(err, badger.ErrEncryptionKeyMismatch) {
		if cfg.Names.Unencrypted != "" && Unencrypted(cfg.Dir) {
			return nil, fmt.Errorf(cfg.Names.Unencrypted, cfg.Dir)
		}
		if cfg.KeyMismatch != "" {
			return nil, errors.New(cfg.KeyMismatch)
		}
		return nil, fmt.Errorf("open %s in %s: the key file is not the key this database was encrypted with; restore the original key file (the database cannot be read without it)", what, where)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s in %s: %w (is another %s using this %s?)", what, where, err, cfg.Names.program(), cfg.Names.dirFlag())
	}
	d := &DB{db: db, log: cfg.Log, names: cfg.Names, fatalWrites: cfg.FatalWrites, failed: make(chan struct{}), faults: o.faults}
	l.db.Store(d)
	return d, nil
}

// Close closes the database. A failed store is left as it is (Close
// returns its failure): Badger's Close flushes the memtables, which is
// what may crash after a failure, and nothing is lost without it, as
// every write is in the write-ahead log, which the next Open replays.
// A failure a test injected (WithFaults) leaves Badger sound: Close
// closes it, so that the test can open the folder again.
func (d *DB) Close() error {
	d.writes.Lock()
	defer d.writes.Unlock()
	if fe := d.failure.Load(); fe != nil && fe.injected {
		_ = d.db.Close()
		return fe
	}
	return d.call("close", true, d.db.Close)
}

// Write runs fn, which writes to Badger (transactions it commits), as
// op ("write" unless the caller names it): a panic fails the store, and
// so does an error when the store was opened with FatalWrites (the
// *FailedError is returned). Writes run together, never with
// DropPrefix, FlushMemtable or value-log GC.
func (d *DB) Write(op string, fn func(db *badger.DB) error) error {
	d.writes.RLock()
	defer d.writes.RUnlock()
	return d.call(op, d.fatalWrites, func() error { return fn(d.db) })
}

// View runs fn in a read-only transaction; a panic fails the store, and
// a failed store is not read (Badger's reads can crash after a failure).
func (d *DB) View(fn func(txn *badger.Txn) error) error {
	return d.call("read", false, func() error { return d.db.View(fn) })
}

// FlushMemtable writes Badger's memtables to a level-0 table and compacts
// it into the tree; with flatten, it then compacts every level into one
// (Flatten), which drops what deletions and rewrites made stale. Badger
// v4 has no call for the flush alone; DropPrefix does it (it flushes
// every memtable, then compacts level 0, then drops the prefix from the
// tables that hold it), so FlushMemtable writes a key of FlushPrefix,
// which no table holds, and drops that prefix. The flush is as durable as
// Badger's own: the memtable's write-ahead log is removed only once its
// table is written and synced. Writes wait meanwhile.
//
// The key's write is op "write", DropPrefix "flush" (it always fails the
// store: see failure.go), Flatten "flatten". After a failed write,
// DropPrefix is not called.
func (d *DB) FlushMemtable(flatten bool) error {
	d.writes.Lock()
	defer d.writes.Unlock()
	key := []byte(FlushPrefix + "memtable")
	// Synced, like every write: DropPrefix does nothing when no key has
	// the prefix, so the key must be there first.
	err := d.call("write", d.fatalWrites, func() error {
		return d.db.Update(func(txn *badger.Txn) error { return txn.Set(key, []byte{1}) })
	})
	if err != nil {
		return err
	}
	if err := d.call("flush", true, func() error { return d.db.DropPrefix([]byte(FlushPrefix)) }); err != nil {
		return err
	}
	if !flatten {
		return nil
	}
	if err := d.call("flatten", d.fatalWrites, func() error { return d.db.Flatten(1) }); err != nil {
		if d.failure.Load() != nil {
			return err
		}
		return fmt.Errorf("%w: %w", ErrFlatten, err)
	}
	return nil
}

// ErrFlatten is in the error of a FlushMemtable whose flush went through
// and whose compaction (Flatten) failed, when that does not fail the
// store: the caller may try again later.
var ErrFlatten = errors.New("compacting the tables (Flatten) failed")

// DropPrefix removes every key under prefix (op "drop"; a failure fails
// the store). Writes wait meanwhile.
func (d *DB) DropPrefix(prefix string) error {
	d.writes.Lock()
	defer d.writes.Unlock()
	return d.call("drop", true, func() error { return d.db.DropPrefix([]byte(prefix)) })
}

// CollectValueLog runs Badger's value-log GC until no file qualifies
// (at least half of it stale), or max rounds: bounded, so that a
// database written faster than it is collected cannot keep the caller
// forever; the next run goes on. Each round rewrites one file with
// writes held off (a few milliseconds). It returns how many files were
// rewritten.
//
// Badger knows that a value is stale only once compaction has met the
// newer version of its key: when writing stops, FlushMemtable first
// (the caller decides when).
func (d *DB) CollectValueLog(max int) (rewritten int, err error) {
	for rewritten < max {
		err := d.valueLogGC()
		switch {
		case errors.Is(err, badger.ErrNoRewrite), errors.Is(err, badger.ErrRejected):
			// Nothing (more) to reclaim, or a GC already runs or the
			// database is closing.
			return rewritten, nil
		case err != nil:
			return rewritten, err
		}
		rewritten++
	}
	return rewritten, nil
}

// valueLogGC runs one round of Badger's value-log GC with writes held
// off: Badger v4.9.6's rewrite reads the memtable's max version without
// its lock (DB.MaxVersion, added with the fix for deleted keys coming
// back after GC), which races with a concurrent write (the race detector
// caught it in TestWANImpaired).
func (d *DB) valueLogGC() error {
	d.writes.Lock()
	defer d.writes.Unlock()
	var benign error
	err := d.call("value log GC", d.fatalWrites, func() error {
		err := d.db.RunValueLogGC(0.5)
		if errors.Is(err, badger.ErrNoRewrite) || errors.Is(err, badger.ErrRejected) {
			benign, err = err, nil
		}
		return err
	})
	if err != nil {
		return err
	}
	return benign
}

// Size is the size of the LSM tree's and the value log's files; 0, 0
// once the store has failed.
func (d *DB) Size() (lsm, vlog int64) {
	if d.failure.Load() != nil {
		return 0, 0
	}
	return d.db.Size()
}

// logger takes Badger's log lines into the program's log. With
// failOnErrors, an error Badger logs once the store is open fails the
// store: some come from Badger's own goroutines, where no caller hears
// of them (a memtable flush that fails is retried every second, forever,
// while writes pile up behind it until they block). Once the store has
// failed, Badger's lines (that retry, mostly) go to the debug level: the
// store's failure is the line that matters.
type logger struct {
	log          *slog.Logger
	failOnErrors bool
	db           atomic.Pointer[DB]
}

func (l *logger) Errorf(f string, a ...any) {
	msg, d := l.line(slog.LevelError, f, a)
	if d != nil && l.failOnErrors {
		op := "background write"
		if cur := d.current.Load(); cur != nil {
			op = *cur
		} else if strings.Contains(msg, "flush") {
			op = "background flush"
		}
		d.fail(op, errors.New(msg))
	}
}

// Warningf: with failOnErrors, a warning that names a failure of the
// system (a compaction that cannot open a file: "too many open files")
// fails the store too. Badger retries such a compaction at once, forever
// (~20 lines a second), and the memtable flushes behind it soon block
// writes.
func (l *logger) Warningf(f string, a ...any) {
	msg, d := l.line(slog.LevelWarn, f, a)
	if d != nil && l.failOnErrors && systemFailure(msg) != "" {
		op := "background write"
		if strings.Contains(msg, "ompact") {
			op = "compaction"
		}
		d.fail(op, errors.New(msg))
	}
}

// line logs Badger's line at level, or at debug level once the store
// has failed; it returns the line and the store while it is sound.
func (l *logger) line(level slog.Level, f string, a []any) (string, *DB) {
	msg := strings.TrimSpace(fmt.Sprintf(f, a...))
	d := l.db.Load()
	if d != nil && d.failure.Load() != nil {
		l.log.Debug("badger: " + msg)
		return msg, nil
	}
	l.log.Log(context.Background(), level, "badger: "+msg)
	return msg, d
}

func (l *logger) Infof(string, ...any)  {}
func (l *logger) Debugf(string, ...any) {}

// removeEmptyValueLogs removes the value-log files of dir that are empty.
// Badger creates its next value-log file, then sizes it; a process killed
// in between leaves an empty file, which Badger v4.9.6 then refuses to
// open ("Open existing file ...: Create a new file") instead of starting
// it again, so that the folder could not be opened at all. An empty file
// holds nothing, not even its header: Badger makes it anew when it needs
// it.
func removeEmptyValueLogs(dir string, log *slog.Logger) error {
	names, err := filepath.Glob(filepath.Join(dir, "*.vlog"))
	if err != nil {
		return err
	}
	for _, name := range names {
		fi, err := os.Lstat(name)
		if err != nil || !fi.Mode().IsRegular() || fi.Size() != 0 {
			continue
		}
		if err := os.Remove(name); err != nil {
			return fmt.Errorf("remove the empty value-log file %s left by a killed process: %w", filepath.Base(name), err)
		}
		if log != nil {
			log.Warn("removed an empty value-log file left by a process killed while it made the file", "file", filepath.Base(name))
		}
	}
	return nil
}
