package api

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

func writeHTPasswd(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "htpasswd")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func bcryptLine(t *testing.T, user, pw, prefix string) string {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte(pw), MinBcryptCost)
	if err != nil {
		t.Fatal(err)
	}
	// Go writes $2a$; htpasswd -B writes $2y$ with the same algorithm.
	return user + ":" + prefix + string(h[4:]) + "\n"
}

// TestLoadHTPasswd accepts the three bcrypt prefixes and refuses other
// hash types naming the line and the user, never the hash.
func TestLoadHTPasswd(t *testing.T) {
	good := "# operators\n\n" + bcryptLine(t, "alice", "pw-a", "$2y$") + bcryptLine(t, "bob", "pw-b", "$2a$") + bcryptLine(t, "carol", "pw-c", "$2b$")
	a, err := LoadHTPasswd(writeHTPasswd(t, good))
	if err != nil {
		t.Fatal(err)
	}
	if a.Users() != 3 {
		t.Fatalf("%d users, want 3", a.Users())
	}
	for user, pw := range map[string]string{"alice": "pw-a", "bob": "pw-b", "carol": "pw-c"} {
		if !a.Check(user, pw) {
			t.Errorf("%s with the right password refused", user)
		}
		if a.Check(user, pw+"x") || a.Check(user, "") {
			t.Errorf("%s with a wrong password accepted", user)
		}
	}
	if a.Check("dave", "pw-a") || a.Check("", "") {
		t.Error("an unknown user was accepted")
	}

	md5 := "$apr1$r31.....$HqJZimcKQFAMYayBlzkrA/"
	for name, c := range map[string]struct{ content, want string }{
		"md5":      {bcryptLine(t, "alice", "x", "$2y$") + "bob:" + md5 + "\n", `line 2 (user "bob"): the password is not a bcrypt hash`},
		"sha1":     {"eve:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=\n", `line 1 (user "eve")`},
		"plain":    {"eve:secret\n", `line 1 (user "eve")`},
		"no colon": {"justaname\n", "line 1: not USER:HASH"},
		"bad hash": {"eve:$2y$05$short\n", "malformed"},
		"dup":      {bcryptLine(t, "a", "x", "$2y$") + bcryptLine(t, "a", "y", "$2y$"), `line 2: user "a" appears twice`},
		"empty":    {"# nobody\n", "has no users"},
	} {
		_, err := LoadHTPasswd(writeHTPasswd(t, c.content))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", name, err, c.want)
			continue
		}
		if strings.Contains(err.Error(), md5) || strings.Contains(err.Error(), "W6ph5") || strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: the error shows the hash: %v", name, err)
		}
		if !strings.Contains(err.Error(), "htpasswd") {
			t.Errorf("%s: the error does not say how to make an entry: %v", name, err)
		}
	}
	if _, err := LoadHTPasswd(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("a missing file was accepted")
	}
}

// TestCheckCache checks that good credentials are remembered (the second
// check skips bcrypt) and wrong ones never are, and that the cache stays
// bounded.
func TestCheckCache(t *testing.T) {
	h, err := bcrypt.GenerateFromPassword([]byte("pw"), 10) // ~60 ms: slow enough to see the cache
	if err != nil {
		t.Fatal(err)
	}
	a, err := LoadHTPasswd(writeHTPasswd(t, "u:"+string(h)+"\n"+bcryptLine(t, "v", "pw-v", "$2y$")))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if !a.Check("u", "pw") {
		t.Fatal("right password refused")
	}
	first := time.Since(start)
	start = time.Now()
	for i := 0; i < 100; i++ {
		if !a.Check("u", "pw") {
			t.Fatal("right password refused from the cache")
		}
	}
	if cached := time.Since(start); cached > first {
		t.Fatalf("100 cached checks took %s, one bcrypt check %s: the cache is not used", cached, first)
	}
	if a.Check("u", "wrong") || a.Check("u", "wrong") {
		t.Fatal("a wrong password was accepted (from the cache?)")
	}
	a.mu.Lock()
	n := len(a.good)
	a.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d cache entries, want 1 (only the good login)", n)
	}
	// The bound: fill the cache to its size with fake entries, then log
	// in as someone not yet cached.
	a.mu.Lock()
	for i := 0; len(a.good) < maxCachedLogins; i++ {
		a.good[[32]byte{byte(i), byte(i >> 8), 1}] = struct{}{}
	}
	a.mu.Unlock()
	if !a.Check("v", "pw-v") {
		t.Fatal("right password refused with a full cache")
	}
	a.mu.Lock()
	n = len(a.good)
	a.mu.Unlock()
	if n > maxCachedLogins || n == 0 {
		t.Fatalf("cache has %d entries after a login with a full cache; bound %d", n, maxCachedLogins)
	}
}

// TestAuthenticateLogs checks the 401 answer and that a failed login logs
// neither the password nor an unknown user name (often a password typed
// in the wrong field).
func TestAuthenticateLogs(t *testing.T) {
	a, err := LoadHTPasswd(writeHTPasswd(t, bcryptLine(t, "alice", "right-pw", "$2y$")))
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	s := &Server{log: slog.New(slog.NewTextHandler(&logs, nil)), auth: a}
	try := func(path, user, pw string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", path, nil)
		if user != "" {
			r.SetBasicAuth(user, pw)
		}
		w := httptest.NewRecorder()
		if s.authenticate(w, r) {
			w.WriteHeader(299) // passed
		}
		return w
	}
	for _, c := range []struct {
		path, user, pw string
		code           int
	}{
		{"/", "", "", 299}, {"/v1", "", "", 299}, {"/v1/", "", "", 299},
		{"/v1/nodes", "", "", 401}, {"/v1/nodes", "alice", "wrong-pw-1", 401}, {"/v1/nodes", "mallory-typed-pw", "x", 401},
		{"/v1/nodes", "alice", "right-pw", 299}, {"/v1/nodes/detail", "alice", "right-pw", 299},
	} {
		w := try(c.path, c.user, c.pw)
		if w.Code != c.code {
			t.Errorf("%s as %q: %d, want %d", c.path, c.user, w.Code, c.code)
		}
		if c.code == 401 {
			if got := w.Header().Get("WWW-Authenticate"); got != `Basic realm="bmedge"` {
				t.Errorf("%s: WWW-Authenticate %q", c.path, got)
			}
			if !strings.Contains(w.Body.String(), `"error_message"`) || !strings.Contains(w.Body.String(), `faultstring`) {
				t.Errorf("%s: not Ironic's error body: %s", c.path, w.Body)
			}
		}
	}
	// A POST to a public path is not public.
	r := httptest.NewRequest(http.MethodPost, "/v1", strings.NewReader("{}"))
	if w := httptest.NewRecorder(); s.authenticate(w, r) || w.Code != 401 {
		t.Errorf("POST /v1 without credentials passed")
	}
	out := logs.String()
	if !strings.Contains(out, "user=alice") || !strings.Contains(out, "unknown user") {
		t.Errorf("failed logins not logged as expected:\n%s", out)
	}
	for _, secret := range []string{"wrong-pw-1", "right-pw", "mallory-typed-pw"} {
		if strings.Contains(out, secret) {
			t.Errorf("the log shows %q:\n%s", secret, out)
		}
	}
}

func TestNodeNameRules(t *testing.T) {
	for _, ok := range []string{"n1", "a.b-c_d~e", "X", strings.Repeat("a", 255), "0123456789abcdef0123456789abcde", "details", "-lead"} {
		if p := nodeNameProblem(ok); p != "" {
			t.Errorf("%q refused: %s", ok, p)
		}
	}
	for _, bad := range []string{"", "a b", "a/b", "ä", "a:b", strings.Repeat("a", 256), "detail", "DETAIL", "states", "ports",
		"maintenance", "management", "vendor_passthru", "validate",
		"0123456789abcdef0123456789abcdef", "01234567-89ab-cdef-0123-456789abcdef", "0123-456789abcdef0123456789abcdef"} {
		if nodeNameProblem(bad) == "" {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestJSONDepth(t *testing.T) {
	for s, want := range map[string]int{
		`1`: 0, `{}`: 1, `[[]]`: 2, `{"a":{"b":[1,{"c":2}]}}`: 4,
		`{"a":"[[[[{{{{"}`: 1, `{"a":"\"[["}`: 1, `["\\", [[]]]`: 3,
	} {
		if got := jsonDepth([]byte(s), 100); got != want {
			t.Errorf("jsonDepth(%s) = %d, want %d", s, got, want)
		}
	}
	deep := strings.Repeat("[", 1000) + strings.Repeat("]", 1000)
	if got := jsonDepth([]byte(deep), 32); got != 33 {
		t.Errorf("jsonDepth stops at limit+1, got %d", got)
	}
}
