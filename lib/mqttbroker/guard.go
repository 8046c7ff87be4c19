package mqttbroker

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/bmedge/bmedge/lib/netbudget"
	"github.com/bmedge/bmedge/lib/ratelog"
)

// guardListener checks the first packet of every connection before the
// broker sees it: it must be a CONNECT no larger than max, and it must
// arrive whole within connectTimeout (a client that sends part of it and
// stops is closed then, as one that sends nothing is). mochi bounds
// packets by one size only (its MaximumPacketSize, sized for
// inventories), so without this a stranger could make it buffer megabytes
// before it has authenticated anybody, or hold connections for ever.
//
// The budgets of connections between accept and the end of their
// CONNECT (in all: Config.MaxPendingConnects, and per source), per
// source and of the descriptor pool are netbudget's, under TLS; a
// connection is settled there once its whole CONNECT is read. Failed accepts (too many
// open files) are retried below, by netbudget's listener (listenerStack).
type guardListener struct {
	net.Listener
	max int
	log *slog.Logger
	rl  *ratelog.Limiter // refusals; nil: log every one
}

// connectTimeout is how long a new connection may take to send its whole
// CONNECT (and, under TLS, to finish the handshake).
var connectTimeout = 10 * time.Second

// DefaultMaxPendingConnects bounds the connections that have not yet sent
// their whole CONNECT, all sources together (netbudget's MaxPending; a
// source holds at most DefaultConnLimits.MaxPendingPerSource of them,
// and when they are full a source holding fewer takes the place of the
// heaviest source's oldest).
const DefaultMaxPendingConnects = 2048

func (l *guardListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		g := &guardConn{Conn: c, max: l.max, log: l.log, rl: l.rl}
		g.release = sync.OnceFunc(func() { netbudget.Settle(c) })
		return g, nil
	}
}

// guardConn reads and checks the fixed header of the first packet on the
// first Read. Under TLS it wraps the TLS conn, so that first Read also
// runs the handshake, under the same deadline. The deadline stays until
// the broker sets its own once it has the CONNECT (its keepalive).
type guardConn struct {
	net.Conn
	max  int
	log  *slog.Logger
	rl   *ratelog.Limiter
	once sync.Once
	r    *bufio.Reader
	err  error
	// left is what remains to be read of the CONNECT; release frees the
	// connection's pending slot, once the CONNECT is read or on Close.
	left    int
	release func()
}

func (c *guardConn) Read(p []byte) (int, error) {
	c.once.Do(c.check)
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.r.Read(p)
	if c.left > 0 {
		if c.left -= n; c.left <= 0 {
			c.release()
		}
	}
	return n, err
}

// NetConn is the connection under the guard (netbudget.Settle and Known
// look through it).
func (c *guardConn) NetConn() net.Conn { return c.Conn }

func (c *guardConn) Close() error {
	c.release()
	return c.Conn.Close()
}

func (c *guardConn) check() {
	c.r = bufio.NewReaderSize(c.Conn, 16)
	_ = c.Conn.SetReadDeadline(time.Now().Add(connectTimeout))
	first, err := c.r.Peek(1)
	if err != nil {
		c.err = err
		return
	}
	if first[0]>>4 != 1 { // CONNECT
		c.refuse(fmt.Errorf("first packet is not CONNECT (type %d)", first[0]>>4))
		return
	}
	// Remaining length: 1 to 4 bytes, 7 bits each.
	size := 0
	for i := 1; i <= 4; i++ {
		b, err := c.r.Peek(i + 1)
		if err != nil {
			c.err = err
			return
		}
		size |= int(b[i]&0x7f) << (7 * (i - 1))
		if b[i]&0x80 == 0 {
			if size > c.max {
				c.refuse(fmt.Errorf("CONNECT of %d bytes is larger than the %d allowed before authentication", size, c.max))
			}
			c.left = 1 + i + size
			return
		}
	}
	c.refuse(errors.New("malformed remaining length in CONNECT"))
}

func (c *guardConn) refuse(err error) {
	if c.rl != nil {
		c.rl.Warn("mqtt bad first packet", "MQTT connection refused before authentication", "remote", c.Conn.RemoteAddr(), "reason", err)
	} else {
		c.log.Warn("MQTT connection refused before authentication", "remote", c.Conn.RemoteAddr(), "reason", err)
	}
	c.err = err
	c.Close()
}
