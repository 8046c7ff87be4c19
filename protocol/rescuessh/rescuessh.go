// Package rescuessh is the SSH server of a rescue login, as Ironic's
// rescue ramdisk offers it once finalize_rescue has run: the user
// "rescue" only, password authentication checked against the SHA-crypt
// hash the coordinator sent (nobody here ever sees the password), and
// budgets. What a session runs is the caller's (Config.Shell): the rescue
// ramdisk (ramdisk/rescue) runs its shell, the edge agent's simulator
// (agent/sim) a small built-in command set.
//
// Budgets: a bounded number of connections and of sessions, a handshake
// deadline, three password tries per connection, and failed tries limited
// for the whole server (a token bucket, which a caller's other logins,
// such as a serial console, share through Check): once it is empty every
// try is refused unchecked until it refills. Refusals are logged through
// protocol/ratelog; the password never is. It must never offer
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
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/bmedge/bmedge/protocol/ratelog"
	"github.com/bmedge/bmedge/protocol/shacrypt"
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
	// MaxConns bounds concurrent SSH connections (default 8), MaxSessions
	// concurrent sessions over all of them and the caller's other logins
	// (AcquireSession; default 4).
	MaxConns, MaxSessions int
	// FailBurst failed tries are allowed at once, then one per FailEvery
	// (defaults 5 and 2 s); FailDelay is waited after each failed try
	// (default 1 s).
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
	conns    chan struct{}
	sessions chan struct{}
	fails    *bucket

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
		cfg.MaxConns = 8
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
		conns: make(chan struct{}, cfg.MaxConns), sessions: make(chan struct{}, cfg.MaxSessions),
		fails: newBucket(cfg.FailBurst, cfg.FailEvery), live: map[io.Closer]struct{}{}}
	s.ssh = &ssh.ServerConfig{
		MaxAuthTries: 3,
		PasswordCallback: func(c ssh.ConnMetadata, pw []byte) (*ssh.Permissions, error) {
			if err := s.Check(c.User(), string(pw)); err != nil {
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
	s.ln = ln
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

// Check verifies a login, over SSH or another way in (a console): the
// user must be "rescue", the failure budget not spent, the password the
// hashed one. A failed try waits FailDelay.
func (s *Server) Check(user, password string) error {
	if !s.fails.ok() {
		s.rl.Warn("rescue-login-budget", "rescue login refused unchecked: too many failed tries; wait and retry")
		time.Sleep(s.cfg.FailDelay)
		return errors.New("too many failed logins; retry later")
	}
	err := shacrypt.Verify(s.cfg.Hash, password)
	if user != User && err == nil {
		err = errors.New("unknown user")
	}
	if err != nil {
		s.fails.take()
		s.rl.Warn("rescue-login-failed", "rescue login refused: wrong user or password")
		time.Sleep(s.cfg.FailDelay)
		return errors.New("wrong user or password")
	}
	s.log.Info("rescue login accepted", "user", User)
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
		select {
		case s.conns <- struct{}{}:
		default:
			s.rl.Warn("rescue-ssh-conns", "rescue SSH connection refused: too many connections", "max", s.cfg.MaxConns)
			c.Close()
			continue
		}
		if !s.track(c) {
			<-s.conns
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() { <-s.conns }()
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
	defer sc.Close()
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "only session channels are offered")
			continue
		}
		release, ok := s.AcquireSession()
		if !ok {
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
			defer release()
			s.session(ch, creqs)
		}()
	}
}

// session serves one session channel: an optional pty, then one shell or
// exec; its exit status goes back to the client.
func (s *Server) session(ch ssh.Channel, reqs <-chan *ssh.Request) {
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

// bucket is a token bucket of failed tries.
type bucket struct {
	mu     sync.Mutex
	tokens float64
	burst  float64
	every  time.Duration
	last   time.Time
}

func newBucket(burst int, every time.Duration) *bucket {
	return &bucket{tokens: float64(burst), burst: float64(burst), every: every, last: time.Now()}
}

func (b *bucket) refill() {
	now := time.Now()
	b.tokens = min(b.burst, b.tokens+float64(now.Sub(b.last))/float64(b.every))
	b.last = now
}

// ok says whether a try may be checked.
func (b *bucket) ok() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill()
	return b.tokens >= 1
}

// take spends a token for a failed try.
func (b *bucket) take() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill()
	b.tokens = max(0, b.tokens-1)
}
