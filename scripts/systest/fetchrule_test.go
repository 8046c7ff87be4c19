package systest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/coordinator/configdrive"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestFetchRuleRefusals (issue 30, acceptance 1): an edge agent whose
// operator allows only 127.0.0.2 (the image server's address here) is
// asked to deploy with config drive and image URLs to 127.0.0.1 (a
// loopback-only server standing for the agent host's metrics), ::1,
// 169.254.169.254, the agent's own image cache listener, a redirect from
// the allowed origin to loopback and to the metadata address, and a body
// that is no config drive: every deploy fails before a byte of it
// reaches the (simulated) node, its last_error names the rule and
// --fetch-allow (or says the body is no config drive), and carries
// neither the internal server's status line nor a digest of its answer;
// the loopback-only server is never asked. The same deploy with an
// allowed config drive goes through. A pre-seed of a loopback URL is
// refused in the same words.
func TestFetchRuleRefusals(t *testing.T) {
	metrics := "# HELP agent_internal only for this host\nagent_internal 1\n"
	var internalHits atomic.Int32
	internal := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		internalHits.Add(1)
		_, _ = w.Write([]byte(metrics))
	}))
	t.Cleanup(internal.Close)
	_, iport, _ := net.SplitHostPort(internal.Listener.Addr().String())

	img := make([]byte, 64<<10)
	for i := range img {
		img[i] = byte(i * 7)
	}
	h := sha256.Sum256(img)
	sum := "sha256:" + hex.EncodeToString(h[:])
	iso, err := configdrive.BuildISO("config-2", map[string][]byte{"openstack/latest/meta_data.json": []byte(`{"uuid":"x"}`)})
	if err != nil {
		t.Fatal(err)
	}
	drive, err := configdrive.Encode(iso)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("no 127.0.0.2 here: %v", err)
	}
	origin := &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/image.raw":
			_, _ = w.Write(img)
		case "/drive":
			_, _ = w.Write([]byte(drive))
		case "/to-loopback":
			http.Redirect(w, r, internal.URL+"/metrics", http.StatusFound)
		case "/to-metadata":
			http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
		default:
			_, _ = w.Write([]byte("<html><body>not a config drive</body></html>"))
		}
	})}}
	origin.Start()
	t.Cleanup(origin.Close)

	c := testrig.Coordinator(t, testrig.Options{})
	cl := testrig.NewClient(t, c)
	var creds agent.Credentials
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "rule1"}, &creds); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	cases := []struct{ name, configdrive, image, want string }{
		{"config drive on loopback", internal.URL + "/metrics", "", "it is a loopback address"},
		{"config drive on ::1", "http://[::1]:" + iport + "/metrics", "", "it is a loopback address"},
		{"config drive on the metadata address", "http://169.254.169.254/latest/user-data", "", "link-local"},
		{"config drive from the agent's own listener", "OWN", "", "the edge agent's own listeners"},
		{"config drive redirected to loopback", origin.URL + "/to-loopback", "", "a redirect to 127.0.0.1:" + iport + " was refused"},
		{"config drive redirected to the metadata address", origin.URL + "/to-metadata", "", "a redirect to 169.254.169.254 was refused"},
		{"config drive that is no config drive", origin.URL + "/page", "", "not a config drive"},
		{"image on loopback", "", internal.URL + "/image.raw", "it is a loopback address"},
		{"image redirected to loopback", "", origin.URL + "/to-loopback", "a redirect to 127.0.0.1:" + iport + " was refused"},
		{"allowed", origin.URL + "/drive", "", ""},
	}
	a := testrig.StartAgentConfig(t, creds, agent.Config{
		Sim: agent.SimOptions{Nodes: len(cases), StepDuration: 20 * time.Millisecond, BootDelay: 20 * time.Millisecond},
		Cache: agent.ImageCacheOptions{Dir: t.TempDir(), Listen: "127.0.0.2:0", MaxBytes: 1 << 30,
			FetchAllow: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}},
	})
	ids := availableNodes(t, cl, "rule1", len(cases))
	for i, tc := range cases {
		image := tc.image
		if image == "" {
			image = origin.URL + "/image.raw"
		}
		setImage(t, cl, ids[i], image, sum)
		extra := map[string]any{}
		switch tc.configdrive {
		case "":
		case "OWN":
			extra["configdrive"] = "http://" + a.ImageCacheAddr() + "/images/0123"
		default:
			extra["configdrive"] = tc.configdrive
		}
		cl.MustVerb(ids[i], "active", extra)
	}
	for i, tc := range cases {
		n := cl.WaitRest(ids[i], 2*time.Minute)
		if tc.want == "" {
			if n.State != "active" {
				t.Errorf("%s: %q, last_error %q; want active", tc.name, n.State, n.LastError)
			}
			continue
		}
		named := strings.Contains(n.LastError, "--fetch-allow") || tc.want == "not a config drive" || tc.want == "the edge agent's own listeners"
		if n.State != "deploy failed" || !strings.Contains(n.LastError, tc.want) || !named {
			t.Errorf("%s: %q, last_error %q; want deploy failed saying %q and naming --fetch-allow", tc.name, n.State, n.LastError, tc.want)
		}
		mh := sha256.Sum256([]byte(metrics))
		for _, never := range []string{"200 OK", "agent_internal", hex.EncodeToString(mh[:])} {
			if strings.Contains(n.LastError, never) {
				t.Errorf("%s: last_error %q shows %q of the internal answer", tc.name, n.LastError, never)
			}
		}
		if i == 0 {
			t.Logf("last_error: %s", n.LastError)
		}
	}
	if n := internalHits.Load(); n != 0 {
		t.Errorf("the loopback-only server was asked %d times", n)
	}
	st := preseed(t, cl, "rule1", internal.URL+"/image.raw", sum)
	if msg := fmt.Sprint(st["error"], st["last_error"], st["message"]); st["state"] != "failed" || !strings.Contains(msg, "loopback") || !strings.Contains(msg, "--fetch-allow") {
		t.Errorf("pre-seed of a loopback URL: %v", st)
	}
	if n := internalHits.Load(); n != 0 {
		t.Errorf("the loopback-only server was asked %d times", n)
	}
}
