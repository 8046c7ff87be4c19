package cli

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// powerAPI is a coordinator that takes a power request and then shows
// the node in states, one per GET; it answers the steps API with 202 and
// the node list and show with fixed nodes.
type powerAPI struct {
	mu     sync.Mutex
	states []map[string]any
	gets   int
	bodies []map[string]any
}

func (f *powerAPI) start(t *testing.T) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		switch {
		case r.Method == "PUT" && r.URL.Path == "/v1/nodes/n1/states/power":
			var b map[string]any
			_ = json.NewDecoder(r.Body).Decode(&b)
			f.bodies = append(f.bodies, b)
			w.WriteHeader(202)
		case r.Method == "GET" && r.URL.Path == "/v1/nodes/n1":
			n := f.states[min(f.gets, len(f.states)-1)]
			f.gets++
			_ = json.NewEncoder(w).Encode(n)
		case r.Method == "GET" && r.URL.Path == "/v1/nodes/detail":
			_ = json.NewEncoder(w).Encode(map[string]any{"nodes": []any{
				node("available", "", "power_state", "power off"),
				node("manageable", "", "uuid", "0c7c2d5e-6a43-4a0e-8f3f-2b8f1f0d9e11", "name", nil, "maintenance", true),
			}})
		case r.Method == "GET" && r.URL.Path == "/v1/nodes/n1/cleaning/steps":
			w.Header().Set("Retry-Request-After", "-1")
			w.WriteHeader(202)
			_ = json.NewEncoder(w).Encode(map[string]any{"message": "The in-band clean steps of this node are not known yet. Retry later.",
				"steps": []any{map[string]any{"interface": "management", "step": "fake_reset_bmc", "priority": 0, "abortable": false, "requires_ramdisk": false}}})
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
}

// TestNodePowerWait: node power … --wait sends Ironic's target, follows
// the node until the BMC has answered and exits 0 in the power state
// asked for (power on after a reboot), 1 with last_error when the node
// ends elsewhere or the action failed (whatever the state before);
// without --wait it returns at once, reading nothing.
func TestNodePowerWait(t *testing.T) {
	f := &powerAPI{states: []map[string]any{
		node("active", "", "power_state", "power on", "target_power_state", "power on", "reservation", "coordinator"),
		node("active", "", "power_state", "power on"),
	}}
	f.start(t)
	code, out, errOut := runHere(context.Background(), "node", "power", "n1", "reboot", "--wait")
	if code != 0 || !strings.Contains(out, "n1: power on → power on") {
		t.Fatalf("reboot --wait: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if len(f.bodies) != 1 || f.bodies[0]["target"] != "rebooting" || f.gets != 2 {
		t.Fatalf("sent %v with %d reads, want target rebooting and 2 reads", f.bodies, f.gets)
	}

	f2 := &powerAPI{states: []map[string]any{
		node("active", "", "power_state", "power on", "last_error", "power off on node n1 failed: BMC refused the request"),
	}}
	f2.start(t)
	code, _, errOut = runHere(context.Background(), "node", "power", "n1", "soft-off", "--wait")
	if code != 1 || !strings.Contains(errOut, "not power off") || !strings.Contains(errOut, "BMC refused") {
		t.Fatalf("failed soft-off --wait: exit %d, stderr %q", code, errOut)
	}
	if len(f2.bodies) != 1 || f2.bodies[0]["target"] != "soft power off" {
		t.Fatalf("sent %v, want target soft power off", f2.bodies)
	}

	// A failed power on of a node already recorded on: exit 1 all the
	// same, with the BMC's answer and address.
	le := "power on failed on node n1: redfish BMC http://127.0.0.1:8000: cannot reset the system (On): HTTP 500 Base.1.8.InternalError"
	f4 := &powerAPI{states: []map[string]any{
		node("manageable", "", "power_state", "power on", "target_power_state", "power on", "reservation", "coordinator"),
		node("manageable", "", "power_state", "power on", "last_error", le),
	}}
	f4.start(t)
	code, _, errOut = runHere(context.Background(), "node", "power", "n1", "on", "--wait")
	if code != 1 || !strings.Contains(errOut, "power on failed (the node is recorded power on)") || !strings.Contains(errOut, le) {
		t.Fatalf("failed power on of a node recorded on, --wait: exit %d, stderr %q", code, errOut)
	}

	f3 := &powerAPI{states: []map[string]any{node("active", "")}}
	f3.start(t)
	if code, out, _ := runHere(context.Background(), "node", "power", "n1", "off"); code != 0 || !strings.Contains(out, "power off requested") || f3.gets != 0 {
		t.Fatalf("off without --wait: exit %d, %q, %d reads", code, out, f3.gets)
	}
}

// TestFormatValue: -f value prints bare values as openstack clients do: a
// list's rows one per line with their values separated by spaces, a
// record's values one per line, None for a null, True and False.
func TestFormatValue(t *testing.T) {
	f := &powerAPI{states: []map[string]any{node("active", "", "power_state", "power on")}}
	f.start(t)
	code, out, errOut := runHere(context.Background(), "node", "list", "-f", "value", "-c", "name", "-c", "provision_state", "-c", "maintenance")
	if want := "n1 available False\nNone manageable True\n"; code != 0 || out != want {
		t.Fatalf("node list -f value: exit %d, %q (stderr %q), want %q", code, out, errOut, want)
	}
	code, out, errOut = runHere(context.Background(), "node", "show", "n1", "-f", "value", "-c", "provision_state", "-c", "target_provision_state", "-c", "power_state")
	if want := "active\nNone\npower on\n"; code != 0 || out != want {
		t.Fatalf("node show -f value: exit %d, %q (stderr %q), want %q", code, out, errOut, want)
	}
}

// TestStepsRetrySentence: node steps says what the API's 202 and its
// Retry-Request-After mean in a sentence, never the raw header.
func TestStepsRetrySentence(t *testing.T) {
	f := &powerAPI{}
	f.start(t)
	code, out, errOut := runHere(context.Background(), "node", "steps", "n1")
	if code != 0 || !strings.Contains(out, "fake_reset_bmc") {
		t.Fatalf("node steps: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if strings.Contains(errOut, "Retry-Request-After") || strings.Contains(errOut, "-1") || !strings.Contains(errOut, "ask again once the ramdisk of node n1 has booted") {
		t.Fatalf("node steps says %q", errOut)
	}
	if s := retrySentence("Not known yet.", "30", "n1"); s != "Not known yet. Ask again in 30 seconds." {
		t.Fatalf("retrySentence with 30 s: %q", s)
	}
}

// TestFollowStopsAtHold: --wait stops when a hold step holds the node
// (clean hold), exit 0, saying how to go on; node unhold sends the
// unhold target.
func TestFollowStopsAtHold(t *testing.T) {
	hold := map[string]any{"interface": "deploy", "step": "hold"}
	f := &fakeAPI{states: []map[string]any{
		node("cleaning", "manageable", "reservation", "coordinator"),
		node("clean hold", "manageable", "clean_step", hold),
	}}
	f.start(t)
	code, _, errOut := runHere(context.Background(), "node", "wait", "n1", "--wait=3")
	if code != 0 || !strings.Contains(errOut, "held in clean hold by step deploy.hold") || !strings.Contains(errOut, "coordinator node unhold n1") {
		t.Fatalf("wait at a hold: exit %d, stderr %q", code, errOut)
	}
	f2 := &fakeAPI{states: []map[string]any{node("manageable", "")}}
	f2.start(t)
	if code, _, errOut := runHere(context.Background(), "node", "unhold", "n1", "--wait"); code != 0 || len(f2.bodies) != 1 || f2.bodies[0]["target"] != "unhold" {
		t.Fatalf("unhold: exit %d (%q), sent %v", code, errOut, f2.bodies)
	}
}
