package sitecache

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
	secret := []byte("H4sIAAAAAAAAA-secret-config-drive-" + strings.Repeat("x", 5000))
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/cd" {
			http.Error(w, "no", http.StatusForbidden)
			return
		}
		_, _ = w.Write(secret)
	}))
	t.Cleanup(origin.Close)
	dir := t.TempDir()
	sc := New(Config{Site: "s1", Opts: Options{Dir: dir, Listen: "127.0.0.1:0", MaxBytes: 1 << 30}})
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
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte("secret-config-drive")) {
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
	if resp.StatusCode != 502 || !strings.Contains(string(body), "403") || strings.Contains(string(body), "sig=") {
		t.Errorf("origin refusal: %s %q; want 502 naming the origin's 403 without the query", resp.Status, body)
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
