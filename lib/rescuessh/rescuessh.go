// Package rescuessh is the SSH server of a rescue login, as Ironic's
// rescue ramdisk offers it once finalize_rescue has run: the user
// "rescue" only, password authentication checked against the SHA-crypt
// hash the coordinator sent (nobody here ever sees the password), and
// budgets. What a session runs is the caller's (Config.Shell): the rescue
// ramdisk (ramdisk/rescue) runs its shell, the edge agent's simulator
// (agent/sim) a small built-in command set.
//
// Budgets: a bounded number of connections, with a share per source
// address and a bound on those not yet logged in (lib/netbudget:
// a flood from many sources leaves room for one more), a bounded number
// of sessions, a handshake deadline, three password tries per
// connection, and failed tries limited per source address (a token
// bucket each; a caller's other way in, such as a serial console, has a
// bucket of its own through Check): once a source's bucket is empty its
// tries are refused unchecked until it refills, and other sources are
// not affected. Refusals are counted (Stats) and logged through
// lib/ratelog; the password never is. It must never offer
// forwarding, agent forwarding, X11, env or subsystems.
package rescuessh

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/bmedge/bmedge/lib/netbudget"
	"github.com/bmedge/bmedge/lib/ratelog"
	"github.com/bmedge/bmedge/lib/shacrypt"
)

// User is the only user name the rescue login accepts (Ironic's).
const User = "rescue"

// Session runs one SSH session channel: an optional terminal, then one
// shell or command.
type Session interface {
	// Pty is the client's terminal request (TERM, width, height); false
	// refuses it, and the client goes on without one.
	Pty(term string, cols, rows uint32) bool
	// Resize is the client's window change.
	Resize(cols, rows uint32)
	// Start runs the shell (exec false) or command (exec true) with its
	// input and output on ch. done gets the exit status once all its
	// output is written to ch.
	Start(ch ssh.Channel, exec bool, command string) (done <-chan int, err error)
	// Hangup says the client went away before the session ended.
	Hangup()
	// Close releases what the session holds; it is called once, last.
	Close()
}

// Config configures a rescue SSH server.
type Config struct {
	// Hash is the SHA-crypt hash ("$6$...") of the rescue password.
	Hash string
	// Listen is the SSH address (default ":22").
	Listen string
	// Shell makes the Session of each session channel (required).
	Shell func() Session
	// MaxConns bounds concurrent SSH connections (default 16), MaxSessions
	// concurrent sessions over all of them and the caller's other logins
	// (AcquireSession; default 4).
	MaxConns, MaxSessions int
	// MaxConnsPerSource bounds the connections from one source address
	// (default 4); MaxPending those not yet logged in (default 3/4 of
	// MaxConns), MaxPendingPerSource those of one source (default 2).
	MaxConnsPerSource, MaxPending, MaxPendingPerSource int
	// FailBurst failed tries are allowed at once from one source
	// address (and from the console), then one per FailEvery (defaults 5
	// and 2 s); FailDelay is waited after each failed try (default 1 s).
	FailBurst            int
	FailEvery, FailDelay time.Duration
	// HostKey is the SSH host key; nil makes a new Ed25519 key.
	HostKey ssh.Signer
	// Version is the server's SSH version string (default
	// "SSH-2.0-bmedge-rescue").
	Version string
	Log     *slog.Logger
}

// Server is a running rescue SSH server.
type Server struct {
	cfg      Config
	ln       net.Listener
	ssh      *ssh.ServerConfig
	rl       *ratelog.Limiter
	log      *slog.Logger
	bl       *netbudget.Listener
	sessions chan struct{}
	fails    *buckets
	refused  map[string]*atomic.Int64

	mu     sync.Mutex
	closed bool
	live   map[io.Closer]struct{}
	wg     sync.WaitGroup
}

// Start checks cfg.Hash and starts the SSH server.
func Start(cfg Config) (*Server, error) {
	if err := shacrypt.Check(cfg.Hash); err != nil {
		return nil, fmt.Errorf("rescue password hash: %w", err)
	}
	if cfg.Shell == nil {
		return nil, errors.New("rescue SSH server: no Shell to run sessions")
	}
	if cfg.Listen == "" {
		cfg.Listen = ":22"
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 16
	}
	if cfg.MaxConnsPerSource <= 0 {
		cfg.MaxConnsPerSource = 4
	}
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = max(1, cfg.MaxConns*3/4)
	}
	if cfg.MaxPendingPerSource <= 0 {
		cfg.MaxPendingPerSource = 2
	}
	if cfg.MaxSessions <= 0 {
		cfg.MaxSessions = 4
	}
	if cfg.FailBurst <= 0 {
		cfg.FailBurst = 5
	}
	if cfg.FailEvery <= 0 {
		cfg.FailEvery = 2 * time.Second
	}
	if cfg.FailDelay <= 0 {
		cfg.FailDelay = time.Second
	}
	if cfg.Version == "" {
		cfg.Version = "SSH-2.0-bmedge-rescue"
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.HostKey == nil {
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, err
		}
		if cfg.HostKey, err = ssh.NewSignerFromKey(priv); err != nil {
			return nil, err
		}
	}
	s := &Server{cfg: cfg, log: cfg.Log, rl: ratelog.New(cfg.Log, 0),
		sessions: make(chan struct{}, cfg.MaxSessions),
		fails:    newBuckets(cfg.FailBurst, cfg.FailEvery), live: map[io.Closer]struct{}{}, refused: map[string]*atomic.Int64{}}
	for _, k := range []string{RefusedLoginBudget, RefusedLoginFailed, RefusedSessions} {
		s.refused[k] = new(atomic.Int64)
	}
	s.ssh = &ssh.ServerConfig{
		MaxAuthTries: 3,
		PasswordCallback: func(c ssh.ConnMetadata, pw []byte) (*ssh.Permissions, error) {
			if err := s.check(netbudget.Source(c.RemoteAddr().String()), c.User(), string(pw)); err != nil {
				return nil, err
			}
			return &ssh.Permissions{}, nil
		},
		ServerVersion: cfg.Version,
	}
	s.ssh.AddHostKey(cfg.HostKey)
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, err
	}
	// A pool of its own: the caps here are tiny beside the process's
	// descriptors, and a simulator runs many of these servers.
	pool, err := netbudget.NewPoolLimit(1<<20, 0)
	if err != nil {
		ln.Close()
		return nil, err
	}
	s.bl = pool.Wrap(ln, netbudget.Options{Name: "rescue-ssh", Log: cfg.Log, Limits: netbudget.Limits{MaxConns: cfg.MaxConns,
		MaxPerSource: cfg.MaxConnsPerSource, MaxPending: cfg.MaxPending, MaxPendingPerSource: cfg.MaxPendingPerSource}})
	s.ln = s.bl
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Addr is the SSH server's address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// HostKey is the server's public host key.
func (s *Server) HostKey() ssh.PublicKey { return s.cfg.HostKey.PublicKey() }

// Close stops accepting, ends every connection and session, and waits.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	for c := range s.live {
		c.Close()
	}
	s.mu.Unlock()
	s.ln.Close()
	s.wg.Wait()
}

func (s *Server) track(c io.Closer) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return false
	}
	s.live[c] = struct{}{}
	return true
}

func (s *Server) untrack(c io.Closer) {
	s.mu.Lock()
	delete(s.live, c)
	s.mu.Unlock()
}

// Kinds of refusal counted in Stats besides the listener's (netbudget's
// kinds: total, per-source, pending, pending-per-source, evicted).
const (
	// RefusedLoginBudget: a try refused unchecked, its source's failure
	// budget spent.
	RefusedLoginBudget = "login-budget"
	// RefusedLoginFailed: a wrong user or password.
	RefusedLoginFailed = "login-failed"
	// RefusedSessions: a session over MaxSessions.
	RefusedSessions = "sessions"
)

// ConsoleSource is the failure-budget key of Check: the console's tries
// have a budget of their own, apart from every network source's.
const ConsoleSource = "console"

// Stats returns the refusals, by kind: the listener's (netbudget) and
// the logins' and sessions' (Refused* constants).
func (s *Server) Stats() map[string]int64 {
	out := map[string]int64{}
	for k, n := range s.bl.Stats().Refused {
		out[k] = n
	}
	for k, n := range s.refused {
		out[k] = n.Load()
	}
	return out
}

// Check verifies a login from another way in than SSH (a console), with
// the console's own failure budget: the user must be "rescue", the
// budget not spent, the password the hashed one. A failed try waits
// FailDelay.
func (s *Server) Check(user, password string) error {
	return s.check(ConsoleSource, user, password)
}

// check is Check for the failure budget of source.
func (s *Server) check(source, user, password string) error {
	if !s.fails.ok(source) {
		s.refused[RefusedLoginBudget].Add(1)
		s.rl.Warn("rescue-login-budget "+source, "rescue login refused unchecked: too many failed tries from this source; wait and retry",
			"source", source)
		time.Sleep(s.cfg.FailDelay)
		return errors.New("too many failed logins; retry later")
	}
	err := shacrypt.Verify(s.cfg.Hash, password)
	if user != User && err == nil {
		err = errors.New("unknown user")
	}
	if err != nil {
		s.fails.take(source)
		s.refused[RefusedLoginFailed].Add(1)
		s.rl.Warn("rescue-login-failed", "rescue login refused: wrong user or password", "source", source)
		time.Sleep(s.cfg.FailDelay)
		return errors.New("wrong user or password")
	}
	s.log.Info("rescue login accepted", "user", User, "source", source)
	return nil
}

// AcquireSession takes a place in the session budget for a session that
// is not an SSH one (a console's); ok is false when none is free, else
// release gives it back.
func (s *Server) AcquireSession() (release func(), ok bool) {
	select {
	case s.sessions <- struct{}{}:
		return func() { <-s.sessions }, true
	default:
		return nil, false
	}
}

// MaxSessions is the session budget.
func (s *Server) MaxSessions() int { return s.cfg.MaxSessions }

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		if !s.track(c) {
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer s.untrack(c)
			defer c.Close()
			s.serveConn(c)
		}()
	}
}

func (s *Server) serveConn(c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	sc, chans, reqs, err := ssh.NewServerConn(c, s.ssh)
	if err != nil {
		return
	}
	_ = c.SetDeadline(time.Time{})
	netbudget.Settle(c) // logged in
	netbudget.Known(c)
	defer sc.Close()
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "only session channels are offered")
			continue
		}
		release, ok := s.AcquireSession()
		if !ok {
			s.refused[RefusedSessions].Add(1)
			s.rl.Warn("rescue-sessions", "rescue session refused: too many sessions", "max", s.cfg.MaxSessions)
			_ = nc.Reject(ssh.ResourceShortage, fmt.Sprintf("at most %d rescue sessions at once", s.cfg.MaxSessions))
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			release()
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			once := sync.OnceFunc(release)
			defer once()
			s.session(ch, creqs, once)
		}()
	}
}

// session serves one session channel: an optional pty, then one shell or
// exec; its exit status goes back to the client. done gives the
// session's place in the budget back: before the exit status is sent, so
// that a client that saw its session end finds the place free.
func (s *Server) session(ch ssh.Channel, reqs <-chan *ssh.Request, done func()) {
	defer ch.Close()
	run := s.cfg.Shell()
	defer run.Close()
	var (
		started  <-chan int
		running  bool
		hasTerm  bool
		finished bool
	)
	for !finished {
		var req *ssh.Request
		var ok bool
		select {
		case req, ok = <-reqs:
			if !ok {
				if running {
					run.Hangup()
				}
				return
			}
		case code := <-started:
			done()
			b := binary.BigEndian.AppendUint32(nil, uint32(code))
			_, _ = ch.SendRequest("exit-status", false, b)
			return
		}
		switch req.Type {
		case "pty-req":
			if hasTerm || running {
				_ = req.Reply(false, nil)
				continue
			}
			t, cols, rows, ok := parsePtyReq(req.Payload)
			if !ok || !run.Pty(t, cols, rows) {
				_ = req.Reply(false, nil)
				continue
			}
			hasTerm = true
			_ = req.Reply(true, nil)
		case "window-change":
			if hasTerm && len(req.Payload) >= 8 {
				run.Resize(binary.BigEndian.Uint32(req.Payload), binary.BigEndian.Uint32(req.Payload[4:]))
			}
		case "shell", "exec":
			if running {
				_ = req.Reply(false, nil)
				continue
			}
			command := ""
			if req.Type == "exec" {
				var p struct{ Command string }
				if err := ssh.Unmarshal(req.Payload, &p); err != nil {
					_ = req.Reply(false, nil)
					continue
				}
				command = p.Command
			}
			done, err := run.Start(ch, req.Type == "exec", command)
			if err != nil {
				s.log.Warn("rescue session: cannot start the shell", "err", err)
				_ = req.Reply(false, nil)
				finished = true
				continue
			}
			started, running = done, true
			_ = req.Reply(true, nil)
		default:
			// env, signal, x11-req, auth-agent-req@openssh.com,
			// subsystem and the rest are not offered.
			if req.WantReply {
				_ = req.Reply(false, nil)
			}
		}
	}
}

func parsePtyReq(b []byte) (term string, cols, rows uint32, ok bool) {
	var p struct {
		Term             string
		Cols, Rows, W, H uint32
		Modes            string
	}
	if err := ssh.Unmarshal(b, &p); err != nil {
		return "", 0, 0, false
	}
	if p.Term == "" || len(p.Term) > 64 {
		p.Term = "vt100"
	}
	return p.Term, p.Cols, p.Rows, true
}

// maxSources bounds the failure buckets kept; past it, buckets that
// have refilled are dropped, and if none has, new sources share one.
const maxSources = 1024

// buckets are the failure budgets, one token bucket per source.
type buckets struct {
	mu    sync.Mutex
	burst int
	every time.Duration
	by    map[string]*bucket
	// shared is the bucket of new sources while by is full.
	shared *bucket
	now    func() time.Time
}

func newBuckets(burst int, every time.Duration) *buckets {
	b := &buckets{burst: burst, every: every, by: map[string]*bucket{}, now: time.Now}
	b.shared = b.newBucket()
	return b
}

func (b *buckets) newBucket() *bucket {
	return &bucket{tokens: float64(b.burst), burst: float64(b.burst), every: b.every, last: b.now()}
}

// of returns source's bucket (under b.mu).
func (b *buckets) of(source string) *bucket {
	if x, ok := b.by[source]; ok {
		return x
	}
	if len(b.by) >= maxSources {
		now := b.now()
		for k, x := range b.by {
			if x.refill(now); x.tokens >= x.burst {
				delete(b.by, k)
			}
		}
		if len(b.by) >= maxSources {
			return b.shared
		}
	}
	x := b.newBucket()
	b.by[source] = x
	return x
}

// ok says whether a try from source may be checked.
func (b *buckets) ok(source string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	x := b.of(source)
	x.refill(b.now())
	return x.tokens >= 1
}

// take spends a token of source's for a failed try.
func (b *buckets) take(source string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	x := b.of(source)
	x.refill(b.now())
	x.tokens = max(0, x.tokens-1)
}

// bucket is a token bucket of failed tries.
type bucket struct {
	tokens float64
	burst  float64
	every  time.Duration
	last   time.Time
}

func (b *bucket) refill(now time.Time) {
	b.tokens = min(b.burst, b.tokens+float64(now.Sub(b.last))/float64(b.every))
	b.last = now
}
