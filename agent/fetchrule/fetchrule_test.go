package fetchrule

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestCheck: loopback (127/8, ::1), link-local (169.254/16 with the
// metadata address, fe80::/10), unspecified and multicast are refused
// with words naming the rule and the flag; an allowed network is
// fetched from; the agent's own listeners stay refused even when their
// network is allowed; the BMCs' addresses and network are refused
// unless allowed.
func TestCheck(t *testing.T) {
	bmcs := []string{"https://10.9.0.5:8443", "10.9.0.6", "[fd00::7]:623"}
	r := &Rule{BMCNets: []netip.Prefix{netip.MustParsePrefix("10.8.0.0/16")},
		BMCs: func() []string { return bmcs },
		Own:  func() []string { return []string{"127.0.0.1:8090", "[::]:1883", "10.1.0.1:8081"} }}
	for _, tc := range []struct {
		addr, why string
		allow     bool // allowable with --fetch-allow
	}{
		{"127.0.0.1:80", "loopback", true},
		{"127.9.9.9:9100", "loopback", true},
		{"[::1]:80", "loopback", true},
		{"[::ffff:127.0.0.1]:80", "loopback", true},
		{"169.254.169.254:80", "link-local", true},
		{"[fe80::1]:80", "link-local", true},
		{"0.0.0.0:80", "not a host's address", false},
		{"0.1.2.3:80", "not a host's address", false},
		{"[::]:80", "not a host's address", false},
		{"224.0.0.1:80", "not a host's address", false},
		{"127.0.0.1:8090", "edge agent's own listeners", false},
		{"127.0.0.1:1883", "edge agent's own listeners", false}, // [::]:1883 listens on every local address
		{"10.1.0.1:8081", "edge agent's own listeners", false},
		{"10.9.0.5:443", "one of the site's BMCs", true},
		{"10.9.0.6:80", "one of the site's BMCs", true},
		{"[fd00::7]:80", "one of the site's BMCs", true},
		{"10.8.3.4:80", "BMC network 10.8.0.0/16", true},
	} {
		err := r.Check(netip.MustParseAddrPort(tc.addr))
		var rf *Refused
		if !errors.As(err, &rf) || !strings.Contains(err.Error(), tc.why) || rf.Allowable != tc.allow ||
			strings.Contains(err.Error(), Flag) != tc.allow {
			t.Errorf("%s: %v, want refused as %q (allowable %v)", tc.addr, err, tc.why, tc.allow)
		}
	}
	for _, a := range []string{"10.1.0.1:80", "192.0.2.10:443", "[2001:db8::1]:80", "10.9.0.7:80"} {
		if err := r.Check(netip.MustParseAddrPort(a)); err != nil {
			t.Errorf("%s refused: %v", a, err)
		}
	}
	r.Allow, _ = ParseAllow([]string{"127.0.0.0/8,::1", "169.254.169.254", "10.8.0.0/16", "10.9.0.5"})
	for _, a := range []string{"127.0.0.1:80", "[::1]:80", "169.254.169.254:80", "10.8.3.4:80", "10.9.0.5:443"} {
		if err := r.Check(netip.MustParseAddrPort(a)); err != nil {
			t.Errorf("%s refused although allowed: %v", a, err)
		}
	}
	for _, a := range []string{"127.0.0.1:8090", "169.254.1.1:80", "10.9.0.6:80"} {
		if err := r.Check(netip.MustParseAddrPort(a)); err == nil {
			t.Errorf("%s fetched from although not allowed", a)
		}
	}
	if _, err := ParseAllow([]string{"10.0.0.0/33"}); err == nil || !strings.Contains(err.Error(), "CIDR") {
		t.Errorf("bad CIDR: %v", err)
	}
}

// TestDialAndRedirect: a fetch of a loopback URL is refused before
// anything is sent, by the URL's check and by the dial itself (what a
// name resolves to is checked as dialled); a redirect from an allowed
// origin to a refused address is refused; allowed, the same URL is
// fetched.
func TestDialAndRedirect(t *testing.T) {
	var hits atomic.Int32
	inner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = w.Write([]byte("internal"))
	}))
	t.Cleanup(inner.Close)
	r := &Rule{}
	c := r.Client(10 * time.Second)
	ctx := context.Background()
	if _, err := r.Get(ctx, c, inner.URL+"/metrics"); err == nil || !strings.Contains(Words(err), "loopback") || !strings.Contains(Words(err), Flag) {
		t.Errorf("loopback URL: %v", err)
	}
	host := strings.Replace(inner.URL, "127.0.0.1", "localhost", 1)
	if _, err := r.Get(ctx, c, host+"/metrics"); err == nil || !strings.Contains(Words(err), "loopback") {
		t.Errorf("localhost URL: %v", err)
	}
	// The dial itself: what the URL check cannot see (a name).
	if _, err := r.Dialer(time.Second).DialContext(ctx, "tcp", inner.Listener.Addr().String()); err == nil || !strings.Contains(Words(err), "loopback") {
		t.Errorf("dial of a loopback address: %v", err)
	}
	if hits.Load() != 0 {
		t.Fatalf("the internal server was reached %d times", hits.Load())
	}

	// A redirect from an allowed origin (127.0.0.2 here) to a refused
	// one (127.0.0.1).
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("no 127.0.0.2: %v", err)
	}
	redir := &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, inner.URL+"/metrics", http.StatusFound)
	})}}
	redir.Start()
	t.Cleanup(redir.Close)
	r.Allow = []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}
	_, err = r.Get(ctx, c, redir.URL+"/cd")
	if err == nil || !strings.Contains(Words(err), "redirect") || !strings.Contains(Words(err), "loopback") {
		t.Errorf("redirect to loopback: %v (%s)", err, Words(err))
	}
	if hits.Load() != 0 {
		t.Fatalf("the internal server was reached through a redirect")
	}
	r.Allow = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	resp, err := r.Get(ctx, c, redir.URL+"/cd")
	if err != nil {
		t.Fatalf("allowed: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || hits.Load() != 1 {
		t.Errorf("allowed: %s, %d hits", resp.Status, hits.Load())
	}
}

// TestWords: fetch errors in words, never an answer's text: a TLS
// origin whose certificate this host does not trust, too many redirects,
// a refused connection, a name that does not resolve.
func TestWords(t *testing.T) {
	r := &Rule{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	c := r.Client(10 * time.Second)
	ctx := context.Background()
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(tlsSrv.Close)
	if _, err := r.Get(ctx, c, tlsSrv.URL); !strings.Contains(Words(err), "TLS handshake failed") {
		t.Errorf("untrusted TLS origin: %q (%v)", Words(err), err)
	}
	loop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/again", http.StatusFound)
	}))
	t.Cleanup(loop.Close)
	if _, err := r.Get(ctx, c, loop.URL); !strings.Contains(Words(err), "more than 5 redirects") {
		t.Errorf("redirect loop: %q (%v)", Words(err), err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	if _, err := r.Get(ctx, c, "http://"+addr+"/"); Words(err) != "the connection was refused" {
		t.Errorf("closed port: %q (%v)", Words(err), err)
	}
	// (No lookup of a name that does not resolve: it would ask the
	// host's DNS server, off loopback.)
	if w := Words(&net.DNSError{Name: "images.example", Err: "no such host", IsNotFound: true}); w != "the name images.example does not resolve" {
		t.Errorf("unknown name: %q", w)
	}
}
