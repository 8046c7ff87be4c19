package agent

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/bmedge/bmedge/lib/netbudget"
)

// heldOpen dials addr from the loopback address from and reports whether
// the server kept the connection for a moment (false: closed at once).
func heldOpen(t *testing.T, from, addr string) (net.Conn, bool) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if errors.Is(err, syscall.ECONNRESET) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	_, err = c.Read(make([]byte, 1))
	var ne net.Error
	return c, errors.As(err, &ne) && ne.Timeout()
}

// TestAgentHTTPListenersBudgeted: the image cache and the metrics
// listener refuse at accept the idle connections of one source over
// their pending budget, while another source and a real request get
// through; a request settles its connection.
func TestAgentHTTPListenersBudgeted(t *testing.T) {
	lim := netbudget.Limits{MaxConns: 100, MaxPerSource: 10, MaxPendingPerSource: 2}
	a := New(Config{Site: "s1", MetricsListen: "127.0.0.1:0", MetricsConns: lim,
		Cache: ImageCacheOptions{Dir: t.TempDir(), Listen: "127.0.0.1:0", MaxBytes: 1 << 20, Conns: lim, FetchAllow: loopback}})
	stop, err := a.cache.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := a.serveMetrics(ctx); err != nil {
		t.Fatal(err)
	}
	for name, addr := range map[string]string{"image cache": a.ImageCacheAddr(), "metrics": a.MetricsAddr()} {
		for i := 0; i < 2; i++ {
			if _, ok := heldOpen(t, "127.0.0.2", addr); !ok {
				t.Fatalf("%s: idle connection %d of 2 from 127.0.0.2 refused", name, i+1)
			}
		}
		if _, ok := heldOpen(t, "127.0.0.2", addr); ok {
			t.Errorf("%s: a 3rd idle connection from 127.0.0.2 was held over a pending budget of 2", name)
		}
		if _, ok := heldOpen(t, "127.0.0.3", addr); !ok {
			t.Errorf("%s: 127.0.0.3 refused for 127.0.0.2's idle connections", name)
		}
	}
	// A request settles its connection: three kept-alive connections
	// from 127.0.0.4 that each carried a request leave its pending
	// budget free for two more.
	for i := 0; i < 3; i++ {
		c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.4")}}).Dial("tcp", a.MetricsAddr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := c.Write([]byte("GET /metrics HTTP/1.1\r\nHost: agent\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("request %d on its own connection from 127.0.0.4: %v", i+1, err)
		}
		resp.Body.Close()
	}
	for i := 0; i < 2; i++ {
		if _, ok := heldOpen(t, "127.0.0.4", a.MetricsAddr()); !ok {
			t.Fatalf("idle connection %d from 127.0.0.4 refused: its connections that carried a request still count as pending", i+1)
		}
	}
}
