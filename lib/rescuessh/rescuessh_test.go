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
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/bmedge/bmedge/lib/shacrypt"
	"github.com/bmedge/bmedge/lib/waitfor"
	"github.com/bmedge/bmedge/protocol"
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
	return sshLoginFrom(t, s, "127.0.0.1", user, password, command)
}

// sshLoginFrom is sshLogin from the loopback address from.
func sshLoginFrom(t *testing.T, s *Server, from, user, password, command string) (string, error) {
	t.Helper()
	_, port, _ := net.SplitHostPort(s.Addr().String())
	args := []string{"-p", password, "ssh", "-F", "/dev/null", "-b", from, "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
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

// TestFailedTriesLimited: once a source's failure budget is spent, even
// the right password is refused from it until it refills; another source
// and the console (Check) have budgets of their own, and the console's
// spent budget leaves SSH alone.
func TestFailedTriesLimited(t *testing.T) {
	needTools(t, "ssh", "sshpass")
	const pw = "Rescue-Pa55-limit"
	s, logs := start(t, pw, Config{FailBurst: 2, FailEvery: time.Hour})
	for range 2 {
		if _, err := sshLoginFrom(t, s, "127.0.0.2", "rescue", "wrong", "true"); err == nil {
			t.Fatal("a wrong password logged in")
		}
	}
	if out, err := sshLoginFrom(t, s, "127.0.0.2", "rescue", pw, "in"); err == nil {
		t.Fatalf("the right password was checked with the source's failure budget spent: %q", out)
	}
	if out, err := sshLoginFrom(t, s, "127.0.0.3", "rescue", pw, "in"); err != nil || !strings.Contains(out, "ran: in") {
		t.Fatalf("another source was refused for 127.0.0.2's failures: %q %v", out, err)
	}
	if err := s.Check("rescue", pw); err != nil {
		t.Fatalf("the console was refused for 127.0.0.2's failures: %v", err)
	}
	for range 2 {
		if err := s.Check("rescue", "wrong-too"); err == nil {
			t.Fatal("Check took a wrong password")
		}
	}
	if err := s.Check("rescue", pw); err == nil {
		t.Fatal("Check took the right password with the console's failure budget spent")
	}
	if out, err := sshLoginFrom(t, s, "127.0.0.3", "rescue", pw, "in"); err != nil || !strings.Contains(out, "ran: in") {
		t.Fatalf("SSH was refused for the console's failures: %q %v", out, err)
	}
	if !strings.Contains(logs.String(), "too many failed tries") {
		t.Fatalf("the spent budget is not logged:\n%s", logs)
	}
	st := s.Stats()
	if st[RefusedLoginFailed] != 4 || st[RefusedLoginBudget] != 2 {
		t.Fatalf("stats %v; want 4 failed and 2 refused unchecked", st)
	}
}

// TestStrangersLeaveRoom (issue 30, acceptance 2): 8 idle sockets from
// one address and 4 from four others, and 3 guessers (x/crypto/ssh
// clients) spending their failure budgets, do not keep the operator out:
// OpenSSH's client with the right password logs in from another address
// while they hold on. The refusals are counted by kind.
func TestStrangersLeaveRoom(t *testing.T) {
	needTools(t, "ssh", "sshpass")
	const pw = "Rescue-Pa55-room"
	s, _ := start(t, pw, Config{FailBurst: 3, FailEvery: time.Hour, FailDelay: 50 * time.Millisecond})
	addr := s.Addr().String()
	var idle []net.Conn
	dial := func(from string) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
		if c, err := d.Dial("tcp", addr); err == nil {
			idle = append(idle, c)
		}
	}
	for range 8 {
		dial("127.0.0.50")
	}
	for i := range 4 {
		dial(fmt.Sprintf("127.0.0.%d", 51+i))
	}
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	// The guessers: each tries wrong passwords until it is refused
	// unchecked, and goes on trying while the operator logs in.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			from := &net.TCPAddr{IP: net.ParseIP(fmt.Sprintf("127.0.0.%d", 60+i))}
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				d := net.Dialer{LocalAddr: from, Timeout: 5 * time.Second}
				c, err := d.Dial("tcp", addr)
				if err != nil {
					continue
				}
				cfg := &ssh.ClientConfig{User: "rescue", Auth: []ssh.AuthMethod{ssh.Password(fmt.Sprintf("guess-%d", n))},
					HostKeyCallback: ssh.InsecureIgnoreHostKey(), Timeout: 10 * time.Second}
				if sc, _, _, err := ssh.NewClientConn(c, addr, cfg); err == nil {
					sc.Close()
				}
				c.Close()
			}
		}()
	}
	// Let the guessers spend their budgets before the operator comes.
	if !waitfor.Until(30*time.Second, func() bool { return s.Stats()[RefusedLoginBudget] >= 3 }) {
		t.Fatalf("the guessers never spent their budgets: %v", s.Stats())
	}
	out, err := sshLoginFrom(t, s, "127.0.0.1", "rescue", pw, "operator")
	close(stop)
	wg.Wait()
	if err != nil || !strings.Contains(out, "ran: operator") {
		t.Fatalf("the operator was kept out by 12 idle sockets and 3 guessers: %q %v (stats %v)", out, err, s.Stats())
	}
	st := s.Stats()
	t.Logf("refusals: %v", st)
	if st["pending-per-source"] < 6 || st[RefusedLoginFailed] < 9 || st[RefusedLoginBudget] < 3 {
		t.Fatalf("stats %v: want 6 refused over the pending share of 127.0.0.50, 9 failed and 3 unchecked tries", st)
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

// TestStatsKindsAreTheContracts: every kind Stats counts is one a
// heartbeat may carry (protocol.RescueRefusalKinds), or the ramdisk's
// heartbeats would be refused.
func TestStatsKindsAreTheContracts(t *testing.T) {
	s, _ := start(t, "Rescue-Pa55-kinds", Config{})
	st := s.Stats()
	if len(st) == 0 {
		t.Fatal("no kinds counted")
	}
	for k := range st {
		if !slices.Contains(protocol.RescueRefusalKinds, k) {
			t.Errorf("Stats counts kind %q, which protocol.RescueRefusalKinds lacks", k)
		}
	}
}
