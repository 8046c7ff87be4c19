//go:build unix

package agent

import "syscall"

// privateUmask adds 077 to the process's umask, for good, when the agent
// opens its durable outbox: Badger creates files as it runs (0666 before
// the umask), so the umask is the one place that makes every one of them
// 0600 and every folder 0700 from the start. A stricter umask is kept.
func privateUmask() {
	old := syscall.Umask(0o077)
	syscall.Umask(old | 0o077)
}
