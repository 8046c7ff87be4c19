package api

import (
	"bufio"
	"container/list"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"math"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/bmedge/bmedge/lib/netbudget"
)

// Realm is what a 401 answer names in WWW-Authenticate.
const Realm = "bmedge"

// What a password guesser is allowed. bcrypt makes each guess cost the
// coordinator (and so the guesser) ~60 ms at cost 10; the throttle makes
// an address that keeps failing wait, whatever its CPU.
const (
	// MinBcryptCost is the lowest bcrypt cost LoadHTPasswd accepts.
	// Debian's `htpasswd -B` writes cost 5 (~2 ms a guess) unless told
	// `-C`; bcrypt's own default is 10.
	MinBcryptCost = 10
	// LoginBurst is how many failed logins (a user name and password
	// that do not match) one source address may make in a row before it
	// is throttled.
	LoginBurst = 10
	// LoginRefill is how often a throttled address earns one more try:
	// failed logins decay at one per LoginRefill, so an address that
	// stops failing for LoginBurst×LoginRefill (one minute) has its whole
	// burst back.
	LoginRefill = 6 * time.Second
	// maxTrackedSources bounds the addresses whose failures are counted
	// (least recently failing forgotten first; about 200 bytes each).
	// IPv6 addresses are counted by /64, the block one host controls.
	maxTrackedSources = 16384
	// maxCachedLogins bounds each of the caches of good and of wrong
	// credentials; beyond it a cache starts again empty (a few bcrypt
	// checks more, never unbounded memory, whoever sends what).
	maxCachedLogins = 4096
)

// BasicAuth checks HTTP Basic credentials against an htpasswd file of
// bcrypt entries, as Ironic's http_basic auth strategy does.
type BasicAuth struct {
	users map[string][]byte // user → bcrypt hash
	// slots bounds the bcrypt checks that run at once to half the CPUs,
	// so that a flood of wrong passwords slows logins, not the engine.
	slots chan struct{}
	// dummy is compared against when the user is unknown, so that an
	// unknown user costs as much time as a wrong password and user names
	// cannot be found by timing.
	dummy []byte

	// bcrypt costs 50-100 ms per check, and clients send the same
	// credentials with every request, so the outcome of a check is
	// remembered, good or wrong (the file does not change while the
	// coordinator runs): a client that repeats a wrong password costs no
	// bcrypt either. The key is an HMAC under a key made at start (not a
	// plain hash), so that the caches in a memory dump do not offer
	// fast-to-guess password hashes.
	mu     sync.Mutex
	macKey []byte
	good   map[loginKey]struct{}
	bad    map[loginKey]struct{}
	// inflight holds the bcrypt checks under way: the same credentials
	// sent again meanwhile (a client's parallel first requests) wait for
	// that check instead of starting another.
	inflight map[loginKey]*flight
	guard    *guard
	// bcrypts counts the bcrypt comparisons run (tests check that cached
	// and throttled attempts run none).
	bcrypts atomic.Int64
}

type loginKey [sha256.Size]byte

type flight struct {
	done chan struct{}
	ok   bool
}

// LoadHTPasswd reads an htpasswd file whose entries are bcrypt hashes
// (`htpasswd -B`: $2y$, or $2a$/$2b$) of cost MinBcryptCost or more. Any
// other hash type is refused, naming the line: MD5 ($apr1$), SHA1
// ({SHA}), crypt and plain text are weak, and Ironic refuses them too.
func LoadHTPasswd(path string) (*BasicAuth, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read the htpasswd file: %w", err)
	}
	defer f.Close()
	a := &BasicAuth{users: map[string][]byte{}, good: map[loginKey]struct{}{}, bad: map[loginKey]struct{}{},
		inflight: map[loginKey]*flight{}, macKey: make([]byte, 32),
		slots: make(chan struct{}, max(1, runtime.NumCPU()/2)),
		guard: newGuard(LoginBurst, LoginRefill, maxTrackedSources, time.Now)}
	if _, err := rand.Read(a.macKey); err != nil {
		return nil, err
	}
	recipe := func(user string) string {
		return fmt.Sprintf("'htpasswd -B -C 12 %s %s' (Debian's apache2-utils; -C 12 sets bcrypt's cost: without it htpasswd writes cost 5)", path, user)
	}
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		user, hash, ok := strings.Cut(l, ":")
		if !ok || user == "" || hash == "" {
			return nil, fmt.Errorf("%s line %d: not USER:HASH; make entries with %s", path, line, recipe("USER"))
		}
		if !strings.HasPrefix(hash, "$2y$") && !strings.HasPrefix(hash, "$2a$") && !strings.HasPrefix(hash, "$2b$") {
			// The hash itself is not printed: it is a secret too.
			return nil, fmt.Errorf("%s line %d (user %q): the password is not a bcrypt hash; only bcrypt entries are accepted, make them with %s", path, line, user, recipe(user))
		}
		cost, err := bcrypt.Cost([]byte(hash))
		if err != nil {
			return nil, fmt.Errorf("%s line %d (user %q): the bcrypt hash is malformed (%v); make it again with %s", path, line, user, err, recipe(user))
		}
		if cost < MinBcryptCost {
			return nil, fmt.Errorf("%s line %d (user %q): the bcrypt cost is %d, at least %d is accepted (a low cost makes each guess of a stolen file cheap); make the entry again with %s",
				path, line, user, cost, MinBcryptCost, recipe(user))
		}
		if _, dup := a.users[user]; dup {
			return nil, fmt.Errorf("%s line %d: user %q appears twice; keep one entry", path, line, user)
		}
		a.users[user] = []byte(hash)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("cannot read the htpasswd file %s: %w", path, err)
	}
	if len(a.users) == 0 {
		return nil, fmt.Errorf("%s has no users: nobody could use the API; add one with %s", path, recipe("USER"))
	}
	for _, h := range a.users {
		// The dummy has the cost of a real entry.
		a.dummy = h
		break
	}
	return a, nil
}

// Users returns how many users the file holds.
func (a *BasicAuth) Users() int { return len(a.users) }

// Check reports whether user and password match an entry. It counts no
// failures against anybody: requests go through Attempt.
func (a *BasicAuth) Check(user, password string) bool {
	ok, _ := a.attempt("", user, password)
	return ok
}

// Attempt checks user and password sent from remote (a request's
// RemoteAddr). A source address that failed LoginBurst times lately is
// refused without any check: retry is then how long until it may try
// again (and ok false). Every wrong password counts against its source,
// cached or not.
func (a *BasicAuth) Attempt(remote, user, password string) (ok bool, retry time.Duration) {
	return a.attempt(sourceKey(remote), user, password)
}

func (a *BasicAuth) attempt(src, user, password string) (bool, time.Duration) {
	m := hmac.New(sha256.New, a.macKey)
	m.Write([]byte(user))
	m.Write([]byte{0}) // user names cannot hold NUL, so "a"+"b:c" ≠ "a:b"+"c"
	m.Write([]byte(password))
	var key loginKey
	copy(key[:], m.Sum(nil))

	a.mu.Lock()
	if src != "" {
		if retry := a.guard.blocked(src); retry > 0 {
			a.mu.Unlock()
			return false, retry
		}
	}
	if _, ok := a.good[key]; ok {
		a.mu.Unlock()
		return true, 0
	}
	if _, bad := a.bad[key]; bad {
		if src != "" {
			a.guard.fail(src)
		}
		a.mu.Unlock()
		return false, 0
	}
	f, joined := a.inflight[key]
	if !joined {
		f = &flight{done: make(chan struct{})}
		a.inflight[key] = f
		if src != "" {
			// A check under way holds one of its source's tries, so that
			// many parallel guesses cannot all pass before the first fails.
			a.guard.pend(src, 1)
		}
	}
	a.mu.Unlock()

	if joined {
		<-f.done
	} else {
		f.ok = a.bcrypt(user, password)
	}
	a.mu.Lock()
	if !joined {
		delete(a.inflight, key)
		cache := a.bad
		if f.ok {
			cache = a.good
		}
		if len(cache) >= maxCachedLogins {
			clear(cache)
		}
		cache[key] = struct{}{}
		if src != "" {
			a.guard.pend(src, -1)
		}
		close(f.done)
	}
	if !f.ok && src != "" {
		a.guard.fail(src)
	}
	a.mu.Unlock()
	return f.ok, 0
}

// bcrypt compares password with user's entry (or the dummy).
func (a *BasicAuth) bcrypt(user, password string) bool {
	hash, known := a.users[user]
	if !known {
		hash = a.dummy
	}
	a.slots <- struct{}{}
	a.bcrypts.Add(1)
	err := bcrypt.CompareHashAndPassword(hash, []byte(password))
	<-a.slots
	return err == nil && known
}

// sourceKey is what failed logins are counted by: the source of the
// connection budgets (netbudget.Source), the IP address of remote
// (host:port), or its /64 for IPv6.
func sourceKey(remote string) string { return netbudget.Source(remote) }

// guard counts failed logins per source as a token bucket: a source
// starts with burst tries, each failure spends one, and one comes back
// every refill. Sources are kept in least-recently-used order, at most
// max of them; a source whose bucket is full again is forgotten (it is
// as if it had never failed). Its caller holds BasicAuth.mu.
type guard struct {
	burst  float64
	refill time.Duration
	max    int
	now    func() time.Time
	m      map[string]*list.Element
	lru    list.List // of *bucket, most recent first
}

type bucket struct {
	src     string
	tokens  float64
	at      time.Time
	pending int
}

func newGuard(burst int, refill time.Duration, max int, now func() time.Time) *guard {
	return &guard{burst: float64(burst), refill: refill, max: max, now: now, m: map[string]*list.Element{}}
}

// update refills b to now.
func (g *guard) update(b *bucket, now time.Time) {
	if d := now.Sub(b.at); d > 0 {
		b.tokens = math.Min(g.burst, b.tokens+float64(d)/float64(g.refill))
	}
	b.at = now
}

// blocked returns how long src must wait before its next try, or 0.
func (g *guard) blocked(src string) time.Duration {
	e := g.m[src]
	if e == nil {
		return 0
	}
	b := e.Value.(*bucket)
	g.update(b, g.now())
	avail := b.tokens - float64(b.pending)
	if avail >= 1 {
		return 0
	}
	return time.Duration((1 - avail) * float64(g.refill))
}

// get returns src's bucket, made (full) if it had none, as the most
// recently used; it forgets the least recently used beyond max and
// those that are full again.
func (g *guard) get(src string) *bucket {
	now := g.now()
	if e := g.m[src]; e != nil {
		g.lru.MoveToFront(e)
		b := e.Value.(*bucket)
		g.update(b, now)
		return b
	}
	for e := g.lru.Back(); e != nil; e = g.lru.Back() {
		old := e.Value.(*bucket)
		g.update(old, now)
		if len(g.m) < g.max && (old.tokens < g.burst || old.pending > 0) {
			break
		}
		g.lru.Remove(e)
		delete(g.m, old.src)
	}
	b := &bucket{src: src, tokens: g.burst, at: now}
	g.m[src] = g.lru.PushFront(b)
	return b
}

// fail spends one of src's tries.
func (g *guard) fail(src string) {
	b := g.get(src)
	b.tokens = math.Max(0, b.tokens-1)
}

// pend counts a check of src's under way (n = 1) or done (n = -1).
func (g *guard) pend(src string, n int) {
	b := g.get(src)
	b.pending = max(0, b.pending+n)
}

// publicPath reports whether a path is served without credentials:
// Ironic's version documents, which clients read before anything else
// (Ironic leaves them public too).
func publicPath(p string) bool {
	return p == "/" || p == "/v1" || p == "/v1/"
}

// Authenticated wraps h (GET /metrics) in the API's authentication:
// the same credentials, the same throttling of failed logins.
func (s *Server) Authenticated(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.authenticate(w, r) {
			h.ServeHTTP(w, r)
		}
	})
}

// authenticate answers 401 unless the request carries good credentials,
// or 429 when its source address failed too often lately. Refusals are
// logged at most once per kind per ratelog interval, with a count.
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request) bool {
	if s.auth == nil || (publicPath(r.URL.Path) && (r.Method == http.MethodGet || r.Method == http.MethodHead)) {
		return true
	}
	user, pass, ok := r.BasicAuth()
	if !ok {
		w.Header().Set("WWW-Authenticate", `Basic realm="`+Realm+`"`)
		writeError(w, http.StatusUnauthorized, "Authentication required: send a user name and password of the coordinator's htpasswd file as HTTP Basic credentials "+
			"(baremetal CLI: OS_AUTH_TYPE=http_basic with OS_USERNAME and OS_PASSWORD; coordinator CLI: OS_USERNAME and OS_PASSWORD)")
		return false
	}
	good, retry := s.auth.Attempt(r.RemoteAddr, user, pass)
	if good {
		return true
	}
	src := sourceKey(r.RemoteAddr)
	if retry > 0 {
		secs := max(1, int(math.Ceil(retry.Seconds())))
		s.refusals().Warn("api-login-throttled", "API login refused without checking: too many failed logins from its address", "remote", src)
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		writeError(w, http.StatusTooManyRequests, fmt.Sprintf("Too many failed logins from %s: try again in %d seconds. After %d wrong user names or passwords in a row an address may try once every %s",
			src, secs, LoginBurst, LoginRefill))
		return false
	}
	// The user name is logged only when it is a real one: a mistyped
	// password sometimes lands in the user field.
	if _, known := s.auth.users[user]; known {
		s.refusals().Warn("api-login-wrong-password", "API authentication failed: wrong password", "user", user, "remote", src)
	} else {
		s.refusals().Warn("api-login-unknown-user", "API authentication failed: unknown user", "remote", src)
	}
	w.Header().Set("WWW-Authenticate", `Basic realm="`+Realm+`"`)
	writeError(w, http.StatusUnauthorized, "Incorrect username or password")
	return false
}
