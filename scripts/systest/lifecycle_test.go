package systest

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestLifecycleOverMQTT drives nodes through every verb with a real
// coordinator, Badger on disk, the embedded broker and a simulated site.
func TestLifecycleOverMQTT(t *testing.T) {
	c := testrig.Coordinator(t, testrig.Options{})
	testrig.Site(t, c, "site1", agent.SimOptions{Nodes: 8, StepDuration: 100 * time.Millisecond})
	cl := testrig.NewClient(t, c)
	id := cl.CreateNode("n1", "site1", nil)

	// Steps listing before the ramdisk reported: 202 with Retry-Request-After.
	var steps struct {
		Steps   []map[string]any `json:"steps"`
		Message string           `json:"message"`
	}
	if code := cl.Do("GET", "/v1/nodes/n1/cleaning/steps", nil, &steps); code != 202 || steps.Message == "" {
		t.Fatalf("steps before inspection: %d %q", code, steps.Message)
	}

	cl.MustVerb(id, "manage", nil)
	if n := cl.WaitRest(id, 10*time.Second); n.State != "manageable" {
		t.Fatalf("manage: %q %q", n.State, n.LastError)
	}
	cl.MustVerb(id, "inspect", nil)
	n := cl.WaitRest(id, 10*time.Second)
	if n.State != "manageable" || n.Properties["cpus"] == nil || n.Properties["memory_mb"] == nil || n.Properties["local_gb"] == nil {
		t.Fatalf("inspect: %q props %v", n.State, n.Properties)
	}
	var inv map[string]any
	if code := cl.Do("GET", "/v1/nodes/n1/inventory", nil, &inv); code != 200 || inv["inventory"] == nil {
		t.Fatalf("inventory: %d", code)
	}

	// Sorted steps and min_priority.
	if code := cl.Do("GET", "/v1/nodes/n1/cleaning/steps", nil, &steps); code != 200 || len(steps.Steps) < 3 {
		t.Fatalf("steps: %d %v", code, steps.Steps)
	}
	if steps.Steps[0]["step"] != "erase_devices_metadata" || steps.Steps[1]["step"] != "erase_devices" {
		t.Fatalf("steps not sorted by priority: %v", steps.Steps)
	}
	cl.Do("GET", "/v1/nodes/n1/cleaning/steps?min_priority=50", nil, &steps)
	if len(steps.Steps) != 1 || steps.Steps[0]["step"] != "erase_devices_metadata" {
		t.Fatalf("min_priority=50: %v", steps.Steps)
	}

	cl.MustVerb(id, "provide", nil)
	if n := cl.WaitRest(id, 10*time.Second); n.State != "available" {
		t.Fatalf("provide: %q %q", n.State, n.LastError)
	}
	history := func() string {
		var h struct {
			History []map[string]any `json:"history"`
		}
		cl.Do("GET", "/v1/nodes/n1/history", nil, &h)
		var b strings.Builder
		for _, e := range h.History {
			b.WriteString(e["event"].(string) + "\n")
		}
		return b.String()
	}
	for _, want := range []string{"clean step deploy.erase_devices_metadata done", "clean step deploy.erase_devices done"} {
		if !strings.Contains(history(), want) {
			t.Fatalf("history lacks %q:\n%s", want, history())
		}
	}

	// Deploy needs an image.
	if code, msg := cl.Verb(id, "active", nil); code != 400 || !strings.Contains(msg, "image_source") {
		t.Fatalf("deploy without image: %d %s", code, msg)
	}
	cl.Do("PATCH", "/v1/nodes/n1", []map[string]any{{"op": "add", "path": "/instance_info/image_source", "value": "http://127.0.0.1:1/img"}}, nil)
	cl.MustVerb(id, "active", nil)
	if n := cl.WaitRest(id, 10*time.Second); n.State != "active" || n.PowerState != "power on" {
		t.Fatalf("deploy: %q %q %q", n.State, n.PowerState, n.LastError)
	}
	if !strings.Contains(history(), "deploy step deploy.write_image done") || !strings.Contains(history(), "deploy step deploy.boot_instance done") {
		t.Fatalf("deploy steps missing in history:\n%s", history())
	}
	for _, v := range []struct{ verb, want string }{{"rebuild", "active"}, {"rescue", "rescue"}, {"unrescue", "active"}, {"deleted", "available"}} {
		extra := map[string]any{}
		if v.verb == "rescue" {
			extra["rescue_password"] = "s3cret"
		}
		cl.MustVerb(id, v.verb, extra)
		if n := cl.WaitRest(id, 10*time.Second); n.State != v.want {
			t.Fatalf("%s: %q %q", v.verb, n.State, n.LastError)
		}
	}
	if strings.Contains(history(), "s3cret") {
		t.Fatal("rescue password in history")
	}

	// Manual clean, then a bad list: clean failed naming step and argument.
	cl.MustVerb(id, "manage", nil)
	cl.WaitRest(id, 5*time.Second)
	cl.MustVerb(id, "clean", map[string]any{"clean_steps": []map[string]any{{"interface": "deploy", "step": "erase_devices_metadata"}}})
	if n := cl.WaitRest(id, 10*time.Second); n.State != "manageable" {
		t.Fatalf("manual clean: %q %q", n.State, n.LastError)
	}
	cl.MustVerb(id, "clean", map[string]any{"clean_steps": []map[string]any{{"interface": "deploy", "step": "erase_devices", "args": map[string]any{"passes": 3}}}})
	n = cl.WaitRest(id, 5*time.Second)
	if n.State != "clean failed" || !strings.Contains(n.LastError, "erase_devices") || !strings.Contains(n.LastError, `"passes"`) {
		t.Fatalf("bad clean list: %q %q", n.State, n.LastError)
	}
}

// TestAbortRetireMaintenance covers abort during an abortable step,
// retirement and the maintenance pause.
func TestAbortRetireMaintenance(t *testing.T) {
	c := testrig.Coordinator(t, testrig.Options{})
	testrig.Site(t, c, "site1", agent.SimOptions{Nodes: 8, StepDuration: 2 * time.Second})
	cl := testrig.NewClient(t, c)
	a := cl.CreateNode("a", "site1", nil)
	b := cl.CreateNode("b", "site1", nil)
	for _, id := range []string{a, b} {
		cl.MustVerb(id, "manage", nil)
		cl.WaitRest(id, 10*time.Second)
	}

	// Abort during erase_devices_metadata (abortable): fails at once.
	cl.MustVerb(a, "provide", nil)
	for cl.Get(a).CleanStep["step"] == nil {
		time.Sleep(20 * time.Millisecond)
	}
	cl.MustVerb(a, "abort", nil)
	n := cl.Get(a)
	if n.State != "clean failed" || !strings.Contains(n.LastError, "aborted by request during step deploy.erase_devices_metadata") || n.Maintenance {
		t.Fatalf("abort: %q %q maint=%v", n.State, n.LastError, n.Maintenance)
	}
	if code, _ := cl.Verb(a, "abort", nil); code != 400 {
		t.Fatalf("second abort: %d", code)
	}

	// Maintenance pauses a node in clean wait; unset resumes it.
	cl.MustVerb(b, "provide", nil)
	cl.WaitState(b, "clean wait", 5*time.Second)
	if code := cl.Do("PUT", "/v1/nodes/b/maintenance", map[string]string{"reason": "inspecting cables"}, nil); code != 202 {
		t.Fatalf("maintenance: %d", code)
	}
	// The running step's result arrives and is held (not applied) while
	// the node is in maintenance.
	held := func() bool {
		var h bool
		_ = c.Engine.View(b, func(n *fsm.Node, _ bool) error { h = n.Held != nil; return nil })
		return h
	}
	for deadline := time.Now().Add(30 * time.Second); !held(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no result of the running step held in maintenance after 30 s: %q", cl.Get(b).State)
		}
	}
	if n := cl.Get(b); n.State != "clean wait" || !n.Maintenance {
		t.Fatalf("maintenance did not pause: %q", n.State)
	}
	cl.Do("DELETE", "/v1/nodes/b/maintenance", nil, nil)
	if n := cl.WaitRest(b, 15*time.Second); n.State != "available" {
		t.Fatalf("after maintenance: %q %q", n.State, n.LastError)
	}

	// Retire an active node, undeploy: ends manageable; provide: 409.
	cl.Do("PATCH", "/v1/nodes/b", []map[string]any{{"op": "add", "path": "/instance_info/image_source", "value": "http://127.0.0.1:1/i"}}, nil)
	if code := cl.Do("PATCH", "/v1/nodes/b", []map[string]any{{"op": "replace", "path": "/retired", "value": true}}, nil); code != 409 {
		t.Fatalf("retire available node: %d, want 409 (as Ironic)", code)
	}
	cl.MustVerb(b, "active", nil)
	cl.WaitRest(b, 20*time.Second)
	if code := cl.Do("PATCH", "/v1/nodes/b", []map[string]any{{"op": "replace", "path": "/retired", "value": true},
		{"op": "replace", "path": "/retired_reason", "value": "warranty ended"}}, nil); code != 200 {
		t.Fatalf("retire: %d", code)
	}
	cl.MustVerb(b, "deleted", nil)
	if n := cl.WaitRest(b, 20*time.Second); n.State != "manageable" {
		t.Fatalf("retired undeploy: %q %q", n.State, n.LastError)
	}
	code, msg := cl.Verb(b, "provide", nil)
	if code != 409 || !strings.Contains(msg, "retired") || !strings.Contains(msg, "warranty ended") {
		t.Fatalf("provide retired: %d %s", code, msg)
	}
	var list struct {
		Nodes []map[string]any `json:"nodes"`
	}
	cl.Do("GET", "/v1/nodes?retired=True", nil, &list)
	if len(list.Nodes) != 1 || list.Nodes[0]["name"] != "b" {
		t.Fatalf("retired list: %v", list.Nodes)
	}
}

// TestFailureInjection: a failing step, a ramdisk that never boots, one
// that dies mid-step and one that reboots on its own mid-step all end in
// a failed state with last_error.
func TestFailureInjection(t *testing.T) {
	c := testrig.Coordinator(t, testrig.Options{Machine: fsm.Config{WaitTimeout: 3 * time.Second}})
	testrig.Site(t, c, "site1", agent.SimOptions{Nodes: 8, StepDuration: 100 * time.Millisecond})
	cl := testrig.NewClient(t, c)
	cases := []struct {
		name, key, val, want string
	}{
		{"fails", "fake_fail_step", "erase_devices", "simulated failure of step erase_devices"},
		{"noboot", "fake_no_boot", "true", "to boot"},
		{"dies", "fake_die_step", "erase_devices_metadata", "no heartbeat"},
		{"reboots", "fake_reboot_step", "erase_devices", "restarted on its own"},
	}
	ids := map[string]string{}
	for _, cs := range cases {
		ids[cs.name] = cl.CreateNode(cs.name, "site1", map[string]any{cs.key: cs.val})
		cl.MustVerb(ids[cs.name], "manage", nil)
	}
	for _, cs := range cases {
		cl.WaitRest(ids[cs.name], 10*time.Second)
		cl.MustVerb(ids[cs.name], "provide", nil)
	}
	for _, cs := range cases {
		n := cl.WaitRest(ids[cs.name], 60*time.Second)
		if n.State != "clean failed" || !strings.Contains(n.LastError, cs.want) {
			t.Errorf("%s: %q %q, want clean failed with %q", cs.name, n.State, n.LastError, cs.want)
		}
	}
}

// TestMalformedRequests: bad JSON and bad shapes are 400 with a reason,
// and change nothing.
func TestMalformedRequests(t *testing.T) {
	c := testrig.Coordinator(t, testrig.Options{})
	cl := testrig.NewClient(t, c)
	cl.Do("POST", "/v1/sites", map[string]string{"name": "site1"}, nil)
	id := cl.CreateNode("m", "site1", nil)
	raw := func(method, path, body string) (int, string) {
		req, _ := http.NewRequest(method, cl.Base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, c := range []struct{ method, path, body, want string }{
		{"PUT", "/v1/nodes/m/states/provision", `{"target": "manage"`, "Invalid JSON"},
		{"PUT", "/v1/nodes/m/states/provision", `{"target": "teleport"}`, "not a valid provision target"},
		{"PUT", "/v1/nodes/m/states/provision", `{}`, "target"},
		{"PUT", "/v1/nodes/m/states/provision", `{"target": "clean", "clean_steps": {"interface": "deploy"}}`, "Invalid clean_steps"},
		{"POST", "/v1/nodes", `{"driver": "fake", "name": "x", "colour": "red"}`, "Unknown attribute"},
		{"POST", "/v1/nodes", `{"driver": "warp", "name": "y"}`, "unknown driver"},
		{"PATCH", "/v1/nodes/m", `[{"op": "move", "path": "/name"}]`, "not supported"},
		{"PATCH", "/v1/nodes/m", `[{"op": "replace", "path": "/provision_state", "value": "active"}]`, "cannot be patched"},
		{"POST", "/v1/ports", `{"address": "zz:zz", "node_uuid": "m"}`, "MAC address"},
	} {
		code, body := raw(c.method, c.path, c.body)
		if code != 400 || !strings.Contains(body, c.want) {
			t.Errorf("%s %s %s: %d %s; want 400 with %q", c.method, c.path, c.body, code, body, c.want)
		}
	}
	if n := cl.Get(id); n.State != "enroll" || n.Name != "m" {
		t.Fatalf("bad requests changed the node: %+v", n)
	}
}
