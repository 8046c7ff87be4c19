package api_test

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// requireTool skips the test when path is missing, or fails it with
// BM_REQUIRE_ALL=1 (make test), naming the Debian package.
func requireTool(t *testing.T, path, pkg string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		if os.Getenv("BM_REQUIRE_ALL") == "1" {
			t.Fatalf("%s is missing (package %s); run scripts/install-test-deps.sh", path, pkg)
		}
		t.Skipf("%s is missing: install Debian's %s (scripts/install-test-deps.sh, which make test runs)", path, pkg)
	}
}

// withEnv returns a copy of b whose environment has kv instead of the
// variables of the same names.
func (b *bmCLI) withEnv(kv ...string) *bmCLI {
	set := map[string]bool{}
	for _, x := range kv {
		k, _, _ := strings.Cut(x, "=")
		set[k] = true
	}
	var env []string
	for _, x := range b.env {
		k, _, _ := strings.Cut(x, "=")
		if !set[k] {
			env = append(env, x)
		}
	}
	c := *b
	c.env = append(env, kv...)
	return &c
}

// TestBaremetalCLIBasicAuth drives a coordinator with --auth http_basic
// with the Debian `baremetal` CLI, authenticating as Ironic standalone's
// documentation says (OS_AUTH_TYPE=http_basic, OS_USERNAME, OS_PASSWORD,
// OS_ENDPOINT): it lists nodes and manages one. Without credentials, and
// with a wrong password, it gets 401 and exits non-zero, printing why.
// Over https it works with OS_CACERT and refuses the certificate without.
func TestBaremetalCLIBasicAuth(t *testing.T) {
	requireTool(t, baremetalPath, "python3-ironicclient")
	const user, password = "operator", "correct horse battery staple"
	c := testrig.Coordinator(t, testrig.Options{Users: map[string]string{user: password, "other": "other-password"}, User: user})
	testrig.Site(t, c, "site1", agent.SimOptions{Nodes: 2, StepDuration: 100 * time.Millisecond})
	api := testrig.NewClient(t, c)
	id := api.CreateNode("auth1", "site1", nil)
	other := api.CreateNode("auth2", "site1", nil)

	base := newBMCLI(t, "http://"+c.APIAddr)
	good := base.withEnv("OS_AUTH_TYPE=http_basic", "OS_USERNAME="+user, "OS_PASSWORD="+password)
	var list []map[string]any
	if !good.json(&list, "node", "list", "-f", "json") {
		t.FailNow()
	}
	names := map[any]any{}
	for _, row := range list {
		names[row["Name"]] = row["UUID"]
	}
	if len(list) != 2 || names["auth1"] != id || names["auth2"] != other {
		t.Fatalf("node list printed %v", list)
	}
	if _, ok := good.ok("node", "manage", "auth1", "--wait", "60"); !ok {
		t.FailNow()
	}
	if n := api.WaitRest(id, 5*time.Second); n.State != "manageable" || n.LastError != "" {
		t.Fatalf("after node manage: %q (last_error %q), want manageable", n.State, n.LastError)
	}

	// Without credentials: the coordinator's message names what to set.
	none := base.withEnv("OS_AUTH_TYPE=none")
	r := none.run("node", "list")
	if r.code == 0 || !strings.Contains(r.stderr, "HTTP 401") || !strings.Contains(r.stderr, "OS_AUTH_TYPE=http_basic") {
		t.Errorf("%s without credentials: exit %d, stderr %q; want non-zero, HTTP 401 and what to set", r, r.code, r.stderr)
	}
	// A wrong password; the verb must not run either.
	wrong := base.withEnv("OS_AUTH_TYPE=http_basic", "OS_USERNAME="+user, "OS_PASSWORD=not-the-password")
	r = wrong.run("node", "manage", "auth2")
	if r.code == 0 || !strings.Contains(r.stderr, "HTTP 401") || !strings.Contains(r.stderr, "Incorrect username or password") {
		t.Errorf("%s with a wrong password: exit %d, stderr %q; want non-zero and HTTP 401", r, r.code, r.stderr)
	}
	if strings.Contains(r.stderr, "not-the-password") || strings.Contains(r.stdout, "not-the-password") {
		t.Errorf("the password is echoed back: %q", r.stderr)
	}
	if n := api.Get(other); n.State != "enroll" {
		t.Fatalf("a refused manage changed auth2 to %q", n.State)
	}

	// Over TLS, the CA given as OS_CACERT, as for Ironic; without it the
	// CLI refuses the certificate.
	certFile, keyFile, caFile := testrig.LabCerts(t, "127.0.0.1")
	tc := testrig.Coordinator(t, testrig.Options{Users: map[string]string{user: password}, TLSCert: certFile, TLSKey: keyFile, CACert: caFile})
	if !strings.HasPrefix(tc.APIURL, "https://") {
		t.Fatalf("APIURL %q with TLS", tc.APIURL)
	}
	tapi := testrig.NewClient(t, tc)
	if code := tapi.Do("POST", "/v1/sites", map[string]string{"name": "site1"}, nil); code != 201 {
		t.Fatalf("site add over https: %d", code)
	}
	tapi.CreateNode("tls1", "", nil)
	tlsCLI := newBMCLI(t, tc.APIURL).withEnv("OS_AUTH_TYPE=http_basic", "OS_USERNAME="+user, "OS_PASSWORD="+password)
	if r, ok := tlsCLI.withEnv("OS_CACERT="+caFile).ok("node", "list", "-f", "value", "-c", "Name"); ok && strings.TrimSpace(r.stdout) != "tls1" {
		t.Errorf("node list over https printed %q, want tls1", r.stdout)
	}
	if r := tlsCLI.run("node", "list"); r.code == 0 || !strings.Contains(r.stderr, "CERTIFICATE_VERIFY_FAILED") {
		t.Errorf("%s over https without OS_CACERT: exit %d, stderr %q; want a certificate error", r, r.code, r.stderr)
	}

	// The version documents stay public (clients read them first);
	// everything else asks for credentials in Ironic's error shape.
	for path, want := range map[string]int{"/": 200, "/v1": 200, "/v1/": 200, "/v1/nodes": 401, "/v1/nodes/auth1": 401, "/v1/drivers": 401} {
		resp, err := http.Get("http://" + c.APIAddr + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s without credentials: %d, want %d", path, resp.StatusCode, want)
		}
		if want == 401 && (resp.Header.Get("WWW-Authenticate") != `Basic realm="bmedge"` || !strings.Contains(string(body), "faultstring")) {
			t.Errorf("GET %s: 401 without Basic realm or Ironic's body: %v %s", path, resp.Header, body)
		}
	}
	// What hands out or revokes a site's credential asks for credentials
	// too (curl, an independent client, without and with a wrong
	// password), and changes nothing: site1's agent stays online and a
	// node of it is still driven.
	for _, req := range [][]string{{"-X", "POST", "http://" + c.APIAddr + "/v1/sites/site1/credentials"}, {"-X", "DELETE", "http://" + c.APIAddr + "/v1/sites/site1"}} {
		for _, auth := range [][]string{nil, {"-u", user + ":wrong"}} {
			out, err := exec.Command("curl", append(append([]string{"-s", "-o", "/dev/null", "-w", "%{http_code}"}, auth...), req...)...).Output()
			if err != nil || string(out) != "401" {
				t.Errorf("curl %v %v: %q, %v; want 401", auth, req, out, err)
			}
		}
	}
	var sites struct {
		Sites []map[string]any `json:"sites"`
	}
	if code := api.Do("GET", "/v1/sites", nil, &sites); code != 200 || len(sites.Sites) != 1 || sites.Sites[0]["online"] != true {
		t.Errorf("site1 after the refused requests: %d %v; want it listed and online", code, sites.Sites)
	}
	api.MustVerb(other, "manage", nil)
	if n := api.WaitRest(other, 30*time.Second); n.State != "manageable" {
		t.Errorf("auth2 after the refused site requests: %q (%s); the site's agent must still drive it", n.State, n.LastError)
	}
}
