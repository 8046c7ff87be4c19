package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/coordinator/api"
	"github.com/bmedge/bmedge/coordinator/cli"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/coordinator/server"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

const python3Path = "/usr/bin/python3"

// runPython runs script with args under Debian's python3 and returns its
// stdout.
func runPython(t *testing.T, script string, args ...string) []byte {
	t.Helper()
	p := filepath.Join(t.TempDir(), "client.py")
	if err := os.WriteFile(p, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var stderr strings.Builder
	cmd := exec.CommandContext(ctx, python3Path, append([]string{p}, args...)...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python3: %v\n%s", err, stderr.String())
	}
	return out
}

// The independent client of the CSRF walk: each request of a JSON list
// ([method, path, content type or ""]) is sent with an empty body, as
// an HTML form with no fields (or a script) would, with the user's
// credentials, as a browser that has them cached would.
const emptyBodyClient = `
import base64, http.client, json, sys
host, port, user, pw, reqs = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], json.load(open(sys.argv[5]))
auth = "Basic " + base64.b64encode((user + ":" + pw).encode()).decode()
out = []
for method, path, ctype in reqs:
    c = http.client.HTTPConnection(host, port, timeout=30)
    h = {"Authorization": auth}
    if ctype:
        h["Content-Type"] = ctype
    c.request(method, path, body=None, headers=h)  # Content-Length: 0
    r = c.getresponse()
    out.append({"status": r.status, "body": r.read().decode()})
    c.close()
print(json.dumps(out))
`

// wildcard is a path wildcard of a route pattern ({id}, {rest...}).
var wildcard = regexp.MustCompile(`\{[A-Za-z_][A-Za-z0-9_]*(\.\.\.)?\}`)

// TestEmptyBodyCSRFRefusedOnEveryRoute walks every route of the API and
// sends POST, PUT and PATCH with an empty body and a content type that a
// web page may send to any origin (a form, multipart, text/plain) or
// none, with good credentials, from python3, curl and Go: each is 415
// with Ironic's error body naming the type to send, and nothing changes
// (issue 17 F4: an empty form rotated a site's credential). With
// Content-Type: application/json the same bodiless POST is served.
func TestEmptyBodyCSRFRefusedOnEveryRoute(t *testing.T) {
	requireTool(t, curlPath, "curl")
	requireTool(t, python3Path, "python3")
	const user, password = "op", "browser-cached-password"
	c := testrig.Coordinator(t, testrig.Options{Users: map[string]string{user: password}})
	testrig.Site(t, c, "s2", agent.SimOptions{Nodes: 1, StepDuration: 50 * time.Millisecond})
	cl := testrig.NewClient(t, c)
	node := cl.CreateNode("n1", "s2", nil)

	routes := api.New(nil, slog.Default(), "").Routes()
	if len(routes) < 30 || !strings.Contains(strings.Join(routes, "\n"), "POST /v1/sites/{name}/credentials") {
		t.Fatalf("the router lists %d routes: %v", len(routes), routes)
	}
	seen := map[string]bool{}
	var paths []string
	for _, r := range routes {
		p := r
		if _, after, ok := strings.Cut(r, " "); ok {
			p = after
		}
		p = strings.NewReplacer("{$}", "", "{id}", "n1", "{name}", "s2", "{trait}", "CUSTOM_X", "{hostname}", "h", "{event}", "e", "{vif}", "v").Replace(p)
		// Any other wildcard (a route added later) gets its own name:
		// the refusal comes before routing, so any value reaches it.
		p = wildcard.ReplaceAllStringFunc(p, func(w string) string { return strings.Trim(w, "{}.") })
		if strings.ContainsAny(p, "{}") {
			t.Fatalf("route %q has a wildcard this test does not fill", r)
		}
		if !seen[p] {
			seen[p] = true
			paths = append(paths, p)
		}
	}
	types := []string{"application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "text/plain", "text/plain; charset=utf-8", ""}
	var reqs [][3]string
	for _, p := range paths {
		for _, m := range []string{"POST", "PUT", "PATCH"} {
			for _, ct := range types {
				reqs = append(reqs, [3]string{m, p, ct})
			}
		}
	}
	check := func(who string, req [3]string, status int, body string) {
		t.Helper()
		f := fault(body)
		if status != http.StatusUnsupportedMediaType || !strings.Contains(f, "application/json") || !strings.Contains(f, "even without a body") {
			t.Errorf("%s: %s %s with Content-Type %q and no body: HTTP %d, faultstring %q; want 415 saying to send application/json (body %.200s)",
				who, req[0], req[1], req[2], status, f, body)
		}
	}

	// python3's http.client.
	rf := filepath.Join(t.TempDir(), "requests.json")
	b, _ := json.Marshal(reqs)
	if err := os.WriteFile(rf, b, 0o600); err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(c.APIAddr)
	var answers []struct {
		Status int    `json:"status"`
		Body   string `json:"body"`
	}
	if err := json.Unmarshal(runPython(t, emptyBodyClient, host, port, user, password, rf), &answers); err != nil || len(answers) != len(reqs) {
		t.Fatalf("python3 printed %d answers for %d requests: %v", len(answers), len(reqs), err)
	}
	for i, a := range answers {
		check("python3", reqs[i], a.Status, a.Body)
	}
	t.Logf("%d routes, %d paths, %d bodiless requests each from python3 and Go", len(routes), len(paths), len(reqs))

	// Go's client.
	for _, req := range reqs {
		r, _ := http.NewRequest(req[0], "http://"+c.APIAddr+req[1], nil)
		if req[2] != "" {
			r.Header.Set("Content-Type", req[2])
		}
		r.SetBasicAuth(user, password)
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		check("Go", req, resp.StatusCode, string(body))
	}

	// curl, as issue 17 reproduced it: what <form method=post> with no
	// fields sends (-d ''), and a bare POST.
	rotate := "http://" + c.APIAddr + "/v1/sites/s2/credentials"
	for _, args := range [][]string{
		{"-d", ""},
		{"-X", "POST"},
		{"-H", "Content-Type: text/plain", "-d", ""},
		{"-H", "Content-Type: multipart/form-data; boundary=x", "-d", ""},
	} {
		r := curl(t, append(append([]string{"-u", user + ":" + password}, args...), rotate)...)
		check(fmt.Sprintf("curl %v", args), [3]string{"POST", "/v1/sites/s2/credentials", strings.Join(args, " ")}, r.status, r.body)
	}

	// Nothing changed: one node, no port, s2's agent still holds a good
	// credential (a rotation cuts it off at once) and drives its node.
	var nodes struct {
		Nodes []map[string]any `json:"nodes"`
	}
	var ports struct {
		Ports []map[string]any `json:"ports"`
	}
	if cl.Do("GET", "/v1/nodes", nil, &nodes) != 200 || len(nodes.Nodes) != 1 || cl.Do("GET", "/v1/ports", nil, &ports) != 200 || len(ports.Ports) != 0 {
		t.Fatalf("after the refused requests: nodes %v, ports %v; want the one node and no port", nodes.Nodes, ports.Ports)
	}
	if n := cl.Get(node); n.State != "enroll" || n.Maintenance {
		t.Fatalf("n1 after the refused requests: %+v", n)
	}
	cl.MustVerb(node, "manage", nil)
	if n := cl.WaitRest(node, 30*time.Second); n.State != "manageable" {
		t.Fatalf("n1 after the refused requests: %q (%s); s2's agent must still drive it", n.State, n.LastError)
	}
	// With the JSON type, the same bodiless POST is served.
	if r := curl(t, "-u", user+":"+password, "-X", "POST", "-H", "Content-Type: application/json", rotate); r.status != 200 || !strings.Contains(r.body, "password") {
		t.Fatalf("bodiless POST with Content-Type: application/json: HTTP %d %.200s; want 200 and the new credential", r.status, r.body)
	}
}

// syncBuffer is a log destination that tests read while the server
// writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The guesser: 200 different wrong passwords from 127.0.0.2, one
// connection each; every 20, the right password from 127.0.0.1.
const guessClient = `
import base64, http.client, json, sys
host, port, user, right = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
def get(src, pw, path="/v1/nodes"):
    c = http.client.HTTPConnection(host, port, timeout=60, source_address=(src, 0))
    c.request("GET", path, headers={"Authorization": "Basic " + base64.b64encode((user + ":" + pw).encode()).decode()})
    r = c.getresponse()
    a = {"status": r.status, "retry_after": r.getheader("Retry-After"), "body": r.read().decode()}
    c.close()
    return a
out = {"guesses": [], "right": []}
for i in range(200):
    out["guesses"].append(get("127.0.0.2", "wrong-guess-%d" % i))
    if i % 20 == 19:
        out["right"].append(get("127.0.0.1", right))
print(json.dumps(out))
`

// TestPasswordGuessingThrottled sends 200 wrong passwords from 127.0.0.2
// (python3, each on its own connection): after LoginBurst failures the
// address gets 429 with Retry-After and Ironic's error body, even with
// the right password (curl, Go) and on GET /metrics; the right password
// from 127.0.0.1 works meanwhile; the log holds a few lines, not one per
// attempt, and no password.
func TestPasswordGuessingThrottled(t *testing.T) {
	requireTool(t, curlPath, "curl")
	requireTool(t, python3Path, "python3")
	const user, password = "op", "the-right-password"
	var logs syncBuffer
	c, err := server.Start(context.Background(), server.Options{DataDir: t.TempDir(), APIListen: "127.0.0.1:0", MQTTListen: testrig.FreeAddr(t),
		Machine:      fsm.Config{WaitTimeout: 30 * time.Second, CommandTimeout: 20 * time.Second, ResendInterval: 500 * time.Millisecond},
		TickInterval: 100 * time.Millisecond, Log: slog.New(slog.NewTextHandler(&logs, nil)),
		Auth: "http_basic", HTPasswd: testrig.HTPasswd(t, map[string]string{user: password})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	base := "http://" + c.APIAddr

	host, port, _ := net.SplitHostPort(c.APIAddr)
	start := time.Now()
	var got struct {
		Guesses, Right []struct {
			Status     int     `json:"status"`
			RetryAfter *string `json:"retry_after"`
			Body       string  `json:"body"`
		}
	}
	if err := json.Unmarshal(runPython(t, guessClient, host, port, user, password), &got); err != nil || len(got.Guesses) != 200 {
		t.Fatalf("python3: %d answers, %v", len(got.Guesses), err)
	}
	elapsed := time.Since(start)
	// The budget refills during the run: one try per LoginRefill.
	allowed := api.LoginBurst + int(math.Ceil(float64(elapsed)/float64(api.LoginRefill)))
	n401, n429 := 0, 0
	for i, g := range got.Guesses {
		switch g.Status {
		case 401:
			// The burst, then one per refill: when those come depends on
			// the machine's speed, so only their number is checked
			// (below), not their places.
			n401++
		case 429:
			n429++
			secs := -1
			if g.RetryAfter != nil {
				secs, _ = strconv.Atoi(*g.RetryAfter)
			}
			if secs < 1 || secs > int(math.Ceil(api.LoginRefill.Seconds())) || !strings.Contains(fault(g.Body), "Too many failed logins from 127.0.0.2") {
				t.Errorf("guess %d: 429 with Retry-After %v and body %.200s; want whole seconds up to %s and Ironic's body", i+1, g.RetryAfter, g.Body, api.LoginRefill)
			}
		default:
			t.Errorf("guess %d: HTTP %d %.200s", i+1, g.Status, g.Body)
		}
		if i < api.LoginBurst && g.Status != 401 {
			t.Errorf("guess %d of the burst: HTTP %d, want 401", i+1, g.Status)
		}
	}
	if n401 > allowed || n429 < 200-allowed {
		t.Errorf("200 wrong passwords: %d answered 401, %d 429; want at most %d 401 (burst %d, one per %s over %s)", n401, n429, allowed, api.LoginBurst, api.LoginRefill, elapsed)
	}
	for i, r := range got.Right {
		if r.Status != 200 {
			t.Errorf("the right password from 127.0.0.1 during the guessing (%d): HTTP %d %.200s", i+1, r.Status, r.Body)
		}
	}

	// The throttled address is refused even with the right password, by
	// curl and by Go, on the API and on /metrics; 127.0.0.1 is not.
	for _, c := range []struct {
		src, path, pw string
		want          int
	}{
		{"127.0.0.2", "/v1/nodes", password, 429}, {"127.0.0.2", "/metrics", password, 429},
		{"127.0.0.1", "/v1/nodes", password, 200}, {"127.0.0.1", "/metrics", password, 200},
	} {
		// The budget refills one try per LoginRefill: spend what came back
		// since (on a busy machine that may be a try or two), so that
		// the check follows a 429 of the same address at once.
		drain(t, base, user)
		r := curl(t, "--interface", c.src, "-u", user+":"+c.pw, base+c.path)
		if r.status != c.want {
			t.Errorf("curl from %s to %s: HTTP %d %.200s; want %d", c.src, c.path, r.status, r.body, c.want)
		}
		drain(t, base, user)
		hc := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(c.src)}}).DialContext}}
		req, _ := http.NewRequest("GET", base+c.path, nil)
		req.SetBasicAuth(user, c.pw)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		hc.CloseIdleConnections()
		if resp.StatusCode != c.want || (c.want == 429 && resp.Header.Get("Retry-After") == "") {
			t.Errorf("Go from %s to %s: HTTP %d, Retry-After %q; want %d", c.src, c.path, resp.StatusCode, resp.Header.Get("Retry-After"), c.want)
		}
	}

	// A few lines, each kind at most once per ratelog interval: never
	// one per attempt, never a password.
	out := logs.String()
	lines := 0
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "127.0.0.2") {
			lines++
		}
	}
	t.Logf("200 wrong passwords in %s: %d answered 401, %d 429; %d log lines:\n%s", elapsed, n401, n429, lines, out)
	if lines == 0 || lines > 6 {
		t.Errorf("%d log lines name 127.0.0.2 after 200 refused logins; want a few (one per kind per interval):\n%s", lines, out)
	}
	if strings.Contains(out, "wrong-guess") || strings.Contains(out, password) {
		t.Errorf("the log shows a password:\n%s", out)
	}
}

// drain sends wrong passwords from 127.0.0.2 until one is answered 429:
// the tries the address's budget got back are spent.
func drain(t *testing.T, base, user string) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}).DialContext}}
	defer hc.CloseIdleConnections()
	for i := 0; i <= api.LoginBurst; i++ {
		req, _ := http.NewRequest("GET", base+"/v1/nodes", nil)
		req.SetBasicAuth(user, fmt.Sprintf("wrong-drain-%d", i))
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == 429 {
			return
		}
	}
	t.Fatalf("127.0.0.2 is not throttled: %d wrong passwords answered without a 429", api.LoginBurst+1)
}

// TestWeakHTPasswdRefusedAtStart makes an entry with Debian's htpasswd
// -B (bcrypt cost 5): `coordinator serve` refuses it at start, naming
// the line and the command that makes a good one; the entry that
// command (the README's recipe) makes is accepted.
func TestWeakHTPasswdRefusedAtStart(t *testing.T) {
	const htpasswd = "/usr/bin/htpasswd"
	requireTool(t, htpasswd, "apache2-utils")
	file := filepath.Join(t.TempDir(), "htpasswd")
	if out, err := exec.Command(htpasswd, "-B", "-c", "-b", file, "operator", "pw").CombinedOutput(); err != nil {
		t.Fatalf("htpasswd -B: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(file); !strings.HasPrefix(string(b), "operator:$2y$05$") {
		t.Fatalf("htpasswd -B wrote %q; this test expects Debian's cost 5", b)
	}
	data := filepath.Join(t.TempDir(), "data")
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- cli.Main([]string{"serve", "--data-dir", data, "--api-listen", "127.0.0.1:0", "--mqtt-listen", testrig.FreeAddr(t),
			"--auth", "http_basic", "--htpasswd", file}, strings.NewReader(""), io.Discard, &stderr)
	}()
	select {
	case code := <-done:
		msg := stderr.String()
		if code != 1 {
			t.Errorf("serve with a cost-5 entry: exit %d, want 1\n%s", code, msg)
		}
		for _, w := range []string{"line 1", `user "operator"`, "bcrypt cost is 5", "htpasswd -B -C 12 " + file + " operator"} {
			if !strings.Contains(msg, w) {
				t.Errorf("serve's refusal does not say %q:\n%s", w, msg)
			}
		}
		if strings.Contains(msg, "$2y$") {
			t.Errorf("the refusal shows the hash:\n%s", msg)
		}
	case <-time.After(time.Minute):
		t.Fatalf("serve with a cost-5 entry did not refuse to start:\n%s", stderr.String())
	}
	if _, err := os.Stat(data); err == nil {
		t.Errorf("serve refused, but made the data folder")
	}

	// The recipe the refusal gives.
	if out, err := exec.Command(htpasswd, "-B", "-C", "12", "-b", file, "operator", "pw").CombinedOutput(); err != nil {
		t.Fatalf("htpasswd -B -C 12: %v\n%s", err, out)
	}
	a, err := api.LoadHTPasswd(file)
	if err != nil {
		t.Fatalf("an entry of 'htpasswd -B -C 12' refused: %v", err)
	}
	if !a.Check("operator", "pw") || a.Check("operator", "wrong") {
		t.Fatal("the cost-12 entry does not check as it should")
	}

	// The README's recipe, run as written (the password given with -b
	// instead of typed), makes an entry that is accepted.
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var recipe []string
	for _, l := range strings.Split(string(readme), "\n") {
		if strings.HasPrefix(l, "htpasswd ") {
			cmd, _, _ := strings.Cut(l, "#")
			recipe = strings.Fields(cmd)
		}
	}
	if len(recipe) < 3 {
		t.Fatal("README.md has no line starting 'htpasswd ': the recipe of a password file is gone")
	}
	readmeFile := filepath.Join(t.TempDir(), "htpasswd")
	args := []string{"-b"}
	for _, f := range recipe[1 : len(recipe)-1] {
		if strings.Contains(f, "htpasswd") {
			f = readmeFile // the README's build/htpasswd
		}
		args = append(args, f)
	}
	args = append(args, recipe[len(recipe)-1], "pw")
	if out, err := exec.Command(htpasswd, args...).CombinedOutput(); err != nil {
		t.Fatalf("the README's %q: %v\n%s", strings.Join(recipe, " "), err, out)
	}
	if _, err := api.LoadHTPasswd(readmeFile); err != nil {
		t.Errorf("the README's recipe %q makes an entry the coordinator refuses: %v", strings.Join(recipe, " "), err)
	}
}
