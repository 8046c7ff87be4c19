package testrig

import (
	"net"
	"sync"
	"testing"
)

// WANLink forwards TCP from a loopback port to the coordinator's broker
// (a site's WAN link, as its edge agent dials it) and can be cut: every
// connection is closed and new ones are closed at once, until it is
// restored. Or it can go silent (Blackhole), as a pulled cable or a dead
// router: connections stay open and nothing crosses, until it is restored.
type WANLink struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	down   bool
	silent bool
	gate   *sync.Cond // on mu: signalled when down or silent change
	conns  map[net.Conn]bool
}

// NewWANLink listens on a loopback port forwarding to target (host:port)
// until the test ends.
func NewWANLink(t testing.TB, target string) *WANLink {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &WANLink{ln: ln, target: target, conns: map[net.Conn]bool{}}
	l.gate = sync.NewCond(&l.mu)
	t.Cleanup(func() { ln.Close(); l.Cut() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go l.serve(c)
		}
	}()
	return l
}

// Addr is the link's end the agent dials (host:port).
func (l *WANLink) Addr() string { return l.ln.Addr().String() }

func (l *WANLink) serve(c net.Conn) {
	l.mu.Lock()
	l.conns[c] = true
	for l.silent && !l.down {
		l.gate.Wait() // a connection made while silent waits for the link
	}
	if l.down {
		l.mu.Unlock()
		c.Close()
		return
	}
	s, err := net.Dial("tcp", l.target)
	if err != nil {
		l.mu.Unlock()
		c.Close()
		return
	}
	l.conns[c], l.conns[s] = true, true
	l.mu.Unlock()
	go func() { l.copy(s, c); s.Close(); c.Close() }()
	l.copy(c, s)
	c.Close()
	s.Close()
}

// copy forwards from src to dst; while the link is silent what was read
// waits (and src is not read further: TCP holds the rest, as it keeps
// retransmitting across an outage).
func (l *WANLink) copy(dst, src net.Conn) {
	b := make([]byte, 32<<10)
	for {
		n, err := src.Read(b)
		if n > 0 {
			l.mu.Lock()
			for l.silent && !l.down {
				l.gate.Wait()
			}
			down := l.down
			l.mu.Unlock()
			if down {
				return
			}
			if _, werr := dst.Write(b[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Cut closes every connection and refuses new ones.
func (l *WANLink) Cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.down = true
	l.gate.Broadcast()
	for c := range l.conns {
		c.Close()
	}
	l.conns = map[net.Conn]bool{}
}

// Blackhole makes the link silent: no byte crosses either way and new
// connections get no answer, but nothing is closed; each end finds out
// only by its own timeouts (MQTT keepalive). Restore lets what waited
// through.
func (l *WANLink) Blackhole() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.silent = true
	l.gate.Broadcast()
}

// Restore lets connections through again.
func (l *WANLink) Restore() {
	l.mu.Lock()
	l.down, l.silent = false, false
	l.gate.Broadcast()
	l.mu.Unlock()
}
