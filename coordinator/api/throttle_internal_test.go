package api

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/bmedge/bmedge/lib/ratelog"
)

// throttledAuth returns a BasicAuth of user "op" (password "right")
// whose throttle runs on a clock the test moves.
func throttledAuth(t *testing.T, maxSources int) (*BasicAuth, *time.Time) {
	t.Helper()
	a, err := LoadHTPasswd(writeHTPasswd(t, bcryptLine(t, "op", "right", "$2y$")))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_000_000, 0)
	a.guard = newGuard(LoginBurst, LoginRefill, maxSources, func() time.Time { return now })
	return a, &now
}

// TestLoginThrottle checks the per-source budget of failed logins: a
// burst of LoginBurst, then refusals without bcrypt that say how long to
// wait, one more try per LoginRefill, the whole burst back after a quiet
// LoginBurst×LoginRefill; other sources unaffected; repeated wrong
// credentials cost no bcrypt; parallel guesses cannot pass the burst.
func TestLoginThrottle(t *testing.T) {
	a, now := throttledAuth(t, maxTrackedSources)
	const guesser, other = "127.0.0.2:40000", "127.0.0.1:40001"
	for i := 0; i < LoginBurst; i++ {
		if ok, retry := a.Attempt(guesser, "op", fmt.Sprint("guess-", i)); ok || retry != 0 {
			t.Fatalf("failure %d of the burst: ok %v, retry %s; want a plain refusal", i+1, ok, retry)
		}
	}
	ran := a.bcrypts.Load()
	for i := 0; i < 200; i++ {
		ok, retry := a.Attempt(guesser, "op", fmt.Sprint("more-", i))
		if ok || retry <= 0 || retry > LoginRefill {
			t.Fatalf("attempt %d after the burst: ok %v, retry %s; want throttled for at most %s", i, ok, retry, LoginRefill)
		}
	}
	// Even the right password: the address is throttled, not a guess.
	if ok, retry := a.Attempt("127.0.0.2:40002", "op", "right"); ok || retry <= 0 {
		t.Fatalf("the right password from the throttled address: ok %v retry %s; want throttled", ok, retry)
	}
	if n := a.bcrypts.Load() - ran; n != 0 {
		t.Fatalf("throttled attempts ran bcrypt %d times", n)
	}
	// Another address logs in, and fails on its own budget.
	if ok, retry := a.Attempt(other, "op", "right"); !ok || retry != 0 {
		t.Fatalf("the right password from another address: ok %v retry %s", ok, retry)
	}
	if ok, retry := a.Attempt(other, "op", "guess-0"); ok || retry != 0 {
		t.Fatalf("a wrong password from another address: ok %v retry %s; want a plain refusal", ok, retry)
	}
	// A repeated wrong password is answered from the cache.
	ran = a.bcrypts.Load()
	if ok, _ := a.Attempt(other, "op", "guess-0"); ok || a.bcrypts.Load() != ran {
		t.Fatalf("a repeated wrong password: ok %v, %d bcrypt runs; want refused from the cache", ok, a.bcrypts.Load()-ran)
	}

	// Decay: one try per LoginRefill, then refused again.
	*now = now.Add(LoginRefill)
	if ok, retry := a.Attempt(guesser, "op", "after-wait"); ok || retry != 0 {
		t.Fatalf("after waiting %s: ok %v retry %s; want one more try", LoginRefill, ok, retry)
	}
	if _, retry := a.Attempt(guesser, "op", "after-wait-2"); retry != LoginRefill {
		t.Fatalf("the try after that: retry %s, want %s", retry, LoginRefill)
	}
	*now = now.Add(LoginRefill / 2)
	if _, retry := a.Attempt(guesser, "op", "x"); retry != LoginRefill/2 {
		t.Fatalf("half a refill later: retry %s, want %s", retry, LoginRefill/2)
	}
	*now = now.Add(time.Duration(LoginBurst) * LoginRefill)
	for i := 0; i < LoginBurst; i++ {
		if _, retry := a.Attempt(guesser, "op", fmt.Sprint("later-", i)); retry != 0 {
			t.Fatalf("after a quiet %s, failure %d was throttled", time.Duration(LoginBurst)*LoginRefill, i+1)
		}
	}
	if _, retry := a.Attempt(guesser, "op", "later-x"); retry == 0 {
		t.Fatal("the burst came back larger than LoginBurst")
	}

	// Parallel distinct guesses from a fresh address: a check under way
	// holds a try, so at most LoginBurst bcrypt checks run.
	ran = a.bcrypts.Load()
	var wg sync.WaitGroup
	var mu sync.Mutex
	throttled := 0
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, retry := a.Attempt("127.0.0.3:1", "op", fmt.Sprint("parallel-", i)); retry > 0 {
				mu.Lock()
				throttled++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if n := a.bcrypts.Load() - ran; n > LoginBurst || throttled < 50-LoginBurst {
		t.Fatalf("50 parallel guesses: %d bcrypt checks, %d throttled; want at most %d checks", n, throttled, LoginBurst)
	}
	// Parallel first requests of one client with the same good
	// credentials share one check.
	b, _ := throttledAuth(t, maxTrackedSources)
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if ok, _ := b.Attempt("127.0.0.4:1", "op", "right"); !ok {
				t.Error("a parallel good login was refused")
			}
		}()
	}
	wg.Wait()
	if n := b.bcrypts.Load(); n != 1 {
		t.Fatalf("20 parallel good logins ran %d bcrypt checks, want 1", n)
	}
}

// TestLoginThrottleBounded checks that the throttle's memory is bounded
// whoever sends, that an IPv6 host counts as its /64, and that sources
// whose budget is whole again are forgotten.
func TestLoginThrottleBounded(t *testing.T) {
	const bound = 100
	a, now := throttledAuth(t, bound)
	for i := 0; i < 1000; i++ {
		a.Attempt(fmt.Sprintf("10.%d.%d.1:5", i/250, i%250), "op", "same-wrong")
		if n := len(a.guard.m); n > bound || a.guard.lru.Len() != n {
			t.Fatalf("after %d sources the throttle tracks %d (list %d), bound %d", i+1, n, a.guard.lru.Len(), bound)
		}
	}
	a.mu.Lock()
	bad := len(a.bad)
	a.mu.Unlock()
	if bad != 1 {
		t.Fatalf("%d cached failures for one wrong password, want 1", bad)
	}
	// One IPv6 /64 is one source, whatever the host part.
	for i := 0; i < LoginBurst; i++ {
		a.Attempt(fmt.Sprintf("[2001:db8:1:2::%x]:443", i+1), "op", "v6-wrong")
	}
	if _, retry := a.Attempt("[2001:db8:1:2:ffff::1]:443", "op", "v6-wrong"); retry == 0 {
		t.Fatal("another host of the same /64 was not throttled")
	}
	if _, retry := a.Attempt("[2001:db8:1:3::1]:443", "op", "v6-wrong"); retry != 0 {
		t.Fatal("another /64 was throttled")
	}
	if got := sourceKey("[::ffff:127.0.0.2]:80"); got != "127.0.0.2" {
		t.Fatalf("an IPv4-mapped address counts as %q", got)
	}
	// Sources whose budget is whole again are dropped when new ones come.
	*now = now.Add(time.Duration(LoginBurst) * LoginRefill)
	a.Attempt("192.0.2.1:1", "op", "fresh")
	if n := len(a.guard.m); n != 1 {
		t.Fatalf("after every budget refilled, %d sources are still tracked, want 1", n)
	}
}

// TestWeakBcryptRefused checks that entries under MinBcryptCost are
// refused at load, with the recipe of a good one, and that the cost
// itself is accepted.
func TestWeakBcryptRefused(t *testing.T) {
	line := func(user string, cost int) string {
		h, err := bcrypt.GenerateFromPassword([]byte("pw"), cost)
		if err != nil {
			t.Fatal(err)
		}
		return user + ":" + string(h) + "\n"
	}
	for _, cost := range []int{bcrypt.MinCost, MinBcryptCost - 1} {
		_, err := LoadHTPasswd(writeHTPasswd(t, line("ok", MinBcryptCost)+line("weak", cost)))
		want := []string{`line 2 (user "weak")`, fmt.Sprintf("the bcrypt cost is %d, at least %d", cost, MinBcryptCost), "htpasswd -B -C 12 "}
		for _, w := range want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("cost %d: error %v, want one containing %q", cost, err, w)
			}
		}
	}
	if _, err := LoadHTPasswd(writeHTPasswd(t, line("ok", MinBcryptCost))); err != nil {
		t.Errorf("cost %d refused: %v", MinBcryptCost, err)
	}
}

// TestRefusedLoginsLogBounded checks that 2000 refused logins of every
// kind (unknown user, wrong password, throttled) within one interval of
// the refusals' log write one line per kind, never a password.
func TestRefusedLoginsLogBounded(t *testing.T) {
	a, now := throttledAuth(t, maxTrackedSources)
	var logs bytes.Buffer
	s := &Server{log: slog.New(slog.NewTextHandler(&logs, nil)), auth: a}
	// The refusals' log on the test's clock, which stands still: the 2000
	// logins fall in one interval however long the bcrypt checks take on
	// a busy machine.
	s.refusalOnce.Do(func() {
		s.refusalLog = ratelog.NewWithClock(s.log, ratelog.DefaultInterval, func() time.Time { return *now })
	})
	codes := map[int]int{}
	for i := 0; i < 2000; i++ {
		r := httptest.NewRequest("GET", "/v1/nodes", nil)
		r.RemoteAddr = fmt.Sprintf("127.0.0.%d:1234", 2+i%3)
		user := "op"
		if i%2 == 1 {
			user = "nobody-secret-typed-here"
		}
		r.SetBasicAuth(user, fmt.Sprint("pw-secret-", i%7))
		w := httptest.NewRecorder()
		if s.authenticate(w, r) {
			t.Fatal("a wrong password passed")
		}
		codes[w.Code]++
		if w.Code == 429 && (w.Header().Get("Retry-After") == "" || !strings.Contains(w.Body.String(), "faultstring")) {
			t.Fatalf("429 without Retry-After or Ironic's body: %v %s", w.Header(), w.Body)
		}
	}
	if codes[401] != 3*LoginBurst || codes[429] != 2000-3*LoginBurst {
		t.Fatalf("answers %v, want %d 401 (the burst of 3 addresses) and the rest 429", codes, 3*LoginBurst)
	}
	out := logs.String()
	if n := strings.Count(out, "\n"); n > 3 {
		t.Fatalf("2000 refused logins of 3 kinds wrote %d lines, want at most 3:\n%s", n, out)
	}
	for _, kind := range []string{"wrong password", "unknown user", "too many failed logins"} {
		if !strings.Contains(out, kind) {
			t.Errorf("no line for %q:\n%s", kind, out)
		}
	}
	if strings.Contains(out, "secret") {
		t.Fatalf("the log shows a password or an unknown user name:\n%s", out)
	}
}
