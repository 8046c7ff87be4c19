// Package freeport picks TCP addresses for tests and benches that start
// servers on ports they name in advance (a child process's flags, a
// script's environment).
//
// Asking the kernel for port 0 and closing the listener is racy: the
// kernel hands the same port out again as the source port of the next
// outgoing connection, and on a busy test machine another test's client
// takes it before the server binds. Addr picks ports below the kernel's
// ephemeral range instead, which the kernel never hands out on its own,
// and never returns the same port twice in one process.
package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// The range Addr draws from: below Linux's default ephemeral range
// (32768–60999, /proc/sys/net/ipv4/ip_local_port_range) and above the
// ports services usually listen on.
const (
	low  = 20000
	high = 32767
)

var (
	mu    sync.Mutex
	given = map[int]bool{}
)

// Addr returns host:port for a port that was free on host a moment ago,
// outside the ephemeral range. host is a loopback address such as
// 127.0.0.1.
func Addr(host string) (string, error) {
	return pick(host, false)
}

// LoopbackPort returns a port that was free a moment ago both on
// 127.0.0.1 and, where the machine has IPv6, on [::1], outside the
// ephemeral range. It is for servers that bind "localhost" on both
// families and exit when either is taken (chromedriver does).
func LoopbackPort() (int, error) {
	addr, err := pick("127.0.0.1", true)
	if err != nil {
		return 0, err
	}
	_, p, _ := net.SplitHostPort(addr)
	return strconv.Atoi(p)
}

// freeOnV6Loopback says whether port can be bound on [::1]. A machine
// without an IPv6 loopback counts as free: the server will not bind it
// either. A port in use does not.
func freeOnV6Loopback(port string) bool {
	ln, err := net.Listen("tcp6", net.JoinHostPort("::1", port))
	if err != nil {
		return !errors.Is(err, syscall.EADDRINUSE)
	}
	ln.Close()
	return true
}

// pick draws a port free on host, and with v6 on [::1] too.
func pick(host string, v6 bool) (string, error) {
	lo, hi := low, high
	if l, ok := ephemeralLow(); ok {
		// A machine whose ephemeral range starts lower: the ports below it.
		hi = min(hi, l-1)
		if hi < lo {
			lo = 1024
		}
	}
	if hi < lo {
		return "", fmt.Errorf("freeport: the kernel's ephemeral range (ip_local_port_range) leaves no port from %d below it", lo)
	}
	mu.Lock()
	defer mu.Unlock()
	for try := 0; try < 200; try++ {
		port := lo + rand.IntN(hi-lo+1)
		if given[port] {
			continue
		}
		addr := net.JoinHostPort(host, strconv.Itoa(port))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		ln.Close()
		if v6 && !freeOnV6Loopback(strconv.Itoa(port)) {
			continue
		}
		given[port] = true
		return addr, nil
	}
	return "", fmt.Errorf("freeport: no free port on %s in %d–%d after 200 tries", host, lo, hi)
}

// ephemeralLow is the first port of the kernel's ephemeral range.
func ephemeralLow() (int, bool) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, false
	}
	n, err := strconv.Atoi(f[0])
	return n, err == nil
}
