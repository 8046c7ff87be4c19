package mqttlink_test

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bmedge/bmedge/lib/mqttlink"
)

// flapProxy forwards TCP to a broker. While flapping it passes only the
// client's CONNECT (so the CONNACK comes back and the connection counts
// as up), drops everything else the client sends (its SUBSCRIBE never
// arrives) and cuts the connection after 150 ms.
type flapProxy struct {
	ln     net.Listener
	target string
	flap   atomic.Bool
	wg     sync.WaitGroup
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
	go func() { _, _ = io.Copy(io.Discard, c) }()
	time.Sleep(150 * time.Millisecond)
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
	time.Sleep(10 * time.Second) // many connections, none subscribed
	if n := ups.Load(); n != 0 {
		t.Fatalf("OnUp ran %d times while no subscription could succeed", n)
	}
	px.flap.Store(false)
	deadline := time.Now().Add(20 * time.Second)
	for ups.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if ups.Load() == 0 {
		t.Fatal("the link never came up once the flapping stopped")
	}
	// An onUp of an earlier connection (without the fix) waits up to
	// 10 s for its SUBACK, then retries within 2 s: give those the time
	// to show.
	time.Sleep(5 * time.Second)
	if n := ups.Load(); n != 1 || !l.Up() {
		t.Errorf("after the flapping stopped OnUp ran %d times (want 1); up %v", n, l.Up())
	}
}
