//go:build unix

package kvstore

import "syscall"

// privateUmask adds 077 to the process's umask, for good: every file and
// folder the process creates from now on is private to its owner.
//
// Why process-wide and permanent: Badger creates value-log, table and
// memtable files while it runs (with mode 0666 before the umask), so a
// umask restored after Open, or a chmod after the fact, would leave files
// readable by others, at least for a moment. The umask is the one place
// that covers every file Badger will ever create. It also covers every
// other file the process writes, which is what a process that holds BMC
// passwords wants anyway. A stricter umask is kept as it is.
func privateUmask() {
	old := syscall.Umask(0o077)
	syscall.Umask(old | 0o077)
}
