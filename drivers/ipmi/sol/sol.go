// Package sol is the IPMI v2.0 Serial-over-LAN client: the BMC side of a
// node's serial console for the ipmi hardware type.
//
// It is native (go-ipmi's RMCP+ session and SOL stream, no ipmitool
// process): the session is the same library the ipmi driver already uses,
// the password never leaves the process (no argv, no environment of a
// child), and a Close deactivates the payload on the session that
// activated it rather than killing a child and leaving the BMC's payload
// busy until its timeout.
//
// A session asks for administrator privilege (Ironic's default
// ipmi_priv_level; the BMC may grant the user's own level, and SOL needs
// only the level in the BMC's SOL configuration, User by default) with
// cipher suite 17 then 3, and the SOL payload instance 1 is activated with
// encryption and authentication.
// Bounds: one SOL session per BMC at a time (the BMC's rule, not ours);
// output is buffered up to MaxBuffered bytes when nobody reads, then the
// oldest bytes are dropped; a write is sent a byte per SOL packet (go-ipmi
// v0.9.1's stream), so typing is fine and pasting large text is slow.
package sol

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bougou/go-ipmi/pkg/client"
	"github.com/bougou/go-ipmi/pkg/command/transport"
	"github.com/bougou/go-ipmi/pkg/types"
)

// MaxBuffered is how much console output is kept for a reader that is
// behind; older output is dropped.
const MaxBuffered = 1 << 20

// MaxTyped is how much typed input may wait for the BMC; a Write beyond
// it blocks until the BMC took the earlier input.
const MaxTyped = 4096

// Errors a caller can test with errors.Is.
var (
	// ErrRefused: the BMC refused the login (user, password or privilege).
	ErrRefused = errors.New("IPMI login refused")
	// ErrSOLUnavailable: the BMC refused to activate SOL (disabled, busy,
	// not supported).
	ErrSOLUnavailable = errors.New("SOL unavailable")
)

// IPMI v2.0 table 24-2, Activate Payload completion codes.
const (
	ccPayloadActive    = 0x80
	ccPayloadDisabled  = 0x81
	ccActivationLimit  = 0x82
	ccNoEncryption     = 0x83
	ccNeedsEncryption  = 0x84
	ccInsufficientPriv = 0xd4
)

// Dial opens an IPMI v2.0 (RMCP+) session to the BMC at addr (host or
// host:port, UDP 623 by default) as username and activates SOL. Reads give
// the node's serial output, writes are typed at it; Close deactivates the
// payload and closes the session. ctx bounds the dial only.
func Dial(ctx context.Context, addr, username, password string) (io.ReadWriteCloser, error) {
	host, port := addr, 623
	if h, p, err := net.SplitHostPort(addr); err == nil {
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 || n > 65535 {
			return nil, fmt.Errorf("IPMI SOL: bad port in BMC address %q", addr)
		}
		host, port = h, n
	}
	if host == "" {
		return nil, fmt.Errorf("IPMI SOL: empty BMC address %q", addr)
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	who := "IPMI BMC " + addr
	c, err := client.NewClient(host, port, username, password)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", who, err)
	}
	c.WithInterface(client.InterfaceLanplus)
	c.WithCipherSuiteID(types.CipherSuiteID17, types.CipherSuiteID3)
	c.WithMaxPrivilegeLevel(types.PrivilegeLevelAdministrator)
	c.WithTimeout(2 * time.Second)
	c.WithRetry(2)
	if err := c.Connect(ctx); err != nil {
		closeNow(c)
		return nil, loginError(who, username, err)
	}
	req := &transport.ActivatePayloadRequest{
		PayloadType:          types.PayloadTypeSOL,
		PayloadInstance:      1,
		EnableEncryption:     true,
		EnableAuthentication: true,
	}
	if _, err := c.ActivatePayload(ctx, req); err != nil {
		closeNow(c)
		return nil, activateError(who, username, err)
	}
	s := &session{c: c, who: who, done: make(chan struct{})}
	s.cond = sync.NewCond(&s.mu)
	s.gen = 1
	sctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	c.WithTimeout(time.Second).WithRetry(1) // for the stream: quiet BMCs do not answer polls
	go s.run(sctx)
	return s, nil
}

// run keeps the SOL stream going until Close or a lost session.
//
// go-ipmi v0.9.1's stream ends at the first exchange the BMC does not
// answer, and ipmi_sim (like some BMCs) does not answer a poll while the
// node prints nothing. So an unanswered exchange is followed by a check
// of the session (Get Payload Activation Status): while the BMC answers
// and the payload is still active, the stream resumes on the same
// session; output the BMC had not seen acknowledged it sends again.
func (s *session) run(ctx context.Context) {
	defer close(s.done)
	for gen := 1; ; gen++ {
		err := s.c.SOLStream(ctx, &input{s: s, gen: gen}, (*sink)(s), nil)
		if ctx.Err() != nil {
			return
		}
		s.mu.Lock()
		s.gen = gen + 1 // the old stream's reader takes no more input
		s.cond.Broadcast()
		s.mu.Unlock()
		if err == nil {
			err = io.EOF
		}
		if errors.Is(err, io.EOF) || strings.Contains(err.Error(), "deactivation") {
			s.fail(fmt.Errorf("%s: SOL session ended: %w", s.who, err))
			return
		}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		s.c.WithTimeout(3 * time.Second).WithRetry(3)
		st, perr := s.c.GetPayloadActivationStatus(cctx, types.PayloadTypeSOL)
		s.c.WithTimeout(time.Second).WithRetry(1)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if perr != nil {
			s.fail(fmt.Errorf("%s: SOL session lost (the BMC no longer answers: %v) after: %w", s.who, perr, err))
			return
		}
		if !st.Instance01Activated {
			s.fail(fmt.Errorf("%s: the BMC deactivated SOL (another session may have taken it over): %w", s.who, err))
			return
		}
	}
}

// input is one stream's view of what is typed: a byte per Read, so that
// nothing typed is left in a stream's buffer when it ends, and EOF once a
// newer stream took over.
type input struct {
	s   *session
	gen int
}

func (in *input) Read(p []byte) (int, error) {
	s := in.s
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.typed) == 0 && !s.closed && s.gen == in.gen {
		s.cond.Wait()
	}
	if s.closed || s.gen != in.gen {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	p[0] = s.typed[0]
	s.typed = s.typed[1:]
	s.cond.Broadcast()
	return 1, nil
}

type session struct {
	gen    int    // the running stream's generation
	typed  []byte // written, not yet taken by the stream
	total  int64  // bytes received
	c      *client.Client
	who    string
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	buf    []byte
	err    error // the stream's end, returned once buf is drained
	closed bool
	cond   *sync.Cond

	closeOnce sync.Once
}

// sink receives the stream's output.
type sink session

func (k *sink) Write(p []byte) (int, error) {
	s := (*session)(k)
	s.mu.Lock()
	s.buf = append(s.buf, p...)
	s.total += int64(len(p))
	if over := len(s.buf) - MaxBuffered; over > 0 {
		s.buf = append(s.buf[:0], s.buf[over:]...)
	}
	s.mu.Unlock()
	s.wake()
	return len(p), nil
}

func (s *session) wake() {
	s.mu.Lock()
	s.cond.Broadcast()
	s.mu.Unlock()
}

func (s *session) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
	s.wake()
}

// Read blocks until console output arrives, the session ends or Close.
func (s *session) Read(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.buf) == 0 && s.err == nil && !s.closed {
		s.cond.Wait()
	}
	switch {
	case s.closed:
		return 0, io.EOF
	case len(s.buf) > 0:
		n := copy(p, s.buf)
		s.buf = s.buf[n:]
		if len(s.buf) == 0 {
			s.buf = nil
		}
		return n, nil
	}
	return 0, s.err
}

// Write types p at the node's serial port.
func (s *session) Write(p []byte) (int, error) {
	s.mu.Lock()
	closed, err := s.closed, s.err
	s.mu.Unlock()
	if closed {
		return 0, fmt.Errorf("%s: SOL session closed", s.who)
	}
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Wait until the stream took what was typed before (at most
	// MaxTyped bytes wait), as a serial line would hold the writer.
	for len(s.typed) > 0 && len(s.typed)+len(p) > MaxTyped && !s.closed && s.err == nil {
		s.cond.Wait()
	}
	if s.closed {
		return 0, fmt.Errorf("%s: SOL session closed", s.who)
	}
	if s.err != nil {
		return 0, s.err
	}
	s.typed = append(s.typed, p...)
	s.cond.Broadcast()
	return len(p), nil
}

// Close deactivates the SOL payload and closes the IPMI session.
func (s *session) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		s.wake()
		s.cancel()
		<-s.done
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = s.c.DeactivatePayload(ctx, &transport.DeactivatePayloadRequest{PayloadType: types.PayloadTypeSOL, PayloadInstance: 1})
		_ = s.c.Close(ctx)
	})
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

func activateError(who, user string, err error) error {
	cc := -1
	if re, ok := types.IsResponseError(err); ok {
		cc = int(re.CompletionCode())
	} else if m := completionCodeText.FindStringSubmatch(err.Error()); m != nil {
		n, _ := strconv.ParseUint(m[1], 16, 8)
		cc = int(n)
	}
	switch cc {
	case ccPayloadActive:
		return fmt.Errorf("%s: SOL payload already active on another session (someone else holds the console, e.g. another ipmitool sol activate); deactivate it (ipmitool sol deactivate) or wait for that session to end: %w", who, ErrSOLUnavailable)
	case ccPayloadDisabled:
		return fmt.Errorf("%s: SOL is disabled on the BMC; enable it (ipmitool sol set enabled true, and sol payload enable for user %s): %w", who, user, ErrSOLUnavailable)
	case ccActivationLimit:
		return fmt.Errorf("%s: SOL payload activation limit reached; deactivate another SOL session (ipmitool sol deactivate): %w", who, ErrSOLUnavailable)
	case ccNoEncryption, ccNeedsEncryption:
		return fmt.Errorf("%s: the BMC refused SOL's encryption setting (completion code %#02x); set the BMC's SOL encryption to allowed (ipmitool sol set force-encryption false): %w", who, cc, ErrSOLUnavailable)
	case ccInsufficientPriv:
		return fmt.Errorf("%s: user %s may not activate SOL (insufficient privilege); give the user administrator privilege and SOL payload access on the BMC: %w", who, user, ErrSOLUnavailable)
	case int(types.CodeInvalidCommand), int(types.CodeNotSupported), int(types.CodeIllegalCommand):
		return fmt.Errorf("%s does not offer Serial-over-LAN (completion code %#02x): %w", who, cc, ErrSOLUnavailable)
	case -1:
		return fmt.Errorf("%s: activating SOL failed: %v", who, err)
	}
	return fmt.Errorf("%s refused to activate SOL (completion code %#02x: %v): %w", who, cc, err, ErrSOLUnavailable)
}
