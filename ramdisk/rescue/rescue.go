// Package rescue is the login the rescue ramdisk offers its operator once
// finalize_rescue has run: an SSH server for the user "rescue"
// (lib/rescuessh) and a login prompt on the serial console, both
// checking the password against the SHA-crypt hash the coordinator sent
// (it never sees the password). A session runs the ramdisk's shell
// (u-root's gosh as /bin/sh) as root.
//
// Budgets (lib/rescuessh): a bounded number of connections, with a
// share per source address, and of sessions (the console's counted too),
// a handshake deadline, three password tries per connection, and failed
// tries limited per source address, the console having a budget of its
// own: once a source's budget is empty its tries are refused unchecked
// until it refills, and nobody else's are. Refusals are logged through
// lib/ratelog; the password never is.
package rescue

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os/exec"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/bmedge/bmedge/lib/rescuessh"
)

// User is the only user name the rescue login accepts (Ironic's).
const User = rescuessh.User

// Config configures a rescue login.
type Config struct {
	// Hash is the SHA-crypt hash ("$6$...") of the rescue password.
	Hash string
	// Listen is the SSH address (default ":22").
	Listen string
	// Shell is the shell a session runs (default /bin/sh); a command
	// runs as Shell -c COMMAND.
	Shell string
	// MaxConns bounds concurrent SSH connections (default 16), MaxSessions
	// concurrent sessions over all of them and the console (default 4).
	MaxConns, MaxSessions int
	// FailBurst failed tries are allowed at once from one source (the
	// console is one), then one per FailEvery (defaults 5 and 2 s);
	// FailDelay is waited after each failed try (default 1 s).
	FailBurst            int
	FailEvery, FailDelay time.Duration
	// HostKey is the SSH host key; nil makes a new Ed25519 key.
	HostKey ssh.Signer
	// Env is the environment of sessions (default PATH, HOME=/, TERM).
	Env []string
	Log *slog.Logger
}

// Server is a running rescue login: the SSH server (Addr, HostKey,
// Close) and what the console needs of it.
type Server struct {
	*rescuessh.Server
	cfg Config
}

// Start checks cfg.Hash and starts the SSH server.
func Start(cfg Config) (*Server, error) {
	if cfg.Shell == "" {
		cfg.Shell = "/bin/sh"
	}
	if cfg.Env == nil {
		cfg.Env = []string{"PATH=/bbin:/bin:/ubin:/usr/bin:/sbin:/usr/sbin", "HOME=/", "USER=root"}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s := &Server{cfg: cfg}
	srv, err := rescuessh.Start(rescuessh.Config{Hash: cfg.Hash, Listen: cfg.Listen,
		Shell:    func() rescuessh.Session { return &shellSession{cfg: &s.cfg} },
		MaxConns: cfg.MaxConns, MaxSessions: cfg.MaxSessions,
		FailBurst: cfg.FailBurst, FailEvery: cfg.FailEvery, FailDelay: cfg.FailDelay,
		HostKey: cfg.HostKey, Log: cfg.Log})
	if err != nil {
		return nil, err
	}
	s.Server = srv
	return s, nil
}

// shellSession runs the ramdisk's shell for one SSH session, on a pty
// when the client asked for one.
type shellSession struct {
	cfg     *Config
	term    *ptyPair
	termEnv string
	cmd     *exec.Cmd
}

func (r *shellSession) Pty(t string, cols, rows uint32) bool {
	p, err := openPty()
	if err != nil {
		r.cfg.Log.Warn("rescue session: no pty", "err", err)
		return false
	}
	r.term, r.termEnv = p, "TERM="+t
	p.resize(cols, rows)
	return true
}

func (r *shellSession) Resize(cols, rows uint32) {
	if r.term != nil {
		r.term.resize(cols, rows)
	}
}

func (r *shellSession) Start(ch ssh.Channel, isExec bool, command string) (<-chan int, error) {
	args := []string{r.cfg.Shell}
	if isExec {
		args = append(args, "-c", command)
	}
	r.cmd = exec.Command(args[0], args[1:]...)
	r.cmd.Dir = "/"
	r.cmd.Env = append(append([]string{}, r.cfg.Env...), r.termEnv)
	return run(r.cmd, ch, r.term)
}

func (r *shellSession) Hangup() {
	if r.cmd != nil && r.cmd.Process != nil {
		_ = r.cmd.Process.Signal(syscall.SIGHUP)
	}
}

func (r *shellSession) Close() {
	if r.term != nil {
		r.term.Close()
	}
}

// run starts cmd on the channel (through the pty if there is one) and
// returns a channel that gets its exit code once its output is sent.
func run(cmd *exec.Cmd, ch ssh.Channel, term *ptyPair) (chan int, error) {
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

// Wait blocks until ctx ends, then closes the server.
func (s *Server) Wait(ctx context.Context) {
	<-ctx.Done()
	s.Close()
}
