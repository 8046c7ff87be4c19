package rescuessh

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/bmedge/bmedge/protocol/shacrypt"
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

// testShell answers a command with "ran: COMMAND" and exits with the
// status after "exit " in it; the command "block" runs until release is
// closed, after saying "blocking".
type testShell struct {
	release <-chan struct{}
	started chan<- string
}

func (s *testShell) Pty(string, uint32, uint32) bool { return false }
func (s *testShell) Resize(uint32, uint32)           {}
func (s *testShell) Hangup()                         {}
func (s *testShell) Close()                          {}

func (s *testShell) Start(ch ssh.Channel, isExec bool, command string) (<-chan int, error) {
	if !isExec {
		return nil, errors.New("the test shell runs commands only")
	}
	done := make(chan int, 1)
	go func() {
		if s.started != nil {
			s.started <- command
		}
		if command == "block" {
			fmt.Fprintln(ch, "blocking")
			<-s.release
		}
		fmt.Fprintf(ch, "ran: %s\n", command)
		code := 0
		if _, n, ok := strings.Cut(command, "exit "); ok {
			fmt.Sscan(n, &code)
		}
		done <- code
	}()
	return done, nil
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

func start(t *testing.T, password string, cfg Config) (*Server, *syncBuffer) {
	t.Helper()
	h, err := shacrypt.Hash(password)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	cfg.Hash, cfg.Listen = h, "127.0.0.1:0"
	cfg.Log = slog.New(slog.NewTextHandler(logs, nil))
	if cfg.FailDelay == 0 {
		cfg.FailDelay = time.Millisecond
	}
	if cfg.Shell == nil {
		cfg.Shell = func() Session { return &testShell{} }
	}
	s, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, logs
}

// sshLogin runs OpenSSH's client (through sshpass) against s.
func sshLogin(t *testing.T, s *Server, user, password, command string) (string, error) {
	t.Helper()
	_, port, _ := net.SplitHostPort(s.Addr().String())
	args := []string{"-p", password, "ssh", "-F", "/dev/null", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
		"-o", "PreferredAuthentications=password", "-o", "PubkeyAuthentication=no", "-o", "NumberOfPasswordPrompts=1",
		"-o", "ConnectTimeout=10", "-o", "LogLevel=ERROR", "-p", port, user + "@127.0.0.1", command}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "sshpass", args...).CombinedOutput()
	return string(out), err
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// TestSSHLogin: OpenSSH's client logs in as rescue with the password and
// runs a command (its output and exit status come back); a wrong
// password, another user (root) and an empty password are refused;
// neither password is logged, the refusals are.
func TestSSHLogin(t *testing.T) {
	needTools(t, "ssh", "sshpass")
	const pw = "Rescue-Pa55-proto"
	s, logs := start(t, pw, Config{})
	out, err := sshLogin(t, s, "rescue", pw, "hello; exit 3")
	if !strings.Contains(out, "ran: hello; exit 3") || exitCode(err) != 3 {
		t.Fatalf("login with the password: %v (exit %d) %q, want the command's output and exit 3", err, exitCode(err), out)
	}
	for _, c := range []struct{ user, pw string }{{"rescue", pw + "x"}, {"root", pw}, {"rescue", ""}} {
		out, err := sshLogin(t, s, c.user, c.pw, "in")
		if err == nil || strings.Contains(out, "ran:") {
			t.Fatalf("%s with password %q logged in: %q", c.user, c.pw, out)
		}
	}
	if strings.Contains(logs.String(), pw) {
		t.Fatalf("the log holds the password:\n%s", logs)
	}
	if !strings.Contains(logs.String(), "rescue login refused") {
		t.Fatalf("refusals are not logged:\n%s", logs)
	}
}

// TestFailedTriesLimited: once the failure budget is spent, even the
// right password is refused until it refills, and Check (a console's
// way in) shares the budget.
func TestFailedTriesLimited(t *testing.T) {
	needTools(t, "ssh", "sshpass")
	const pw = "Rescue-Pa55-limit"
	s, logs := start(t, pw, Config{FailBurst: 2, FailEvery: time.Hour})
	if _, err := sshLogin(t, s, "rescue", "wrong", "true"); err == nil {
		t.Fatal("a wrong password logged in")
	}
	if err := s.Check("rescue", "wrong-too"); err == nil {
		t.Fatal("Check took a wrong password")
	}
	if out, err := sshLogin(t, s, "rescue", pw, "in"); err == nil {
		t.Fatalf("the right password was checked with the failure budget spent: %q", out)
	}
	if err := s.Check("rescue", pw); err == nil {
		t.Fatal("Check took the right password with the failure budget spent")
	}
	if !strings.Contains(logs.String(), "too many failed tries") {
		t.Fatalf("the spent budget is not logged:\n%s", logs)
	}
}

// TestSessionBudget: with one session allowed, a second concurrent
// session is refused while the first runs, and a console's session
// (AcquireSession) counts; once the first ends another may run.
func TestSessionBudget(t *testing.T) {
	needTools(t, "ssh", "sshpass")
	const pw = "Rescue-Pa55-budget"
	release := make(chan struct{})
	started := make(chan string, 4)
	s, logs := start(t, pw, Config{MaxSessions: 1, Shell: func() Session { return &testShell{release: release, started: started} }})
	done := make(chan string, 1)
	go func() {
		out, _ := sshLogin(t, s, "rescue", pw, "block")
		done <- out
	}()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the first session never ran")
	}
	if out, err := sshLogin(t, s, "rescue", pw, "second"); err == nil || strings.Contains(out, "ran: second") {
		t.Fatalf("a second session ran beside the first: %q", out)
	}
	if _, ok := s.AcquireSession(); ok {
		t.Fatal("a console session got a place beside the first SSH session")
	}
	close(release)
	if out := <-done; !strings.Contains(out, "ran: block") {
		t.Fatalf("first session: %q", out)
	}
	if !strings.Contains(logs.String(), "too many sessions") {
		t.Fatalf("the refused session is not logged:\n%s", logs)
	}
	rel, ok := s.AcquireSession()
	if !ok {
		t.Fatal("no place for a session once the first ended")
	}
	rel()
}

// TestConnectionBudget: with one connection allowed, a second one is
// closed at once while the first is open; Close ends the first and
// nothing listens after it.
func TestConnectionBudget(t *testing.T) {
	needTools(t, "ssh", "sshpass")
	const pw = "Rescue-Pa55-conns"
	s, logs := start(t, pw, Config{MaxConns: 1})
	first, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	// The first connection has its place once the server's banner comes.
	buf := make([]byte, 64)
	_ = first.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := first.Read(buf); err != nil || !strings.HasPrefix(string(buf[:n]), "SSH-2.0-bmedge-rescue") {
		t.Fatalf("first connection: %q %v", buf[:n], err)
	}
	if out, err := sshLogin(t, s, "rescue", pw, "second"); err == nil || strings.Contains(out, "ran:") {
		t.Fatalf("a second connection was served beside the first: %q", out)
	}
	if !strings.Contains(logs.String(), "too many connections") {
		t.Fatalf("the refused connection is not logged:\n%s", logs)
	}
	addr := s.Addr().String()
	s.Close()
	_ = first.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := first.Read(buf); err == nil {
		t.Fatal("the first connection is still open after Close")
	}
	if c, err := net.DialTimeout("tcp", addr, 2*time.Second); err == nil {
		c.Close()
		t.Fatalf("%s still listens after Close", addr)
	}
}

// TestOnlySessions: forwarding is refused (a Go client asks for a
// direct-tcpip channel), a shell that cannot start ends the session,
// and a hash that is not one is refused at Start.
func TestOnlySessions(t *testing.T) {
	const pw = "Rescue-Pa55-chan"
	s, _ := start(t, pw, Config{})
	c, err := ssh.Dial("tcp", s.Addr().String(), &ssh.ClientConfig{User: User, Auth: []ssh.AuthMethod{ssh.Password(pw)},
		HostKeyCallback: ssh.FixedHostKey(s.HostKey()), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Dial("tcp", "127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), "only session channels") {
		t.Fatalf("port forwarding: %v, want it refused", err)
	}
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	if err := sess.Shell(); err == nil {
		t.Fatal("the test shell has no interactive shell, yet the request was accepted")
	}
	sess.Close()
	if _, err := Start(Config{Hash: "plain", Listen: "127.0.0.1:0", Shell: func() Session { return &testShell{} }}); err == nil {
		t.Fatal("Start took a hash that is not a SHA-crypt hash")
	}
}
