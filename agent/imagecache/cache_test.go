package imagecache

import (
	"net/netip"

	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/bmedge/bmedge/agent/fetchrule"
	"github.com/bmedge/bmedge/lib/clock"
	"github.com/bmedge/bmedge/lib/waitfor"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// origin is a test image server that counts what it serves.
type origin struct {
	srv      *httptest.Server
	data     []byte
	bytes    atomic.Int64
	requests atomic.Int64
	// gate, when set, holds the transfer after half the image until it
	// is closed.
	gate chan struct{}
	// cut closes the connection after this many bytes (0: never).
	cut int
	// chunked leaves out Content-Length.
	chunked bool
}

func newOrigin(t *testing.T, size int) *origin {
	t.Helper()
	o := &origin{data: pattern(size)}
	o.srv = httptest.NewServer(http.HandlerFunc(o.serve))
	t.Cleanup(o.srv.Close)
	return o
}

func pattern(size int) []byte {
	b := make([]byte, size)
	r := rand.New(rand.NewPCG(uint64(size), 7))
	for i := 0; i+8 <= size; i += 8 {
		v := r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

func (o *origin) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/image.raw" {
		http.NotFound(w, r)
		return
	}
	o.requests.Add(1)
	if !o.chunked {
		w.Header().Set("Content-Length", strconv.Itoa(len(o.data)))
	}
	w.WriteHeader(200)
	fl := w.(http.Flusher)
	half := len(o.data) / 2
	for off := 0; off < len(o.data); {
		end := min(off+256<<10, len(o.data))
		if o.gate != nil && off < half && end >= half {
			end = half
		}
		if o.cut > 0 && end > o.cut {
			end = o.cut
		}
		n, err := w.Write(o.data[off:end])
		o.bytes.Add(int64(n))
		if err != nil {
			return
		}
		off = end
		fl.Flush()
		if o.cut > 0 && off >= o.cut {
			panic(http.ErrAbortHandler)
		}
		if o.gate != nil && off == half {
			select {
			case <-o.gate:
			case <-r.Context().Done():
				return
			}
		}
	}
}

func (o *origin) url() string { return o.srv.URL + "/image.raw" }

func (o *origin) sum() Checksum {
	h := sha256.Sum256(o.data)
	return Checksum{Algo: "sha256", Hex: hex.EncodeToString(h[:])}
}

func badSum() Checksum {
	return Checksum{Algo: "sha256", Hex: strings.Repeat("ab", 32)}
}

func openCache(t *testing.T, dir string, max int64) *Cache {
	t.Helper()
	c, err := Open(Options{Dir: dir, MaxBytes: max, StallTimeout: 5 * time.Second, Rule: loopbackRule})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// serveCache serves c's handler on loopback.
func serveCache(t *testing.T, c *Cache) string {
	t.Helper()
	s := httptest.NewServer(c.Handler())
	t.Cleanup(s.Close)
	return s.URL
}

type got struct {
	status int
	n      int64
	sum    string
	err    error
}

// get fetches url and hashes the body as a node would.
func get(url string) got {
	resp, err := http.Get(url)
	if err != nil {
		return got{err: err}
	}
	defer resp.Body.Close()
	h := sha256.New()
	n, err := io.Copy(h, resp.Body)
	return got{status: resp.StatusCode, n: n, sum: hex.EncodeToString(h.Sum(nil)), err: err}
}

// files lists the cache folder but its key.
func files(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, de := range des {
		if de.Name() != "token.key" {
			out = append(out, de.Name())
		}
	}
	return out
}

func TestConcurrentReadersOneDownload(t *testing.T) {
	const size = 64 << 20
	o := newOrigin(t, size)
	o.gate = make(chan struct{})
	dir := t.TempDir()
	c := openCache(t, dir, 1<<30)
	base := serveCache(t, c)
	token, err := c.Register(o.url(), o.sum())
	if err != nil {
		t.Fatal(err)
	}
	const readers = 10
	results := make(chan got, readers)
	for range readers {
		go func() { results <- get(base + PathPrefix + token) }()
	}
	// Every reader is in before the origin sends the second half.
	if !waitfor.Until(20*time.Second, func() bool { return flightRefs(c, o.url(), o.sum()) == readers+1 }) {
		t.Fatalf("only %d readers joined the download", flightRefs(c, o.url(), o.sum())-1)
	}
	if c.Cached(o.url(), o.sum()) {
		t.Fatal("image cached before its download ended")
	}
	close(o.gate)
	want := o.sum().Hex
	for range readers {
		g := <-results
		if g.err != nil || g.status != 200 || g.n != size || g.sum != want {
			t.Errorf("reader: status %d, %d bytes, err %v, sum ok %v", g.status, g.n, g.err, g.sum == want)
		}
	}
	if r, b := o.requests.Load(), o.bytes.Load(); r != 1 || b != size {
		t.Errorf("origin served %d requests, %d bytes; want 1, %d", r, b, size)
	}
	if !c.Cached(o.url(), o.sum()) {
		t.Fatal("image not cached after its download")
	}
	// Later requests come from disk.
	if g := get(base + PathPrefix + token); g.err != nil || g.n != size || g.sum != want {
		t.Errorf("from disk: %+v", g)
	}
	if r := o.requests.Load(); r != 1 {
		t.Errorf("origin asked %d times", r)
	}
	if st := c.Stats(); st.Images != 1 || st.Bytes != size || st.Downloading != 0 {
		t.Errorf("stats %+v", st)
	}
	// A pre-seed of a cached image says so.
	res, err := c.Fetch(context.Background(), o.url(), o.sum())
	if err != nil || !res.AlreadyCached || res.Size != size {
		t.Errorf("fetch of a cached image: %+v, %v", res, err)
	}
}

// flightRefs is how many hold the download of an image under way (its
// readers, and the download itself); 0 when none is under way.
func flightRefs(c *Cache, u string, sum Checksum) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[keyOf(u, sum)]
	if e == nil || e.fl == nil {
		return 0
	}
	e.fl.mu.Lock()
	defer e.fl.mu.Unlock()
	return e.fl.refs
}

func TestWrongChecksumFailsEveryReader(t *testing.T) {
	for _, chunked := range []bool{false, true} {
		t.Run(fmt.Sprintf("chunked=%v", chunked), func(t *testing.T) {
			const size = 8 << 20
			o := newOrigin(t, size)
			o.chunked = chunked
			o.gate = make(chan struct{})
			dir := t.TempDir()
			c := openCache(t, dir, 1<<30)
			base := serveCache(t, c)
			token, err := c.Register(o.url(), badSum())
			if err != nil {
				t.Fatal(err)
			}
			const readers = 10
			results := make(chan got, readers)
			for range readers {
				go func() { results <- get(base + PathPrefix + token) }()
			}
			fetchErr := make(chan error, 1)
			go func() {
				_, err := c.Fetch(context.Background(), o.url(), badSum())
				fetchErr <- err
			}()
			// Every reader is in before the origin sends the second half
			// (the pre-seed, in or not, fails on the checksum).
			if !waitfor.Until(20*time.Second, func() bool { return flightRefs(c, o.url(), badSum()) == readers+1 }) {
				t.Fatalf("only %d readers joined the download", flightRefs(c, o.url(), badSum())-1)
			}
			close(o.gate)
			for range readers {
				g := <-results
				if g.status == 200 && g.err == nil {
					t.Errorf("a reader got a complete transfer of %d bytes from an image whose checksum failed", g.n)
				}
				if g.n >= size {
					t.Errorf("a reader got all %d bytes before the checksum was verified", g.n)
				}
			}
			if err := <-fetchErr; err == nil || !strings.Contains(err.Error(), "checksum mismatch") {
				t.Errorf("pre-seed error %v; want a checksum mismatch", err)
			}
			if f := files(t, dir); len(f) != 0 {
				t.Errorf("cache folder holds %v after a failed checksum", f)
			}
			if st := c.Stats(); st.Images != 0 || st.Downloading != 0 {
				t.Errorf("stats %+v", st)
			}
			// A reader that comes later fails too, with the reason.
			g := get(base + PathPrefix + token)
			if g.status != http.StatusBadGateway {
				t.Errorf("later reader: status %d, want 502", g.status)
			}
		})
	}
}

func TestPartialNeverServed(t *testing.T) {
	for _, chunked := range []bool{false, true} {
		t.Run(fmt.Sprintf("chunked=%v", chunked), func(t *testing.T) { testPartial(t, chunked) })
	}
}

func testPartial(t *testing.T, chunked bool) {
	const size = 4 << 20
	o := newOrigin(t, size)
	o.cut = size / 2
	o.chunked = chunked
	dir := t.TempDir()
	c := openCache(t, dir, 1<<30)
	base := serveCache(t, c)
	token, _ := c.Register(o.url(), o.sum())
	g := get(base + PathPrefix + token)
	if g.err == nil && g.status == 200 {
		t.Fatalf("a cut download was served complete (%d bytes)", g.n)
	}
	if _, err := c.Fetch(context.Background(), o.url(), o.sum()); err == nil || strings.Contains(err.Error(), "checksum") {
		t.Fatalf("pre-seed of a cut download: %v; want the cut named", err)
	}
	if f := files(t, dir); len(f) != 0 {
		t.Errorf("cache folder holds %v after a cut download", f)
	}
}

func TestStalledOrigin(t *testing.T) {
	o := newOrigin(t, 1<<20)
	o.gate = make(chan struct{}) // never opened
	dir := t.TempDir()
	c, err := Open(Options{Dir: dir, MaxBytes: 1 << 30, StallTimeout: 300 * time.Millisecond, Rule: loopbackRule})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	_, err = c.Fetch(context.Background(), o.url(), o.sum())
	if err == nil || !strings.Contains(err.Error(), "sent nothing for 300ms") {
		t.Fatalf("fetch from a stalled origin: %v", err)
	}
	if f := files(t, dir); len(f) != 0 {
		t.Errorf("cache folder holds %v", f)
	}
}

func TestOriginErrors(t *testing.T) {
	o := newOrigin(t, 1024)
	c := openCache(t, t.TempDir(), 1<<20)
	base := serveCache(t, c)
	missing := strings.Replace(o.srv.URL, "http://", "http://user:pw@", 1) + "/nope.raw?sig=secret"
	_, err := c.Fetch(context.Background(), missing, o.sum())
	if err == nil || !strings.Contains(err.Error(), "did not answer with the image") || strings.Contains(err.Error(), "404") || strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "pw") {
		t.Errorf("fetch of a missing image: %v", err)
	}
	token, _ := c.Register(missing, o.sum())
	if g := get(base + PathPrefix + token); g.status != http.StatusBadGateway {
		t.Errorf("node asking for a missing image: %d", g.status)
	}
	// Only registered images are served: no way to make the agent fetch.
	if g := get(base + PathPrefix + strings.Repeat("0", 32)); g.status != 404 {
		t.Errorf("unknown token: %d", g.status)
	}
	if _, err := c.Register("file:///etc/passwd", o.sum()); err == nil {
		t.Error("file URL registered")
	}
	if _, err := c.Register(o.url(), Checksum{Algo: "crc32", Hex: "00"}); err == nil {
		t.Error("bad checksum registered")
	}
	big := newOrigin(t, 2<<20)
	_, err = c.Fetch(context.Background(), big.url(), big.sum())
	if err == nil || !strings.Contains(err.Error(), "larger than the whole site cache") {
		t.Errorf("image over the cap: %v", err)
	}
	if big.bytes.Load() > 0 {
		// The origin may have started sending before the client hung up;
		// what matters is that nothing was stored.
		t.Logf("origin sent %d bytes of an image over the cap", big.bytes.Load())
	}
}

func TestLRU(t *testing.T) {
	const size = 1 << 20
	var origins []*origin
	for i := range 4 {
		o := newOrigin(t, size+i) // distinct contents
		origins = append(origins, o)
	}
	// The images' last use is on a fake clock, moved between uses.
	fk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	c, err := Open(Options{Dir: t.TempDir(), MaxBytes: 3*size + 10, StallTimeout: 5 * time.Second, Rule: loopbackRule, Clock: fk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx := context.Background()
	for _, o := range origins[:3] {
		if _, err := c.Fetch(ctx, o.url(), o.sum()); err != nil {
			t.Fatal(err)
		}
		fk.Advance(time.Second)
	}
	// origins[0] is used again: origins[1] is now the least recent.
	base := serveCache(t, c)
	tok0, _ := c.Register(origins[0].url(), origins[0].sum())
	if g := get(base + PathPrefix + tok0); g.err != nil || g.status != 200 {
		t.Fatal(g)
	}
	if _, err := c.Fetch(ctx, origins[3].url(), origins[3].sum()); err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, false, true, true} {
		if got := c.Cached(origins[i].url(), origins[i].sum()); got != want {
			t.Errorf("image %d cached %v, want %v", i, got, want)
		}
	}
	if st := c.Stats(); st.Bytes > 3*size+10 || st.Images != 3 {
		t.Errorf("stats %+v over the cap", st)
	}
}

func TestRestartKeepsCompleteOnly(t *testing.T) {
	const size = 1 << 20
	o := newOrigin(t, size)
	dir := t.TempDir()
	c, err := Open(Options{Dir: dir, MaxBytes: 1 << 30, Rule: loopbackRule})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Fetch(context.Background(), o.url(), o.sum()); err != nil {
		t.Fatal(err)
	}
	token, _ := c.Register(o.url(), o.sum())
	c.Close()
	// A download interrupted by a crash leaves a .part file.
	part := filepath.Join(dir, keyOf("http://x/y", o.sum())+".123.part")
	if err := os.WriteFile(part, []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	c2 := openCache(t, dir, 1<<30)
	if _, err := os.Stat(part); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("partial download kept across a restart: %v", err)
	}
	if !c2.Cached(o.url(), o.sum()) {
		t.Fatal("complete image lost across a restart")
	}
	// The token of before the restart still works, from disk.
	base := serveCache(t, c2)
	if g := get(base + PathPrefix + token); g.err != nil || g.n != size || g.sum != o.sum().Hex {
		t.Errorf("after restart: %+v", g)
	}
	if r := o.requests.Load(); r != 1 {
		t.Errorf("origin asked %d times", r)
	}
}

func TestClientGoneDownloadGoesOn(t *testing.T) {
	o := newOrigin(t, 4<<20)
	o.gate = make(chan struct{})
	c := openCache(t, t.TempDir(), 1<<30)
	token, _ := c.Register(o.url(), o.sum())
	ctx, cancel := context.WithCancel(context.Background())
	r, err := c.OpenToken(ctx, token)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1024)
	if _, err := r.Read(buf); err != nil {
		t.Fatal(err)
	}
	cancel()
	r.Close()
	close(o.gate)
	res, err := c.Fetch(context.Background(), o.url(), o.sum())
	if err != nil || res.Size != 4<<20 {
		t.Fatalf("%+v %v", res, err)
	}
	if n := o.requests.Load(); n != 1 {
		t.Errorf("origin asked %d times", n)
	}
}

func TestParseChecksum(t *testing.T) {
	h := strings.Repeat("a", 64)
	for _, tc := range []struct {
		sum, algo, value string
		want             string
		bad              bool
	}{
		{sum: h, want: "sha256:" + h},
		{sum: "SHA256:" + strings.ToUpper(h), want: "sha256:" + h},
		{sum: strings.Repeat("b", 32), want: "md5:" + strings.Repeat("b", 32)},
		{sum: strings.Repeat("c", 128), want: "sha512:" + strings.Repeat("c", 128)},
		{sum: strings.Repeat("e", 96), want: "sha384:" + strings.Repeat("e", 96)},
		{sum: "x", algo: "sha384", value: strings.Repeat("f", 96), want: "sha384:" + strings.Repeat("f", 96)},
		{sum: "x", algo: "sha512", value: strings.Repeat("d", 128), want: "sha512:" + strings.Repeat("d", 128)},
		{sum: "", bad: true},
		{sum: "http://img/x.sha256", bad: true},
		{sum: "sha256:00", bad: true},
		{sum: "crc:00", bad: true},
		{algo: "sha256", value: "zz", bad: true},
	} {
		c, err := ParseChecksum(tc.sum, tc.algo, tc.value)
		if tc.bad != (err != nil) || (!tc.bad && c.String() != tc.want) {
			t.Errorf("ParseChecksum(%q, %q, %q) = %v, %v", tc.sum, tc.algo, tc.value, c, err)
		}
	}
}

// loopbackRule allows the tests' origins, which run on 127.0.0.1
// (agent/fetchrule refuses loopback otherwise).
var loopbackRule = &fetchrule.Rule{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}

// TestExistingFolderMadePrivate (issue 30): an existing image cache
// folder of mode 0755 is made 0700 when the cache opens it, its images
// kept.
func TestExistingFolderMadePrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "images")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := Open(Options{Dir: dir, MaxBytes: 1 << 20, Rule: loopbackRule})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Fatalf("image cache folder has mode %04o after Open, want 0700", fi.Mode().Perm())
	}
}
