package api_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestDeployTemplates is issue 21's third acceptance through curl on a
// simulated site: a deploy template on trait CUSTOM_BIOS_TUNED adds its
// bios.apply_configuration step to the deploy of a node whose
// instance_info traits name it (the node has the trait), and deploy_step
// shows that step while it runs; the deploy of a node whose
// instance_info traits do not name it runs no such step. Also
// /v1/deploy_templates as Ironic's controller answers it: 404 to GET and
// 405 to POST below 1.55, list (uuid, name, links; detail; fields),
// show by name or UUID, PATCH, delete, and the refusals of its schema.
func TestDeployTemplates(t *testing.T) {
	c := testrig.Coordinator(t, testrig.Options{})
	// The fake BMC takes 300 ms per command, so the BIOS step is seen
	// running.
	testrig.Site(t, c, "site1", agent.SimOptions{Nodes: 2, StepDuration: 20 * time.Millisecond, BMCDelay: 300 * time.Millisecond})
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
	tmpl := `{"name": "CUSTOM_BIOS_TUNED", "extra": {"team": "hpc"}, "steps": [{"interface": "bios", "step": "apply_configuration",
		"args": {"settings": [{"name": "ProcTurboMode", "value": "Disabled"}]}, "priority": 150}]}`

	// Below 1.55 the resource does not exist.
	call("1.54", "GET", "/v1/deploy_templates", "", 404)
	call("1.54", "POST", "/v1/deploy_templates", tmpl, 405)
	if v := call("1.54", "GET", "/v1", "", 200).obj(t); hasKey(v, "deploy_templates") {
		t.Fatalf("GET /v1 at 1.54 links deploy_templates")
	}
	if v := call("1.55", "GET", "/v1", "", 200).obj(t); !hasKey(v, "deploy_templates") {
		t.Fatalf("GET /v1 at 1.55 does not link deploy_templates: %v", keysOf(v))
	}

	// Refusals of the schema.
	for _, bad := range []string{
		`{"name": "bios_tuned", "steps": [{"interface": "bios", "step": "apply_configuration", "args": {}, "priority": 1}]}`,
		`{"name": "CUSTOM_X", "steps": []}`,
		`{"name": "CUSTOM_X", "steps": [{"interface": "bios", "step": "apply_configuration", "args": {}}]}`,
		`{"name": "CUSTOM_X", "steps": [{"interface": "nonsense", "step": "x", "args": {}, "priority": 1}]}`,
		`{"name": "CUSTOM_X", "steps": [{"interface": "bios", "step": "x", "args": {}, "priority": 1}, {"interface": "bios", "step": "x", "args": {}, "priority": 2}]}`,
		`{"name": "CUSTOM_X", "description": "not in 1.55", "steps": [{"interface": "bios", "step": "x", "args": {}, "priority": 1}]}`,
		`{"name": "CUSTOM_X", "uuid": "not-a-uuid", "steps": [{"interface": "bios", "step": "x", "args": {}, "priority": 1}]}`,
	} {
		call("1.55", "POST", "/v1/deploy_templates", bad, 400)
	}

	a := call("1.55", "POST", "/v1/deploy_templates", tmpl, 201)
	created := a.obj(t)
	uuid, _ := created["uuid"].(string)
	if uuid == "" || !strings.HasSuffix(a.header["location"], "/v1/deploy_templates/"+uuid) || created["name"] != "CUSTOM_BIOS_TUNED" {
		t.Fatalf("created template %v, Location %q", created, a.header["location"])
	}
	call("1.55", "POST", "/v1/deploy_templates", tmpl, 409)
	// A second template, that the deploy below does not ask for.
	call("1.55", "POST", "/v1/deploy_templates", `{"name": "CUSTOM_OTHER", "steps": [{"interface": "bios", "step": "apply_configuration", "args": {"settings": [{"name": "X", "value": "Y"}]}, "priority": 200}]}`, 201)

	list := call("1.55", "GET", "/v1/deploy_templates", "", 200).obj(t)["deploy_templates"].([]any)
	if len(list) != 2 {
		t.Fatalf("list: %v", list)
	}
	if first := list[0].(map[string]any); len(first) != 3 || first["uuid"] != uuid || !hasKey(first, "links") {
		t.Fatalf("list entry is not uuid, name and links: %v", first)
	}
	detail := call("1.55", "GET", "/v1/deploy_templates?detail=True", "", 200).obj(t)["deploy_templates"].([]any)
	if d := detail[0].(map[string]any); !hasKey(d, "steps") || !hasKey(d, "extra") || !hasKey(d, "created_at") {
		t.Fatalf("detail entry: %v", d)
	}
	call("1.55", "GET", "/v1/deploy_templates?fields=bogus", "", 400)
	call("1.55", "GET", "/v1/deploy_templates?detail=True&fields=name", "", 400)
	if page := call("1.55", "GET", "/v1/deploy_templates?limit=1", "", 200).obj(t); !hasKey(page, "next") {
		t.Fatalf("a full page has no next link: %v", page)
	}
	show := call("1.55", "GET", "/v1/deploy_templates/CUSTOM_BIOS_TUNED?fields=steps", "", 200).obj(t)
	if s, _ := json.Marshal(show["steps"]); !strings.Contains(string(s), `"priority":150`) || hasKey(show, "extra") {
		t.Fatalf("show with fields=steps: %v", show)
	}
	call("1.55", "GET", "/v1/deploy_templates/CUSTOM_NOPE", "", 404)
	patched := call("1.55", "PATCH", "/v1/deploy_templates/"+uuid, `[{"op": "replace", "path": "/extra/team", "value": "ops"}]`, 200).obj(t)
	if patched["extra"].(map[string]any)["team"] != "ops" || patched["updated_at"] == nil {
		t.Fatalf("patched: %v", patched)
	}
	call("1.55", "PATCH", "/v1/deploy_templates/"+uuid, `[{"op": "replace", "path": "/uuid", "value": "x"}]`, 400)
	call("1.55", "PATCH", "/v1/deploy_templates/"+uuid, `[{"op": "remove", "path": "/steps/0/priority"}]`, 400)
	call("1.55", "PATCH", "/v1/deploy_templates/"+uuid, `[{"op": "replace", "path": "/name", "value": "CUSTOM_OTHER"}]`, 409)

	// The node: the trait, and instance_info traits naming it.
	deployed := func(name string, traits string) string {
		t.Helper()
		id := api.CreateNode(name, "site1", nil)
		call("1.55", "PATCH", "/v1/nodes/"+id, `[{"op":"add","path":"/instance_info/image_source","value":"http://127.0.0.1:1/img"},
			{"op":"add","path":"/instance_info/traits","value":`+traits+`}]`, 200)
		for _, v := range []string{"manage", "provide"} {
			call("1.55", "PUT", "/v1/nodes/"+id+"/states/provision", `{"target":"`+v+`"}`, 202)
			api.WaitRest(id, 60*time.Second)
		}
		return id
	}
	id := deployed("tmpl1", `["CUSTOM_BIOS_TUNED"]`)
	// The node lacks the trait: refused (Ironic: 400), nothing starts.
	if a := call("1.55", "PUT", "/v1/nodes/"+id+"/states/provision", `{"target":"active"}`, 400); !strings.Contains(a.body, "missing traits CUSTOM_BIOS_TUNED") {
		t.Fatalf("deploy without the trait: %s", a.body)
	}
	call("1.55", "PUT", "/v1/nodes/"+id+"/traits", `{"traits": ["CUSTOM_BIOS_TUNED", "CUSTOM_OTHER"]}`, 204)
	call("1.55", "PUT", "/v1/nodes/"+id+"/states/provision", `{"target":"active"}`, 202)
	deadline := time.Now().Add(60 * time.Second)
	for {
		n := call("1.55", "GET", "/v1/nodes/"+id, "", 200).obj(t)
		step, _ := n["deploy_step"].(map[string]any)
		if step["interface"] == "bios" && step["step"] == "apply_configuration" {
			if n["provision_state"] != "deploying" || step["priority"] != float64(150) {
				t.Fatalf("while the BIOS step runs: state %v step %v", n["provision_state"], step)
			}
			if s, _ := json.Marshal(step["args"]); !strings.Contains(string(s), "ProcTurboMode") {
				t.Fatalf("deploy_step args %s", s)
			}
			break
		}
		if n["provision_state"] == "active" || n["provision_state"] == "deploy failed" || time.Now().After(deadline) {
			t.Fatalf("deploy_step never showed bios.apply_configuration; node %v (last_error %v)", n["provision_state"], n["last_error"])
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := api.WaitRest(id, 60*time.Second); n.State != "active" {
		t.Fatalf("deploy with the template ended in %q (%s)", n.State, n.LastError)
	}
	hist := call("1.78", "GET", "/v1/nodes/"+id+"/history?detail=True", "", 200).body
	if strings.Count(hist, "bios.apply_configuration") != 1 {
		t.Fatalf("history does not have the template's step once: %.1500s", hist)
	}

	// A node whose deploy asks for no template runs no BIOS step.
	id2 := deployed("tmpl2", `[]`)
	call("1.55", "PUT", "/v1/nodes/"+id2+"/states/provision", `{"target":"active"}`, 202)
	if n := api.WaitRest(id2, 60*time.Second); n.State != "active" {
		t.Fatalf("deploy without templates ended in %q (%s)", n.State, n.LastError)
	}
	if hist := call("1.78", "GET", "/v1/nodes/"+id2+"/history?detail=True", "", 200).body; strings.Contains(hist, "bios.") {
		t.Fatalf("a deploy that asked for no template ran a BIOS step: %.1500s", hist)
	}

	// Secret-looking step arguments are masked in every answer, as
	// Ironic's mask_dict_password.
	sec := call("1.55", "POST", "/v1/deploy_templates", `{"name": "CUSTOM_SECRET", "steps": [{"interface": "vendor", "step": "x", "args": {"admin_password": "s3cret-pw", "nested": {"token": "s3cret-tok"}}, "priority": 0}]}`, 201)
	for _, a := range []vAnswer{sec, call("1.55", "GET", "/v1/deploy_templates/CUSTOM_SECRET", "", 200), call("1.55", "GET", "/v1/deploy_templates?detail=True", "", 200)} {
		if strings.Contains(a.body, "s3cret") || !strings.Contains(a.body, "******") {
			t.Fatalf("a secret step argument is shown: %.500s", a.body)
		}
	}
	call("1.55", "DELETE", "/v1/deploy_templates/CUSTOM_BIOS_TUNED", "", 204)
	call("1.55", "GET", "/v1/deploy_templates/"+uuid, "", 404)
	call("1.54", "DELETE", "/v1/deploy_templates/CUSTOM_OTHER", "", 405)
}
