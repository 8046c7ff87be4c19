package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeAPI answers as a coordinator would for node n1: each GET of it
// returns the next of states (the last one from then on); PUTs of a
// provision state are recorded, or refused with refusal.
type fakeAPI struct {
	mu      sync.Mutex
	states  []map[string]any
	gets    int
	bodies  []map[string]any
	refusal string
	auth    []string
}

func (f *fakeAPI) start(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		u, _, _ := r.BasicAuth()
		f.auth = append(f.auth, u)
		switch {
		case r.Method == "PUT" && r.URL.Path == "/v1/nodes/n1/states/provision":
			if f.refusal != "" {
				w.WriteHeader(400)
				inner, _ := json.Marshal(map[string]string{"faultstring": f.refusal})
				_ = json.NewEncoder(w).Encode(map[string]string{"error_message": string(inner)})
				return
			}
			var b map[string]any
			_ = json.NewDecoder(r.Body).Decode(&b)
			f.bodies = append(f.bodies, b)
			w.WriteHeader(202)
		case r.Method == "GET" && r.URL.Path == "/v1/nodes/n1":
			n := f.states[min(f.gets, len(f.states)-1)]
			f.gets++
			_ = json.NewEncoder(w).Encode(n)
		case r.Method == "GET" && r.URL.Path == "/v1/nodes/detail":
			_ = json.NewEncoder(w).Encode(map[string]any{"nodes": f.states[len(f.states)-1:]})
		default:
			t.Errorf("unexpected request %s %s", r.Method, r.URL)
			w.WriteHeader(404)
		}
	}))
	t.Cleanup(srv.Close)
	t.Setenv("COORDINATOR_URL", srv.URL)
	for _, k := range []string{"OS_USERNAME", "OS_PASSWORD", "OS_CACERT"} {
		t.Setenv(k, "")
	}
	return srv.URL
}

func node(state, target string, more ...any) map[string]any {
	n := map[string]any{"uuid": "1be26c0b-03f2-4d2e-ae87-c02d7f33c123", "name": "n1", "provision_state": state,
		"target_provision_state": nil, "reservation": nil, "last_error": nil, "maintenance": false, "site_online": true,
		"conductor_group": "site1", "driver": "fake"}
	if target != "" {
		n["target_provision_state"] = target
	}
	for i := 0; i+1 < len(more); i += 2 {
		n[more[i].(string)] = more[i+1]
	}
	return n
}

// TestWaitFailsAnywhereButTheTarget: --wait exits 1 when the node rests
// anywhere but the verb's target, printing last_error, and speaks of
// the CLI's verb (deploy), not the API's target (active).
func TestWaitFailsAnywhereButTheTarget(t *testing.T) {
	f := &fakeAPI{states: []map[string]any{
		node("deploying", "active", "deploy_step", map[string]any{"interface": "deploy", "step": "write_image", "progress": 0.4}),
		node("wait call-back", "active"),
		node("deploy failed", "", "last_error", "image checksum mismatch"),
	}}
	f.start(t)
	code, out, errOut := runHere(context.Background(), "node", "deploy", "n1", "--wait")
	if code != 1 {
		t.Fatalf("exit %d, want 1; stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if want := "error: node n1: deploy ended in deploy failed, not active: image checksum mismatch\n"; errOut != want {
		t.Errorf("stderr %q, want %q", errOut, want)
	}
	for _, w := range []string{"n1: deploying → active  [deploy.write_image 40%]\n", "n1: wait call-back → active\n", "n1: deploy failed\n"} {
		if !strings.Contains(out, w) {
			t.Errorf("stdout does not show %q:\n%s", w, out)
		}
	}
	if len(f.bodies) != 1 || f.bodies[0]["target"] != "active" {
		t.Errorf("PUT bodies %v, want one with target active", f.bodies)
	}

	// Where the verb was going: exit 0. A manage that falls back to
	// enroll fails.
	f.states, f.gets = []map[string]any{node("verifying", "manageable"), node("manageable", "")}, 0
	if code, out, errOut := runHere(context.Background(), "node", "manage", "n1", "--wait"); code != 0 {
		t.Errorf("manage to manageable: exit %d\n%s%s", code, out, errOut)
	}
	f.states, f.gets = []map[string]any{node("verifying", "manageable"), node("enroll", "", "last_error", "wrong password")}, 0
	if code, _, errOut := runHere(context.Background(), "node", "manage", "n1", "--wait"); code != 1 ||
		errOut != "error: node n1: manage ended in enroll, not manageable: wrong password\n" {
		t.Errorf("manage back to enroll: exit %d, stderr %q", code, errOut)
	}
	// Abort is meant to land in a failed state.
	f.states, f.gets = []map[string]any{node("clean failed", "")}, 0
	if code, _, errOut := runHere(context.Background(), "node", "abort", "n1", "--wait"); code != 0 {
		t.Errorf("abort into clean failed: exit %d, %s", code, errOut)
	}
	// node wait on a node resting in a failed state.
	f.states, f.gets = []map[string]any{node("clean failed", "", "last_error", "step failed")}, 0
	if code, _, errOut := runHere(context.Background(), "node", "wait", "n1"); code != 1 || errOut != "error: node n1 rests in clean failed: step failed\n" {
		t.Errorf("node wait on clean failed: exit %d, stderr %q", code, errOut)
	}
	// Without --wait: accepted, in the verb's words.
	if code, out, _ := runHere(context.Background(), "node", "undeploy", "n1"); code != 0 || out != "node n1: undeploy accepted\n" {
		t.Errorf("undeploy: exit %d, %q", code, out)
	}
}

// TestRefusalInVerbs: the API's refusal names its targets; the CLI says
// its verbs.
func TestRefusalInVerbs(t *testing.T) {
	f := &fakeAPI{states: []map[string]any{node("available", "")},
		refusal: `The requested action "deleted" can not be performed on node "n1" while it is in state "available". Allowed there: manage, active, clean.`}
	f.start(t)
	code, _, errOut := runHere(context.Background(), "node", "undeploy", "n1")
	want := `error: cannot undeploy node n1: it is in state "available", where only these verbs are allowed: manage, deploy, clean (HTTP 400)` + "\n"
	if code != 1 || errOut != want {
		t.Errorf("exit %d, stderr %q, want %q", code, errOut, want)
	}
	f.refusal = "Cannot active node n1: it needs the ramdisk, and it has none."
	if _, _, errOut := runHere(context.Background(), "node", "deploy", "n1"); !strings.Contains(errOut, "Cannot deploy node n1") {
		t.Errorf("stderr %q", errOut)
	}
}

// TestWaitTimeoutAndSeconds: --wait SECONDS (with a space, as the
// baremetal CLI takes it) gives up with exit 2 and says how to follow
// the node.
func TestWaitTimeoutAndSeconds(t *testing.T) {
	f := &fakeAPI{states: []map[string]any{node("cleaning", "available")}}
	f.start(t)
	for _, w := range [][]string{{"--wait", "1"}, {"--wait=1"}} {
		start := time.Now()
		code, _, errOut := runHere(context.Background(), append([]string{"node", "provide", "n1"}, w...)...)
		if code != 2 || !strings.Contains(errOut, "node n1 is still in cleaning after 1s; the provide carries on at the coordinator: follow it with 'coordinator node wait n1'") {
			t.Errorf("%v: exit %d, stderr %q", w, code, errOut)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%v: took %s", w, d)
		}
	}
	if code, _, errOut := runHere(context.Background(), "node", "wait", "n1", "--wait", "1"); code != 2 || !strings.Contains(errOut, "its operation carries on") {
		t.Errorf("node wait --wait 1: exit %d, %q", code, errOut)
	}
}

// TestInterruptedWait: Ctrl-C during --wait says the operation carries
// on and how to follow it, exit 130.
func TestInterruptedWait(t *testing.T) {
	f := &fakeAPI{states: []map[string]any{node("deploying", "active")}}
	f.start(t)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(700*time.Millisecond, cancel)
	code, _, errOut := runHere(ctx, "node", "deploy", "n1", "--wait")
	if code != 130 {
		t.Fatalf("exit %d, want 130; stderr %q", code, errOut)
	}
	for _, w := range []string{"interrupted", "the deploy of node n1 carries on at the coordinator", "'coordinator node wait n1'"} {
		if !strings.Contains(errOut, w) {
			t.Errorf("stderr does not say %q: %q", w, errOut)
		}
	}
}

// TestLiveLine: on a terminal --wait redraws one line with the time so
// far; progress.update is given a terminal here.
func TestLiveLine(t *testing.T) {
	var b strings.Builder
	p := &progress{w: &b, tty: true, width: 40}
	p.update(1500*time.Millisecond, "n1", "deploying → active")
	p.update(2500*time.Millisecond, "n1", "deploying → active  [deploy.write_image 40%]")
	p.end()
	got := b.String()
	if want := "\rn1: deploying → active  (1s)\x1b[K\r"; !strings.HasPrefix(got, want) {
		t.Errorf("live line %q, want it to start %q", got, want)
	}
	if strings.Count(got, "\n") != 1 || !strings.HasSuffix(got, "\n") {
		t.Errorf("live line %q: want one newline, at the end", got)
	}
	for _, l := range strings.Split(got, "\r") {
		l = strings.TrimSuffix(strings.TrimSuffix(l, "\n"), "\x1b[K")
		if n := len([]rune(l)); n > 39 {
			t.Errorf("line %q is %d wide on a 40-column terminal", l, n)
		}
	}
	if _, tty := terminalWidth(io.Discard); tty {
		t.Error("io.Discard taken for a terminal")
	}
}

// TestOutputFormats: -f table|json|yaml and -c on list and show, with the
// global flags anywhere on the line and the variables behind them.
func TestOutputFormats(t *testing.T) {
	f := &fakeAPI{states: []map[string]any{node("active", "")}}
	url := f.start(t)
	code, out, errOut := runHere(context.Background(), "node", "show", "n1", "-f", "yaml", "-c", "provision_state", "-c", "Driver")
	if code != 0 || out != "driver: fake\nprovision_state: active\n" {
		t.Errorf("show -f yaml -c: exit %d, %q %s", code, out, errOut)
	}
	code, out, _ = runHere(context.Background(), "-c", "name", "--column", "Provision State", "node", "list")
	if code != 0 || out != "NAME  PROVISION STATE\nn1    active\n" {
		t.Errorf("list -c: exit %d, %q", code, out)
	}
	code, out, _ = runHere(context.Background(), "node", "list", "-f", "json", "-c", "name,site")
	var rows []map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &rows) != nil || fmt.Sprint(rows) != "[map[name:n1 site:site1]]" {
		t.Errorf("list -f json -c name,site: exit %d, %q", code, out)
	}
	code, out, _ = runHere(context.Background(), "node", "show", "n1")
	if code != 0 || !strings.Contains(out, "provision_state         active\n") || !strings.Contains(out, "site                    site1\n") {
		t.Errorf("show: exit %d:\n%s", code, out)
	}
	code, _, errOut = runHere(context.Background(), "node", "show", "n1", "-c", "colour")
	if code != 2 || !strings.Contains(errOut, `no column "colour" here; columns: `) || !strings.Contains(errOut, "provision_state") {
		t.Errorf("-c colour: exit %d, %q", code, errOut)
	}
	// --url overrides COORDINATOR_URL; OS_USERNAME is sent.
	t.Setenv("COORDINATOR_URL", "http://127.0.0.1:1")
	t.Setenv("OS_USERNAME", "operator")
	if code, _, errOut := runHere(context.Background(), "node", "show", "n1", "--url", url); code != 0 {
		t.Errorf("--url after the command: exit %d, %s", code, errOut)
	}
	if code, _, errOut := runHere(context.Background(), "--url="+url, "node", "show", "n1"); code != 0 {
		t.Errorf("--url before the command: exit %d, %s", code, errOut)
	}
	if f.auth[len(f.auth)-1] != "operator" {
		t.Errorf("OS_USERNAME not sent: %v", f.auth)
	}
	if code, _, errOut := runHere(context.Background(), "node", "show", "n1"); code != 1 || !strings.Contains(errOut, "cannot reach the coordinator at http://127.0.0.1:1") {
		t.Errorf("COORDINATOR_URL: exit %d, %q", code, errOut)
	}
}
