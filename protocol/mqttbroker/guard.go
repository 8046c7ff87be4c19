package mqttbroker

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"
)

// guardListener checks the first packet of every connection before the
// broker sees it: it must be a CONNECT no larger than max. mochi bounds
// packets by one size only (its MaximumPacketSize, sized for inventories),
// so without this a stranger could make it buffer megabytes before it
// has authenticated anybody.
type guardListener struct {
	net.Listener
	max int
	log *slog.Logger
}

// connectTimeout is how long a new connection may take to send its
// CONNECT header.
const connectTimeout = 10 * time.Second

func (l *guardListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &guardConn{Conn: c, max: l.max, log: l.log}, nil
}

// guardConn reads and checks the fixed header of the first packet on the
// first Read. Under TLS it wraps the TLS conn, so that first Read also
// runs the handshake, under the same deadline.
type guardConn struct {
	net.Conn
	max  int
	log  *slog.Logger
	once sync.Once
	r    *bufio.Reader
	err  error
}

func (c *guardConn) Read(p []byte) (int, error) {
	c.once.Do(c.check)
	if c.err != nil {
		return 0, c.err
	}
	return c.r.Read(p)
}

func (c *guardConn) check() {
	c.r = bufio.NewReaderSize(c.Conn, 16)
	_ = c.Conn.SetReadDeadline(time.Now().Add(connectTimeout))
	defer c.Conn.SetReadDeadline(time.Time{})
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
			return
		}
	}
	c.refuse(errors.New("malformed remaining length in CONNECT"))
}

func (c *guardConn) refuse(err error) {
	c.log.Warn("MQTT connection refused before authentication", "remote", c.Conn.RemoteAddr(), "reason", err)
	c.err = err
	c.Conn.Close()
}
