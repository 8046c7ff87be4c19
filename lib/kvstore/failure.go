package kvstore

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
)

// A Badger error while writing (a DropPrefix always; for a store opened
// with FatalWrites also a commit, the memtable flush's write and a
// value-log GC round) or a panic in any Badger call fails the store for
// good: the first failure is kept, every later call returns it without
// calling Badger again, and Failed is closed. A restart recovers from
// what is on disk: every commit was synced to Badger's write-ahead log
// before it was acknowledged, and Badger replays that log when it opens.
//
// Why never call Badger again: after a failed write or flush its state in
// memory is no longer sound, and the next call can crash the process.
// The case found (issue 17, 1100 idle connections exhausting a
// coordinator's file descriptors): Badger v4.9.6's DB.DropPrefix
// (db.go) appends the live memtable db.mt to db.imm and flushes each
// memtable of db.imm with handleMemTableFlush; when one flush fails
// (table.CreateTable: "too many open files") it returns at once, leaving
// db.imm holding the live memtable (which is still db.mt too) and any
// memtable it had already flushed and released (memTable.DecrRef, whose
// skiplist's head is then nil: skl/skl.go Skiplist.DecrRef). The next
// DropPrefix (FlushMemtable, on the next garbage collection) appends
// db.mt once more, flushes and releases its first copy, and calls
// memtable.sl.Empty() on the second: Skiplist.findLast reads the nil
// head, SIGSEGV (coordinator/store's TestFailedFlushIsNotRetried
// reproduces it with real descriptor exhaustion when the latch is taken
// out). ensureRoomForWrite and DropPrefix likewise set db.mt to nil when
// a new memtable file cannot be created (newMemTable), after which the
// next write fails Badger's assertion (log.Fatal) and the next read
// dereferences nil (DB.getMemTables). Not found reported upstream as
// such; related: dgraph-io/badger#1395 (badger v1 segfaults once the
// open-file limit is reached) and dgraph-io/badger#1883 (a panic after a
// failed newMemTable in ensureRoomForWrite).

// FailedError is a store's failure: what it was doing and Badger's error
// (or panic). Its message says what to do.
type FailedError struct {
	// Op is what failed: "write", "flush", "drop", "value log GC",
	// "read" (panics only), "close", or "background flush",
	// "background write" and "compaction" (an error Badger logged from
	// its own goroutines, such as a memtable flush it keeps retrying),
	// or an operation a caller named (Write's op).
	Op  string
	Err error
	// Program and DirFlag word the advice ("coordinator", "--data-dir");
	// a store sets them from its Names.
	Program string
	DirFlag string
	// injected: the failure came from a test's Faults, and Badger itself
	// is sound (Close closes it).
	injected bool
}

// Cause is the short cause: the system's error text when there is one
// ("too many open files"), else Badger's message.
func (e *FailedError) Cause() string {
	var errno syscall.Errno
	if errors.As(e.Err, &errno) {
		return errno.Error()
	}
	msg := e.Err.Error()
	if known := systemFailure(msg); known != "" {
		return known
	}
	return msg
}

// systemFailure is the system's error that msg names, if one of those
// that stop a database writing.
func systemFailure(msg string) string {
	for _, known := range []string{"too many open files", "no space left on device", "disk quota exceeded",
		"read-only file system", "permission denied", "input/output error"} {
		if strings.Contains(msg, known) {
			return known
		}
	}
	return ""
}

// Advice says what the operator should do about the cause.
func (e *FailedError) Advice() string {
	n := Names{Program: e.Program, DirFlag: e.DirFlag}
	p, dir := n.program(), n.dirFlag()
	switch c := e.Cause(); {
	case c == "too many open files":
		return "raise the " + p + "'s open-file limit (LimitNOFILE= in its systemd unit, ulimit -n in its shell)"
	case c == "no space left on device", c == "disk quota exceeded":
		return "free disk space under " + dir
	case c == "read-only file system", c == "permission denied":
		return "make " + dir + " writable by the " + p + "'s user"
	case c == "input/output error":
		return "check the disk (dmesg) and " + dir
	case strings.HasPrefix(c, "panic in Badger"):
		return "report this line (a Badger bug); a restart recovers"
	}
	return "check the disk and " + dir + " (Badger's log lines above say more)"
}

// Error is the one line that names the cause and what to do.
func (e *FailedError) Error() string {
	return fmt.Sprintf("store %s failed: %s; the %s stops so that nothing is acknowledged that is not stored; %s and start it again (every acknowledged change is on disk)",
		e.Op, e.Cause(), Names{Program: e.Program}.program(), e.Advice())
}

func (e *FailedError) Unwrap() error { return e.Err }

// Injected tells whether the failure came from a test's Faults (Badger
// itself is then sound).
func (e *FailedError) Injected() bool { return e.injected }

// Faults lets tests make a store's Badger calls fail: Before is called
// before each one with its operation ("write", "flush", "flatten",
// "drop", "value log GC", "read", or the op a caller passed to Write);
// an error it returns stands for Badger's, and a panic in it for a panic
// in Badger. Production passes none (see WithFaults).
type Faults interface {
	Before(op string) error
}

// FaultsFunc is a Faults of one function.
type FaultsFunc func(op string) error

// Before calls f.
func (f FaultsFunc) Before(op string) error { return f(op) }

// Option changes how Open opens a store.
type Option func(*options)

type options struct {
	faults Faults
	noSync bool
}

// WithoutSync opens the store without syncing each write: a write is in
// the operating system's cache when it returns, so a killed process loses
// nothing, but a lost machine may lose the last writes. Only for a store
// rebuilt from a durable record of its own at every start (a cluster
// member's state, restored from raft's snapshot and log).
func WithoutSync() Option { return func(o *options) { o.noSync = true } }

// WithFaults injects failures into the store's Badger calls, for tests
// of what a failing database does to its callers.
func WithFaults(f Faults) Option { return func(o *options) { o.faults = f } }

// Err is the store's failure (a *FailedError), or nil while it is sound.
func (d *DB) Err() error {
	if p := d.failure.Load(); p != nil {
		return p
	}
	return nil
}

// Failure is the store's failure, or nil while it is sound.
func (d *DB) Failure() *FailedError { return d.failure.Load() }

// Failed is closed when the store fails; Err then says why.
func (d *DB) Failed() <-chan struct{} { return d.failed }

// fail records the store's first failure and returns it (the first one,
// whatever err is: the first is the cause, later ones its consequences).
func (d *DB) fail(op string, err error) *FailedError {
	return d.failWith(&FailedError{Op: op, Err: err})
}

func (d *DB) failWith(fe *FailedError) *FailedError {
	var first *FailedError
	if errors.As(fe.Err, &first) {
		fe = first
	} else {
		fe.Program, fe.DirFlag = d.names.Program, d.names.DirFlag
	}
	if d.failure.CompareAndSwap(nil, fe) {
		close(d.failed)
	}
	return d.failure.Load()
}

// call runs fn, one use of Badger, unless the store has failed. A panic
// in fn fails the store; so does an error when fatal, and it is returned
// as the store's *FailedError; other errors are returned as they are.
func (d *DB) call(op string, fatal bool, fn func() error) (err error) {
	if fe := d.failure.Load(); fe != nil {
		return fe
	}
	// injected: the failure comes from the test's Faults, not Badger.
	injected := false
	defer func() {
		if r := recover(); r != nil {
			err = d.failWith(&FailedError{Op: op, Err: fmt.Errorf("panic in Badger: %v", r), injected: injected})
		}
	}()
	if fatal {
		// An error Badger logs meanwhile is this operation's (see
		// logger); writes do not overlap (d.writes).
		d.current.Store(&op)
		defer d.current.Store(nil)
	}
	if d.faults != nil {
		injected = true
		if err := d.faults.Before(op); err != nil {
			if fatal {
				return d.failWith(&FailedError{Op: op, Err: err, injected: true})
			}
			return err
		}
		injected = false
	}
	if err := fn(); err != nil {
		if fatal {
			return d.fail(op, err)
		}
		return err
	}
	return nil
}
