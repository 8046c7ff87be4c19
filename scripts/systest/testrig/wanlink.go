package testrig

import (
	"io"
	"net"
	"sync"
	"testing"
)

// WANLink forwards TCP from a loopback port to the coordinator's broker
// (a site's WAN link, as its edge agent dials it) and can be cut: every
// connection is closed and new ones are closed at once, until it is
// restored.
type WANLink struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	down   bool
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
	go func() { _, _ = io.Copy(s, c); s.Close(); c.Close() }()
	_, _ = io.Copy(c, s)
	c.Close()
	s.Close()
}

// Cut closes every connection and refuses new ones.
func (l *WANLink) Cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.down = true
	for c := range l.conns {
		c.Close()
	}
	l.conns = map[net.Conn]bool{}
}

// Restore lets connections through again.
func (l *WANLink) Restore() {
	l.mu.Lock()
	l.down = false
	l.mu.Unlock()
}
