package mqttlink_test

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bmedge/bmedge/lib/mqttlink"
	"github.com/bmedge/bmedge/lib/waitfor"
)

// flapProxy forwards TCP to a broker. While flapping it passes only the
// client's CONNECT (so the CONNACK comes back and the connection counts
// as up), and cuts the connection as soon as the client sends anything
// else (its SUBSCRIBE never arrives). flapped counts those connections.
type flapProxy struct {
	ln      net.Listener
	target  string
	flap    atomic.Bool
	flapped atomic.Int32
	wg      sync.WaitGroup
}

func (p *flapProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() { defer p.wg.Done(); p.conn(c) }()
	}
}

func (p *flapProxy) conn(c net.Conn) {
	defer c.Close()
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer s.Close()
	go func() { _, _ = io.Copy(c, s); c.Close() }()
	if !p.flap.Load() {
		_, _ = io.Copy(s, c)
		return
	}
	// CONNECT: a fixed header byte, the remaining length (varint), the body.
	head := make([]byte, 1, 8)
	if _, err := io.ReadFull(c, head); err != nil {
		return
	}
	n, mul := 0, 1
	for {
		b := make([]byte, 1)
		if _, err := io.ReadFull(c, b); err != nil {
			return
		}
		head = append(head, b[0])
		n += int(b[0]&127) * mul
		mul *= 128
		if b[0]&128 == 0 {
			break
		}
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(c, body); err != nil {
		return
	}
	_, _ = s.Write(append(head, body...))
	defer p.flapped.Add(1)
	// The next packet (the SUBSCRIBE, once the CONNACK is in) cuts it.
	_, _ = io.ReadFull(c, make([]byte, 1))
}

// TestFlappingLinkCallsOnUpOnce checks that connections which went down
// before their subscription succeeded never call OnUp: once a flapping
// link is stable again, OnUp (the edge agent's resend of its whole
// outbox) runs once, not once for every connection made while it
// flapped.
func TestFlappingLinkCallsOnUpOnce(t *testing.T) {
	b := startBroker(t, "127.0.0.1:0")
	t.Cleanup(func() { _ = b.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	px := &flapProxy{ln: ln, target: b.Addr}
	px.flap.Store(true)
	px.wg.Add(1)
	go px.serve()
	var ups atomic.Int32
	l := dial(t, mqttlink.Config{URL: "mqtt://" + ln.Addr().String(), ClientID: "flap", Username: "u",
		Subscriptions: []string{"t/#"}, OnUp: func() { ups.Add(1) }})
	t.Cleanup(func() {
		l.Close()
		ln.Close()
		px.wg.Wait()
	})
	// Many connections, none subscribed.
	waitfor.Until(30*time.Second, func() bool { return ups.Load() != 0 || px.flapped.Load() >= 8 })
	if n := ups.Load(); n != 0 {
		t.Fatalf("OnUp ran %d times while no subscription could succeed", n)
	}
	px.flap.Store(false)
	if !waitfor.Until(20*time.Second, func() bool { return ups.Load() != 0 }) {
		t.Fatal("the link never came up once the flapping stopped")
	}
	// An onUp of an earlier connection (without the fix) waits up to
	// 10 s for its SUBACK, then retries within 2 s: give those the time
	// to show (a second OnUp ends the wait at once).
	waitfor.Until(5*time.Second, func() bool { return ups.Load() > 1 })
	if n := ups.Load(); n != 1 || !l.Up() {
		t.Errorf("after the flapping stopped OnUp ran %d times (want 1); up %v", n, l.Up())
	}
}
