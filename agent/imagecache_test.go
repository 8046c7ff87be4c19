package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/bmedge/bmedge/protocol"
)

func writeImageCmd(args map[string]any) *protocol.Message {
	return &protocol.Message{Kind: protocol.KindCommand, ID: "c1", Node: "n1", Action: protocol.ActionInbandRun,
		Step: &protocol.Step{Interface: "deploy", Step: "write_image", Args: args}}
}

// TestImageArgs: a write_image step goes to the cache when its image can
// be verified; the command given is not changed; a simulated ramdisk
// fetches the cache URL and checks the image.
func TestImageArgs(t *testing.T) {
	img := []byte(strings.Repeat("bmedge image ", 100000))
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(img) }))
	t.Cleanup(origin.Close)
	h := sha256.Sum256(img)
	sum := "sha256:" + hex.EncodeToString(h[:])

	a := New(Config{Site: "s1", Cache: ImageCacheOptions{Dir: t.TempDir(), Listen: "127.0.0.1:0", MaxBytes: 1 << 30, FetchAllow: loopback}})
	stop, err := a.cache.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	base := "http://" + a.ImageCacheAddr() + "/images/"

	m := writeImageCmd(map[string]any{"image_source": origin.URL + "/x.raw", "image_checksum": sum, "root_device": map[string]any{"size": 10}})
	out := a.cache.ImageArgs(m)
	src, _ := out.Step.Args["image_source"].(string)
	if !strings.HasPrefix(src, base) || out.Step.Args["image_checksum"] != sum || out.Step.Args["root_device"] == nil {
		t.Fatalf("rewritten args %v", out.Step.Args)
	}
	if m.Step.Args["image_source"] != origin.URL+"/x.raw" {
		t.Fatalf("imageArgs changed the command it was given: %v", m.Step.Args)
	}
	if again := a.cache.ImageArgs(out); again.Step.Args["image_source"] != src {
		t.Errorf("a cache URL was rewritten again: %v", again.Step.Args)
	}
	if err := a.sim.FetchImage(context.Background(), src, out.Step.Args); err != nil {
		t.Fatalf("simulated ramdisk through the cache: %v", err)
	}
	// os_hash wins over image_checksum, as in the ramdisk.
	m2 := writeImageCmd(map[string]any{"image_source": origin.URL + "/y.raw", "image_checksum": "junk",
		"image_os_hash_algo": "sha256", "image_os_hash_value": strings.Repeat("1", 64)})
	out2 := a.cache.ImageArgs(m2)
	src2, _ := out2.Step.Args["image_source"].(string)
	if !strings.HasPrefix(src2, base) {
		t.Fatalf("os_hash image not cached: %v", out2.Step.Args)
	}
	if err := a.sim.FetchImage(context.Background(), src2, out2.Step.Args); err == nil || !strings.Contains(err.Error(), "checksum mismatch") {
		t.Errorf("simulated ramdisk, wrong checksum: %v", err)
	}

	// Left to the ramdisk: no checksum, not http, not write_image.
	for _, m := range []*protocol.Message{
		writeImageCmd(map[string]any{"image_source": origin.URL + "/z.raw"}),
		writeImageCmd(map[string]any{"image_source": "file:///img", "image_checksum": sum}),
		{Kind: protocol.KindCommand, Action: protocol.ActionInbandRun, Step: &protocol.Step{Interface: "deploy", Step: "erase_devices", Args: map[string]any{"image_source": origin.URL}}},
		{Kind: protocol.KindCommand, Action: protocol.ActionAbort},
	} {
		if out := a.cache.ImageArgs(m); out != m {
			t.Errorf("imageArgs changed %v", m.Step)
		}
	}
	// A simulated ramdisk without a cache in between fetches nothing.
	if err := a.sim.FetchImage(context.Background(), "http://127.0.0.1:1/bench.img", nil); err != nil {
		t.Errorf("plain origin URL: %v", err)
	}
}

// loopback is the fetch allowance of the tests' image servers, which run
// on 127.0.0.1 (agent/fetchrule refuses loopback otherwise).
var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
