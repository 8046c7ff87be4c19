package mqttlink

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"net/url"
	"strings"
	"sync"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/packets"
)

// A coordinator cluster's follower refuses a CONNECT with CONNACK 0x9C
// "use another server" (or 0x9D "server moved") and the leader's broker
// URL in the Server Reference property. The link reads that property
// (autopaho's ConnackError does not carry it) and makes its next attempt
// at that URL, at once, instead of walking its list of brokers.

// attempt is autopaho's AttemptConnection: the pending Server Reference
// if there is one, else u; the connection is watched for its CONNACK.
func (l *Link) attempt(ctx context.Context, cfg autopaho.ClientConfig, u *url.URL) (net.Conn, error) {
	l.mu.Lock()
	if l.redirect != nil {
		u, l.redirect = l.redirect, nil
	}
	l.mu.Unlock()
	dctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()
	var conn net.Conn
	var err error
	if isTLS(u.Scheme) {
		d := tls.Dialer{Config: cfg.TlsCfg}
		conn, err = d.DialContext(dctx, "tcp", u.Host)
	} else {
		var d net.Dialer
		conn, err = d.DialContext(dctx, "tcp", u.Host)
	}
	if err != nil {
		return nil, err
	}
	return &connackWatch{Conn: conn, l: l, from: u}, nil
}

func isTLS(scheme string) bool {
	switch strings.ToLower(scheme) {
	case "mqtts", "ssl", "tls", "mqtt+ssl", "tcps":
		return true
	}
	return false
}

// follow notes a Server Reference for the next attempt: the first URL of
// the property (it may list several, separated by spaces), taken only if
// it is an MQTT URL with a host and TLS exactly when the refused URL had
// it (a reference never downgrades the link to plain MQTT).
func (l *Link) follow(from *url.URL, ref string) {
	ref = strings.TrimSpace(ref)
	if i := strings.IndexByte(ref, ' '); i >= 0 {
		ref = ref[:i]
	}
	u, err := url.Parse(ref)
	if err != nil || u.Host == "" || isTLS(u.Scheme) != isTLS(from.Scheme) ||
		!isTLS(u.Scheme) && u.Scheme != "mqtt" && u.Scheme != "tcp" {
		l.log.Warn("mqtt broker sent this client to another server, but the reference is not an MQTT URL of the same kind; walking the list instead",
			"broker", from.String(), "reference", ref)
		return
	}
	l.log.Info("mqtt broker sent this client to another server; following", "broker", from.String(), "server", u.String())
	l.mu.Lock()
	l.redirect = u
	l.followed++
	l.mu.Unlock()
}

// Followed counts the Server References the link followed.
func (l *Link) Followed() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.followed
}

// connackWatch reads the connection's first packet (the CONNACK) as it
// passes, for its reason code and Server Reference.
type connackWatch struct {
	net.Conn
	l    *Link
	from *url.URL
	buf  []byte
	done bool
	// wmu is the connection's write lock: paho writes a packet in several
	// Writes (its header, then its parts) and takes a connection's
	// sync.Locker around them, so that packets of publishes made at the
	// same time never interleave on the wire.
	wmu sync.Mutex
}

// Lock and Unlock make the connection a sync.Locker for paho's packet
// writes (packets.ControlPacket.WriteTo).
func (c *connackWatch) Lock()   { c.wmu.Lock() }
func (c *connackWatch) Unlock() { c.wmu.Unlock() }

func (c *connackWatch) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if !c.done && n > 0 {
		c.buf = append(c.buf, p[:n]...)
		c.check()
	}
	return n, err
}

// check decodes the CONNACK once its bytes are all in.
func (c *connackWatch) check() {
	if len(c.buf) < 2 {
		return
	}
	if c.buf[0]>>4 != packets.CONNACK || len(c.buf) > 64<<10 {
		c.done, c.buf = true, nil
		return
	}
	// The remaining length: up to 4 bytes of 7 bits.
	size, mul, i := 0, 1, 1
	for ; ; i++ {
		if i >= len(c.buf) {
			return
		}
		if i > 4 {
			c.done, c.buf = true, nil
			return
		}
		size += int(c.buf[i]&0x7f) * mul
		mul *= 128
		if c.buf[i]&0x80 == 0 {
			break
		}
	}
	if len(c.buf) < i+1+size {
		return
	}
	cp, err := packets.ReadPacket(bytes.NewReader(c.buf[:i+1+size]))
	c.done, c.buf = true, nil
	if err != nil {
		return
	}
	ack, ok := cp.Content.(*packets.Connack)
	if !ok || ack.Properties == nil || ack.Properties.ServerReference == "" {
		return
	}
	if ack.ReasonCode == packets.ConnackUseAnotherServer || ack.ReasonCode == packets.ConnackServerMoved {
		c.l.follow(c.from, ack.Properties.ServerReference)
	}
}
