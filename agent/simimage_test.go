package agent

import (
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/bmedge/bmedge/protocol"
)

// TestSimWriteImage: on a site with an image cache, a simulated ramdisk's
// write_image fetches the image as the real ramdisk does and fails the
// step, with an error that says why, on a bad URL, a checksum mismatch or
// no checksum; without an image cache it fetches nothing.
func TestSimWriteImage(t *testing.T) {
	img := []byte(strings.Repeat("bmedge simulated image ", 50000))
	var served atomic.Int64
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/good.raw" {
			http.NotFound(w, r)
			return
		}
		served.Add(1)
		_, _ = w.Write(img)
	}))
	t.Cleanup(origin.Close)
	h := sha256.Sum256(img)
	sum := "sha256:" + hex.EncodeToString(h[:])
	wrong := "sha256:" + strings.Repeat("0", 64)
	// A port nothing listens on: bound, then closed.
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL + "/gone.raw"
	dead.Close()

	a := New(Config{Site: "s1", Cache: ImageCacheOptions{Dir: t.TempDir(), Listen: "127.0.0.1:0", MaxBytes: 1 << 30, FetchAllow: loopback}})
	stop, err := a.cache.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	r := a.sim.Runner("n1", SimOptions{})
	// run is the step as the agent hands it to the ramdisk (imageArgs).
	run := func(args map[string]any) error {
		m := a.cache.ImageArgs(writeImageCmd(args))
		_, err := r.Run(context.Background(), *m.Step, func(float64, string) {})
		return err
	}

	if err := run(map[string]any{"image_source": origin.URL + "/good.raw", "image_checksum": sum}); err != nil {
		t.Fatalf("good image through the cache: %v", err)
	}
	if served.Load() != 1 {
		t.Fatalf("origin served the image %d times, want 1 (through the cache)", served.Load())
	}
	for _, c := range []struct {
		name string
		args map[string]any
		want []string
	}{
		{"unreachable origin", map[string]any{"image_source": deadURL, "image_checksum": sum},
			[]string{"site image cache: cannot fetch image " + deadURL, "connection was refused"}},
		{"not found at the origin", map[string]any{"image_source": origin.URL + "/missing.raw", "image_checksum": sum},
			[]string{"site image cache: the origin", "did not answer with the image (not 200 OK"}},
		{"checksum mismatch", map[string]any{"image_source": origin.URL + "/good.raw", "image_checksum": wrong},
			[]string{"checksum mismatch", "is not the " + strings.TrimPrefix(wrong, "sha256:") + " given"}},
		{"no checksum", map[string]any{"image_source": origin.URL + "/good.raw"},
			[]string{"no image checksum given"}},
		{"no checksum, bad URL", map[string]any{"image_source": deadURL},
			[]string{"no image checksum given"}},
		{"md5", map[string]any{"image_source": origin.URL + "/good.raw", "image_checksum": "md5:" + strings.Repeat("a", 32)},
			[]string{"is md5, which is taken only when the operator allows it", "--allow-md5-checksum"}},
		{"md5 allowed, wrong", map[string]any{"image_source": origin.URL + "/good.raw", "image_checksum": "md5:" + strings.Repeat("a", 32), protocol.ArgAllowMD5Checksum: true},
			[]string{"checksum mismatch"}},
		{"no image_source", map[string]any{"image_checksum": sum},
			[]string{"needs instance_info/image_source"}},
	} {
		err := run(c.args)
		if err == nil {
			t.Errorf("%s: write_image succeeded", c.name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", c.name, err, w)
			}
		}
		// Never a status line of an answer, nor the digest of what
		// came back (the image's, where the checksum given is wrong).
		for _, n := range []string{"Bad Gateway", "Not Found", "dial tcp"} {
			if strings.Contains(err.Error(), n) {
				t.Errorf("%s: error %q tells %q", c.name, err, n)
			}
		}
		if c.args["image_checksum"] == wrong && strings.Contains(err.Error(), hex.EncodeToString(h[:])) {
			t.Errorf("%s: error %q tells the digest of what came back", c.name, err)
		}
	}

	// md5, allowed by the coordinator (allow_md5_checksum): verified.
	m5 := md5.Sum(img)
	if err := run(map[string]any{"image_source": origin.URL + "/good.raw", "image_checksum": hex.EncodeToString(m5[:]), protocol.ArgAllowMD5Checksum: true}); err != nil {
		t.Errorf("md5 allowed, right digest: %v", err)
	}

	// An image the agent did not take through the cache (here: handed to
	// the ramdisk as is) is fetched from its origin and verified.
	direct := func(args map[string]any) error {
		_, err := r.Run(context.Background(), *writeImageCmd(args).Step, func(float64, string) {})
		return err
	}
	before := served.Load()
	if err := direct(map[string]any{"image_source": origin.URL + "/good.raw", "image_checksum": sum}); err != nil {
		t.Fatalf("good image from its origin: %v", err)
	}
	if served.Load() != before+1 {
		t.Errorf("origin not asked for the image (served %d, was %d)", served.Load(), before)
	}
	for _, c := range []struct {
		name string
		args map[string]any
		want string
	}{
		{"unreachable", map[string]any{"image_source": deadURL, "image_checksum": sum},
			"cannot fetch image " + deadURL + " from its origin " + strings.TrimPrefix(dead.URL, "http://") + ": the connection was refused"},
		{"404", map[string]any{"image_source": origin.URL + "/missing.raw", "image_checksum": sum},
			"the origin " + strings.TrimPrefix(origin.URL, "http://") + " of image " + origin.URL + "/missing.raw did not answer with the image (not 200 OK: not found)"},
		{"mismatch", map[string]any{"image_source": origin.URL + "/good.raw", "image_checksum": wrong},
			"checksum mismatch for image " + origin.URL + "/good.raw: its sha256 is not the " + strings.TrimPrefix(wrong, "sha256:") + " given"},
		{"not http", map[string]any{"image_source": "file:///img.raw", "image_checksum": sum}, "not http:// or https://"},
	} {
		err := direct(c.args)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("origin, %s: error %v, want one saying %q", c.name, err, c.want)
			continue
		}
		for _, n := range []string{"Not Found", "dial tcp"} {
			if strings.Contains(err.Error(), n) {
				t.Errorf("origin, %s: error %q tells %q", c.name, err, n)
			}
		}
		if c.args["image_checksum"] == wrong && strings.Contains(err.Error(), hex.EncodeToString(h[:])) {
			t.Errorf("origin, %s: error %q tells the digest of what came back", c.name, err)
		}
	}

	// No image cache: the simulated nodes have no network.
	plain := New(Config{Site: "s2"}).sim.Runner("n2", SimOptions{})
	m := writeImageCmd(map[string]any{"image_source": deadURL})
	if _, err := plain.Run(context.Background(), *m.Step, func(float64, string) {}); err != nil {
		t.Errorf("site without an image cache: %v", err)
	}
}
