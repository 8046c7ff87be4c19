package vbmc

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

// SerialConsole is a Machine whose serial port can be reached as a unix
// socket (QEMUMachine is one).
type SerialConsole interface {
	// SerialSocket is the path of the serial port's unix socket; it
	// exists while the machine runs.
	SerialSocket() string
}

// The commands of the SSH console's prompt that attach to the serial
// port, as iDRAC ("console com2", left with Ctrl+\) and iLO ("vsp", left
// with ESC then "(") spell them.
const (
	ConsoleCommandIDRAC = "console com2"
	ConsoleCommandILO   = "vsp"
	ConsoleEscapeIDRAC  = "\x1c"
	ConsoleEscapeILO    = "\x1b("
	consolePrompt       = "vbmc-> "
)

// SSHConsoleOptions shape ServeSSHConsole.
type SSHConsoleOptions struct {
	// Addr is the listen address (default 127.0.0.1:0, a free port).
	Addr string
	// System is the Id of the system whose serial port is served
	// (default the BMC's first system).
	System string
	// HostKey is the server's key (default a new Ed25519 key).
	HostKey ssh.Signer
}

// SSHConsole is a BMC's SSH serial console on its own listener.
type SSHConsole struct {
	// Addr is where it listens; HostKey the server's public key.
	Addr    string
	HostKey ssh.PublicKey

	ln     net.Listener
	b      *BMC
	sys    *system
	cfg    *ssh.ServerConfig
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]bool
	busy   bool // a session is attached to the serial port
	closed bool
}

// Bounds of the SSH console.
const (
	sshMaxConns      = 4                // connections at once, authenticated or not
	sshHandshakeTime = 15 * time.Second // to authenticate
	sshMaxAuthTries  = 3
	sshMaxLine       = 256 // a command at the prompt
)

// ServeSSHConsole serves a system's serial console over SSH as a real
// BMC's management CLI does: log in with the BMC's own username and
// password (nothing else is accepted), then "console com2" or "vsp" at
// the prompt (or as the SSH command) attaches to the serial port; the
// vendor's escape (Ctrl+\ or ESC "(") goes back to the prompt, "exit"
// logs out. One session at a time may be attached (a second one is told
// the console is busy). While the machine is off the session waits and
// attaches when it starts; a reboot keeps the session. The Manager shows
// it as SerialConsole.SSH.
func (b *BMC) ServeSSHConsole(opts SSHConsoleOptions) (*SSHConsole, error) {
	sys := b.systems[0]
	if opts.System != "" {
		if sys = b.system(opts.System); sys == nil {
			return nil, fmt.Errorf("vbmc: SSH console: no system %q", opts.System)
		}
	}
	if _, ok := sys.machine.(SerialConsole); !ok {
		return nil, fmt.Errorf("vbmc: SSH console: system %s's machine has no serial socket", sys.id)
	}
	key := opts.HostKey
	if key == nil {
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("vbmc: SSH console host key: %w", err)
		}
		if key, err = ssh.NewSignerFromKey(priv); err != nil {
			return nil, fmt.Errorf("vbmc: SSH console host key: %w", err)
		}
	}
	cfg := &ssh.ServerConfig{
		MaxAuthTries: sshMaxAuthTries,
		PasswordCallback: func(c ssh.ConnMetadata, pw []byte) (*ssh.Permissions, error) {
			uok := subtle.ConstantTimeCompare([]byte(c.User()), []byte(b.cfg.Username)) == 1
			pok := subtle.ConstantTimeCompare(pw, []byte(b.cfg.Password)) == 1
			if uok && pok {
				return nil, nil
			}
			b.log.Warn("vbmc SSH console login refused", "user", c.User(), "remote", c.RemoteAddr().String())
			return nil, errors.New("wrong username or password")
		},
		ServerVersion: "SSH-2.0-vBMC",
	}
	cfg.AddHostKey(key)
	addr := opts.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("vbmc: SSH console: listen on %s: %w", addr, err)
	}
	s := &SSHConsole{Addr: ln.Addr().String(), HostKey: key.PublicKey(), ln: ln, b: b, sys: sys, cfg: cfg, conns: map[net.Conn]bool{}}
	port := ln.Addr().(*net.TCPAddr).Port
	b.mu.Lock()
	sys.sshConsolePort = port
	b.mu.Unlock()
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Close stops the listener and ends every session.
func (s *SSHConsole) Close() error {
	s.mu.Lock()
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	err := s.ln.Close()
	s.wg.Wait()
	s.b.mu.Lock()
	s.sys.sshConsolePort = 0
	s.b.mu.Unlock()
	return err
}

func (s *SSHConsole) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed || len(s.conns) >= sshMaxConns {
			s.mu.Unlock()
			c.Close()
			continue
		}
		s.conns[c] = true
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.serveConn(c)
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
			c.Close()
		}()
	}
}

func (s *SSHConsole) serveConn(c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(sshHandshakeTime))
	conn, chans, reqs, err := ssh.NewServerConn(c, s.cfg)
	if err != nil {
		return
	}
	defer conn.Close()
	_ = c.SetDeadline(time.Time{})
	s.b.log.Info("vbmc SSH console login", "user", conn.User(), "system", s.sys.id)
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "only session channels")
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			return
		}
		go s.session(ch, creqs)
	}
}

// session serves one SSH session: a pty is accepted (and ignored, the
// serial port is the terminal), "shell" gives the prompt, "exec" runs one
// command.
func (s *SSHConsole) session(ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer ch.Close()
	for req := range reqs {
		switch req.Type {
		case "pty-req", "env", "window-change":
			_ = req.Reply(req.Type != "env", nil)
		case "shell":
			_ = req.Reply(true, nil)
			go ssh.DiscardRequests(reqs)
			s.prompt(ch, bufio.NewReaderSize(ch, sshMaxLine))
			exit(ch, 0)
			return
		case "exec":
			var p struct{ Command string }
			if ssh.Unmarshal(req.Payload, &p) != nil {
				_ = req.Reply(false, nil)
				return
			}
			_ = req.Reply(true, nil)
			go ssh.DiscardRequests(reqs)
			status := 0
			if !s.run(ch, bufio.NewReaderSize(ch, sshMaxLine), p.Command) {
				status = 1
			}
			exit(ch, status)
			return
		default:
			_ = req.Reply(false, nil)
		}
	}
}

func exit(ch ssh.Channel, status int) {
	_, _ = ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{uint32(status)}))
}

func (s *SSHConsole) prompt(ch ssh.Channel, in *bufio.Reader) {
	for {
		if _, err := io.WriteString(ch, consolePrompt); err != nil {
			return
		}
		line, err := readLine(ch, in)
		if err != nil {
			return
		}
		switch line = strings.TrimSpace(line); line {
		case "":
		case "exit", "logout", "quit":
			return
		default:
			s.run(ch, in, line)
		}
	}
}

// readLine reads a command, echoing it (the client's pty is raw).
func readLine(ch ssh.Channel, in *bufio.Reader) (string, error) {
	var b []byte
	for {
		c, err := in.ReadByte()
		if err != nil {
			return "", err
		}
		switch c {
		case '\r', '\n':
			// A CR LF pair ends one line: the LF then ends an empty one,
			// which the prompt skips.
			_, _ = io.WriteString(ch, "\r\n")
			return string(b), nil
		case 0x7f, 0x08:
			if len(b) > 0 {
				b = b[:len(b)-1]
				_, _ = io.WriteString(ch, "\b \b")
			}
		default:
			if len(b) >= sshMaxLine {
				return "", fmt.Errorf("command line longer than %d bytes", sshMaxLine)
			}
			b = append(b, c)
			_, _ = ch.Write([]byte{c})
		}
	}
}

// run runs one command; false if it is unknown or refused.
func (s *SSHConsole) run(ch ssh.Channel, in *bufio.Reader, cmd string) bool {
	var escape string
	switch strings.Join(strings.Fields(cmd), " ") {
	case ConsoleCommandIDRAC:
		escape = ConsoleEscapeIDRAC
	case ConsoleCommandILO:
		escape = ConsoleEscapeILO
	default:
		fmt.Fprintf(ch, "unknown command %q: %q (iDRAC) or %q (iLO) attaches to the serial console, exit logs out\r\n", cmd, ConsoleCommandIDRAC, ConsoleCommandILO)
		return false
	}
	s.mu.Lock()
	if s.busy {
		s.mu.Unlock()
		fmt.Fprintf(ch, "the serial console is in use by another session; try again when it is left\r\n")
		return false
	}
	s.busy = true
	s.mu.Unlock()
	defer func() { s.mu.Lock(); s.busy = false; s.mu.Unlock() }()
	fmt.Fprintf(ch, "Connected to the serial console of system %s. To leave, type %s.\r\n", s.sys.id, escapeName(escape))
	s.attach(ch, in, escape)
	return true
}

func escapeName(e string) string {
	if e == ConsoleEscapeIDRAC {
		return `Ctrl+\`
	}
	return `ESC (`
}

// attach relays the session to the serial socket until the escape or the
// session's end, reconnecting across power cycles.
func (s *SSHConsole) attach(ch ssh.Channel, in *bufio.Reader, escape string) {
	sock := s.sys.machine.(SerialConsole).SerialSocket()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var cur net.Conn
	go func() {
		for ctx.Err() == nil {
			var d net.Dialer
			c, err := d.DialContext(ctx, "unix", sock)
			if err != nil {
				select {
				case <-ctx.Done():
				case <-time.After(300 * time.Millisecond):
				}
				continue
			}
			mu.Lock()
			cur = c
			mu.Unlock()
			_, _ = io.Copy(ch, c)
			mu.Lock()
			cur = nil
			mu.Unlock()
			c.Close()
		}
	}()
	defer func() {
		mu.Lock()
		if cur != nil {
			cur.Close()
		}
		mu.Unlock()
	}()
	buf := make([]byte, 512)
	var pend []byte // the bytes read so far of a possible escape
	for {
		n, err := in.Read(buf)
		if err != nil {
			return
		}
		var out []byte
		for _, c := range buf[:n] {
			pend = append(pend, c)
			if strings.HasPrefix(escape, string(pend)) {
				if len(pend) == len(escape) {
					s.write(&mu, &cur, out)
					fmt.Fprintf(ch, "\r\nLeft the serial console.\r\n")
					return
				}
				continue
			}
			if c == escape[0] {
				out, pend = append(out, pend[:len(pend)-1]...), pend[len(pend)-1:]
			} else {
				out, pend = append(out, pend...), pend[:0]
			}
		}
		s.write(&mu, &cur, out)
	}
}

// write types p at the serial port; typing while the machine is off is
// lost, as on a real serial line.
func (s *SSHConsole) write(mu *sync.Mutex, cur *net.Conn, p []byte) {
	if len(p) == 0 {
		return
	}
	mu.Lock()
	c := *cur
	mu.Unlock()
	if c != nil {
		_, _ = c.Write(p)
	}
}

// sshConsoleResource is the Manager's SerialConsole (Manager v1_10_0).
func sshConsoleResource(port int) map[string]any {
	if port == 0 {
		return map[string]any{"ServiceEnabled": false, "MaxConcurrentSessions": 0, "ConnectTypesSupported": []any{}}
	}
	return map[string]any{
		"ServiceEnabled":        true,
		"MaxConcurrentSessions": 1,
		"ConnectTypesSupported": []any{"SSH"},
		"SSH": map[string]any{
			"ServiceEnabled":        true,
			"Port":                  port,
			"SharedWithManagerCLI":  true,
			"ConsoleEntryCommand":   ConsoleCommandIDRAC,
			"HotKeySequenceDisplay": `Press Ctrl+\ to leave the console`,
		},
	}
}
