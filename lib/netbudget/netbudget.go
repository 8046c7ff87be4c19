// Package netbudget bounds the connections a listener holds, so that
// nobody who has not logged in can take a process's file descriptors or
// lock others out. A Listener wraps the raw TCP listener (under
// tls.NewListener, so that nothing is read, not even a TLS handshake,
// before a connection is admitted) and closes at once, at accept, every
// connection over one of its caps:
//
//   - the listener's total (Limits.MaxConns);
//   - per source address: one IPv4 address, or one IPv6 /64, which one
//     host can hold whole (Limits.MaxPerSource);
//   - connections not yet settled, in all (Limits.MaxPending) and per
//     source (Limits.MaxPendingPerSource). A connection is pending from
//     accept until its server says it is past its first complete
//     exchange (Settle): for HTTP the first request header (ConnState),
//     for MQTT the whole CONNECT. Settled connections (a logged-in
//     client) no longer count against these;
//   - the process's descriptors: a Pool shared by all the process's
//     listeners holds what RLIMIT_NOFILE leaves after a reserve for the
//     store and everything else, and an accepted socket whose
//     descriptor number shows that fewer than the reserve are left is
//     refused too (Linux hands out the lowest free number, so fd N means
//     N are open).
//
// The per-source shares are smaller than the totals, so a few sources
// cannot fill a total alone; but many sources can (17 addresses of one
// host fill 2048 pending slots at 128 each). So when MaxConns or
// MaxPending is full, a connection from a source that holds fewer
// pending connections than the heaviest source, by two or more, takes
// the place of that source's oldest pending connection, which is closed
// (counted as RefusedEvicted): a flood from N sources leaves room for
// every other source, such as a site's agent or a node's ramdisk logging
// in, whose identity is known only once its CONNECT or request is read.
// Settled connections are never evicted. Sources that proved an
// identity (Known: an MQTT login, an API request that passed
// authentication) within knownTTL are never taken from either, and one
// of them coming back needs only to hold fewer than the heaviest: a
// site's agent reconnecting from its address finds room even while many
// strangers hold one pending connection each.
//
// Refusals are counted (Stats) and logged through ratelog: one line per
// listener and kind per interval, with the count. Accept outlives failed
// accepts (too many open files) by retrying with a backoff, as net/http
// does, for as long as the listener is open.
package netbudget

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bmedge/bmedge/lib/ratelog"
)

// DefaultReserve is how many file descriptors a Pool keeps for the rest
// of the process (the Badger store, outgoing connections, files).
const DefaultReserve = 256

// minConns is the fewest connections a pool must leave room for.
const minConns = 16

// Limits are one listener's caps. A field <= 0 is no cap of its kind
// (the pool still applies); callers fill their defaults with Or.
type Limits struct {
	// MaxConns bounds the connections open at once on the listener.
	MaxConns int
	// MaxPerSource bounds the connections open at once from one source
	// (an IPv4 address, or an IPv6 /64).
	MaxPerSource int
	// MaxPending bounds the connections not yet settled, all sources
	// together.
	MaxPending int
	// MaxPendingPerSource bounds the connections not yet settled from one
	// source.
	MaxPendingPerSource int
}

// Or returns l with every field <= 0 taken from d.
func (l Limits) Or(d Limits) Limits {
	pick := func(a, b int) int {
		if a > 0 {
			return a
		}
		return b
	}
	return Limits{MaxConns: pick(l.MaxConns, d.MaxConns), MaxPerSource: pick(l.MaxPerSource, d.MaxPerSource),
		MaxPending: pick(l.MaxPending, d.MaxPending), MaxPendingPerSource: pick(l.MaxPendingPerSource, d.MaxPendingPerSource)}
}

// Kinds of refusal, as counted in Stats.Refused and named in the log.
const (
	// RefusedPool: the process's descriptors for connections (NOFILE
	// less the reserve) are all held by its listeners.
	RefusedPool = "fd-pool"
	// RefusedReserve: the accepted socket's descriptor number shows that
	// fewer than the reserve are left in the process.
	RefusedReserve = "fd-reserve"
	// RefusedTotal: the listener's MaxConns.
	RefusedTotal = "total"
	// RefusedPerSource: MaxPerSource.
	RefusedPerSource = "per-source"
	// RefusedPending: MaxPending.
	RefusedPending = "pending"
	// RefusedPendingPerSource: MaxPendingPerSource.
	RefusedPendingPerSource = "pending-per-source"
	// RefusedEvicted: a pending connection closed to make room, under a
	// full MaxConns or MaxPending, for a connection from a source that
	// held fewer (see the package documentation).
	RefusedEvicted = "evicted"
)

var kinds = []string{RefusedPool, RefusedReserve, RefusedTotal, RefusedPerSource, RefusedPending, RefusedPendingPerSource, RefusedEvicted}

// Pool is the file descriptors a process's listeners may hold, together:
// RLIMIT_NOFILE less a reserve.
type Pool struct {
	limit, reserve int
	used           atomic.Int64

	mu        sync.Mutex
	listeners []*Listener
}

// NewPool returns a pool of the process's NOFILE limit (Go raises the
// soft limit to the hard one at start) less reserve (DefaultReserve when
// reserve < 0). It refuses a reserve that leaves too few descriptors for
// connections, saying what to change.
func NewPool(reserve int) (*Pool, error) {
	return NewPoolLimit(nofile(), reserve)
}

// NewPoolLimit is NewPool with the descriptor limit given, for tests.
func NewPoolLimit(limit, reserve int) (*Pool, error) {
	if reserve < 0 {
		reserve = DefaultReserve
	}
	if limit-reserve < minConns {
		return nil, fmt.Errorf("the file-descriptor limit (NOFILE) is %d and %d are reserved for the store and the rest of the process, "+
			"which leaves fewer than %d for connections: raise the limit (ulimit -n, or LimitNOFILE= in a systemd unit) or lower --fd-reserve",
			limit, reserve, minConns)
	}
	return &Pool{limit: limit, reserve: reserve}, nil
}

// Limit is the NOFILE limit the pool was made with.
func (p *Pool) Limit() int { return p.limit }

// Reserve is how many descriptors the pool leaves to the rest of the
// process.
func (p *Pool) Reserve() int { return p.reserve }

// Cap is how many connections the pool's listeners may hold together.
func (p *Pool) Cap() int { return p.limit - p.reserve }

// InUse is how many connections the pool's listeners hold now.
func (p *Pool) InUse() int { return int(p.used.Load()) }

func (p *Pool) take() bool {
	if p.used.Add(1) > int64(p.Cap()) {
		p.used.Add(-1)
		return false
	}
	return true
}

func (p *Pool) give() { p.used.Add(-1) }

// Stats returns the stats of every listener of the pool, by name.
func (p *Pool) Stats() []Stats {
	p.mu.Lock()
	ls := append([]*Listener(nil), p.listeners...)
	p.mu.Unlock()
	out := make([]Stats, 0, len(ls))
	for _, l := range ls {
		out = append(out, l.Stats())
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Stats are a listener's counts.
type Stats struct {
	// Name is the listener's name ("api", "mqtt", ...).
	Name string
	// Open and Pending are the connections held now.
	Open, Pending int
	// Refused counts the connections refused at accept, by kind
	// (Refused* constants); every kind is present.
	Refused map[string]int64
}

// Options name a listener and say where it logs.
type Options struct {
	// Name is the listener's name in logs and stats; it is also the
	// prefix of its flags (--NAME-max-connections...), which refusal
	// lines name.
	Name string
	// Limits are its caps.
	Limits Limits
	// Log receives refusals (at most one line per kind per
	// LogInterval) and accept failures.
	Log         *slog.Logger
	LogInterval time.Duration
}

// Listener is a budgeted listener; see the package documentation.
type Listener struct {
	net.Listener
	name  string
	lim   Limits
	pool  *Pool
	log   *slog.Logger
	rl    *ratelog.Limiter
	sleep func(time.Duration)
	// fdOf returns the descriptor number of an accepted connection (-1
	// when it has none); tests replace it.
	fdOf func(net.Conn) int

	mu      sync.Mutex
	open    int
	pending int
	sources map[netip.Addr]*source
	refused map[string]*atomic.Int64
	// known is when each source last proved an identity (Known); now
	// is the clock (tests replace it).
	known map[netip.Addr]time.Time
	now   func() time.Time
}

// knownTTL is how long a source that proved an identity stays known;
// maxKnown bounds the sources remembered.
const (
	knownTTL = time.Hour
	maxKnown = 4096
)

type source struct {
	open, pending int
	// pend is the source's pending connections, oldest first.
	pend []*Conn
}

// Wrap returns ln under the pool's and o's budgets. ln should be the raw
// TCP listener: put tls.NewListener above it.
func (p *Pool) Wrap(ln net.Listener, o Options) *Listener {
	log := o.Log
	if log == nil {
		log = slog.Default()
	}
	l := &Listener{Listener: ln, name: o.Name, lim: o.Limits, pool: p, log: log, rl: ratelog.New(log, o.LogInterval),
		sleep: time.Sleep, fdOf: fdOf, sources: map[netip.Addr]*source{}, refused: map[string]*atomic.Int64{},
		known: map[netip.Addr]time.Time{}, now: time.Now}
	for _, k := range kinds {
		l.refused[k] = new(atomic.Int64)
	}
	p.mu.Lock()
	p.listeners = append(p.listeners, l)
	p.mu.Unlock()
	return l
}

// acceptRetryMax is the longest wait between tries after a failed accept.
const acceptRetryMax = time.Second

// Accept returns the next connection within the budgets; those over are
// closed at once and counted. It returns an error only once the listener
// is closed.
func (l *Listener) Accept() (net.Conn, error) {
	var delay time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil, err
			}
			// As net/http's server: wait and try again (EMFILE, ENFILE,
			// ECONNABORTED...), for as long as the listener is open.
			if delay == 0 {
				delay = 5 * time.Millisecond
			} else {
				delay = min(2*delay, acceptRetryMax)
			}
			l.rl.Warn("netbudget "+l.name+" accept", "accept failed; trying again until it works", "listener", l.name, "err", err,
				"retry_in", delay.String())
			l.sleep(delay)
			continue
		}
		if delay > 0 {
			l.rl.Info("netbudget "+l.name+" accept again", "accepting again", "listener", l.name)
			delay = 0
		}
		if bc := l.admit(c); bc != nil {
			return bc, nil
		}
	}
}

// admit returns c within the budgets, or closes it and returns nil.
func (l *Listener) admit(c net.Conn) *Conn {
	key := sourceOf(c.RemoteAddr())
	if fd := l.fdOf(c); fd >= 0 && fd >= l.pool.limit-l.pool.reserve {
		l.refuse(c, RefusedReserve, l.pool.reserve, key)
		return nil
	}
	if !l.pool.take() {
		l.refuse(c, RefusedPool, l.pool.Cap(), key)
		return nil
	}
	l.mu.Lock()
	s := l.sources[key]
	if s == nil {
		s = &source{}
	}
	kind, limit := "", 0
	var victim *Conn
	switch {
	case l.lim.MaxPerSource > 0 && s.open >= l.lim.MaxPerSource:
		kind, limit = RefusedPerSource, l.lim.MaxPerSource
	case l.lim.MaxPendingPerSource > 0 && s.pending >= l.lim.MaxPendingPerSource:
		kind, limit = RefusedPendingPerSource, l.lim.MaxPendingPerSource
	case l.lim.MaxConns > 0 && l.open >= l.lim.MaxConns:
		kind, limit = RefusedTotal, l.lim.MaxConns
	case l.lim.MaxPending > 0 && l.pending >= l.lim.MaxPending:
		kind, limit = RefusedPending, l.lim.MaxPending
	}
	if kind == RefusedTotal || kind == RefusedPending {
		if victim = l.evictFor(s, key); victim != nil {
			kind = ""
		}
	}
	if kind != "" {
		l.mu.Unlock()
		l.pool.give()
		l.refuse(c, kind, limit, key)
		return nil
	}
	l.open++
	l.pending++
	s.open++
	s.pending++
	l.sources[key] = s
	bc := &Conn{Conn: c, l: l, key: key, pending: true}
	s.pend = append(s.pend, bc)
	l.mu.Unlock()
	if victim != nil {
		l.refused[RefusedEvicted].Add(1)
		if tc, ok := victim.Conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = victim.Conn.Close()
		l.rl.Warn("netbudget "+l.name+" "+RefusedEvicted, "pending connection closed to make room for a source that holds fewer: "+
			"the listener's connections or pending connections are full", "listener", l.name, "kind", RefusedEvicted,
			"source", victim.key.String(), "for", key.String(), "refused_total", l.refused[RefusedEvicted].Load(),
			"hint", "many sources hold connections that have not finished their first request or CONNECT")
	}
	return bc
}

// evictFor takes out, under l.mu, the oldest pending connection of the
// unknown source (see Known) holding the most pending connections, when
// that is at least two more than s (the newcomer's source, key) holds,
// or one more when key is known: so that s, once admitted, holds no
// more than it. It returns it for the caller to close; nil when there is
// none such. Its places are given back here: the caller's connection
// takes them.
func (l *Listener) evictFor(s *source, key netip.Addr) *Conn {
	now := l.now()
	var heavy *source
	for k, x := range l.sources {
		if len(x.pend) > 0 && !l.knownLocked(k, now) && (heavy == nil || x.pending > heavy.pending) {
			heavy = x
		}
	}
	need := s.pending + 2
	if l.knownLocked(key, now) {
		need = s.pending + 1
	}
	if heavy == nil || heavy == s || heavy.pending < need {
		return nil
	}
	v := heavy.pend[0]
	heavy.pend = heavy.pend[1:]
	v.closed, v.pending = true, false
	heavy.pending--
	l.pending--
	l.open--
	if heavy.open--; heavy.open == 0 {
		delete(l.sources, v.key)
	}
	l.pool.give()
	return v
}

func (l *Listener) knownLocked(key netip.Addr, now time.Time) bool {
	at, ok := l.known[key]
	return ok && now.Sub(at) < knownTTL
}

// markKnown notes that key proved an identity now.
func (l *Listener) markKnown(key netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if _, ok := l.known[key]; !ok && len(l.known) >= maxKnown {
		for k, at := range l.known {
			if now.Sub(at) >= knownTTL {
				delete(l.known, k)
			}
		}
		if len(l.known) >= maxKnown {
			return // full of live ones: this one is not remembered
		}
	}
	l.known[key] = now
}

// Known notes that the budgeted connection under c (looking through
// wrappers, as Settle) proved an identity: its source is not evicted
// for a while, and finds room more easily (see the package
// documentation). It reports whether it found one.
func Known(c net.Conn) bool {
	for range 8 {
		switch x := c.(type) {
		case *Conn:
			x.l.markKnown(x.key)
			return true
		case interface{ NetConn() net.Conn }:
			c = x.NetConn()
		default:
			return false
		}
	}
	return false
}

// unpend drops c from its source's pending list (under l.mu).
func (s *source) unpend(c *Conn) {
	for i, x := range s.pend {
		if x == c {
			s.pend = append(s.pend[:i], s.pend[i+1:]...)
			return
		}
	}
}

var reasons = map[string]string{
	RefusedPool:             "the process's file descriptors for connections are all in use (NOFILE less --fd-reserve)",
	RefusedReserve:          "fewer file descriptors than --fd-reserve are left in the process",
	RefusedTotal:            "too many connections on this listener",
	RefusedPerSource:        "too many connections from one source address",
	RefusedPending:          "too many connections that have not finished their first request or CONNECT",
	RefusedPendingPerSource: "too many connections from one source address that have not finished their first request or CONNECT",
	RefusedEvicted:          "a pending connection was closed to make room for a source that holds fewer",
}

var flagSuffix = map[string]string{
	RefusedTotal:            "-max-connections",
	RefusedPerSource:        "-max-connections-per-source",
	RefusedPendingPerSource: "-max-pending-per-source",
}

func (l *Listener) refuse(c net.Conn, kind string, limit int, key netip.Addr) {
	l.refused[kind].Add(1)
	// Logged before the close, so that what the peer sees is already
	// in the log (rate-limited: a flood costs no more than one line a
	// while).
	defer func() {
		// Reset rather than FIN: the peer learns at once, and no state
		// stays.
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}()
	hint := "raise the NOFILE limit or lower --fd-reserve"
	if kind == RefusedPending || kind == RefusedEvicted {
		hint = "pending connections end within their deadline (10 s)"
	} else if s, ok := flagSuffix[kind]; ok {
		hint = "if legitimate clients are refused, raise --" + l.name + s
	}
	l.rl.Warn("netbudget "+l.name+" "+kind, "connection refused at accept: "+reasons[kind], "listener", l.name, "kind", kind,
		"limit", limit, "source", key.String(), "refused_total", l.refused[kind].Load(), "hint", hint)
}

// Close closes the listener (not its connections) and drops it from the
// pool's stats.
func (l *Listener) Close() error {
	l.pool.mu.Lock()
	for i, x := range l.pool.listeners {
		if x == l {
			l.pool.listeners = append(l.pool.listeners[:i], l.pool.listeners[i+1:]...)
			break
		}
	}
	l.pool.mu.Unlock()
	return l.Listener.Close()
}

// Stats returns the listener's counts.
func (l *Listener) Stats() Stats {
	l.mu.Lock()
	st := Stats{Name: l.name, Open: l.open, Pending: l.pending, Refused: map[string]int64{}}
	l.mu.Unlock()
	for k, n := range l.refused {
		st.Refused[k] = n.Load()
	}
	return st
}

// Limits returns the listener's caps.
func (l *Listener) Limits() Limits { return l.lim }

func (l *Listener) settle(c *Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !c.pending {
		return
	}
	c.pending = false
	l.pending--
	s := l.sources[c.key]
	s.pending--
	s.unpend(c)
}

func (l *Listener) release(c *Conn) {
	l.mu.Lock()
	if c.closed {
		l.mu.Unlock()
		return
	}
	c.closed = true
	s := l.sources[c.key]
	if c.pending {
		c.pending = false
		l.pending--
		s.pending--
		s.unpend(c)
	}
	l.open--
	if s.open--; s.open == 0 {
		delete(l.sources, c.key)
	}
	l.mu.Unlock()
	l.pool.give()
}

// Conn is an admitted connection. It counts as pending until Settle, and
// gives its place back on Close.
type Conn struct {
	net.Conn
	l   *Listener
	key netip.Addr
	// pending and closed are guarded by l.mu.
	pending, closed bool
}

// Settle marks the connection past its first complete exchange: it no
// longer counts against the pending budgets.
func (c *Conn) Settle() { c.l.settle(c) }

// Close closes the connection and gives its place back (once).
func (c *Conn) Close() error {
	c.l.release(c)
	return c.Conn.Close()
}

// Settle settles the budgeted connection under c, looking through
// wrappers that expose it (NetConn, as *tls.Conn does). It reports
// whether it found one.
func Settle(c net.Conn) bool {
	for range 8 {
		switch x := c.(type) {
		case *Conn:
			x.Settle()
			return true
		case interface{ NetConn() net.Conn }:
			c = x.NetConn()
		default:
			return false
		}
	}
	return false
}

// ConnState is an http.Server ConnState hook that settles a connection
// once its first request header is read (StateActive). prev, when not
// nil, is called too.
func ConnState(prev func(net.Conn, http.ConnState)) func(net.Conn, http.ConnState) {
	return func(c net.Conn, s http.ConnState) {
		if s == http.StateActive {
			Settle(c)
		}
		if prev != nil {
			prev(c, s)
		}
	}
}

// Source is the budget key of a remote address given as host:port (as
// http.Request.RemoteAddr has it), in text: the IPv4 address (an
// IPv4-mapped one too), or the /64 of an IPv6 one ("2001:db8:1:2::/64").
// Other counters of the same sources (the API's failed logins) use it, so
// that a source means one thing everywhere. What does not parse is its
// own key.
func Source(remote string) string {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	k := sourceOf(net.TCPAddrFromAddrPort(netip.AddrPortFrom(ip.WithZone(""), 0)))
	if k.Is6() {
		return netip.PrefixFrom(k, 64).String()
	}
	return k.String()
}

// sourceOf is the budget key of a remote address: the IPv4 address, or
// the /64 of an IPv6 one.
func sourceOf(a net.Addr) netip.Addr {
	var ap netip.AddrPort
	switch x := a.(type) {
	case *net.TCPAddr:
		ap = x.AddrPort()
	default:
		if a != nil {
			ap, _ = netip.ParseAddrPort(a.String())
		}
	}
	ip := ap.Addr().Unmap()
	if ip.Is6() {
		if p, err := ip.Prefix(64); err == nil {
			return p.Addr()
		}
	}
	return ip
}
