package rescue

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/bmedge/bmedge/lib/shacrypt"
)

func needTools(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("BM_REQUIRE_ALL") == "1" {
				t.Fatalf("%s is missing (scripts/install-test-deps.sh installs it): %v", tool, err)
			}
			t.Skipf("%s is missing; scripts/install-test-deps.sh installs it", tool)
		}
	}
}

func start(t *testing.T, password string, cfg Config) (*Server, *bytes.Buffer) {
	t.Helper()
	h, err := shacrypt.Hash(password)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	cfg.Hash, cfg.Listen = h, "127.0.0.1:0"
	cfg.Log = slog.New(slog.NewTextHandler(&syncWriter{w: &logs}, nil))
	if cfg.FailDelay == 0 {
		cfg.FailDelay = time.Millisecond
	}
	s, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, &logs
}

type syncWriter struct {
	w  io.Writer
	mu chanMutex
}

type chanMutex struct{ c chan struct{} }

func (s *syncWriter) Write(p []byte) (int, error) {
	if s.mu.c == nil {
		s.mu.c = make(chan struct{}, 1)
	}
	s.mu.c <- struct{}{}
	defer func() { <-s.mu.c }()
	return s.w.Write(p)
}

func portOf(s *Server) string {
	_, p, _ := strings.Cut(s.Addr().String(), "127.0.0.1:")
	return p
}

func sshLogin(t *testing.T, s *Server, user, password string, command string) (string, error) {
	t.Helper()
	args := []string{"-p", password, "ssh", "-F", "/dev/null", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
		"-o", "PreferredAuthentications=password", "-o", "PubkeyAuthentication=no", "-o", "NumberOfPasswordPrompts=1",
		"-o", "ConnectTimeout=10", "-o", "LogLevel=ERROR", "-p", portOf(s), user + "@127.0.0.1", command}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "sshpass", args...).CombinedOutput()
	return string(out), err
}

// TestSSHLogin: OpenSSH's client logs in as rescue with the password and
// runs a command (its output and exit status come back); a wrong
// password and another user are refused; neither password is logged.
func TestSSHLogin(t *testing.T) {
	needTools(t, "ssh", "sshpass")
	const pw = "Rescue-Pa55-unit"
	s, logs := start(t, pw, Config{Shell: "/bin/sh"})
	out, err := sshLogin(t, s, "rescue", pw, "echo hello-from-$(id -u); exit 3")
	if !strings.Contains(out, "hello-from-") {
		t.Fatalf("login with the password: %v %q", err, out)
	}
	var ee *exec.ExitError
	if !errorsAs(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("exit status: %v, want 3", err)
	}
	for _, c := range []struct{ user, pw string }{{"rescue", pw + "x"}, {"root", pw}, {"rescue", ""}} {
		out, err := sshLogin(t, s, c.user, c.pw, "echo in")
		if err == nil || strings.Contains(out, "in\n") {
			t.Fatalf("%s with a wrong password logged in: %q", c.user, out)
		}
	}
	if strings.Contains(logs.String(), pw) {
		t.Fatalf("the log holds the password:\n%s", logs)
	}
	if !strings.Contains(logs.String(), "rescue login refused") {
		t.Fatalf("refusals are not logged:\n%s", logs)
	}
}

func errorsAs(err error, target **exec.ExitError) bool {
	e, ok := err.(*exec.ExitError)
	if ok {
		*target = e
	}
	return ok
}

// TestConsoleLogin: the serial console's prompt refuses an empty user,
// a wrong password and another user, and accepts rescue with the
// password, turning the echo off while the password is typed.
func TestConsoleLogin(t *testing.T) {
	const pw = "Rescue-Pa55-console"
	s, logs := start(t, pw, Config{})
	for _, c := range []struct {
		in   string
		want bool
	}{{"\n", false}, {"rescue\nnope\n", false}, {"root\n" + pw + "\n", false}, {"rescue\n" + pw + "\r", true}, {"rescue\n" + pw, false}} {
		var out bytes.Buffer
		var echoes []bool
		rw := struct {
			io.Reader
			io.Writer
		}{strings.NewReader(c.in), &out}
		got := s.consoleLogin(rw, func(on bool) { echoes = append(echoes, on) })
		if got != c.want {
			t.Errorf("input %q: login %v, want %v (said %q)", c.in, got, c.want, out.String())
		}
		if !strings.Contains(out.String(), "rescue login: ") {
			t.Errorf("input %q: no prompt: %q", c.in, out.String())
		}
		if strings.Count(c.in, "\n")+strings.Count(c.in, "\r") >= 2 && (len(echoes) != 3 || echoes[1]) {
			t.Errorf("input %q: echo %v, want on, off for the password, on", c.in, echoes)
		}
		if !c.want && strings.Count(c.in, "\n") == 2 && !strings.Contains(out.String(), "Login incorrect") {
			t.Errorf("input %q: %q does not say the login is refused", c.in, out.String())
		}
	}
	if strings.Contains(logs.String(), pw) {
		t.Fatalf("the log holds the password:\n%s", logs)
	}
}

func TestConsoleDevice(t *testing.T) {
	for in, want := range map[string]string{
		"console=tty0 console=ttyS0,115200 panic=1": "/dev/ttyS0",
		"quiet":           "/dev/console",
		"console=../../x": "/dev/console",
	} {
		if got := ConsoleDevice(in); got != want {
			t.Errorf("ConsoleDevice(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestPtySession: a session that asks for a terminal runs the shell on
// a pty (the shell sees a terminal, its TERM is the client's) and its
// exit status comes back.
func TestPtySession(t *testing.T) {
	if _, err := os.Stat("/dev/ptmx"); err != nil {
		t.Skip("no /dev/ptmx here")
	}
	const pw = "Rescue-Pa55-pty"
	s, _ := start(t, pw, Config{Shell: "/bin/sh"})
	c, err := ssh.Dial("tcp", s.Addr().String(), &ssh.ClientConfig{User: User, Auth: []ssh.AuthMethod{ssh.Password(pw)},
		HostKeyCallback: ssh.FixedHostKey(s.HostKey()), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	if err := sess.RequestPty("xterm-test", 24, 80, ssh.TerminalModes{}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	sess.Stdout = &out
	sess.Stdin = strings.NewReader("test -t 0 && echo tty-$TERM; exit 5\n")
	if err := sess.Shell(); err != nil {
		t.Fatal(err)
	}
	var ee *ssh.ExitError
	if err := sess.Wait(); !errors.As(err, &ee) || ee.ExitStatus() != 5 {
		t.Errorf("shell on a pty ended with %v, want exit status 5", err)
	}
	if !strings.Contains(out.String(), "tty-xterm-test") {
		t.Errorf("the shell did not run on a terminal with the client's TERM: %q", out.String())
	}
}
