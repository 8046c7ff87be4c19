package netbudget

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// rig is a budgeted listener on 127.0.0.1 whose accepted connections
// arrive on a channel.
type rig struct {
	l    *Listener
	got  chan net.Conn
	log  *syncBuffer
	addr string
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newRig(t *testing.T, p *Pool, name string, lim Limits, fdOf ...func(net.Conn) int) *rig {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	buf := &syncBuffer{}
	l := p.Wrap(ln, Options{Name: name, Limits: lim, Log: slog.New(slog.NewTextHandler(buf, nil)), LogInterval: time.Hour})
	// The test process holds descriptors of its own; the pools here are
	// small, so only the counting is checked (fd-reserve has its own test).
	l.fdOf = func(net.Conn) int { return -1 }
	if len(fdOf) > 0 {
		l.fdOf = fdOf[0] // before the accept loop starts (no race)
	}
	r := &rig{l: l, got: make(chan net.Conn, 100), log: buf, addr: ln.Addr().String()}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(r.got)
				return
			}
			r.got <- c
		}
	}()
	t.Cleanup(func() {
		l.Close()
		for c := range r.got {
			c.Close()
		}
	})
	return r
}

// dial connects from the loopback address from and reports whether the
// listener kept the connection (false: it was closed at once). It waits
// for whichever comes first, the server's side handed out or the
// client's side closed, so that a slow machine decides nothing.
func (r *rig) dial(t *testing.T, from string) (net.Conn, bool) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", r.addr)
	if errors.Is(err, syscall.ECONNRESET) {
		return nil, false // reset before the dial returned
	}
	if err != nil {
		t.Fatalf("dial from %s: %v", from, err)
	}
	t.Cleanup(func() { c.Close() })
	closed := make(chan error, 1)
	go func() {
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, err := c.Read(make([]byte, 1))
		closed <- err
	}()
	select {
	case sc := <-r.got:
		return sc, true
	case err := <-closed:
		if err == nil || isTimeout(err) {
			t.Fatalf("a connection from %s was neither accepted nor closed within 30 s (read: %v)", from, err)
		}
		return nil, false
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func pool(t *testing.T, limit, reserve int) *Pool {
	t.Helper()
	p, err := NewPoolLimit(limit, reserve)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPerSourceCap(t *testing.T) {
	r := newRig(t, pool(t, 1000, 10), "api", Limits{MaxPerSource: 3})
	var held []net.Conn
	for i := 0; i < 3; i++ {
		c, ok := r.dial(t, "127.0.0.2")
		if !ok {
			t.Fatalf("connection %d of 3 from 127.0.0.2 refused", i+1)
		}
		held = append(held, c)
	}
	for i := 0; i < 2; i++ {
		if _, ok := r.dial(t, "127.0.0.2"); ok {
			t.Fatal("a 4th connection from 127.0.0.2 was accepted over a per-source cap of 3")
		}
	}
	if _, ok := r.dial(t, "127.0.0.3"); !ok {
		t.Fatal("127.0.0.3 was refused because of 127.0.0.2's connections")
	}
	st := r.l.Stats()
	if st.Refused[RefusedPerSource] != 2 || st.Open != 4 {
		t.Fatalf("stats %+v; want 2 refused per source and 4 open", st)
	}
	// Closing one gives its place back.
	held[0].Close()
	if _, ok := r.dial(t, "127.0.0.2"); !ok {
		t.Fatal("127.0.0.2 still refused after one of its connections closed")
	}
	// One line for the two refusals, naming the flag to raise.
	out := r.log.String()
	if n := strings.Count(out, "connection refused at accept"); n != 1 {
		t.Fatalf("%d log lines for 2 refusals of one kind within the interval, want 1:\n%s", n, out)
	}
	if !strings.Contains(out, "--api-max-connections-per-source") || !strings.Contains(out, "source=127.0.0.2") {
		t.Fatalf("the refusal line does not name the source and the flag: %s", out)
	}
}

func TestPendingPerSourceAndSettle(t *testing.T) {
	r := newRig(t, pool(t, 1000, 10), "mqtt", Limits{MaxPerSource: 10, MaxPendingPerSource: 2})
	a, _ := r.dial(t, "127.0.0.2")
	if _, ok := r.dial(t, "127.0.0.2"); !ok {
		t.Fatal("2nd pending connection refused under a cap of 2")
	}
	if _, ok := r.dial(t, "127.0.0.2"); ok {
		t.Fatal("3rd pending connection from one source accepted over a cap of 2")
	}
	if _, ok := r.dial(t, "127.0.0.1"); !ok {
		t.Fatal("another source refused for 127.0.0.2's pending connections")
	}
	// Settled through a TLS wrapper, as servers see it.
	if !Settle(tls.Server(a, &tls.Config{})) {
		t.Fatal("Settle did not find the budgeted connection under *tls.Conn")
	}
	if _, ok := r.dial(t, "127.0.0.2"); !ok {
		t.Fatal("a pending slot was not freed by Settle")
	}
	if st := r.l.Stats(); st.Pending != 3 || st.Open != 4 || st.Refused[RefusedPendingPerSource] != 1 {
		t.Fatalf("stats %+v; want 3 pending, 4 open, 1 refused", st)
	}
}

func TestTotalAndPendingCaps(t *testing.T) {
	r := newRig(t, pool(t, 1000, 10), "media", Limits{MaxConns: 3, MaxPending: 2})
	a, _ := r.dial(t, "127.0.0.2")
	r.dial(t, "127.0.0.3")
	if _, ok := r.dial(t, "127.0.0.4"); ok {
		t.Fatal("3rd pending connection accepted over a pending cap of 2")
	}
	Settle(a)
	r.dial(t, "127.0.0.4")
	if _, ok := r.dial(t, "127.0.0.5"); ok {
		t.Fatal("4th connection accepted over a total of 3")
	}
	st := r.l.Stats()
	if st.Refused[RefusedPending] != 1 || st.Refused[RefusedTotal] != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestPoolSharedByListeners: two listeners of one pool hold at most its
// capacity together, and a close gives the place back to either.
func TestPoolSharedByListeners(t *testing.T) {
	p := pool(t, 30, 12) // 18 for connections
	r1 := newRig(t, p, "api", Limits{})
	r2 := newRig(t, p, "mqtt", Limits{})
	var first net.Conn
	for i := 0; i < 10; i++ {
		c, ok := r1.dial(t, "127.0.0.2")
		if !ok {
			t.Fatalf("api connection %d refused", i)
		}
		if first == nil {
			first = c
		}
	}
	for i := 0; i < 8; i++ {
		if _, ok := r2.dial(t, "127.0.0.3"); !ok {
			t.Fatalf("mqtt connection %d refused with the pool not full", i)
		}
	}
	if p.InUse() != 18 {
		t.Fatalf("pool in use %d, want 18", p.InUse())
	}
	if _, ok := r2.dial(t, "127.0.0.3"); ok {
		t.Fatal("a connection was accepted beyond the pool")
	}
	if got := r2.l.Stats().Refused[RefusedPool]; got != 1 {
		t.Fatalf("mqtt refused %d for the pool, want 1", got)
	}
	first.Close()
	first.Close() // twice gives back once
	if _, ok := r2.dial(t, "127.0.0.3"); !ok {
		t.Fatal("the place freed on the api listener is not usable by mqtt")
	}
	if _, ok := r1.dial(t, "127.0.0.2"); ok {
		t.Fatal("pool overcommitted after a double close")
	}
	if st := p.Stats(); len(st) != 2 || st[0].Name != "api" || st[1].Name != "mqtt" || st[1].Refused[RefusedPool] != 1 {
		t.Fatalf("pool stats %+v", st)
	}
	r2.l.Close()
	if st := p.Stats(); len(st) != 1 {
		t.Fatalf("a closed listener is still in the pool's stats: %+v", st)
	}
}

// TestDescriptorReserve: a socket whose descriptor number shows that
// fewer than the reserve are left is refused, whatever the counts.
func TestDescriptorReserve(t *testing.T) {
	p := pool(t, 1024, 256)
	var fd atomic.Int64
	fd.Store(700)
	r := newRig(t, p, "api", Limits{}, func(net.Conn) int { return int(fd.Load()) })
	if _, ok := r.dial(t, "127.0.0.2"); !ok {
		t.Fatal("fd 700 of 1024 with 256 reserved was refused")
	}
	fd.Store(800)
	if _, ok := r.dial(t, "127.0.0.2"); ok {
		t.Fatal("fd 800 of 1024 with 256 reserved was accepted")
	}
	if r.l.Stats().Refused[RefusedReserve] != 1 {
		t.Fatalf("stats %+v", r.l.Stats())
	}
}

func TestNewPoolRefusesTooLargeReserve(t *testing.T) {
	_, err := NewPoolLimit(256, 256)
	if err == nil || !strings.Contains(err.Error(), "--fd-reserve") {
		t.Fatalf("err = %v; want a refusal naming --fd-reserve", err)
	}
	p, err := NewPool(-1)
	if err != nil {
		t.Fatal(err)
	}
	if p.Reserve() != DefaultReserve || p.Limit() < 1024 {
		t.Fatalf("NewPool(-1): limit %d reserve %d", p.Limit(), p.Reserve())
	}
}

// failing is a listener whose Accept fails n times (EMFILE) first.
type failing struct {
	net.Listener
	mu sync.Mutex
	n  int
}

func (f *failing) Accept() (net.Conn, error) {
	f.mu.Lock()
	if f.n > 0 {
		f.n--
		f.mu.Unlock()
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: syscall.EMFILE}
	}
	f.mu.Unlock()
	return f.Listener.Accept()
}

// TestAcceptOutlivesEMFILE: failed accepts are retried with a growing
// wait, logged once, and the next connection is served.
func TestAcceptOutlivesEMFILE(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	p := pool(t, 1000, 10)
	buf := &syncBuffer{}
	l := p.Wrap(&failing{Listener: ln, n: 12}, Options{Name: "api", Log: slog.New(slog.NewTextHandler(buf, nil)), LogInterval: time.Hour})
	l.fdOf = func(net.Conn) int { return -1 }
	var waits []time.Duration
	l.sleep = func(d time.Duration) { waits = append(waits, d) }
	go func() {
		if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
			defer c.Close()
			io.Copy(io.Discard, c)
		}
	}()
	c, err := l.Accept()
	if err != nil {
		t.Fatalf("Accept gave up: %v", err)
	}
	c.Close()
	if len(waits) != 12 || waits[0] != 5*time.Millisecond || waits[11] != acceptRetryMax || waits[1] != 10*time.Millisecond {
		t.Fatalf("waits %v; want 12 doubling from 5ms up to %v", waits, acceptRetryMax)
	}
	if n := strings.Count(buf.String(), "accept failed"); n != 1 {
		t.Fatalf("%d lines for 12 failed accepts, want 1:\n%s", n, buf.String())
	}
	ln.Close()
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept on a closed listener: %v", err)
	}
}

func TestSourceKey(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.2:5":                  "127.0.0.2",
		"[::ffff:10.0.0.1]:5":          "10.0.0.1",
		"[2001:db8:1:2:aa:bb:cc:dd]:5": "2001:db8:1:2::",
	} {
		a, _ := net.ResolveTCPAddr("tcp", in)
		if got := sourceOf(a).String(); got != want {
			t.Errorf("sourceOf(%s) = %s, want %s", in, got, want)
		}
	}
}

// Source, the text key other counters use, means the same source.
func TestSourceText(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.2:5":                  "127.0.0.2",
		"[::ffff:10.0.0.1]:5":          "10.0.0.1",
		"[2001:db8:1:2:aa:bb:cc:dd]:5": "2001:db8:1:2::/64",
		"[fe80::1%eth0]:5":             "fe80::/64",
		"not an address":               "not an address",
	} {
		if got := Source(in); got != want {
			t.Errorf("Source(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestEvictionLeavesRoomForOthers (issue 30, point 2): 20 sources holding
// their whole pending share fill the pending and total caps; a 21st
// source still gets in, each time, by taking the place of the oldest
// pending connection of a source that holds the most; a source that
// holds as many as the heaviest gets no such place (it is refused), and
// a settled connection is never taken.
func TestEvictionLeavesRoomForOthers(t *testing.T) {
	r := newRig(t, pool(t, 1000, 10), "mqtt", Limits{MaxConns: 41, MaxPerSource: 10, MaxPending: 40, MaxPendingPerSource: 2})
	settled, _ := r.dial(t, "127.0.0.19")
	Settle(settled)
	var flood []net.Conn
	for i := range 20 {
		for range 2 {
			if c, ok := r.dial(t, fmt.Sprintf("127.0.0.%d", 20+i)); ok {
				flood = append(flood, c)
			}
		}
	}
	if st := r.l.Stats(); st.Pending != 40 || st.Open != 41 {
		t.Fatalf("after the flood: %+v; want 40 pending, 41 open", st)
	}
	// The newcomers: each gets in, one evicted each time.
	for i := range 5 {
		c, ok := r.dial(t, fmt.Sprintf("127.0.0.%d", 100+i))
		if !ok {
			t.Fatalf("newcomer %d refused under a flood of 20 sources", i)
		}
		Settle(c) // logs in
	}
	st := r.l.Stats()
	if st.Refused[RefusedEvicted] != 5 || st.Pending != 35 || st.Open != 41 {
		t.Fatalf("after 5 newcomers: %+v; want 5 evicted, 35 pending, 41 open", st)
	}
	// A flooding source that still holds its share gains nothing.
	if _, ok := r.dial(t, "127.0.0.39"); ok {
		t.Fatal("a source at its pending share was let in")
	}
	// Fill the pending cap again with newcomers of one pending each,
	// then the settled connection of .19 must still be open.
	for i := range 20 {
		r.dial(t, fmt.Sprintf("127.0.0.%d", 120+i))
	}
	if _, err := settled.Write([]byte("x")); err != nil {
		t.Fatalf("a settled connection was closed: %v", err)
	}
	if st := r.l.Stats(); st.Pending > 40 || st.Open > 41 {
		t.Fatalf("over the caps: %+v", st)
	}
}

// TestKnownSourcesFindRoom: when strangers hold the pending cap one
// connection each (no source heavier than another by two), an unknown
// newcomer is refused, but a source that proved an identity (Known) gets
// in by taking a stranger's place (once: then it holds as many as they
// do), and a known source's own pending connection is never taken; past
// knownTTL it is a stranger again.
func TestKnownSourcesFindRoom(t *testing.T) {
	r := newRig(t, pool(t, 1000, 10), "mqtt", Limits{MaxConns: 100, MaxPerSource: 10, MaxPending: 8, MaxPendingPerSource: 4})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r.l.mu.Lock()
	r.l.now = func() time.Time { return now }
	r.l.mu.Unlock()
	// The agent logs in from .7 once, then goes away.
	agent, _ := r.dial(t, "127.0.0.7")
	if !Known(agent) {
		t.Fatal("Known found no budgeted connection")
	}
	agent.Close()
	// .8 proves itself too and keeps one pending connection.
	k8, _ := r.dial(t, "127.0.0.8")
	Known(k8)
	for i := range 7 {
		if _, ok := r.dial(t, fmt.Sprintf("127.0.0.%d", 20+i)); !ok {
			t.Fatalf("stranger %d refused below the cap", i)
		}
	}
	if _, ok := r.dial(t, "127.0.0.50"); ok {
		t.Fatal("an unknown newcomer got in while every source holds one pending connection")
	}
	if _, ok := r.dial(t, "127.0.0.7"); !ok {
		t.Fatal("a known source (the agent coming back) was refused while strangers hold the pending cap")
	}
	// Its share stays fair: a second pending one would hold more than
	// any stranger.
	if _, ok := r.dial(t, "127.0.0.7"); ok {
		t.Fatal("a known source took a second place while strangers hold one each")
	}
	if _, err := k8.Write([]byte("x")); err != nil {
		t.Fatalf("a known source's pending connection was taken: %v", err)
	}
	if st := r.l.Stats(); st.Refused[RefusedEvicted] != 1 || st.Pending != 8 {
		t.Fatalf("stats %+v; want 1 evicted, 8 pending", st)
	}
	// An hour later .7 is a stranger again.
	r.l.mu.Lock()
	now = now.Add(knownTTL)
	r.l.mu.Unlock()
	if _, ok := r.dial(t, "127.0.0.9"); ok {
		t.Fatal("an unknown newcomer got in")
	}
}
