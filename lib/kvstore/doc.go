// Package kvstore is the encrypted Badger database that the coordinator
// (coordinator/store) and the edge agent (its durable outbox) both keep
// their state in: one way to open it encrypted at rest in a private
// folder with its key file, one adapter of Badger's log, one failure
// latch, one memtable flush and one value-log garbage collection.
//
// What it is for: the rules about Badger that each program must obey the
// same way. The key file is 0600 and refused when others may read it;
// every file Badger creates is private (the process umask, for good);
// after a failure that may have left Badger's memory unsound (a failed
// DropPrefix, a panic in Badger; every failed write for a store opened
// with FatalWrites) no Badger call is made again (failure.go says why);
// value-log GC and DropPrefix never overlap a write.
//
// What it must never do: hold a program's business (what is stored,
// under which keys, when to collect garbage: its callers decide); call
// Badger after its failure; keep a key or a database readable by others;
// import a program's packages (it is shared library code: see
// protocol/imports_test.go). Tests inject failures with WithFaults, an
// Option of one store, never a package variable.
package kvstore
