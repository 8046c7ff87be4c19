package sim

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/bmedge/bmedge/lib/shacrypt"
	"github.com/bmedge/bmedge/protocol"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

func needSSH(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"ssh", "sshpass"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("BM_REQUIRE_ALL") == "1" {
				t.Fatalf("%s is missing (scripts/install-test-deps.sh installs it): %v", tool, err)
			}
			t.Skipf("%s is missing; scripts/install-test-deps.sh installs it", tool)
		}
	}
}

// sshRun logs in to addr with OpenSSH's client (through sshpass) and
// runs command.
func sshRun(t *testing.T, addr, user, password, command string) (string, int) {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "sshpass", "-p", password, "ssh", "-F", "/dev/null", "-o", "StrictHostKeyChecking=no",
		"-o", "UserKnownHostsFile=/dev/null", "-o", "PreferredAuthentications=password", "-o", "PubkeyAuthentication=no",
		"-o", "NumberOfPasswordPrompts=1", "-o", "ConnectTimeout=10", "-o", "LogLevel=ERROR", "-p", port, user+"@"+host, command).CombinedOutput()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	case err != nil:
		t.Fatalf("sshpass: %v", err)
	}
	return string(out), 0
}

func finalize(r *simRunner, args map[string]any) (map[string]any, error) {
	return r.Run(context.Background(), protocol.Step{Interface: "rescue", Step: "finalize_rescue", Args: args}, func(float64, string) {})
}

// TestSimulatedRescueLogin: a simulated node's finalize_rescue takes only
// the hashed password, starts an SSH login on loopback and says where in
// its summary; OpenSSH's client logs in as rescue with the password and
// runs built-in commands (output and exit status back), on a terminal
// too; a wrong password and root are refused; the same hash again keeps
// the login, another replaces it; a ramdisk of an earlier boot starts
// none; power-off, forget and the agent's stop close it; the password is
// in no log.
func TestSimulatedRescueLogin(t *testing.T) {
	needSSH(t)
	const pw = "Sim-Rescue-Pa55"
	hash, err := shacrypt.Hash(pw)
	if err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := New(Config{Site: "s1", Log: slog.New(slog.NewTextHandler(logs, nil)), Opts: Options{Nodes: 3, Heartbeat: time.Hour},
		ResendInterval: time.Hour, Transport: &hellos{n: map[string]int{}}, Context: func() context.Context { return ctx }})
	t.Cleanup(s.StopAll)
	s.OnPower("n1", protocol.PowerOn, protocol.BootPXE)
	r := s.Runner("n1", Options{}).(*simRunner)

	if _, err := finalize(r, map[string]any{"rescue_password": pw}); err == nil || !strings.Contains(err.Error(), "hashed=true") {
		t.Fatalf("finalize_rescue with a clear password: %v, want it refused", err)
	}
	if s.RescueAddr("n1") != "" {
		t.Fatal("a refused finalize_rescue left a login")
	}
	res, err := finalize(r, map[string]any{"rescue_password": hash, "hashed": true})
	if err != nil {
		t.Fatal(err)
	}
	addr := s.RescueAddr("n1")
	sum, _ := res["summary"].(string)
	m := regexp.MustCompile(`ssh -p (\d+) rescue@(127\.0\.0\.\d+) \(host key (SHA256:\S+)\)`).FindStringSubmatch(sum)
	if m == nil || net.JoinHostPort(m[2], m[1]) != addr || res["ssh_host_key_fingerprint"] != m[3] {
		t.Fatalf("summary %q does not say where to log in (%s): %v", sum, addr, res)
	}
	out, code := sshRun(t, addr, "rescue", pw, "hostname; uname -a && cat /proc/cmdline /proc/meminfo; lsblk; exit 3")
	for _, want := range []string{"n1\n", "Linux n1 6.1.0-bmedge-simulated", "bm.node=n1", "MemTotal:", "sda"} {
		if !strings.Contains(out, want) {
			t.Errorf("session output lacks %q:\n%s", want, out)
		}
	}
	if code != 3 {
		t.Errorf("exit status %d, want 3", code)
	}
	if out, code := sshRun(t, addr, "rescue", pw, "sh -c id"); code != 127 || !strings.Contains(out, "not found") {
		t.Errorf("a command that is not built in: exit %d %q, want 127 and not found", code, out)
	}
	for _, c := range []struct{ user, pw string }{{"rescue", pw + "x"}, {"root", pw}} {
		if out, code := sshRun(t, addr, c.user, c.pw, "echo in"); code == 0 || strings.Contains(out, "in\n") {
			t.Errorf("%s with password %q logged in: %q", c.user, c.pw, out)
		}
	}

	// A terminal session: the prompt, echo, a command, exit's status.
	c, err := ssh.Dial("tcp", addr, &ssh.ClientConfig{User: "rescue", Auth: []ssh.AuthMethod{ssh.Password(pw)},
		HostKeyCallback: ssh.InsecureIgnoreHostKey(), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	if err := sess.RequestPty("xterm", 24, 80, ssh.TerminalModes{}); err != nil {
		t.Fatal(err)
	}
	var term bytes.Buffer
	sess.Stdout = &term
	sess.Stdin = strings.NewReader("echo hello-tty\recho gone\x7f\x7f\x7f\x7fthere\rexit 4\r")
	if err := sess.Shell(); err != nil {
		t.Fatal(err)
	}
	var ee *ssh.ExitError
	if err := sess.Wait(); !errors.As(err, &ee) || ee.ExitStatus() != 4 {
		t.Errorf("terminal session ended with %v, want exit status 4", err)
	}
	c.Close()
	for _, want := range []string{"root@n1:/# ", "echo hello-tty\r\nhello-tty\r\n", "\r\nthere\r\n"} {
		if !strings.Contains(term.String(), want) {
			t.Errorf("terminal session lacks %q:\n%q", want, term.String())
		}
	}

	// The same hash again keeps the login; another one replaces it.
	if _, err := finalize(r, map[string]any{"rescue_password": hash, "hashed": true}); err != nil || s.RescueAddr("n1") != addr {
		t.Fatalf("finalize_rescue resent: %v, login at %s, want %s kept", err, s.RescueAddr("n1"), addr)
	}
	hash2, _ := shacrypt.Hash(pw + "2")
	if _, err := finalize(r, map[string]any{"rescue_password": hash2, "hashed": true}); err != nil {
		t.Fatal(err)
	}
	if out, code := sshRun(t, s.RescueAddr("n1"), "rescue", pw, "echo in"); code == 0 {
		t.Errorf("the first password still logs in after a new one: %q", out)
	}
	addr = s.RescueAddr("n1")

	// Power-off closes the login; the ramdisk of that boot starts none.
	s.OnPower("n1", protocol.PowerOff, "")
	if s.RescueAddr("n1") != "" {
		t.Fatal("a login is left after power-off")
	}
	if conn, err := net.DialTimeout("tcp", addr, 2*time.Second); err == nil {
		conn.Close()
		t.Fatalf("%s still listens after power-off", addr)
	}
	if _, err := finalize(r, map[string]any{"rescue_password": hash, "hashed": true}); err == nil || s.RescueAddr("n1") != "" {
		t.Fatalf("the ramdisk of a powered-off boot started a login: %v", err)
	}

	// Forget and the agent's stop close the logins of other nodes.
	for _, node := range []string{"n2", "n3"} {
		s.OnPower(node, protocol.PowerOn, protocol.BootPXE)
		if _, err := finalize(s.Runner(node, Options{}).(*simRunner), map[string]any{"rescue_password": hash, "hashed": true}); err != nil {
			t.Fatal(err)
		}
	}
	if s.RescueAddr("n2") == s.RescueAddr("n3") {
		t.Fatalf("two nodes share the login %s", s.RescueAddr("n2"))
	}
	n3 := s.RescueAddr("n3")
	s.Forget("n2")
	s.StopAll()
	if s.RescueAddr("n2") != "" || s.RescueAddr("n3") != "" {
		t.Fatal("forget or stop left a login")
	}
	if conn, err := net.DialTimeout("tcp", n3, 2*time.Second); err == nil {
		conn.Close()
		t.Fatalf("%s still listens after the agent's stop", n3)
	}
	if strings.Contains(logs.String(), pw) {
		t.Fatalf("the log holds the password:\n%s", logs)
	}
	if !strings.Contains(logs.String(), "rescue login refused") {
		t.Errorf("the refused logins are not logged:\n%s", logs)
	}
}
