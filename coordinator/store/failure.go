package store

import "github.com/bmedge/bmedge/lib/kvstore"

// A Badger error while writing (a commit, the memtable flush, a drop, a
// value-log GC round) or a panic in any Badger call fails the store for
// good: the first failure is kept, every later call returns it without
// calling Badger again, and Failed is closed. The coordinator then stops
// (engine) and a restart recovers from what is on disk. The latch, and
// why Badger must not be called again, are lib/kvstore's
// (failure.go); the store opens it with FatalWrites and
// FailOnLoggedErrors.

// FailedError is the store's failure: what it was doing and Badger's
// error (or panic). Its message says what to do.
type FailedError = kvstore.FailedError

// Faults lets tests make the store's Badger calls fail: Before is called
// before each one with its operation ("write", "flush", "drop", "value
// log GC", "read"); an error it returns stands for Badger's, and a panic
// in it for a panic in Badger. Production passes none (see WithFaults).
type Faults = kvstore.Faults

// Option changes how Open opens the store.
type Option = kvstore.Option

// WithFaults injects failures into the store's Badger calls, for tests
// of what a failing database does to its callers.
func WithFaults(f Faults) Option { return kvstore.WithFaults(f) }

// WithoutSync opens the store without syncing each commit
// (kvstore.WithoutSync): for a cluster member, whose store raft rebuilds
// at every start from its snapshot and its synced log.
func WithoutSync() Option { return kvstore.WithoutSync() }

// Err is the store's failure (a *FailedError), or nil while it is sound.
func (s *Store) Err() error { return s.db.Err() }

// Failed is closed when the store fails; Err then says why.
func (s *Store) Failed() <-chan struct{} { return s.db.Failed() }
