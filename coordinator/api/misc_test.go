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

// TestHoldUnholdAPI: a manual clean with a hold step, through curl at
// API 1.87 on a simulated site, rests in clean hold (unlocked, target
// manageable, clean_step the hold step); unhold is 406 at 1.84 as Ironic,
// and at 1.85 it releases the node, which finishes its steps in
// manageable; a second hold is aborted into clean failed.
func TestHoldUnholdAPI(t *testing.T) {
	c := testrig.Coordinator(t, testrig.Options{})
	testrig.Site(t, c, "site1", agent.SimOptions{Nodes: 2, StepDuration: 10 * time.Millisecond})
	api := testrig.NewClient(t, c)
	base := api.Base
	id := api.CreateNode("hold1", "site1", nil)
	api.MustVerb(id, "manage", nil)
	api.WaitState(id, "manageable", 30*time.Second)

	clean := `{"target":"clean","clean_steps":[{"interface":"management","step":"fake_reset_bmc"},{"interface":"deploy","step":"hold"},{"interface":"management","step":"fake_reset_bmc"}]}`
	if a := vcurl(t, base, "1.87", "PUT", "/v1/nodes/"+id+"/states/provision", clean); a.status != 202 {
		t.Fatalf("clean with a hold step: %d %.300s", a.status, a.body)
	}
	api.WaitState(id, "clean hold", 30*time.Second)
	n := vcurl(t, base, "1.87", "GET", "/v1/nodes/"+id, "").obj(t)
	step, _ := n["clean_step"].(map[string]any)
	if n["reservation"] != nil || n["target_provision_state"] != "manageable" || step["step"] != "hold" {
		t.Fatalf("in clean hold: reservation %v, target %v, clean_step %v", n["reservation"], n["target_provision_state"], n["clean_step"])
	}
	if a := vcurl(t, base, "1.84", "PUT", "/v1/nodes/"+id+"/states/provision", `{"target":"unhold"}`); a.status != 406 {
		t.Fatalf("unhold at 1.84: %d, want 406 as Ironic", a.status)
	}
	if st := api.Get(id).State; st != "clean hold" {
		t.Fatalf("a refused unhold moved the node to %q", st)
	}
	if a := vcurl(t, base, "1.85", "PUT", "/v1/nodes/"+id+"/states/provision", `{"target":"unhold"}`); a.status != 202 {
		t.Fatalf("unhold at 1.85: %d %.300s", a.status, a.body)
	}
	if got := api.WaitRest(id, 30*time.Second); got.State != "manageable" || got.LastError != "" {
		t.Fatalf("after unhold the node rests in %q (last_error %q), want manageable", got.State, got.LastError)
	}

	if a := vcurl(t, base, "1.87", "PUT", "/v1/nodes/"+id+"/states/provision", clean); a.status != 202 {
		t.Fatalf("clean with a hold step: %d %.300s", a.status, a.body)
	}
	api.WaitState(id, "clean hold", 30*time.Second)
	if a := vcurl(t, base, "1.87", "PUT", "/v1/nodes/"+id+"/states/provision", `{"target":"abort"}`); a.status != 202 {
		t.Fatalf("abort in clean hold: %d %.300s", a.status, a.body)
	}
	if got := api.WaitRest(id, 30*time.Second); got.State != "clean failed" || !strings.Contains(got.LastError, "aborted") {
		t.Fatalf("after abort the node rests in %q (last_error %q), want clean failed, aborted", got.State, got.LastError)
	}
}

// TestCompatEndpoints: the endpoints a `baremetal` user reaches besides
// nodes, through curl: conductors (the coordinator and the sites' edge
// agents, 1.49), VIFs (noop: none; attach refused), the console (never
// enabled; enabling refused as Ironic's no-console), vendor passthru (no
// methods), inject NMI (Ironic's unsupported answer; 404 before 1.29),
// chassis and allocations (none; creating refused), and one history
// record by the ID the history list shows.
func TestCompatEndpoints(t *testing.T) {
	c := testrig.Coordinator(t, testrig.Options{})
	testrig.Site(t, c, "site1", agent.SimOptions{Nodes: 1})
	api := testrig.NewClient(t, c)
	base := api.Base
	id := api.CreateNode("c1", "site1", nil)

	want := func(a vAnswer, code int, part string) {
		t.Helper()
		if a.status != code || !strings.Contains(a.body, part) {
			t.Errorf("got %d %.300s, want %d with %q", a.status, a.body, code, part)
		}
	}
	list := func(a vAnswer, key string) []any {
		t.Helper()
		l, ok := a.obj(t)[key].([]any)
		if a.status != 200 || !ok {
			t.Fatalf("no %s list: %d %.300s", key, a.status, a.body)
		}
		return l
	}

	// Conductors.
	want(vcurl(t, base, "1.48", "GET", "/v1/conductors", ""), 404, "1.49")
	var site1 map[string]any
	deadline := time.Now().Add(20 * time.Second)
	for {
		cs := list(vcurl(t, base, "1.49", "GET", "/v1/conductors", ""), "conductors")
		if len(cs) != 2 {
			t.Fatalf("conductors: %v, want the coordinator and site1", cs)
		}
		co, s1 := cs[0].(map[string]any), cs[1].(map[string]any)
		if co["hostname"] != "coordinator" || co["conductor_group"] != "" || co["alive"] != true || s1["hostname"] != "site1" || s1["conductor_group"] != "site1" {
			t.Fatalf("conductors: %v", cs)
		}
		if _, ok := s1["drivers"]; ok {
			t.Fatalf("drivers listed without detail: %v", s1)
		}
		if s1["alive"] == true {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("site1's conductor not alive with its agent connected: %v", s1)
		}
		time.Sleep(50 * time.Millisecond)
	}
	site1 = vcurl(t, base, "1.49", "GET", "/v1/conductors/site1", "").obj(t)
	if d, _ := site1["drivers"].([]any); len(d) == 0 || site1["alive"] != true || site1["created_at"] == nil {
		t.Errorf("conductor site1: %v", site1)
	}
	if cs := list(vcurl(t, base, "1.49", "GET", "/v1/conductors?detail=True&limit=1", ""), "conductors"); len(cs) != 1 || cs[0].(map[string]any)["drivers"] == nil {
		t.Errorf("detailed list of 1: %v", cs)
	}
	if cs := list(vcurl(t, base, "1.49", "GET", "/v1/conductors?fields=hostname&sort_key=hostname&sort_dir=desc", ""), "conductors"); len(cs) != 2 ||
		cs[0].(map[string]any)["hostname"] != "site1" || cs[0].(map[string]any)["alive"] != nil {
		t.Errorf("fields=hostname, sorted desc: %v", cs)
	}
	want(vcurl(t, base, "1.49", "GET", "/v1/conductors?fields=bogus", ""), 400, "bogus")
	want(vcurl(t, base, "1.49", "GET", "/v1/conductors?sort_key=alive", ""), 400, "alive")
	want(vcurl(t, base, "1.49", "GET", "/v1/conductors/nowhere", ""), 404, "Conductor nowhere could not be found")

	// VIFs, console, passthru.
	want(vcurl(t, base, "1.27", "GET", "/v1/nodes/"+id+"/vifs", ""), 404, "vifs")
	if l := list(vcurl(t, base, "1.87", "GET", "/v1/nodes/"+id+"/vifs", ""), "vifs"); len(l) != 0 {
		t.Errorf("vifs: %v", l)
	}
	want(vcurl(t, base, "1.87", "POST", "/v1/nodes/"+id+"/vifs", `{"id":"port-1"}`), 400, "noop")
	want(vcurl(t, base, "1.87", "DELETE", "/v1/nodes/"+id+"/vifs/port-1", ""), 400, "not attached")
	want(vcurl(t, base, "1.87", "GET", "/v1/nodes/nope/vifs", ""), 404, "nope")
	if con := vcurl(t, base, "1.87", "GET", "/v1/nodes/"+id+"/states/console", "").obj(t); con["console_enabled"] != false || con["console_info"] != nil || len(con) != 2 {
		t.Errorf("console: %v", con)
	}
	want(vcurl(t, base, "1.87", "PUT", "/v1/nodes/"+id+"/states/console", `{"enabled":true}`), 400, "Driver fake does not support console")
	want(vcurl(t, base, "1.87", "PUT", "/v1/nodes/"+id+"/states/console", `{}`), 400, "enabled")
	if m := vcurl(t, base, "1.87", "GET", "/v1/nodes/"+id+"/vendor_passthru/methods", "").obj(t); len(m) != 0 {
		t.Errorf("passthru methods: %v", m)
	}
	want(vcurl(t, base, "1.87", "POST", "/v1/nodes/"+id+"/vendor_passthru?method=reset", `{}`), 400, "No handler for method reset")
	if m := vcurl(t, base, "1.87", "GET", "/v1/drivers/fake/vendor_passthru/methods", "").obj(t); len(m) != 0 {
		t.Errorf("driver passthru methods: %v", m)
	}

	// Inject NMI.
	want(vcurl(t, base, "1.28", "PUT", "/v1/nodes/"+id+"/management/inject_nmi", `{}`), 404, "1.29")
	want(vcurl(t, base, "1.87", "PUT", "/v1/nodes/"+id+"/management/inject_nmi", `{}`), 400, "Driver fake does not support inject_nmi")
	want(vcurl(t, base, "1.87", "PUT", "/v1/nodes/"+id+"/management/inject_nmi", `{"force":true}`), 400, "force")

	// Chassis and allocations.
	if l := list(vcurl(t, base, "1.87", "GET", "/v1/chassis", ""), "chassis"); len(l) != 0 {
		t.Errorf("chassis: %v", l)
	}
	want(vcurl(t, base, "1.87", "POST", "/v1/chassis", `{"description":"rack 4"}`), 400, "conductor_group")
	want(vcurl(t, base, "1.87", "GET", "/v1/chassis/c7e1b1ee-0b4e-4a4e-9a55-0f0f0f0f0f0f", ""), 404, "could not be found")
	want(vcurl(t, base, "1.51", "GET", "/v1/allocations", ""), 404, "1.52")
	if l := list(vcurl(t, base, "1.52", "GET", "/v1/allocations", ""), "allocations"); len(l) != 0 {
		t.Errorf("allocations: %v", l)
	}
	// No available node of the class: the allocation is made, in error
	// with Ironic's last_error (resources_test.go binds one).
	want(vcurl(t, base, "1.87", "POST", "/v1/allocations", `{"resource_class":"baremetal"}`), 201, "no available nodes match the resource class baremetal")
	d := vcurl(t, base, "1.87", "GET", "/v1", "").obj(t)
	for _, res := range []string{"chassis", "conductors", "allocations"} {
		if _, ok := d[res]; !ok {
			t.Errorf("GET /v1 does not link %s", res)
		}
	}

	// History: a record by the ID the list shows.
	var h struct {
		History []map[string]any `json:"history"`
	}
	if err := json.Unmarshal([]byte(vcurl(t, base, "1.87", "GET", "/v1/nodes/"+id+"/history", "").body), &h); err != nil || len(h.History) == 0 {
		t.Fatalf("history list: %v %v", err, h)
	}
	last := h.History[len(h.History)-1]
	ev, _ := last["uuid"].(string)
	one := vcurl(t, base, "1.87", "GET", "/v1/nodes/c1/history/"+ev, "").obj(t)
	if one["uuid"] != ev || one["event"] != last["event"] || one["severity"] != last["severity"] {
		t.Errorf("history get %s: %v, want %v", ev, one, last)
	}
	want(vcurl(t, base, "1.87", "GET", "/v1/nodes/"+id+"/history/"+id+"-99999", ""), 404, "Node history record")
	want(vcurl(t, base, "1.87", "GET", "/v1/nodes/"+id+"/history/bogus", ""), 404, "Node history record bogus")
	want(vcurl(t, base, "1.77", "GET", "/v1/nodes/"+id+"/history/"+ev, ""), 404, "history")
}

// TestBaremetalCLICompat runs the Debian `baremetal` client's commands
// that answered 404 before: conductor list and show, node vif list,
// console show, passthru list, inject nmi (refused, with Ironic's
// message), chassis list, allocation list, and history get with an ID
// that history list printed.
func TestBaremetalCLICompat(t *testing.T) {
	if _, err := os.Stat(baremetalPath); err != nil {
		if os.Getenv("BM_REQUIRE_ALL") == "1" {
			t.Fatalf("%s is missing (package python3-ironicclient); run scripts/install-test-deps.sh", baremetalPath)
		}
		t.Skipf("%s is missing: install Debian's python3-ironicclient (scripts/install-test-deps.sh, which make test runs)", baremetalPath)
	}
	c := testrig.Coordinator(t, testrig.Options{})
	testrig.Site(t, c, "site1", agent.SimOptions{Nodes: 1})
	api := testrig.NewClient(t, c)
	bm := newBMCLI(t, "http://"+c.APIAddr)
	api.CreateNode("cli1", "site1", nil)

	// Independent commands run at once: each is a Python start (~2 s).
	var ev string
	var hist []map[string]any
	parallel(t, func() {
		var conductors []map[string]any
		if bm.json(&conductors, "conductor", "list", "-f", "json") {
			if len(conductors) != 2 || conductors[0]["Hostname"] != "coordinator" || conductors[1]["Hostname"] != "site1" || conductors[1]["Conductor Group"] != "site1" {
				t.Errorf("conductor list: %v", conductors)
			}
		}
	}, func() {
		var cond map[string]any
		if bm.json(&cond, "conductor", "show", "site1", "-f", "json") && cond["conductor_group"] != "site1" {
			t.Errorf("conductor show site1: %v", cond)
		}
	}, func() {
		for _, cmd := range [][]string{{"node", "vif", "list", "cli1"}, {"chassis", "list"}} {
			if r, ok := bm.ok(append(cmd, "-f", "json")...); ok && strings.TrimSpace(r.stdout) != "[]" {
				t.Errorf("%s: %q, want an empty list", r, r.stdout)
			}
		}
	}, func() {
		for _, cmd := range [][]string{{"allocation", "list"}, {"node", "passthru", "list", "cli1"}} {
			if r, ok := bm.ok(append(cmd, "-f", "json")...); ok && strings.TrimSpace(r.stdout) != "[]" {
				t.Errorf("%s: %q, want an empty list", r, r.stdout)
			}
		}
	}, func() {
		var con map[string]any
		if bm.json(&con, "node", "console", "show", "cli1", "-f", "json") && con["console_enabled"] != false {
			t.Errorf("console show: %v", con)
		}
		if r := bm.run("node", "inject", "nmi", "cli1"); r.code == 0 || !strings.Contains(r.stderr, "does not support inject_nmi") {
			t.Errorf("inject nmi: exit %d, stderr %q; want a failure with Ironic's message", r.code, r.stderr)
		}
	}, func() {
		if !bm.json(&hist, "node", "history", "list", "cli1", "-f", "json") || len(hist) == 0 {
			t.Errorf("history list: %v", hist)
			return
		}
		ev, _ = hist[0]["UUID"].(string)
	})
	var one map[string]any
	if bm.json(&one, "node", "history", "get", "cli1", ev, "-f", "json") && (one["uuid"] != ev || one["event"] != hist[0]["Description of the event"]) {
		t.Errorf("history get %s: %v, want %v", ev, one, hist[0])
	}
}
