package api

import (
	"bufio"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"

	"golang.org/x/crypto/bcrypt"
)

// Realm is what a 401 answer names in WWW-Authenticate.
const Realm = "bmedge"

// maxCachedLogins bounds the cache of good credentials; beyond it the
// cache starts again empty (a few bcrypt checks more, never unbounded
// memory, whoever sends what).
const maxCachedLogins = 4096

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
	// credentials with every request, so credentials that were good once
	// are remembered. The key is an HMAC under a key made at start (not a
	// plain hash), so that the cache in a memory dump does not offer
	// fast-to-guess password hashes. Only good credentials are stored: a
	// wrong password is checked by bcrypt every time.
	mu     sync.Mutex
	macKey []byte
	good   map[[sha256.Size]byte]struct{}
}

// LoadHTPasswd reads an htpasswd file whose entries are bcrypt hashes
// (`htpasswd -B`: $2y$, or $2a$/$2b$). Any other hash type is refused,
// naming the line: MD5 ($apr1$), SHA1 ({SHA}), crypt and plain text are
// weak, and Ironic refuses them too.
func LoadHTPasswd(path string) (*BasicAuth, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read the htpasswd file: %w", err)
	}
	defer f.Close()
	a := &BasicAuth{users: map[string][]byte{}, good: map[[sha256.Size]byte]struct{}{}, macKey: make([]byte, 32),
		slots: make(chan struct{}, max(1, runtime.NumCPU()/2))}
	if _, err := rand.Read(a.macKey); err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		user, hash, ok := strings.Cut(l, ":")
		if !ok || user == "" || hash == "" {
			return nil, fmt.Errorf("%s line %d: not USER:HASH; make entries with 'htpasswd -B %s USER'", path, line, path)
		}
		if !strings.HasPrefix(hash, "$2y$") && !strings.HasPrefix(hash, "$2a$") && !strings.HasPrefix(hash, "$2b$") {
			// The hash itself is not printed: it is a secret too.
			return nil, fmt.Errorf("%s line %d (user %q): the password is not a bcrypt hash; only bcrypt entries are accepted, make them with 'htpasswd -B %s %s'", path, line, user, path, user)
		}
		if _, err := bcrypt.Cost([]byte(hash)); err != nil {
			return nil, fmt.Errorf("%s line %d (user %q): the bcrypt hash is malformed (%v); make it again with 'htpasswd -B %s %s'", path, line, user, err, path, user)
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
		return nil, fmt.Errorf("%s has no users: nobody could use the API; add one with 'htpasswd -B %s USER'", path, path)
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

// Check reports whether user and password match an entry.
func (a *BasicAuth) Check(user, password string) bool {
	m := hmac.New(sha256.New, a.macKey)
	m.Write([]byte(user))
	m.Write([]byte{0}) // user names cannot hold NUL, so "a"+"b:c" ≠ "a:b"+"c"
	m.Write([]byte(password))
	var key [sha256.Size]byte
	copy(key[:], m.Sum(nil))
	a.mu.Lock()
	_, ok := a.good[key]
	a.mu.Unlock()
	if ok {
		return true
	}
	hash, known := a.users[user]
	if !known {
		hash = a.dummy
	}
	a.slots <- struct{}{}
	err := bcrypt.CompareHashAndPassword(hash, []byte(password))
	<-a.slots
	if err != nil || !known {
		return false
	}
	a.mu.Lock()
	if len(a.good) >= maxCachedLogins {
		a.good = map[[sha256.Size]byte]struct{}{}
	}
	a.good[key] = struct{}{}
	a.mu.Unlock()
	return true
}

// publicPath reports whether a path is served without credentials:
// Ironic's version documents, which clients read before anything else
// (Ironic leaves them public too).
func publicPath(p string) bool {
	return p == "/" || p == "/v1" || p == "/v1/"
}

// authenticate answers 401 unless the request carries good credentials.
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request) bool {
	if s.auth == nil || (publicPath(r.URL.Path) && (r.Method == http.MethodGet || r.Method == http.MethodHead)) {
		return true
	}
	user, pass, ok := r.BasicAuth()
	if ok && s.auth.Check(user, pass) {
		return true
	}
	w.Header().Set("WWW-Authenticate", `Basic realm="`+Realm+`"`)
	if !ok {
		writeError(w, http.StatusUnauthorized, "Authentication required: send a user name and password of the coordinator's htpasswd file as HTTP Basic credentials "+
			"(baremetal CLI: OS_AUTH_TYPE=http_basic with OS_USERNAME and OS_PASSWORD; coordinator CLI: OS_USERNAME and OS_PASSWORD)")
		return false
	}
	// The user name is logged only when it is a real one: a mistyped
	// password sometimes lands in the user field.
	if _, known := s.auth.users[user]; known {
		s.log.Warn("API authentication failed: wrong password", "user", user, "remote", r.RemoteAddr)
	} else {
		s.log.Warn("API authentication failed: unknown user", "remote", r.RemoteAddr)
	}
	writeError(w, http.StatusUnauthorized, "Incorrect username or password")
	return false
}
