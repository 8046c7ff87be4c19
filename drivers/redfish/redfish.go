// Package redfish drives a BMC over Redfish with gofish, as Ironic's
// redfish hardware type does: power (with a wait until the BMC reports
// the new state), boot device and boot mode, virtual media, BIOS settings
// and the BMC's own reset. It keeps one session per BMC, reuses it, logs
// in again once when the BMC forgets it (401), and retries 5xx answers
// and connection errors with backoff, never 401 or 403. One operation
// runs at a time per BMC. An operation whose context has a deadline
// ends a little before it (a tenth of the time left, at most 5 s), so
// that its caller can still report why it failed.
package redfish

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/stmcginnis/gofish"
	"github.com/stmcginnis/gofish/schemas"

	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/protocol"
)

var (
	_ drivers.BMC = (*BMC)(nil)
	// The edge agent closes BMCs that have this method.
	_ interface{ Close() } = (*BMC)(nil)
)

// Options tune a BMC's timeouts and retries; zero values take defaults.
type Options struct {
	// Logger receives what the driver does; never a password.
	Logger *slog.Logger
	// RequestTimeout bounds one HTTP request (default 30 s).
	RequestTimeout time.Duration
	// PowerTimeout is how long SetPower waits for the BMC to report the
	// requested state (default 2 min: BMCs can take over 30 s).
	PowerTimeout time.Duration
	// SoftPowerOffTimeout is how long SoftPowerOff waits after
	// GracefulShutdown before it forces the power off (default 10 min,
	// Ironic's soft_power_off_timeout).
	SoftPowerOffTimeout time.Duration
	// PollInterval is the pause between power state reads (default 2 s).
	PollInterval time.Duration
	// Attempts bounds the tries of one request on 5xx answers and
	// connection errors (default 5, Ironic's connection_attempts).
	Attempts int
	// RetryBackoff is the first pause between tries; it doubles up to
	// 16 times itself (default 1 s).
	RetryBackoff time.Duration
	// BMCResetSettle is how long reset_bmc waits before it looks for the
	// BMC again: a BMC keeps answering for a while after it accepts a
	// reset (default 15 s).
	BMCResetSettle time.Duration
	// BMCResetTimeout is how long reset_bmc waits for the BMC to answer
	// again (default 5 min).
	BMCResetTimeout time.Duration
	// FirmwareTimeout bounds the wait for a firmware update task
	// (default 60 min).
	FirmwareTimeout time.Duration
	// FirmwareVerifyTimeout is how long, after the activating reset, the
	// driver waits for the component to report a new version (default 5 min).
	FirmwareVerifyTimeout time.Duration
	// MaxFirmwareBytes bounds an image the driver downloads, to verify
	// its checksum or to push it (default 512 MiB; a push holds it in memory).
	MaxFirmwareBytes int64
}

func (o *Options) defaults() {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = 30 * time.Second
	}
	if o.PowerTimeout <= 0 {
		o.PowerTimeout = 2 * time.Minute
	}
	if o.SoftPowerOffTimeout <= 0 {
		o.SoftPowerOffTimeout = 10 * time.Minute
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 2 * time.Second
	}
	if o.Attempts <= 0 {
		o.Attempts = 5
	}
	if o.RetryBackoff <= 0 {
		o.RetryBackoff = time.Second
	}
	if o.BMCResetSettle <= 0 {
		o.BMCResetSettle = 15 * time.Second
	}
	if o.BMCResetTimeout <= 0 {
		o.BMCResetTimeout = 5 * time.Minute
	}
	if o.FirmwareTimeout <= 0 {
		o.FirmwareTimeout = 60 * time.Minute
	}
	if o.FirmwareVerifyTimeout <= 0 {
		o.FirmwareVerifyTimeout = 5 * time.Minute
	}
	if o.MaxFirmwareBytes <= 0 {
		o.MaxFirmwareBytes = 512 << 20
	}
}

// BMC is one Redfish BMC and the system it manages.
type BMC struct {
	cfg  *config
	opts Options
	log  *slog.Logger
	http *http.Client
	// sem lets one operation run at a time; a channel, so that waiting
	// for it honours the caller's context.
	sem chan struct{}

	// Guarded by sem.
	client    *gofish.APIClient
	auth      string // AuthSession or AuthBasic: what the client uses
	systemURI string
	sysMu     sync.Mutex // findSystem's, for the parallel reads of an operation
	rt        *cachingTransport
	// snap is what Validate read ahead for the firmware and BIOS
	// readings that follow it (snapshot.go).
	snap *snapshot
	// basicRefused: the BMC refused Basic while it took a session; no
	// Basic read goes beside a login again.
	basicRefused bool
	// noSessions: under redfish_auth_type auto, the BMC refused a
	// session or has none; later logins go straight to Basic.
	noSessions bool
}

// New validates driver_info and returns a BMC; it does not connect yet.
func New(info map[string]any, opts Options) (*BMC, error) {
	cfg, err := parseInfo(info)
	if err != nil {
		return nil, err
	}
	opts.defaults()
	tlsConf := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: cfg.roots}
	if !cfg.verify {
		// The operator asked for it (redfish_verify_ca=false), as BMCs
		// often ship self-signed certificates.
		tlsConf.InsecureSkipVerify = true
	}
	tr := &http.Transport{
		// BMCs sit on the site's management network: no proxies.
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:     tlsConf,
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: maxInFlight,
		IdleConnTimeout:     60 * time.Second,
	}
	rt := &cachingTransport{base: tr}
	return &BMC{
		cfg:  cfg,
		opts: opts,
		log:  opts.Logger.With("bmc", cfg.endpoint),
		http: &http.Client{Transport: rt, Timeout: opts.RequestTimeout},
		rt:   rt,
		sem:  make(chan struct{}, 1),
	}, nil
}

// Endpoint returns the BMC's URL (scheme and host).
func (b *BMC) Endpoint() string { return b.cfg.endpoint }

func (b *BMC) lock(ctx context.Context) error {
	select {
	case b.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("redfish BMC %s is busy with another operation: %w", b.cfg.endpoint, ctx.Err())
	}
}

func (b *BMC) unlock() { <-b.sem }

// maxInFlight bounds the requests in flight to one BMC.
const maxInFlight = 4

// maxReserve bounds the time an operation leaves its caller (reserve).
const maxReserve = 5 * time.Second

// reserve returns the context an operation runs under: ctx, but ending a
// tenth of the time left (at most maxReserve) before ctx's own deadline.
// A BMC slower than its caller's deadline then still leaves the caller
// time to report why: the edge agent's command deadline is also the
// coordinator's, which drops a result that comes after it and fails the
// node with "no result from the edge agent" instead of the BMC's fault.
// Without a deadline, ctx is returned as it is (with a no-op cancel).
func reserve(ctx context.Context) (context.Context, context.CancelFunc) {
	dl, ok := ctx.Deadline()
	if !ok {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, dl.Add(-min(time.Until(dl)/10, maxReserve)))
}

// round shortens a duration for a message: to 100 ms from a second on,
// to the millisecond below.
func round(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Millisecond)
}

// attempts says "1 attempt" or "n attempts".
func attempts(n int) string {
	if n == 1 {
		return "1 attempt"
	}
	return fmt.Sprintf("%d attempts", n)
}

// Close ends the session, if there is one. It waits up to 30 s for a
// running operation; after that the session is left to time out on the
// BMC. It has no error to return (the edge agent closes its BMCs through
// interface{ Close() }); a failed logout is logged.
func (b *BMC) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.lock(ctx); err != nil {
		b.log.Warn("redfish close: an operation is still running; the session is left to time out", "err", err)
		return
	}
	defer b.unlock()
	b.logout(ctx)
	b.http.CloseIdleConnections()
}

// logout deletes the session (best effort) and forgets the client.
func (b *BMC) logout(ctx context.Context) {
	if b.client != nil && b.auth == AuthSession {
		if s, err := b.client.GetSession(); err == nil {
			lctx, cancel := context.WithTimeout(ctx, b.opts.RequestTimeout)
			err := b.client.WithContext(lctx).Service.DeleteSession(s.ID)
			cancel()
			if err != nil {
				b.log.Warn("redfish logout failed; the session will time out on the BMC", "err", b.explain(err))
			} else {
				b.log.Debug("redfish session closed")
			}
		}
	}
	b.client, b.systemURI = nil, ""
	b.rt.forget()
}

// connect returns the logged-in client, logging in when there is none.
func (b *BMC) connect(ctx context.Context) (*gofish.APIClient, error) {
	if b.client != nil {
		return b.client, nil
	}
	base := gofish.ClientConfig{
		Endpoint: b.cfg.endpoint, Username: b.cfg.username, Password: b.cfg.password,
		HTTPClient: b.http, ReuseConnections: true, NoModifyTransport: true,
		// The per-BMC bound of requests in flight: independent reads go
		// in parallel, a small BMC is not flooded.
		MaxConcurrentRequests: maxInFlight,
		// Never a DumpWriter: it would write the session POST, password
		// and all.
	}
	mode := b.cfg.authType
	if b.cfg.username == "" {
		mode = AuthBasic // no credentials: nothing to log in with
	}
	if mode == AuthAuto && b.noSessions {
		mode = AuthBasic // this BMC refused a session before
	}
	var sessionErr error
	var probe *basicProbe
	if mode == AuthSession || mode == AuthAuto {
		var c *gofish.APIClient
		var err error
		// The Basic read beside the login only for a read-only operation
		// (its answer is used) and never again on a BMC that refused it
		// while it took the session: a refused Basic read is a failed
		// login in the BMC's log.
		_, reads := ctx.Value(readCacheKey{}).(*readCache)
		c, probe, err = b.sessionConnect(ctx, base, mode == AuthAuto && reads && !b.basicRefused)
		if err == nil {
			if probe != nil && probe.refused() {
				b.basicRefused = true
			}
			b.client, b.auth = c, AuthSession
			b.log.Debug("redfish session opened")
			probe.seed(ctx)
			return c, nil
		}
		refused := statusOf(err) == http.StatusUnauthorized || statusOf(err) == http.StatusForbidden
		if mode == AuthSession || !(sessionUnavailable(err) || refused) {
			return nil, &loginError{err: err}
		}
		// As sushy's SessionOrBasicAuth: a BMC without (free) sessions,
		// or one that refuses this user a session, may still take
		// Basic authentication; a wrong password is refused there too.
		if refused {
			sessionErr = err
		} else if !sessionLimit(err) {
			b.noSessions = true // no session service: it will not appear
		}
		b.log.Warn("redfish session refused; using Basic authentication (redfish_auth_type=auto)", "reason", b.explain(err))
	}
	if sessionErr != nil && probe != nil && probe.refused() {
		// The Basic read asked beside the login was refused too: a
		// wrong password, known in one round trip.
		return nil, &loginError{err: probe.err, note: "a session login (" + b.explain(sessionErr) + ") and Basic authentication were both refused"}
	}
	base.BasicAuth = true
	c, err := gofish.ConnectContext(ctx, base)
	if err != nil {
		return nil, &loginError{err: err}
	}
	if sessionErr != nil && (probe == nil || probe.err != nil) {
		// gofish checks no Basic credentials at connect: one read does,
		// so that a wrong password fails here, in one round of login.
		var col collectionDoc
		if err := getJSON(c, "/redfish/v1/Systems", &col); err != nil {
			if st := statusOf(err); st == http.StatusUnauthorized || st == http.StatusForbidden {
				return nil, &loginError{err: err, note: "a session login (" + b.explain(sessionErr) + ") and Basic authentication were both refused"}
			}
		}
	}
	if sessionErr != nil {
		b.noSessions = true
		b.log.Warn("redfish BMC refuses sessions to this user but takes Basic authentication; using Basic", "user", b.cfg.username)
	}
	probe.seed(ctx)
	b.client, b.auth = c, AuthBasic
	return c, nil
}

// sessionConnect logs in with a session: the login and the service root
// are asked at once (one round trip less than gofish's root, then login);
// gofish then takes the session, the root read from the transport's copy.
func (b *BMC) sessionConnect(ctx context.Context, base gofish.ClientConfig, withBasic bool) (*gofish.APIClient, *basicProbe, error) {
	const spec = "/redfish/v1/SessionService/Sessions"
	var root *serviceRootLinks
	var rootErr, err error
	var token, uri string
	var probe *basicProbe
	fns := []func(){
		func() { root, rootErr = b.fetchRoot(ctx) },
		func() { token, uri, err = b.sessionLogin(ctx, spec) },
	}
	if withBasic {
		// Under auto, the Systems collection with Basic beside them: if
		// the BMC refuses the session, Basic's answer is known already
		// (a wrong password fails in this one round trip); if not, it is
		// the collection the operation reads next.
		fns = append(fns, func() { probe = b.probeBasic(ctx, "/redfish/v1/Systems") })
	}
	parallel(fns...)
	if rootErr != nil {
		if err == nil {
			b.deleteSession(ctx, uri, token)
		}
		return nil, probe, rootErr
	}
	if st := statusOf(err); (st == http.StatusNotFound || st == http.StatusMethodNotAllowed) &&
		root.Links.Sessions.ID != "" && strings.TrimSuffix(root.Links.Sessions.ID, "/") != spec {
		// The service root names another sessions collection.
		token, uri, err = b.sessionLogin(ctx, root.Links.Sessions.ID)
	}
	if err != nil {
		return nil, probe, err
	}
	base.Session = &gofish.Session{ID: uri, Token: token}
	c, err := gofish.ConnectContext(ctx, base)
	if err != nil {
		// The session is ours: do not leave it open.
		b.deleteSession(ctx, uri, token)
		return nil, probe, err
	}
	return c, probe, nil
}

// deleteSession closes a session the driver could not use (best effort).
func (b *BMC) deleteSession(ctx context.Context, uri, token string) {
	if uri == "" {
		return
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, b.cfg.endpoint+uri, nil)
	if err != nil {
		return
	}
	req.Header.Set("X-Auth-Token", token)
	if resp, err := b.http.Do(req); err == nil {
		resp.Body.Close()
	}
}

// loginError marks an error from logging in, to explain it as such.
type loginError struct {
	err  error
	note string // what was tried, when more than one way
}

func (e *loginError) Error() string { return e.err.Error() }
func (e *loginError) Unwrap() error { return e.err }

func redfishError(err error) *schemas.Error {
	var e *schemas.Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}

func statusOf(err error) int {
	if e := redfishError(err); e != nil {
		return e.HTTPReturnedStatusCode
	}
	return 0
}

func messageIDs(e *schemas.Error) string {
	ids := []string{e.Code}
	for _, x := range e.ExtendedInfos {
		ids = append(ids, x.MessageID)
	}
	return strings.Join(ids, " ")
}

func sessionLimit(err error) bool {
	e := redfishError(err)
	return e != nil && strings.Contains(messageIDs(e), "SessionLimitExceeded")
}

// sessionUnavailable tells a BMC that offers no sessions (or none free)
// from one that refuses the credentials.
func sessionUnavailable(err error) bool {
	switch statusOf(err) {
	case http.StatusUnauthorized, http.StatusForbidden:
		return false
	case http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusNotImplemented:
		return true
	}
	if sessionLimit(err) {
		return true
	}
	// gofish's answer when the service root has no Links.Sessions.
	return strings.Contains(err.Error(), "no target provided")
}

// retryable: a 5xx answer (but a session limit, which a retry within
// seconds does not lift) or a connection that failed or timed out.
// Never 401/403: the same credentials will not do better, and BMCs lock
// accounts after repeated failures.
func retryable(err error) bool {
	if st := statusOf(err); st != 0 {
		return st >= 500 && !sessionLimit(err)
	}
	if tlsFailure(err) != "" {
		return false
	}
	var ne net.Error
	var ue *url.Error
	return errors.As(err, &ne) || errors.As(err, &ue) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// tlsFailure explains a certificate problem, or returns "".
func tlsFailure(err error) string {
	var ua x509.UnknownAuthorityError
	var hn x509.HostnameError
	var ci x509.CertificateInvalidError
	var rh tls.RecordHeaderError
	var ve *tls.CertificateVerificationError
	switch {
	case errors.As(err, &ua), errors.As(err, &ve) && errors.As(ve.Err, &ua):
		return "its certificate is not signed by a trusted CA"
	case errors.As(err, &hn):
		return "its certificate is not valid for this address (" + hn.Error() + ")"
	case errors.As(err, &ci):
		return "its certificate is not valid (" + ci.Error() + ")"
	case errors.As(err, &rh):
		return "it does not speak TLS"
	}
	return ""
}

// explain turns a gofish or transport error into one line: the HTTP
// status and the BMC's own message id and text, not its whole body.
func (b *BMC) explain(err error) string {
	var re *reqError
	if errors.As(err, &re) {
		return fmt.Sprintf("%s %s%s: %s", re.method, b.cfg.endpoint, re.uri, b.explain(re.err))
	}
	if e := redfishError(err); e != nil {
		msg, id := e.Message, e.Code
		if len(e.ExtendedInfos) > 0 {
			if e.ExtendedInfos[0].Message != "" {
				msg = e.ExtendedInfos[0].Message
			}
			if e.ExtendedInfos[0].MessageID != "" {
				id = e.ExtendedInfos[0].MessageID
			}
		}
		msg = strings.Join(strings.Fields(msg), " ")
		if len(msg) > 300 {
			msg = msg[:300] + "..."
		}
		if e.HTTPReturnedStatusCode == 0 {
			return msg
		}
		if id != "" {
			return fmt.Sprintf("HTTP %d %s: %s", e.HTTPReturnedStatusCode, id, msg)
		}
		return fmt.Sprintf("HTTP %d: %s", e.HTTPReturnedStatusCode, msg)
	}
	return err.Error()
}

// failure builds the error an operation ends with, saying what to do.
// tried is how long the last attempt ran and ended the operation's
// context's error when that attempt ended (nil if it was still alive).
func (b *BMC) failure(what string, err error, attempt int, tried time.Duration, ended error) error {
	ep := b.cfg.endpoint
	var le *loginError
	isLogin := errors.As(err, &le)
	switch st := statusOf(err); {
	case sessionLimit(err):
		return fmt.Errorf("redfish BMC %s: cannot %s: the BMC has no free session (%s); close the other sessions (other tools logged in to it), wait for them to time out, or set %s to basic",
			ep, what, b.explain(err), InfoAuthType)
	case st == http.StatusUnauthorized && (isLogin || b.auth == AuthBasic):
		why := b.explain(err)
		if isLogin && le.note != "" {
			why = le.note + ": " + why
		}
		return fmt.Errorf("redfish BMC %s refused the credentials of user %q to %s (%s); check %s and %s",
			ep, b.cfg.username, what, why, InfoUsername, InfoPassword)
	case st == http.StatusUnauthorized:
		return fmt.Errorf("redfish BMC %s: cannot %s: the BMC refused the session even after a new login (%s); check %s and %s",
			ep, what, b.explain(err), InfoUsername, InfoPassword)
	case st == http.StatusForbidden:
		return fmt.Errorf("redfish BMC %s: user %q may not %s (%s); give the account the Administrator role",
			ep, b.cfg.username, what, b.explain(err))
	case st >= 500:
		return fmt.Errorf("redfish BMC %s: cannot %s: the BMC answered %s (after %s); check the BMC's health or reset it",
			ep, what, b.explain(err), attempts(attempt))
	case st != 0:
		return fmt.Errorf("redfish BMC %s: cannot %s: %s", ep, what, b.explain(err))
	}
	if why := tlsFailure(err); why != "" {
		fix := fmt.Sprintf("set %s to the file of the CA that signed it (or false to skip verification, unsafe)", InfoVerifyCA)
		if b.cfg.caFile != "" {
			fix = fmt.Sprintf("%s=%s is not the CA that signed it; give the right CA file", InfoVerifyCA, b.cfg.caFile)
		}
		return fmt.Errorf("redfish BMC %s: cannot %s: TLS verification failed: %s; %s: %v", ep, what, why, fix, err)
	}
	var ue *url.Error
	cut := errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.As(err, &ue) && ue.Timeout()
	switch {
	case cut && errors.Is(ended, context.DeadlineExceeded):
		// The operation's own deadline ended the request, not the
		// per-request timeout: say how long the BMC had.
		return fmt.Errorf("redfish BMC %s: cannot %s: the BMC did not answer within %s, the time left for this operation (attempt %d of %d); it may be overloaded or unreachable",
			ep, what, round(tried), attempt, b.opts.Attempts)
	case cut && ended != nil:
		return fmt.Errorf("redfish BMC %s: cannot %s: the operation was cancelled (attempt %d of %d)", ep, what, attempt, b.opts.Attempts)
	case errors.As(err, &ue) && ue.Timeout():
		return fmt.Errorf("redfish BMC %s: cannot %s: the BMC did not answer within %s (%s); it may be overloaded or unreachable",
			ep, what, b.opts.RequestTimeout, attempts(attempt))
	case cut:
		return fmt.Errorf("redfish BMC %s: cannot %s: %w", ep, what, err)
	}
	if retryable(err) {
		return fmt.Errorf("redfish BMC %s: cannot %s: %v (after %s); check that the BMC is reachable from this site", ep, what, err, attempts(attempt))
	}
	return fmt.Errorf("redfish BMC %s: cannot %s: %s", ep, what, b.explain(err))
}

// do runs op with a logged-in client. A 401 from a session the BMC
// forgot (it timed out, or the BMC rebooted) earns one new login; 5xx
// answers and connection errors are tried again with backoff.
func (b *BMC) do(ctx context.Context, what string, op func(c *gofish.APIClient) error) error {
	relogged := false
	backoff := b.opts.RetryBackoff
	for attempt := 1; ; attempt++ {
		start := time.Now()
		c, err := b.connect(ctx)
		if err == nil {
			err = op(c.WithContext(ctx))
			if err == nil {
				return nil
			}
			var le *loginError
			// Only a session can be forgotten; Basic credentials refused
			// once are refused again.
			if statusOf(err) == http.StatusUnauthorized && !relogged && b.auth == AuthSession && !errors.As(err, &le) {
				relogged = true
				b.log.Info("redfish BMC refused the session; logging in again", "what", what)
				// The session is gone on the BMC: nothing to log out.
				b.client, b.systemURI = nil, ""
				attempt--
				continue
			}
		}
		tried, ended := time.Since(start), ctx.Err()
		if ended != nil || !retryable(err) || attempt >= b.opts.Attempts {
			return b.failure(what, err, attempt, tried, ended)
		}
		b.log.Warn("redfish request failed; retrying", "what", what, "attempt", attempt, "of", b.opts.Attempts, "in", backoff, "err", b.explain(err))
		var le *loginError
		if errors.As(err, &le) {
			b.client = nil
		}
		select {
		case <-ctx.Done():
			return b.failure(what, err, attempt, tried, nil)
		case <-time.After(backoff):
		}
		if backoff < 16*b.opts.RetryBackoff {
			backoff *= 2
		}
	}
}

// reqError is a request that failed, with its method and path, so that
// every error names the URL it came from.
type reqError struct {
	method, uri string
	err         error
}

func (e *reqError) Error() string { return e.method + " " + e.uri + ": " + e.err.Error() }
func (e *reqError) Unwrap() error { return e.err }

// getJSON reads a resource into v.
func getJSON(c *gofish.APIClient, uri string, v any) error {
	resp, err := c.Get(uri)
	if err != nil {
		return &reqError{"GET", uri, err}
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(v); err != nil {
		return &reqError{"GET", uri, fmt.Errorf("the answer is not the JSON expected: %v", err)}
	}
	return nil
}

// postJSON posts body to uri, ignoring the answer's body.
func postJSON(c *gofish.APIClient, uri string, body any) error {
	resp, err := c.Post(uri, body)
	if err != nil {
		return &reqError{"POST", uri, err}
	}
	resp.Body.Close()
	return nil
}

// patchJSON patches uri with body, ignoring the answer's body.
func patchJSON(c *gofish.APIClient, uri string, body any) error {
	resp, err := c.Patch(uri, body)
	if err != nil {
		return &reqError{"PATCH", uri, err}
	}
	resp.Body.Close()
	return nil
}

type link struct {
	ID string `json:"@odata.id"`
}

// findSystem resolves the system's path once per login: the configured
// one, or the only one the BMC has.
func (b *BMC) findSystem(c *gofish.APIClient) (string, error) {
	// Parallel reads of one operation find it once.
	b.sysMu.Lock()
	defer b.sysMu.Unlock()
	if b.systemURI != "" {
		return b.systemURI, nil
	}
	list := func() ([]string, error) {
		var root struct{ Systems link }
		if err := getJSON(c, schemas.DefaultServiceRoot, &root); err != nil {
			return nil, err
		}
		if root.Systems.ID == "" {
			return nil, fmt.Errorf("the BMC's service root links no Systems collection")
		}
		col, err := schemas.GetCollection(c, root.Systems.ID)
		if err != nil {
			return nil, err
		}
		sort.Strings(col.ItemLinks)
		return col.ItemLinks, nil
	}
	if b.cfg.systemID != "" {
		var probe struct {
			ID string `json:"Id"`
		}
		err := getJSON(c, b.cfg.systemID, &probe)
		if statusOf(err) == http.StatusNotFound {
			systems, lerr := list()
			if lerr != nil {
				return "", lerr
			}
			return "", fmt.Errorf("%s %s is not a system of this BMC; it has %s", InfoSystemID, b.cfg.systemID, orNone(systems))
		}
		if err != nil {
			return "", err
		}
		b.systemURI = b.cfg.systemID
		return b.systemURI, nil
	}
	systems, err := list()
	if err != nil {
		return "", err
	}
	if len(systems) != 1 {
		return "", fmt.Errorf("the BMC has %d systems (%s); set %s to the one this node is", len(systems), orNone(systems), InfoSystemID)
	}
	b.systemURI = systems[0]
	return b.systemURI, nil
}

func orNone(list []string) string {
	if len(list) == 0 {
		return "none"
	}
	return strings.Join(list, ", ")
}

// getSystem reads the system.
func (b *BMC) getSystem(c *gofish.APIClient) (*schemas.ComputerSystem, error) {
	uri, err := b.findSystem(c)
	if err != nil {
		return nil, err
	}
	sys, err := schemas.GetComputerSystem(c, uri)
	if err != nil {
		return nil, &reqError{"GET", uri, err}
	}
	return sys, nil
}

func (b *BMC) readSystem(ctx context.Context, what string) (*schemas.ComputerSystem, error) {
	var sys *schemas.ComputerSystem
	err := b.do(ctx, what, func(c *gofish.APIClient) error {
		var err error
		sys, err = b.getSystem(c)
		return err
	})
	return sys, err
}

// SameInfo reports whether driver_info describes this BMC as it was
// built (address, system, credentials, TLS and auth settings), so that a
// caller keeping BMCs knows when to Close this one and build a new one.
func (b *BMC) SameInfo(info map[string]any) bool {
	c, err := parseInfo(info)
	return err == nil && c.same(b.cfg)
}

// Validate implements drivers.BMC: it logs in anew and finds the system,
// so that wrong credentials, a wrong address or a wrong
// redfish_system_id show now and not at the first power action. A
// session opened earlier proves nothing about the credentials now; it is
// closed first, which also frees its slot on the BMC.
func (b *BMC) Validate(ctx context.Context) error {
	ctx, cancel := reserve(ctx)
	defer cancel()
	if err := b.lock(ctx); err != nil {
		return err
	}
	defer b.unlock()
	b.logout(ctx)
	b.snap = nil
	ctx = reading(ctx)
	var sys *schemas.ComputerSystem
	var snap *snapshot
	err := b.do(ctx, "validate", func(c *gofish.APIClient) error {
		// The system first: every read needs it, and a refusal then
		// ends the operation at its first request.
		if _, err := b.findSystem(c); err != nil {
			return err
		}
		var err error
		parallel(
			func() { sys, err = b.getSystem(c) },
			func() { snap = b.readAhead(c) },
		)
		return err
	})
	if err != nil {
		return err
	}
	b.snap = snap
	b.log.Info("redfish BMC validated", "system", sys.ODataID, "auth", b.auth, "power", sys.PowerState)
	return nil
}

// PowerState implements drivers.BMC. A BMC's transitional states count
// as where they lead, as in Ironic.
func (b *BMC) PowerState(ctx context.Context) (string, error) {
	ctx, cancel := reserve(ctx)
	defer cancel()
	if err := b.lock(ctx); err != nil {
		return "", err
	}
	defer b.unlock()
	sys, err := b.readSystem(ctx, "read the power state")
	if err != nil {
		return "", err
	}
	switch sys.PowerState {
	case schemas.OnPowerState, schemas.PoweringOnPowerState:
		return protocol.PowerOn, nil
	case schemas.OffPowerState, schemas.PoweringOffPowerState:
		return protocol.PowerOff, nil
	}
	return "", fmt.Errorf("redfish BMC %s reports power state %q for %s, which is neither on nor off", b.cfg.endpoint, sys.PowerState, sys.ODataID)
}

// reset posts a reset of the system.
// firstReadKey carries the read context of an operation's first read
// of the system, so that its reset posts to the system read then.
type firstReadKey struct{}

func (b *BMC) reset(ctx context.Context, rt schemas.ResetType) error {
	b.log.Info("redfish reset", "type", rt)
	if rctx, ok := ctx.Value(firstReadKey{}).(context.Context); ok {
		ctx = rctx
	}
	return b.do(ctx, fmt.Sprintf("reset the system (%s)", rt), func(c *gofish.APIClient) error {
		sys, err := b.getSystem(c)
		if err != nil {
			return err
		}
		if _, err = sys.Reset(rt); err != nil {
			return &reqError{"POST", sys.ODataID + " (ComputerSystem.Reset)", err}
		}
		return nil
	})
}

// waitPower polls until the BMC reports want ("On" or "Off") or the
// timeout passes; the error says what the BMC showed instead.
func (b *BMC) waitPower(ctx context.Context, want schemas.PowerState, after string, timeout time.Duration) error {
	start := time.Now()
	deadline := start.Add(timeout)
	var last schemas.PowerState
	outOfTime := func() error {
		return fmt.Errorf("redfish BMC %s did not report power %s within %s after %s, the time left for this operation; it last reported %q",
			b.cfg.endpoint, want, round(time.Since(start)), after, last)
	}
	// Most BMCs change power within a second: read soon, then back off
	// to PollInterval, so that a quick BMC is not waited on for a whole
	// interval and a slow one is not polled hard.
	pause := min(250*time.Millisecond, b.opts.PollInterval)
	for {
		sys, err := b.readSystem(ctx, "read the power state")
		if err != nil {
			if last != "" && ctx.Err() != nil {
				// The BMC answered before; the time ran out during a
				// read: the power change is what was slow.
				return outOfTime()
			}
			return err
		}
		last = sys.PowerState
		if last == want {
			b.log.Info("redfish power state reached", "state", want, "after", after, "took", time.Since(start).Round(time.Millisecond))
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redfish BMC %s did not report power %s within %s after %s; it last reported %q",
				b.cfg.endpoint, want, timeout, after, last)
		}
		select {
		case <-ctx.Done():
			return outOfTime()
		case <-time.After(pause):
		}
		pause = min(2*pause, b.opts.PollInterval)
	}
}

// SetPower implements drivers.BMC: "power on", "power off" (forced) or
// "rebooted" (ForceRestart when on, On when off), then waits until the
// BMC reports the system on or off.
func (b *BMC) SetPower(ctx context.Context, state string) error {
	ctx, cancel := reserve(ctx)
	defer cancel()
	if err := b.lockWrite(ctx); err != nil {
		return err
	}
	defer b.unlock()
	// The reset action is on the system just read: one read for both
	// (the waits below read it afresh).
	rctx := reading(ctx)
	sys, err := b.readSystem(rctx, "read the power state")
	if err != nil {
		return err
	}
	ctx = context.WithValue(ctx, firstReadKey{}, rctx)
	on := sys.PowerState == schemas.OnPowerState
	off := sys.PowerState == schemas.OffPowerState
	switch state {
	case protocol.PowerOn:
		if on {
			return nil
		}
		if err := b.reset(ctx, schemas.OnResetType); err != nil {
			return err
		}
		return b.waitPower(ctx, schemas.OnPowerState, "On", b.opts.PowerTimeout)
	case protocol.PowerOff:
		if off {
			return nil
		}
		if err := b.reset(ctx, schemas.ForceOffResetType); err != nil {
			return err
		}
		return b.waitPower(ctx, schemas.OffPowerState, "ForceOff", b.opts.PowerTimeout)
	case protocol.PowerReboot:
		rt := schemas.ForceRestartResetType
		if off {
			rt = schemas.OnResetType
		}
		if err := b.reset(ctx, rt); err != nil {
			return err
		}
		return b.waitPower(ctx, schemas.OnPowerState, string(rt), b.opts.PowerTimeout)
	}
	return fmt.Errorf("redfish driver: unknown power state %q; want %q, %q or %q", state, protocol.PowerOn, protocol.PowerOff, protocol.PowerReboot)
}

// SoftPowerOff asks the operating system to shut down (GracefulShutdown)
// and forces the power off when the system is still on after timeout
// (Options.SoftPowerOffTimeout when 0), as Ironic's soft power off does.
func (b *BMC) SoftPowerOff(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := reserve(ctx)
	defer cancel()
	if err := b.lockWrite(ctx); err != nil {
		return err
	}
	defer b.unlock()
	if timeout <= 0 {
		timeout = b.opts.SoftPowerOffTimeout
	}
	sys, err := b.readSystem(ctx, "read the power state")
	if err != nil {
		return err
	}
	if sys.PowerState == schemas.OffPowerState {
		return nil
	}
	if err := b.reset(ctx, schemas.GracefulShutdownResetType); err != nil {
		return err
	}
	err = b.waitPower(ctx, schemas.OffPowerState, "GracefulShutdown", timeout)
	if err == nil || ctx.Err() != nil {
		return err
	}
	b.log.Warn("redfish soft power off timed out; forcing the power off", "timeout", timeout)
	if err := b.reset(ctx, schemas.ForceOffResetType); err != nil {
		return err
	}
	return b.waitPower(ctx, schemas.OffPowerState, "ForceOff after a GracefulShutdown that timed out", b.opts.PowerTimeout)
}
