package api_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestBaremetalCLIWalkthroughVerbs: the verbs of the README's
// walk-through that TestBaremetalCLI does not run, through the Debian
// `baremetal` CLI with --wait against a simulated site: inspect (the
// properties filled from the inventory), a manual clean with steps given
// as JSON, rebuild, rescue with a password (shown masked by node show),
// unrescue. Two nodes go through them side by side; states are read back
// through the API, and through the CLI after each verb.
func TestBaremetalCLIWalkthroughVerbs(t *testing.T) {
	if _, err := os.Stat(baremetalPath); err != nil {
		if os.Getenv("BM_REQUIRE_ALL") == "1" {
			t.Fatalf("%s is missing (package python3-ironicclient); run scripts/install-test-deps.sh", baremetalPath)
		}
		t.Skipf("%s is missing: install Debian's python3-ironicclient (scripts/install-test-deps.sh, which make test runs)", baremetalPath)
	}
	if testing.Short() {
		t.Skip("runs the baremetal CLI through inspect, clean, rebuild and rescue; not in -short")
	}
	c := testrig.Coordinator(t, testrig.Options{})
	testrig.Site(t, c, "site1", agent.SimOptions{Nodes: 4, StepDuration: 50 * time.Millisecond})
	api := testrig.NewClient(t, c)
	bm := newBMCLI(t, "http://"+c.APIAddr)

	// to drives a node through the API into state (the setup).
	to := func(id string, verbs ...string) {
		t.Helper()
		for _, v := range verbs {
			api.MustVerb(id, v, nil)
			if n := api.WaitRest(id, 60*time.Second); n.LastError != "" {
				t.Fatalf("setup %s: %q, last_error %q", v, n.State, n.LastError)
			}
		}
	}
	insp := api.CreateNode("walk-inspect", "site1", nil)
	act := api.CreateNode("walk-active", "site1", nil)
	to(insp, "manage")
	if code := api.Do("PATCH", "/v1/nodes/"+act, []map[string]any{{"op": "add", "path": "/instance_info/image_source", "value": "http://127.0.0.1:1/img"}}, nil); code != 200 {
		t.Fatalf("patch instance_info: %d", code)
	}
	to(act, "manage", "provide", "active")

	// step runs a `baremetal` verb with --wait and checks the state it
	// leaves through the API (no last_error) and through the CLI.
	step := func(id, name, want string, args ...string) bool {
		if _, ok := bm.ok(append(args, "--wait", "60")...); !ok {
			return false
		}
		n := api.WaitRest(id, 10*time.Second)
		if n.State != want || n.LastError != "" {
			t.Errorf("after baremetal %s: %s is %q (last_error %q), want %q", strings.Join(args, " "), name, n.State, n.LastError, want)
			return false
		}
		if got := bm.state(name); got != want {
			t.Errorf("after baremetal %s: node show -f value -c provision_state says %q, want %q", strings.Join(args, " "), got, want)
			return false
		}
		return true
	}
	history := func(id string) string {
		var h json.RawMessage
		api.Do("GET", "/v1/nodes/"+id+"/history?detail=True", nil, &h)
		return string(h)
	}

	parallel(t, func() {
		if !step(insp, "walk-inspect", "manageable", "node", "inspect", "walk-inspect") {
			return
		}
		var show map[string]any
		if bm.json(&show, "node", "show", "walk-inspect", "-f", "json", "-c", "properties") {
			if p, _ := show["properties"].(map[string]any); p["cpus"] == nil && p["memory_mb"] == nil && p["local_gb"] == nil {
				t.Errorf("after baremetal node inspect the properties hold nothing from the inventory: %v", show["properties"])
			}
		}
		if !step(insp, "walk-inspect", "manageable", "node", "clean", "walk-inspect",
			"--clean-steps", `[{"interface": "deploy", "step": "erase_devices_metadata"}]`) {
			return
		}
		if h := history(insp); !strings.Contains(h, "erase_devices_metadata") {
			t.Errorf("the manual clean's step is not in the history:\n%s", h)
		}
	}, func() {
		if !step(act, "walk-active", "active", "node", "rebuild", "walk-active") {
			return
		}
		if h := history(act); !strings.Contains(h, "rebuild") {
			t.Errorf("the rebuild is not in the history:\n%s", h)
		}
		const pw = "walk-Rescue-9"
		if !step(act, "walk-active", "rescue", "node", "rescue", "walk-active", "--rescue-password", pw) {
			return
		}
		if r, ok := bm.ok("node", "show", "walk-active", "-f", "json", "-c", "instance_info"); ok &&
			(strings.Contains(r.stdout, pw) || !strings.Contains(r.stdout, `"rescue_password": "******"`)) {
			t.Errorf("in rescue, node show -c instance_info: %s; want rescue_password masked", r.stdout)
		}
		step(act, "walk-active", "active", "node", "unrescue", "walk-active")
	})
}
