// Package rescue is the login the rescue ramdisk offers its operator once
// finalize_rescue has run: an SSH server for the user "rescue" and a
// login prompt on the serial console, both checking the password against
// the SHA-crypt hash the coordinator sent (it never sees the password).
// A session runs the ramdisk's shell (u-root's gosh as /bin/sh) as root.
//
// Budgets: a bounded number of connections and of sessions, a handshake
// deadline, three password tries per connection, and failed tries limited
// for the whole server (a token bucket shared by SSH and the console):
// once it is empty every try is refused unchecked until it refills.
// Refusals are logged through protocol/ratelog; the password never is.
package rescue

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/bmedge/bmedge/protocol/ratelog"
	"github.com/bmedge/bmedge/protocol/shacrypt"
)

// User is the only user name the rescue login accepts (Ironic's).
const User = "rescue"

// Config configures a rescue login.
type Config struct {
	// Hash is the SHA-crypt hash ("$6$...") of the rescue password.
	Hash string
	// Listen is the SSH address (default ":22").
	Listen string
	// Shell is the shell a session runs (default /bin/sh); a command
	// runs as Shell -c COMMAND.
	Shell string
	// MaxConns bounds concurrent SSH connections (default 8), MaxSessions
	// concurrent sessions over all of them and the console (default 4).
	MaxConns, MaxSessions int
	// FailBurst failed tries are allowed at once, then one per FailEvery
	// (defaults 5 and 2 s); FailDelay is waited after each failed try
	// (default 1 s).
	FailBurst            int
	FailEvery, FailDelay time.Duration
	// HostKey is the SSH host key; nil makes a new Ed25519 key.
	HostKey ssh.Signer
	// Env is the environment of sessions (default PATH, HOME=/, TERM).
	Env []string
	Log *slog.Logger
}

// Server is a running rescue login.
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
	if cfg.Listen == "" {
		cfg.Listen = ":22"
	}
	if cfg.Shell == "" {
		cfg.Shell = "/bin/sh"
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
	if cfg.Env == nil {
		cfg.Env = []string{"PATH=/bbin:/bin:/ubin:/usr/bin:/sbin:/usr/sbin", "HOME=/", "USER=root"}
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
			if err := s.check(c.User(), string(pw)); err != nil {
				return nil, err
			}
			return &ssh.Permissions{}, nil
		},
		ServerVersion: "SSH-2.0-bmedge-rescue",
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

// check verifies a login: the user must be "rescue", the failure budget
// not spent, the password the hashed one. Failed tries wait FailDelay.
func (s *Server) check(user, password string) error {
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
		select {
		case s.sessions <- struct{}{}:
		default:
			s.rl.Warn("rescue-sessions", "rescue session refused: too many sessions", "max", s.cfg.MaxSessions)
			_ = nc.Reject(ssh.ResourceShortage, fmt.Sprintf("at most %d rescue sessions at once", s.cfg.MaxSessions))
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			<-s.sessions
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() { <-s.sessions }()
			s.session(ch, creqs)
		}()
	}
}

// session serves one session channel: an optional pty, then one shell or
// exec; its exit status goes back to the client.
func (s *Server) session(ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer ch.Close()
	var (
		term    *ptyPair
		termEnv string
		started chan int
		cmd     *exec.Cmd
	)
	defer func() {
		if term != nil {
			term.Close()
		}
	}()
	for {
		var req *ssh.Request
		var ok bool
		select {
		case req, ok = <-reqs:
			if !ok {
				if cmd != nil && cmd.Process != nil {
					_ = cmd.Process.Signal(syscall.SIGHUP)
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
			if term != nil || cmd != nil {
				_ = req.Reply(false, nil)
				continue
			}
			t, cols, rows, ok := parsePtyReq(req.Payload)
			if !ok {
				_ = req.Reply(false, nil)
				continue
			}
			p, err := openPty()
			if err != nil {
				s.log.Warn("rescue session: no pty", "err", err)
				_ = req.Reply(false, nil)
				continue
			}
			term, termEnv = p, "TERM="+t
			p.resize(cols, rows)
			_ = req.Reply(true, nil)
		case "window-change":
			if term != nil && len(req.Payload) >= 8 {
				term.resize(binary.BigEndian.Uint32(req.Payload), binary.BigEndian.Uint32(req.Payload[4:]))
			}
		case "shell", "exec":
			if cmd != nil {
				_ = req.Reply(false, nil)
				continue
			}
			args := []string{s.cfg.Shell}
			if req.Type == "exec" {
				var p struct{ Command string }
				if err := ssh.Unmarshal(req.Payload, &p); err != nil {
					_ = req.Reply(false, nil)
					continue
				}
				args = append(args, "-c", p.Command)
			}
			cmd = exec.Command(args[0], args[1:]...)
			cmd.Dir = "/"
			cmd.Env = append(append([]string{}, s.cfg.Env...), termEnv)
			done, err := s.run(cmd, ch, term)
			if err != nil {
				s.log.Warn("rescue session: cannot start the shell", "shell", s.cfg.Shell, "err", err)
				_ = req.Reply(false, nil)
				return
			}
			started = done
			_ = req.Reply(true, nil)
		default:
			// env, signal, x11-req, auth-agent-req@openssh.com and the
			// rest are not offered.
			if req.WantReply {
				_ = req.Reply(false, nil)
			}
		}
	}
}

// run starts cmd on the channel (through the pty if there is one) and
// returns a channel that gets its exit code once its output is sent.
func (s *Server) run(cmd *exec.Cmd, ch ssh.Channel, term *ptyPair) (chan int, error) {
	done := make(chan int, 1)
	code := func(err error) int {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if st, ok := ee.Sys().(syscall.WaitStatus); ok && st.Signaled() {
				return 128 + int(st.Signal())
			}
			return ee.ExitCode()
		}
		if err != nil {
			return 255
		}
		return 0
	}
	if term != nil {
		cmd.Stdin, cmd.Stdout, cmd.Stderr = term.tty, term.tty, term.tty
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		term.tty.Close()
		term.tty = nil
		go func() { _, _ = io.Copy(term.ptm, ch) }()
		out := make(chan struct{})
		go func() { _, _ = io.Copy(ch, term.ptm); close(out) }()
		go func() {
			err := cmd.Wait()
			// The pty's output ends with EIO once the last holder of its
			// tty is gone; wait for it briefly so nothing is cut short.
			select {
			case <-out:
			case <-time.After(2 * time.Second):
			}
			done <- code(err)
		}()
		return done, nil
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = ch, ch.Stderr()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _, _ = io.Copy(stdin, ch); stdin.Close() }()
	go func() { done <- code(cmd.Wait()) }()
	return done, nil
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

// Wait blocks until ctx ends, then closes the server.
func (s *Server) Wait(ctx context.Context) {
	<-ctx.Done()
	s.Close()
}
