package api_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestRunbooks is issue 21's second acceptance through curl on a
// simulated site: a runbook is created, listed, and used by clean (a
// manageable node) and by service (an active node) on nodes that have a
// trait of its name, and refused (400) on a node without it, which stays
// where it was. Also /v1/runbooks as Ironic 1.92's controller answers it:
// 404 to GET and 405 to POST below 1.92, 406 for runbook in a provision
// request below 1.92, show, PATCH (owner and public), delete, and the
// refusals: a runbook that does not exist (404), runbook with
// clean_steps, with a verb other than clean and service.
func TestRunbooks(t *testing.T) {
	c := testrig.Coordinator(t, testrig.Options{})
	testrig.Site(t, c, "site1", agent.SimOptions{Nodes: 3, StepDuration: 20 * time.Millisecond})
	api := testrig.NewClient(t, c)
	base := api.Base
	call := func(ver, method, path, body string, want int) vAnswer {
		t.Helper()
		a := vcurl(t, base, ver, method, path, body)
		if a.status != want {
			t.Fatalf("%s %s %s at %s: %d, want %d: %.500s", method, path, body, ver, a.status, want, a.body)
		}
		return a
	}
	rbDoc := `{"name": "CUSTOM_FIRMWARE_2026", "extra": {"ticket": "OPS-1"}, "steps": [
		{"interface": "management", "step": "fake_reset_bmc", "args": {"delay": 0.02}, "order": 2},
		{"interface": "management", "step": "fake_reset_bmc", "args": {"delay": 0.01}, "order": 1}]}`

	call("1.91", "GET", "/v1/runbooks", "", 404)
	call("1.91", "POST", "/v1/runbooks", rbDoc, 405)
	if v := call("1.92", "GET", "/v1", "", 200).obj(t); !hasKey(v, "runbooks") {
		t.Fatalf("GET /v1 at 1.92 does not link runbooks: %v", keysOf(v))
	}
	// Ironic refuses the same step twice in a runbook.
	call("1.92", "POST", "/v1/runbooks", rbDoc, 400)
	for _, bad := range []string{
		`{"name": "CUSTOM_X", "steps": [{"interface": "management", "step": "fake_reset_bmc", "priority": 1}]}`,
		`{"name": "CUSTOM_X", "steps": [{"interface": "management", "step": "fake_reset_bmc"}]}`,
		`{"name": "not a trait", "steps": [{"interface": "management", "step": "fake_reset_bmc", "order": 1}]}`,
		`{"name": "CUSTOM_X", "public": "yes", "steps": [{"interface": "management", "step": "fake_reset_bmc", "order": 1}]}`,
	} {
		call("1.92", "POST", "/v1/runbooks", bad, 400)
	}
	good := `{"name": "CUSTOM_FIRMWARE_2026", "extra": {"ticket": "OPS-1"}, "steps": [
		{"interface": "management", "step": "fake_reset_bmc", "args": {"delay": 0.02}, "order": 2}]}`
	a := call("1.92", "POST", "/v1/runbooks", good, 201)
	rb := a.obj(t)
	uuid, _ := rb["uuid"].(string)
	if uuid == "" || rb["public"] != false || rb["owner"] != nil || rb["disable_ramdisk"] != false || !strings.HasSuffix(a.header["location"], "/v1/runbooks/"+uuid) {
		t.Fatalf("created runbook %v (Location %q)", rb, a.header["location"])
	}
	list := call("1.92", "GET", "/v1/runbooks", "", 200).obj(t)["runbooks"].([]any)
	if len(list) != 1 || list[0].(map[string]any)["name"] != "CUSTOM_FIRMWARE_2026" {
		t.Fatalf("list: %v", list)
	}
	if l := call("1.92", "GET", "/v1/runbooks?project=someone", "", 200).obj(t)["runbooks"].([]any); len(l) != 0 {
		t.Fatalf("?project= lists a runbook that project does not own: %v", l)
	}
	steps, _ := json.Marshal(call("1.92", "GET", "/v1/runbooks/CUSTOM_FIRMWARE_2026", "", 200).obj(t)["steps"])
	if !strings.Contains(string(steps), `"order":2`) {
		t.Fatalf("show: steps %s", steps)
	}
	// Owner and public as Ironic: a public runbook has no owner.
	call("1.92", "PATCH", "/v1/runbooks/"+uuid, `[{"op": "replace", "path": "/public", "value": true}]`, 200)
	call("1.92", "PATCH", "/v1/runbooks/"+uuid, `[{"op": "replace", "path": "/owner", "value": "proj1"}]`, 400)
	p := call("1.92", "PATCH", "/v1/runbooks/"+uuid, `[{"op": "replace", "path": "/public", "value": false}, {"op": "replace", "path": "/owner", "value": "proj1"}]`, 200).obj(t)
	if p["owner"] != "proj1" || p["public"] != false {
		t.Fatalf("patched owner/public: %v", p)
	}
	call("1.92", "PATCH", "/v1/runbooks/"+uuid, `[{"op": "add", "path": "/steps/-", "value": {"interface": "management", "step": "fake_reset_bmc", "args": {}, "order": 1}}]`, 400)
	call("1.92", "PATCH", "/v1/runbooks/"+uuid, `[{"op": "replace", "path": "/disable_ramdisk", "value": true}]`, 400)

	provision := func(id, ver, body string, want int) vAnswer {
		t.Helper()
		return call(ver, "PUT", "/v1/nodes/"+id+"/states/provision", body, want)
	}
	history := func(id string) string {
		return call("1.92", "GET", "/v1/nodes/"+id+"/history?detail=True", "", 200).body
	}
	// Clean by runbook: a manageable node with the trait.
	n1 := api.CreateNode("rb1", "site1", nil)
	provision(n1, "1.92", `{"target":"manage"}`, 202)
	api.WaitRest(n1, 60*time.Second)
	byRunbook := `{"target":"clean","runbook":"CUSTOM_FIRMWARE_2026"}`
	// No trait of its name yet: refused, the node stays manageable.
	if a := provision(n1, "1.92", byRunbook, 400); !strings.Contains(a.body, "has not been approved for use on this node") {
		t.Fatalf("runbook on a node without the trait: %s", a.body)
	}
	if n := api.Get(n1); n.State != "manageable" || n.LastError != "" {
		t.Fatalf("refused runbook moved the node: %q %q", n.State, n.LastError)
	}
	call("1.92", "PUT", "/v1/nodes/"+n1+"/traits", `{"traits": ["CUSTOM_FIRMWARE_2026"]}`, 204)
	provision(n1, "1.91", byRunbook, 406)
	provision(n1, "1.92", `{"target":"clean","runbook":"CUSTOM_NOPE"}`, 404)
	provision(n1, "1.92", `{"target":"clean","runbook":"CUSTOM_FIRMWARE_2026","clean_steps":[{"interface":"management","step":"fake_reset_bmc"}]}`, 400)
	provision(n1, "1.92", `{"target":"provide","runbook":"CUSTOM_FIRMWARE_2026"}`, 400)
	provision(n1, "1.92", byRunbook, 202)
	if n := api.WaitRest(n1, 60*time.Second); n.State != "manageable" || n.LastError != "" {
		t.Fatalf("clean by runbook ended in %q (%s)", n.State, n.LastError)
	}
	if h := history(n1); !strings.Contains(h, "clean step management.fake_reset_bmc done") {
		t.Fatalf("history lacks the runbook's step: %.1500s", h)
	}

	// Service by runbook: an active node with the trait (by UUID).
	n2 := api.CreateNode("rb2", "site1", nil)
	call("1.92", "PATCH", "/v1/nodes/"+n2, `[{"op":"add","path":"/instance_info/image_source","value":"http://127.0.0.1:1/img"}]`, 200)
	for _, v := range []string{"manage", "provide", "active"} {
		provision(n2, "1.92", `{"target":"`+v+`"}`, 202)
		api.WaitRest(n2, 60*time.Second)
	}
	provision(n2, "1.92", `{"target":"service","runbook":"`+uuid+`"}`, 400)
	if n := api.Get(n2); n.State != "active" {
		t.Fatalf("refused service moved the node to %q", n.State)
	}
	call("1.92", "PUT", "/v1/nodes/"+n2+"/traits/CUSTOM_FIRMWARE_2026", `{}`, 204)
	provision(n2, "1.92", `{"target":"service","runbook":"`+uuid+`"}`, 202)
	if n := api.WaitRest(n2, 60*time.Second); n.State != "active" || n.LastError != "" {
		t.Fatalf("service by runbook ended in %q (%s)", n.State, n.LastError)
	}
	if h := history(n2); !strings.Contains(h, "service step management.fake_reset_bmc done") {
		t.Fatalf("history lacks the runbook's service step: %.1500s", h)
	}

	call("1.92", "DELETE", "/v1/runbooks/CUSTOM_FIRMWARE_2026", "", 204)
	call("1.92", "GET", "/v1/runbooks/"+uuid, "", 404)
	provision(n1, "1.92", byRunbook, 404)
}
