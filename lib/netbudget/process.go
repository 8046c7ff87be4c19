package netbudget

import (
	"errors"
	"net"
	"strings"
	"sync"
)

var process struct {
	mu   sync.Mutex
	pool *Pool
}

// Default returns the process's pool, shared by every listener of a
// program that does not make its own: NOFILE less SetDefaultReserve's
// reserve (DefaultReserve until it is called). The edge agent's
// listeners all use it.
func Default() *Pool {
	process.mu.Lock()
	defer process.mu.Unlock()
	if process.pool == nil {
		p, err := NewPool(-1)
		if err != nil {
			// A limit too small for the default reserve: keep a quarter.
			l := nofile()
			p = &Pool{limit: l, reserve: l / 4}
		}
		process.pool = p
	}
	return process.pool
}

// SetDefaultReserve makes the process's pool with reserve descriptors
// kept for the rest of the process. A program calls it once, from its
// flags, before any listener opens; it fails after Default was used.
func SetDefaultReserve(reserve int) error {
	process.mu.Lock()
	defer process.mu.Unlock()
	if process.pool != nil {
		return errors.New("netbudget: the process's pool is already in use")
	}
	p, err := NewPool(reserve)
	if err != nil {
		return err
	}
	process.pool = p
	return nil
}

// LoopbackAddr reports whether a listen address (host:port) is on
// loopback only: 127.0.0.0/8, ::1 or localhost. An empty host (":6385")
// is every interface, and a host name other than localhost may resolve
// anywhere, so neither is.
func LoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
