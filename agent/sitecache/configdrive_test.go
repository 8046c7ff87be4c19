package sitecache

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/bmedge/bmedge/coordinator/configdrive"
	"github.com/bmedge/bmedge/protocol"
)

// TestConfigDriveThroughCache: a write_image command's config drive URL
// is replaced by the site cache's pass-through URL (an image without a
// checksum as well); a GET of it streams the origin's answer, and nothing
// of it is written into the cache's folder; a resent command keeps its
// URL; an unknown token is 404; an origin's refusal is a 502 that names
// the URL without its query; a config drive that is not a URL is left
// alone.
func TestConfigDriveThroughCache(t *testing.T) {
	secret := []byte(testDriveWith(t, "secret-config-drive-"+strings.Repeat("x", 5000)))
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/cd" {
			http.Error(w, "no", http.StatusForbidden)
			return
		}
		_, _ = w.Write(secret)
	}))
	t.Cleanup(origin.Close)
	dir := t.TempDir()
	sc := New(Config{Site: "s1", Opts: Options{Dir: dir, Listen: "127.0.0.1:0", MaxBytes: 1 << 30, FetchAllow: loopback}})
	stop, err := sc.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	base := "http://" + sc.Addr() + DrivePathPrefix

	m := writeImageCmd(map[string]any{"image_source": origin.URL + "/img", "configdrive": origin.URL + "/cd?sig=abc"})
	out := sc.ImageArgs(m)
	u, _ := out.Step.Args["configdrive"].(string)
	if !strings.HasPrefix(u, base) || m.Step.Args["configdrive"] != origin.URL+"/cd?sig=abc" {
		t.Fatalf("configdrive %q (given %v), want a URL under %s and the command unchanged", u, m.Step.Args["configdrive"], base)
	}
	if again := sc.ImageArgs(m); again.Step.Args["configdrive"] != u {
		t.Errorf("a resent command got another URL: %v", again.Step.Args["configdrive"])
	}
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Equal(got, secret) {
		t.Fatalf("GET %s: %s, %d bytes", u, resp.Status, len(got))
	}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if b, _ := os.ReadFile(p); bytes.Contains(b, secret[:64]) {
				t.Errorf("%s holds the config drive", p)
			}
		}
		return nil
	})
	if resp, err := http.Get(base + "00000000000000000000000000000000"); err != nil || resp.StatusCode != 404 {
		t.Errorf("unknown token: %v %v", resp, err)
	}
	m2 := writeImageCmd(map[string]any{"image_source": origin.URL + "/img", "configdrive": origin.URL + "/gone?sig=abc"})
	m2.ID = "c2"
	u2, _ := sc.ImageArgs(m2).Step.Args["configdrive"].(string)
	resp, err = http.Get(u2)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 502 || !strings.Contains(string(body), "did not answer with it") || strings.Contains(string(body), "403") ||
		strings.Contains(string(body), "Forbidden") || strings.Contains(string(body), "sig=") {
		t.Errorf("origin refusal: %s %q; want 502 saying so, without the origin's status line or the query", resp.Status, body)
	}
	m3 := writeImageCmd(map[string]any{"image_source": origin.URL + "/img", "configdrive": "H4sIAAAA"})
	if out := sc.ImageArgs(m3); out.Step.Args["configdrive"] != "H4sIAAAA" {
		t.Errorf("an inline config drive was changed: %v", out.Step.Args["configdrive"])
	}
}

func writeImageCmd(args map[string]any) *protocol.Message {
	return &protocol.Message{Kind: protocol.KindCommand, ID: "c1", Node: "n1", Action: protocol.ActionInbandRun,
		Step: &protocol.Step{Interface: "deploy", Step: "write_image", Args: args}}
}

// loopback allows the tests' origins, on 127.0.0.1.
var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

// testDrive is a config drive as the coordinator makes one: the gzipped,
// base64-encoded text of an ISO 9660 image.
func testDrive(t *testing.T) string { return testDriveWith(t, "{}") }

func testDriveWith(t *testing.T, userData string) string {
	t.Helper()
	iso, err := configdrive.BuildISO("config-2", map[string][]byte{"openstack/latest/user_data": []byte(userData)})
	if err != nil {
		t.Fatal(err)
	}
	s, err := configdrive.Encode(iso)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// get is the status and body of a GET of u.
func get(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestConfigDriveFetchRule (issue 30, acceptance 1): config drive URLs
// to 127.0.0.1, ::1, 169.254.169.254, the agent's own listeners and a
// redirect to any of them are refused before anything reaches the node,
// in words naming the rule and the flag that allows it; the same URL is
// passed on once its network is allowed; a body that is not a config
// drive is refused; no answer carries the origin's status line or a
// digest of what it sent.
func TestConfigDriveFetchRule(t *testing.T) {
	drive := testDrive(t)
	var internalHits int
	var mu sync.Mutex
	internal := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		internalHits++
		mu.Unlock()
		if r.URL.Path == "/metrics" {
			_, _ = w.Write([]byte("# HELP internal_metric only for loopback\ninternal_metric 1\n"))
			return
		}
		_, _ = w.Write([]byte(drive))
	}))
	t.Cleanup(internal.Close)
	_, port, _ := net.SplitHostPort(internal.Listener.Addr().String())
	// An origin the operator allows (127.0.0.2) redirecting to loopback.
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("no 127.0.0.2 here: %v", err)
	}
	outside := &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/to-loopback":
			http.Redirect(w, r, internal.URL+"/metrics", http.StatusFound)
		case "/to-metadata":
			http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
		case "/not-a-drive":
			_, _ = w.Write([]byte("<html>" + strings.Repeat("hello ", 10000) + "</html>"))
		case "/text":
			_, _ = w.Write([]byte("SGVsbG8gd29ybGQ=")) // base64, not gzip
		default:
			_, _ = w.Write([]byte(drive))
		}
	})}}
	outside.Start()
	t.Cleanup(outside.Close)

	start := func(allow []netip.Prefix) *Cache {
		sc := New(Config{Site: "s1", Opts: Options{Dir: t.TempDir(), Listen: "127.0.0.2:0", MaxBytes: 1 << 30,
			FetchAllow: allow}, Own: func() []string { return []string{"127.0.0.2:1883"} }})
		stop, err := sc.Start(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stop)
		return sc
	}
	n := 0
	fetch := func(sc *Cache, u string) (int, string) {
		n++
		m := writeImageCmd(map[string]any{"image_source": "http://192.0.2.1/img", "configdrive": u})
		m.ID = fmt.Sprint("c", n)
		pu, _ := sc.ImageArgs(m).Step.Args["configdrive"].(string)
		if !strings.Contains(pu, DrivePathPrefix) {
			t.Fatalf("configdrive %q not taken through the site cache", pu)
		}
		return get(t, pu)
	}
	only2 := []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}
	sc := start(only2)
	_, ownPort, _ := net.SplitHostPort(sc.Addr())
	sum := sha256.Sum256([]byte("# HELP internal_metric only for loopback\ninternal_metric 1\n"))
	for _, tc := range []struct{ url, want string }{
		{internal.URL + "/metrics", "loopback"},
		{"http://[::1]:" + port + "/metrics", "loopback"},
		{"http://localhost:" + port + "/metrics", "loopback"},
		{"http://169.254.169.254/latest/meta-data/", "link-local"},
		{"http://127.0.0.2:" + ownPort + "/images/x", "edge agent's own listeners"},
		{"http://127.0.0.2:1883/", "edge agent's own listeners"},
		{outside.URL + "/to-loopback", "a redirect to 127.0.0.1:" + port + " was refused"},
		{outside.URL + "/to-metadata", "a redirect to 169.254.169.254 was refused"},
	} {
		status, body := fetch(sc, tc.url)
		if status != http.StatusForbidden || !strings.Contains(body, tc.want) || !strings.Contains(body, "the config drive from ") {
			t.Errorf("%s: %d %q; want 403 saying %q", tc.url, status, body, tc.want)
		}
		if !strings.Contains(tc.want, "own listeners") && !strings.Contains(body, "--fetch-allow") {
			t.Errorf("%s: %q does not name --fetch-allow", tc.url, body)
		}
		if strings.Contains(body, "internal_metric") || strings.Contains(body, hex.EncodeToString(sum[:])) || strings.Contains(body, "200 OK") {
			t.Errorf("%s: the refusal shows what the internal answer was: %q", tc.url, body)
		}
	}
	mu.Lock()
	if internalHits != 0 {
		t.Errorf("the loopback-only server was reached %d times", internalHits)
	}
	mu.Unlock()
	for _, tc := range []struct{ path, want string }{
		{"/not-a-drive", "neither an ISO 9660 nor a VFAT image"},
		{"/text", "not the base64 of gzip data"},
	} {
		status, body := fetch(sc, outside.URL+tc.path)
		if status != http.StatusBadGateway || !strings.Contains(body, tc.want) || strings.Contains(body, "hello") {
			t.Errorf("%s: %d %q; want 502 saying %q", tc.path, status, body, tc.want)
		}
	}
	if status, body := fetch(sc, outside.URL+"/drive"); status != 200 || body != drive {
		t.Errorf("a config drive from an allowed origin: %d, %d bytes", status, len(body))
	}

	// Once the operator allows loopback, the same URLs are passed on; the
	// agent's own listeners stay refused.
	sc = start(loopback)
	for _, u := range []string{internal.URL + "/drive", "http://localhost:" + port + "/drive", outside.URL + "/redirect-ok"} {
		if status, body := fetch(sc, u); status != 200 || body != drive {
			t.Errorf("%s allowed: %d %q", u, status, body[:min(len(body), 200)])
		}
	}
	if status, body := fetch(sc, internal.URL+"/metrics"); status != http.StatusBadGateway || !strings.Contains(body, "not a config drive") {
		t.Errorf("metrics as a config drive, loopback allowed: %d %q", status, body)
	}
	_, ownPort, _ = net.SplitHostPort(sc.Addr())
	if status, body := fetch(sc, "http://127.0.0.2:"+ownPort+"/images/x"); status != http.StatusForbidden || !strings.Contains(body, "own listeners") {
		t.Errorf("own listener, loopback allowed: %d %q", status, body)
	}
}

// TestBlobAndPreseedFetchRule (issue 30, acceptance 1): a firmware image
// (BlobURL) and a pre-seed from 127.0.0.1, ::1 or 169.254.169.254, or
// redirected there, are refused naming the rule and --fetch-allow, the
// origin never asked; allowed, the same firmware URL is fetched; a
// checksum mismatch names neither the origin's status nor the digest of
// what it sent.
func TestBlobAndPreseedFetchRule(t *testing.T) {
	img := []byte("firmware image bytes")
	h := sha256.Sum256(img)
	sum := "sha256:" + hex.EncodeToString(h[:])
	var hits int
	var mu sync.Mutex
	internal := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits++
		mu.Unlock()
		_, _ = w.Write(img)
	}))
	t.Cleanup(internal.Close)
	_, port, _ := net.SplitHostPort(internal.Listener.Addr().String())
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("no 127.0.0.2 here: %v", err)
	}
	outside := &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/other.bin" {
			_, _ = w.Write([]byte("another image"))
			return
		}
		http.Redirect(w, r, internal.URL+"/fw.bin", http.StatusFound)
	})}}
	outside.Start()
	t.Cleanup(outside.Close)
	start := func(allow []netip.Prefix) *Cache {
		sc := New(Config{Site: "s1", Opts: Options{Dir: t.TempDir(), Listen: "127.0.0.2:0", MaxBytes: 1 << 30, FetchAllow: allow}})
		stop, err := sc.Start(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stop)
		return sc
	}
	sc := start([]netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")})
	ctx := context.Background()
	for _, tc := range []struct{ url, want string }{
		{internal.URL + "/fw.bin", "loopback"},
		{"http://[::1]:" + port + "/fw.bin", "loopback"},
		{"http://169.254.169.254/fw.bin", "link-local"},
		{outside.URL + "/fw.bin", "a redirect to 127.0.0.1:" + port + " was refused"},
	} {
		_, err := sc.BlobURL(ctx, tc.url, sum)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "--fetch-allow") {
			t.Errorf("firmware from %s: %v; want refused saying %q and --fetch-allow", tc.url, err, tc.want)
		}
		m := &protocol.Message{Kind: protocol.KindCommand, ID: "p-" + tc.url, Args: map[string]any{"url": tc.url + "?p", "checksum": sum}}
		if _, err := sc.Preseed(ctx, m); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("pre-seed of %s: %v; want refused saying %q", tc.url, err, tc.want)
		}
	}
	mu.Lock()
	if hits != 0 {
		t.Errorf("the loopback-only origin was asked %d times", hits)
	}
	mu.Unlock()
	other := sha256.Sum256([]byte("another image"))
	_, err = sc.BlobURL(ctx, outside.URL+"/other.bin", sum)
	if err == nil || !strings.Contains(err.Error(), "checksum mismatch") || strings.Contains(err.Error(), hex.EncodeToString(other[:])) || strings.Contains(err.Error(), "200 OK") {
		t.Errorf("mismatching firmware: %v; want a checksum mismatch without the digest of what came", err)
	}
	sc = start(loopback)
	u, err := sc.BlobURL(ctx, internal.URL+"/fw.bin", sum)
	if err != nil || !strings.Contains(u, "/images/") {
		t.Fatalf("firmware from loopback, allowed: %q %v", u, err)
	}
}

// TestFetchAllowNeedsCache: --fetch-allow without an image cache would
// allow nothing; it is refused, saying so.
func TestFetchAllowNeedsCache(t *testing.T) {
	_, err := New(Config{Site: "s1", Opts: Options{FetchAllow: loopback}}).Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "--fetch-allow and --bmc-network go with --image-cache-dir") {
		t.Fatalf("--fetch-allow without a cache: %v", err)
	}
}
