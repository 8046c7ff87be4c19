//go:build unix

package netbudget

import (
	"net"
	"syscall"
)

// nofile is the process's soft RLIMIT_NOFILE (Go raises it to the hard
// limit at start).
func nofile() int {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil || r.Cur > 1<<30 {
		return 1 << 30
	}
	return int(r.Cur)
}

// fdOf returns the descriptor number of a TCP connection, -1 for others.
func fdOf(c net.Conn) int {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return -1
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return -1
	}
	fd := -1
	_ = raw.Control(func(f uintptr) { fd = int(f) })
	return fd
}
