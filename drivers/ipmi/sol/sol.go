// Package sol is the IPMI v2.0 Serial-over-LAN client: the BMC side of a
// node's serial console for the ipmi hardware type.
//
// The SOL stream itself is Debian's ipmitool ("ipmitool -I lanplus -H
// HOST -p PORT -U USER -E sol activate", the password in IPMI_PASSWORD,
// never in argv) under a pty, as Ironic's ipmitool-socat console runs it.
// go-ipmi (v0.9.1) has SOL too and its session is used here to check the
// login first (its errors say whether the user or the password is wrong),
// but its stream ends when the BMC leaves a poll unanswered, which
// ipmi_sim does whenever the node prints nothing for a few seconds; and
// it cannot resume on the same session reliably. ipmitool's stream holds.
//
// Bounds: one SOL session per BMC at a time (the BMC's rule: a second is
// refused as busy); output waits in the pty (a few KB) when nobody reads,
// then ipmitool stops acknowledging and the BMC holds or drops output as
// its SOL buffer allows. Close types ipmitool's escape "~." (which
// deactivates the payload) and kills ipmitool if it has not ended within
// 5 s. A '~' typed at the start of a line is sent doubled, so that typed
// data never reaches ipmitool's escape commands.
package sol

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/bougou/go-ipmi/pkg/client"
	"github.com/bougou/go-ipmi/pkg/types"
	"github.com/creack/pty"
)

// Errors a caller can test with errors.Is.
var (
	// ErrRefused: the BMC refused the login (user, password or privilege).
	ErrRefused = errors.New("IPMI login refused")
	// ErrSOLUnavailable: the BMC refused to activate SOL (disabled, busy,
	// not supported).
	ErrSOLUnavailable = errors.New("SOL unavailable")
)

// Option changes Dial.
type Option func(*options)

type options struct{ cipher int }

// WithCipherSuite sets the RMCP+ cipher suite (default 3, which nearly
// every BMC and ipmi_sim offer; 17 on newer BMCs).
func WithCipherSuite(id int) Option { return func(o *options) { o.cipher = id } }

// Dial opens an IPMI v2.0 (RMCP+) session to the BMC at addr (host or
// host:port, UDP 623 by default) as username and activates SOL. Reads give
// the node's serial output, writes are typed at it; Close deactivates the
// payload. ctx bounds the dial only.
func Dial(ctx context.Context, addr, username, password string, opts ...Option) (io.ReadWriteCloser, error) {
	o := options{cipher: 3}
	for _, f := range opts {
		f(&o)
	}
	host, port := addr, 623
	if h, p, err := net.SplitHostPort(addr); err == nil {
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 || n > 65535 {
			return nil, fmt.Errorf("IPMI SOL: bad port in BMC address %q", addr)
		}
		host, port = h, n
	}
	if host == "" || strings.HasPrefix(host, "-") {
		return nil, fmt.Errorf("IPMI SOL: bad BMC address %q", addr)
	}
	who := "IPMI BMC " + addr
	tool, err := exec.LookPath("ipmitool")
	if err != nil {
		return nil, fmt.Errorf("IPMI SOL needs ipmitool (Debian package ipmitool): %w", err)
	}
	if err := checkLogin(ctx, who, host, port, username, password, o.cipher); err != nil {
		return nil, err
	}
	cmd := exec.Command(tool, "-I", "lanplus", "-C", strconv.Itoa(o.cipher), "-H", host, "-p", strconv.Itoa(port),
		"-U", username, "-E", "-N", "2", "-R", "3", "sol", "activate")
	cmd.Env = []string{"IPMI_PASSWORD=" + password, "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "TERM=vt100"}
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 24, Cols: 80})
	if err != nil {
		return nil, fmt.Errorf("%s: start ipmitool: %w", who, err)
	}
	s := &session{cmd: cmd, f: f, who: who, exited: make(chan struct{}), lineStart: true}
	go func() { _ = cmd.Wait(); close(s.exited) }()
	// Until ipmitool says the session is up, its output is its own.
	var seen bytes.Buffer
	got := make(chan error, 1)
	go func() {
		b := make([]byte, 1024)
		for {
			n, err := f.Read(b)
			seen.Write(b[:n])
			if i := bytes.Index(seen.Bytes(), []byte(operational)); i >= 0 {
				rest := seen.Bytes()[i+len(operational):]
				if j := bytes.IndexByte(rest, '\n'); j >= 0 {
					s.pending = append([]byte(nil), rest[j+1:]...)
					got <- nil
					return
				}
			}
			if err != nil || seen.Len() > 64<<10 {
				got <- errors.New("ipmitool ended")
				return
			}
		}
	}()
	select {
	case err = <-got:
	case <-ctx.Done():
		s.kill() // the reader sees the pty close
		<-got
		err = ctx.Err()
	}
	if err != nil {
		s.kill()
		return nil, activateError(who, username, err, seen.String())
	}
	return s, nil
}

const operational = "[SOL Session operational."

type session struct {
	cmd    *exec.Cmd
	f      *os.File
	who    string
	exited chan struct{}

	rmu     sync.Mutex
	pending []byte // output read with ipmitool's banner

	wmu       sync.Mutex
	lineStart bool

	once, killOnce sync.Once
}

// Read gives the node's serial output.
func (s *session) Read(p []byte) (int, error) {
	s.rmu.Lock()
	if len(s.pending) > 0 {
		n := copy(p, s.pending)
		s.pending = s.pending[n:]
		s.rmu.Unlock()
		return n, nil
	}
	s.rmu.Unlock()
	n, err := s.f.Read(p)
	if err != nil {
		// A pty whose other end closed reads EIO: ipmitool ended.
		return n, io.EOF
	}
	return n, nil
}

// Write types p at the node.
func (s *session) Write(p []byte) (int, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	out := make([]byte, 0, len(p)+4)
	for _, c := range p {
		if c == '~' && s.lineStart {
			out = append(out, '~')
		}
		out = append(out, c)
		s.lineStart = c == '\r' || c == '\n'
	}
	if _, err := s.f.Write(out); err != nil {
		return 0, fmt.Errorf("%s: SOL session ended: %w", s.who, err)
	}
	return len(p), nil
}

// Close leaves with ipmitool's escape "~." (it deactivates the payload).
func (s *session) Close() error {
	s.once.Do(func() {
		s.wmu.Lock()
		_, _ = s.f.Write([]byte("\r~."))
		s.wmu.Unlock()
		select {
		case <-s.exited:
		case <-time.After(5 * time.Second):
			s.kill()
		}
		_ = s.f.Close()
	})
	return nil
}

func (s *session) kill() {
	s.killOnce.Do(func() {
		_ = s.cmd.Process.Signal(syscall.SIGKILL)
		<-s.exited
		_ = s.f.Close()
	})
}

// checkLogin opens and closes a session with go-ipmi, whose errors tell a
// wrong user from a wrong password (ipmitool says only that the session
// could not be established).
func checkLogin(ctx context.Context, who, host string, port int, user, password string, cipher int) error {
	h := host
	if strings.Contains(h, ":") {
		h = "[" + h + "]"
	}
	c, err := client.NewClient(h, port, user, password)
	if err != nil {
		return fmt.Errorf("%s: %w", who, err)
	}
	c.WithInterface(client.InterfaceLanplus)
	c.WithCipherSuiteID(types.CipherSuiteID(cipher))
	c.WithMaxPrivilegeLevel(types.PrivilegeLevelAdministrator)
	c.WithTimeout(2 * time.Second)
	c.WithRetry(2)
	if err := c.Connect(ctx); err != nil {
		closeNow(c)
		return loginError(who, user, err)
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_ = c.Close(cctx)
	return nil
}

func closeNow(c *client.Client) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = c.Close(ctx)
}

var (
	rmcpStatusText     = regexp.MustCompile(`RMCP\+ status 0x([0-9a-fA-F]{1,2})\b`)
	completionCodeText = regexp.MustCompile(`cc: 0x([0-9a-fA-F]{1,2})`)
)

// loginError explains a failed session setup. go-ipmi v0.9.1 joins the
// per-cipher-suite failures with %v, so the cause is read from the text.
func loginError(who, user string, err error) error {
	msg := err.Error()
	var rs *types.RmcpStatusError
	code := -1
	if errors.As(err, &rs) {
		code = int(rs.StatusCode())
	} else if m := rmcpStatusText.FindStringSubmatch(msg); m != nil {
		n, _ := strconv.ParseUint(m[1], 16, 8)
		code = int(n)
	}
	switch {
	case errors.Is(err, client.ErrRAKPAuthentication) || strings.Contains(msg, client.ErrRAKPAuthentication.Error()):
		return fmt.Errorf("%s refused user %s: wrong password (RAKP message 2 does not match); correct ipmi_password: %w", who, user, ErrRefused)
	case code == int(types.RmcpStatusCodeUnauthorizedName) || code == int(types.RmcpStatusCodeInvalidNameLength):
		return fmt.Errorf("%s refused user %s: the BMC has no such user; correct ipmi_username: %w", who, user, ErrRefused)
	case code == int(types.RmcpStatusCodeInvalidRole) || code == int(types.RmcpStatusCodeUnauthorizedRoleOfPriLevel):
		return fmt.Errorf("%s refused user %s at the privilege level asked for (administrator); give the user that privilege on the BMC: %w", who, user, ErrRefused)
	case code >= 0:
		return fmt.Errorf("%s refused the session for user %s (RMCP+ status %#02x): %w", who, user, code, ErrRefused)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		return fmt.Errorf("%s: no IPMI session within the time allowed (is the address right and UDP reachable?): %v", who, err)
	}
	return fmt.Errorf("%s: cannot open an IPMI v2.0 session for the serial console (check ipmi_address/ipmi_port and that IPMI over LAN is enabled): %v", who, err)
}

var ipmitoolError = regexp.MustCompile(`(?m)^(Error|Info)[^\r\n]*`)

// activateError explains why ipmitool did not start SOL, from its words.
func activateError(who, user string, err error, out string) error {
	low := strings.ToLower(out)
	switch {
	case strings.Contains(low, "already active"):
		return fmt.Errorf("%s: SOL payload already active on another session (someone else holds the console, e.g. another ipmitool sol activate); deactivate it (ipmitool sol deactivate) or wait for that session to end: %w", who, ErrSOLUnavailable)
	case strings.Contains(low, "activation limit"):
		return fmt.Errorf("%s: SOL payload activation limit reached; deactivate another SOL session (ipmitool sol deactivate): %w", who, ErrSOLUnavailable)
	case strings.Contains(low, "disabled"):
		return fmt.Errorf("%s: SOL is disabled on the BMC; enable it (ipmitool sol set enabled true 1, and ipmitool sol payload enable 1 USERID for user %s): %w", who, user, ErrSOLUnavailable)
	case strings.Contains(low, "insufficient privilege"):
		return fmt.Errorf("%s: user %s may not activate SOL (insufficient privilege); give the user SOL payload access and the privilege the BMC's SOL configuration asks (ipmitool sol set privilege-level): %w", who, user, ErrSOLUnavailable)
	case strings.Contains(low, "encryption"):
		return fmt.Errorf("%s: the BMC refused SOL's encryption setting; allow encrypted SOL on the BMC: %w", who, ErrSOLUnavailable)
	}
	why := strings.Join(ipmitoolError.FindAllString(out, 3), "; ")
	if why == "" {
		why = strings.TrimSpace(out)
		if len(why) > 300 {
			why = why[len(why)-300:]
		}
	}
	return fmt.Errorf("%s: SOL activation failed (%v): ipmitool said: %s: %w", who, err, why, ErrSOLUnavailable)
}
