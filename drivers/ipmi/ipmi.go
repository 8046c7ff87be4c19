// Package ipmi is the IPMI driver of the edge agent: it drives a node's BMC
// out of band over IPMI 2.0 (RMCP+, ipmitool's "lanplus") with
// github.com/bougou/go-ipmi, with the driver_info and the behaviour of
// Ironic's ipmi hardware type: power on, off and reboot that wait until the
// BMC reports the new state, soft power off with a forced fallback, boot
// device once or persistent with the UEFI flag, and a BMC cold reset step.
//
// It must never reveal ipmi_password: not in an error, not in a log line,
// not in a %v of any of its values. Errors name the BMC, the user and what
// the BMC said; the package does not log at all.
//
// A BMC runs one operation at a time (a mutex) over one session that is
// reused across calls and re-opened when it breaks (a timeout, a BMC that
// restarted and forgot it). Transient failures are retried a few times
// with backoff; a refused login, privilege or cipher suite never is, as
// retrying it only locks the account on many BMCs.
//
// drivers/ipmi/ipmisim runs Debian's ipmi_sim for the tests; its package
// doc lists what that simulator does and does not implement.
package ipmi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bougou/go-ipmi/pkg/client"
	"github.com/bougou/go-ipmi/pkg/types"
)

// ErrRefused marks an error where the BMC refused the credentials, the
// privilege level or the cipher suite. Retrying cannot help; the
// driver_info must change.
var ErrRefused = errors.New("refused by the BMC")

// ErrUnsupported marks an error where the BMC answered that it does not
// implement the request (completion codes 0xc1, 0xd5, 0xd6, ...).
var ErrUnsupported = errors.New("not supported by the BMC")

// ErrNoAnswer marks an error where the BMC did not answer in time or
// nothing listens at its address.
var ErrNoAnswer = errors.New("no answer from the BMC")

// Options tune timeouts, retries and waits; zero values take the defaults.
type Options struct {
	// ExchangeTimeout is how long one IPMI request waits for its answer
	// before go-ipmi sends it again (default 1 s, as ipmitool lanplus).
	ExchangeTimeout time.Duration
	// ExchangeRetries is how many times go-ipmi sends one request again
	// when no answer comes (default 3). Negative means none.
	ExchangeRetries int
	// CallTimeout bounds one attempt of one operation: opening a session
	// if needed and running the command (default 30 s).
	CallTimeout time.Duration
	// Retries is how many more attempts an operation gets after a
	// transient failure: no answer, a broken session, a busy BMC
	// (default 2). Negative means none.
	Retries int
	// Backoff is the wait before the first retry, doubled for each next
	// one (default 1 s).
	Backoff time.Duration
	// PowerTimeout is how long a power change waits for the BMC to report
	// the requested state (default 60 s, Ironic's
	// [conductor]power_state_change_timeout).
	PowerTimeout time.Duration
	// PowerPoll is the interval between power state reads while waiting
	// (default 1 s).
	PowerPoll time.Duration
	// SoftPowerOffTimeout is how long a soft power off waits for the OS
	// to shut down before powering off by force (default 10 min, Ironic's
	// [conductor]soft_power_off_timeout).
	SoftPowerOffTimeout time.Duration
	// ResetSettle is how long reset_bmc waits after a cold reset before it
	// asks whether the BMC is back, so that it does not hear the BMC that
	// has not yet gone down (default 10 s).
	ResetSettle time.Duration
	// ResetTimeout is how long reset_bmc waits for the BMC to answer
	// again after a cold reset (default 5 min).
	ResetTimeout time.Duration
	// BootMode is the boot mode SetBootDevice asks for: "uefi" (default,
	// as Ironic's [deploy]default_boot_mode) or "bios" (legacy).
	BootMode string
}

func (o Options) withDefaults() (Options, error) {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.ExchangeTimeout, time.Second)
	def(&o.CallTimeout, 30*time.Second)
	def(&o.Backoff, time.Second)
	def(&o.PowerTimeout, 60*time.Second)
	def(&o.PowerPoll, time.Second)
	def(&o.SoftPowerOffTimeout, 10*time.Minute)
	def(&o.ResetSettle, 10*time.Second)
	def(&o.ResetTimeout, 5*time.Minute)
	if o.ExchangeRetries == 0 {
		o.ExchangeRetries = 3
	} else if o.ExchangeRetries < 0 {
		o.ExchangeRetries = 0
	}
	if o.Retries == 0 {
		o.Retries = 2
	} else if o.Retries < 0 {
		o.Retries = 0
	}
	switch o.BootMode {
	case "":
		o.BootMode = BootModeUEFI
	case BootModeUEFI, BootModeBIOS:
	default:
		return o, fmt.Errorf("ipmi: boot mode %q is neither %q nor %q", o.BootMode, BootModeUEFI, BootModeBIOS)
	}
	return o, nil
}

// BMC is one node's BMC. Its methods are safe for concurrent use; they
// run one at a time.
type BMC struct {
	cfg  config
	opts Options

	mu     sync.Mutex     // one operation at a time
	cl     *client.Client // the open session, or nil
	opened time.Time      // when cl was opened (see retire)
	// sel is what ReadHealth remembers of the SEL (health.go).
	sel selWindow

	// For tests: session setups tried and succeeded, and the highest
	// number of requests seen in flight at once (must stay 1).
	dials, opens atomic.Int64
	lateCloses   atomic.Int64 // sessions whose close waited (retire)
	inflight     atomic.Int64
	maxInflight  atomic.Int64
}

// New checks a node's driver_info (Ironic's ipmi keys: ipmi_address,
// ipmi_port, ipmi_username, ipmi_password, ipmi_cipher_suite,
// ipmi_priv_level, ipmi_disable_boot_timeout) and returns its BMC. It does
// not talk to the BMC; Validate does. An error names the wrong key (an
// *InfoError) and never quotes the password.
func New(info map[string]any, opts Options) (*BMC, error) {
	cfg, err := parseInfo(info)
	if err != nil {
		return nil, err
	}
	if opts, err = opts.withDefaults(); err != nil {
		return nil, err
	}
	return &BMC{cfg: cfg, opts: opts}, nil
}

// String describes the BMC without its password.
func (b *BMC) String() string { return b.cfg.String() }

// GoString is String, so that %#v cannot print the password either.
func (b *BMC) GoString() string { return b.String() }

// Close ends the session, telling the BMC so, which frees one of its few
// session slots at once. The BMC can still be used; the next call opens a
// new session.
func (b *BMC) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closeSession()
}

// closeSession ends the session with a Close Session request, waiting at
// most one exchange with its resends. The caller holds b.mu.
func (b *BMC) closeSession() error {
	if b.cl == nil {
		return nil
	}
	c, opened := b.cl, b.opened
	b.cl = nil
	if err := b.retire(c, opened, true); err != nil {
		return b.fail("close the session", err)
	}
	return nil
}

// keepAlivePeriod is how often go-ipmi's own keep-alive goroutine asks
// about an open session; keepAliveLead is how long before its tick a
// session may still be closed.
const (
	keepAlivePeriod = time.Duration(client.DefaultKeepAliveIntervalSec) * time.Second
	keepAliveLead   = 3 * time.Second
)

// retire closes a session nobody uses any more: politely (a Close Session
// request, waited for) or not (the socket only).
//
// go-ipmi v0.9.1 asks about every open session every 30 s from a goroutine
// of its own whose context is never canceled, and its Client.Close sets the
// socket to nil while that request may still be waiting for the socket's
// lock; the request then writes to a nil socket and the whole process
// panics. So a session is closed only while its keep-alive cannot be
// running: before its first tick, or between the end of one tick's request
// and shortly before the next. Otherwise the close waits, in the
// background, for that gap (at most one keep-alive period); the BMC keeps
// the session slot that long.
func (b *BMC) retire(c *client.Client, opened time.Time, polite bool) error {
	busy := b.opts.ExchangeTimeout*time.Duration(b.opts.ExchangeRetries+2) + 2*time.Second
	closeIt := func() error {
		if !polite {
			closeNow(c)
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), b.opts.ExchangeTimeout*time.Duration(b.opts.ExchangeRetries+1))
		defer cancel()
		return c.Close(ctx)
	}
	d := closeDelay(time.Since(opened), busy)
	if d == 0 {
		return closeIt()
	}
	b.lateCloses.Add(1)
	go func() {
		t := time.NewTimer(d)
		defer t.Stop()
		<-t.C
		_ = closeIt()
	}()
	return nil
}

// closeDelay is how long to wait before closing a session of this age so
// that the close cannot meet go-ipmi's keep-alive request (see retire):
// zero before the first tick's lead, or in the gap between a tick's request
// (busy long at most) and the next tick's lead.
func closeDelay(age, busy time.Duration) time.Duration {
	if age < keepAlivePeriod-keepAliveLead {
		return 0
	}
	phase := age % keepAlivePeriod
	switch {
	case phase >= busy && phase < keepAlivePeriod-keepAliveLead:
		return 0
	case phase < busy:
		return busy - phase
	default:
		return keepAlivePeriod - phase + busy
	}
}

// SameInfo reports whether driver_info describes this BMC as it was built
// (same address, credentials and settings), so that a caller keeping BMCs
// can tell when to build a new one.
func (b *BMC) SameInfo(info map[string]any) bool {
	c, err := parseInfo(info)
	return err == nil && c == b.cfg
}

// Validate implements drivers.BMC: it really logs in, with a new session,
// at the configured privilege level, and reads the chassis status.
func (b *BMC) Validate(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	// A session opened earlier proves nothing about the credentials now.
	// Ending it frees its slot: BMCs allow only a few sessions.
	_ = b.closeSession()
	return b.do(ctx, "report the chassis status", b.opts.Retries, func(ctx context.Context, c *client.Client) error {
		_, err := c.GetChassisStatus(ctx)
		return err
	})
}

// do runs f over the session, opening it first if needed, with up to
// retries more attempts after a transient failure. The caller holds b.mu.
func (b *BMC) do(ctx context.Context, what string, retries int, f func(context.Context, *client.Client) error) error {
	backoff := b.opts.Backoff
	var err error
	for attempt := 0; ; attempt++ {
		err = b.attempt(ctx, f)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || attempt >= retries || !retryable(err) {
			break
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return b.fail(what, err)
		case <-t.C:
		}
		backoff *= 2
	}
	return b.fail(what, err)
}

// attempt is one try of do: a session, then f, under CallTimeout. A
// failure that may have broken the session drops it, so that the next
// attempt starts a new one.
func (b *BMC) attempt(ctx context.Context, f func(context.Context, *client.Client) error) error {
	n := b.inflight.Add(1)
	defer b.inflight.Add(-1)
	for {
		m := b.maxInflight.Load()
		if n <= m || b.maxInflight.CompareAndSwap(m, n) {
			break
		}
	}

	actx, cancel := context.WithTimeout(ctx, b.opts.CallTimeout)
	defer cancel()
	if b.cl == nil {
		c, err := b.open(actx)
		if err != nil {
			return err
		}
		b.cl, b.opened = c, time.Now()
	}
	err := f(actx, b.cl)
	if err != nil && breaksSession(err) {
		b.drop()
	}
	return err
}

// open sets up a new RMCP+ session.
func (b *BMC) open(ctx context.Context) (*client.Client, error) {
	host := b.cfg.host
	if strings.Contains(host, ":") {
		// go-ipmi joins host and port with "%s:%d": bracket IPv6 literals.
		host = "[" + host + "]"
	}
	c, err := client.NewClient(host, b.cfg.port, b.cfg.username, b.cfg.password)
	if err != nil {
		return nil, newSetupError(err)
	}
	c.WithCipherSuiteID(b.cfg.cipher)
	c.WithMaxPrivilegeLevel(b.cfg.priv)
	c.WithTimeout(b.opts.ExchangeTimeout)
	c.WithRetry(b.opts.ExchangeRetries)
	b.dials.Add(1)
	if err := c.Connect(ctx); err != nil {
		closeNow(c)
		return nil, newSetupError(err)
	}
	b.opens.Add(1)
	return c, nil
}

// drop forgets the session without waiting for the BMC: it is broken, or
// about to be replaced. The BMC frees it after its inactivity timeout.
func (b *BMC) drop() {
	if b.cl != nil {
		_ = b.retire(b.cl, b.opened, false)
		b.cl = nil
	}
}

// closeNow stops go-ipmi's keep-alive and closes the socket; with a
// canceled context the Close Session request is not waited for.
func closeNow(c *client.Client) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = c.Close(ctx)
}

// setupError is a failure while opening a session. go-ipmi v0.9.1 joins
// the per-cipher-suite failures of a session setup with %v, which cuts the
// error chain; cause restores the typed error from the text, so that
// errors.Is and errors.As see what the BMC answered.
type setupError struct {
	err   error
	cause error
}

func newSetupError(err error) *setupError {
	e := &setupError{err: err}
	var rs *types.RmcpStatusError
	msg := err.Error()
	switch {
	case errors.Is(err, client.ErrRAKPAuthentication), errors.As(err, &rs):
	case strings.Contains(msg, client.ErrRAKPAuthentication.Error()):
		e.cause = client.ErrRAKPAuthentication
	default:
		if m := rmcpStatusText.FindStringSubmatch(msg); m != nil {
			code, _ := strconv.ParseUint(m[1], 16, 8)
			e.cause = types.NewRmcpStatusError(types.RmcpStatusCode(code))
		} else if _, ok := completionCode(err); !ok {
			if m := completionCodeText.FindStringSubmatch(msg); m != nil {
				code, _ := strconv.ParseUint(m[1], 16, 8)
				e.cause = types.NewResponseError(types.CompletionCode(code), m[2])
			}
		}
	}
	return e
}

// The texts of types.RmcpStatusError and types.ResponseError.
var (
	rmcpStatusText     = regexp.MustCompile(`RMCP\+ status 0x([0-9a-fA-F]{1,2})\b`)
	completionCodeText = regexp.MustCompile(`cc: 0x([0-9a-fA-F]{1,2}), description: ([^\n]*)`)
)

func (e *setupError) Error() string { return e.err.Error() }

func (e *setupError) Unwrap() []error {
	if e.cause == nil {
		return []error{e.err}
	}
	return []error{e.err, e.cause}
}

// noAnswer reports whether err means that no (matching) answer came: a
// timeout, a refused UDP port, a canceled exchange. go-ipmi wraps these as
// "IPMI LAN: ..." over net errors or its unexported no-match error.
func noAnswer(err error) bool {
	var ne net.Error
	var oe *net.OpError
	return errors.As(err, &ne) || errors.As(err, &oe) ||
		errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "IPMI LAN:")
}

// completionCode returns the BMC's completion code when it answered a
// command with one.
func completionCode(err error) (types.CompletionCode, bool) {
	if re, ok := types.IsResponseError(err); ok {
		return re.CompletionCode(), true
	}
	return 0, false
}

// ccText names a completion code: the generic name, or the command's own
// meaning as go-ipmi described it.
func ccText(err error, cc types.CompletionCode) string {
	if s := cc.String(); s != fmt.Sprintf("0x%02x", uint8(cc)) {
		return s
	}
	const mark = "is not normal: "
	if re, ok := types.IsResponseError(err); ok {
		if d := re.Error(); strings.Contains(d, mark) {
			return d[strings.LastIndex(d, mark)+len(mark):]
		}
	}
	return "a code of this command"
}

// busyCodes are completion codes that say "not now": worth a retry.
var busyCodes = map[types.CompletionCode]bool{
	types.CodeNodeBusy:                            true,
	types.CodeProcessTimeout:                      true,
	types.CodeCannotProvideResponse:               true,
	types.CodeCannotProvideResponseSDRRInUpdate:   true,
	types.CodeCannotProvideResponseFirmwareUpdate: true,
	types.CodeCannotProvideResponseBMCInitialize:  true,
	types.CodeDestinationUnavailable:              true,
}

// refusedSetup reports whether a session setup failed because the BMC
// refused who we are or how we asked (never retried).
func refusedSetup(err error) bool {
	var se *setupError
	if !errors.As(err, &se) {
		return false
	}
	if errors.Is(err, client.ErrRAKPAuthentication) {
		return true
	}
	var rs *types.RmcpStatusError
	if errors.As(err, &rs) {
		switch rs.StatusCode() {
		case types.RmcpStatusCodeNoResToCreateSess, types.RmcpStatusCodeNoResToCreateSessAtRole,
			types.RmcpStatusCodeInvalidSessionID, types.RmcpStatusCodeInactiveSessionID:
			return false
		}
		return true
	}
	// A completion code during setup comes from Get Channel Authentication
	// Capabilities or Set Session Privilege Level: unless the BMC is busy,
	// the privilege level is refused.
	cc, ok := completionCode(err)
	return ok && !busyCodes[cc]
}

// retryable reports whether another attempt may succeed.
func retryable(err error) bool {
	if refusedSetup(err) {
		return false
	}
	if cc, ok := completionCode(err); ok {
		return busyCodes[cc]
	}
	var rs *types.RmcpStatusError
	if errors.As(err, &rs) {
		return true // out of session slots: may free up
	}
	// No answer, a malformed answer, a session the BMC no longer knows.
	return true
}

// breaksSession reports whether after err the session must not be used
// again. A completion code is an answer within a working session; anything
// else (no answer, garbage) may mean the BMC lost it.
func breaksSession(err error) bool {
	_, cc := completionCode(err)
	return !cc
}

// opError is what the driver returns: a message for operators, with the
// password removed, and the kinds and cause for errors.Is.
type opError struct {
	msg   string
	kinds []error
}

func (e *opError) Error() string   { return e.msg }
func (e *opError) Unwrap() []error { return e.kinds }

// fail turns err from trying to do what into an error an operator can act
// on.
func (b *BMC) fail(what string, err error) error {
	who := "IPMI BMC " + b.cfg.addr()
	user := b.cfg.username
	if user == "" {
		user = "(anonymous)"
	}
	var msg string
	kinds := []error{err}
	var rs *types.RmcpStatusError
	cc, hasCC := completionCode(err)
	switch {
	case errors.Is(err, context.Canceled):
		msg = fmt.Sprintf("%s: gave up trying to %s: canceled", who, what)
	case refusedSetup(err) && errors.Is(err, client.ErrRAKPAuthentication):
		msg = fmt.Sprintf("%s refused user %s: wrong password (the BMC's RAKP message 2 does not match ipmi_password); correct ipmi_password", who, user)
		kinds = append(kinds, ErrRefused)
	case refusedSetup(err) && errors.As(err, &rs):
		code := rs.StatusCode()
		switch code {
		case types.RmcpStatusCodeUnauthorizedName, types.RmcpStatusCodeInvalidNameLength:
			msg = fmt.Sprintf("%s refused user %s: the BMC has no such user (RMCP+ status %#02x: %s); correct ipmi_username", who, user, uint8(code), code)
		case types.RmcpStatusCodeInvalidIntegrityCheckValue, types.RmcpStatusCodeUnauthorizedGUID:
			msg = fmt.Sprintf("%s refused user %s: the login did not check out (RMCP+ status %#02x: %s), usually a wrong password; correct ipmi_password", who, user, uint8(code), code)
		case types.RmcpStatusCodeInvalidRole, types.RmcpStatusCodeUnauthorizedRoleOfPriLevel:
			msg = fmt.Sprintf("%s refused user %s at privilege level %s (RMCP+ status %#02x: %s); set ipmi_priv_level to a level the user has, or give the user that level on the BMC", who, user, b.cfg.privName, uint8(code), code)
		case types.RmcpStatusCodeInvalidAuthAlg, types.RmcpStatusCodeInvalidIntegrityAlg, types.RmcpStatusCodeInvalidConfidentAlg,
			types.RmcpStatusCodeNoMatchingAuthPayload, types.RmcpStatusCodeNoMatchingIntegrityPayload, types.RmcpStatusCodeNoCipherSuiteMatch:
			msg = fmt.Sprintf("%s refused cipher suite %d (RMCP+ status %#02x: %s); set ipmi_cipher_suite to one the BMC offers (17 or 3 on most)", who, b.cfg.cipher, uint8(code), code)
		default:
			msg = fmt.Sprintf("%s refused the session for user %s (RMCP+ status %#02x: %s)", who, user, uint8(code), code)
		}
		kinds = append(kinds, ErrRefused)
	case refusedSetup(err) && hasCC:
		msg = fmt.Sprintf("%s refused user %s at privilege level %s (completion code %#02x: %s); set ipmi_priv_level to a level the user has (ADMINISTRATOR, OPERATOR, USER)", who, user, b.cfg.privName, uint8(cc), ccText(err, cc))
		kinds = append(kinds, ErrRefused)
	case hasCC && cc == types.CodeInsufficientPrivilege:
		msg = fmt.Sprintf("%s refused to %s for user %s at privilege level %s (completion code 0xd4: insufficient privilege); use a user with more rights or a higher ipmi_priv_level", who, what, user, b.cfg.privName)
		kinds = append(kinds, ErrRefused)
	case hasCC && (cc == types.CodeInvalidCommand || cc == types.CodeInvalidCommandForLUN || cc == types.CodeNotSupported || cc == types.CodeSubFnDisabled || cc == types.CodeIllegalCommand):
		msg = fmt.Sprintf("%s cannot %s: it answered completion code %#02x (%s)", who, what, uint8(cc), ccText(err, cc))
		kinds = append(kinds, ErrUnsupported)
	case hasCC:
		msg = fmt.Sprintf("%s refused to %s: completion code %#02x (%s)", who, what, uint8(cc), ccText(err, cc))
	case errors.As(err, &rs):
		code := rs.StatusCode()
		msg = fmt.Sprintf("%s refused the session for user %s for now (RMCP+ status %#02x: %s); if it lasts, end other sessions on the BMC or wait for them to time out", who, user, uint8(code), code)
	case noAnswer(err) && strings.Contains(err.Error(), "connection refused"):
		msg = fmt.Sprintf("%s did not answer when asked to %s: nothing listens on that UDP port (connection refused); check ipmi_address and ipmi_port and that IPMI over LAN is enabled on the BMC", who, what)
		kinds = append(kinds, ErrNoAnswer)
	case noAnswer(err):
		msg = fmt.Sprintf("%s did not answer when asked to %s (%v); check ipmi_address and ipmi_port, that IPMI over LAN is enabled on the BMC and that UDP gets through", who, what, err)
		kinds = append(kinds, ErrNoAnswer)
	default:
		msg = fmt.Sprintf("%s: failed to %s: %v", who, what, err)
	}
	return &opError{msg: b.redact(msg), kinds: kinds}
}

// redact removes the password from a message, should a library ever quote
// it. Passwords shorter than 4 bytes are not searched for: they would
// match ordinary words, and no library message could hide them anyway.
func (b *BMC) redact(msg string) string {
	if len(b.cfg.password) >= 4 {
		msg = strings.ReplaceAll(msg, b.cfg.password, "***")
	}
	return msg
}
