package api_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	bmapi "github.com/bmedge/bmedge/coordinator/api"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestServiceVerb is issue 21's first acceptance through curl at API
// version 1.87, on a simulated site: an active node serviced with an
// out-of-band step returns to active with its instance untouched; a
// failing (in-band) service step ends in service failed with last_error;
// re-service and rescue from service failed; abort in service wait; at
// 1.86 the verb is refused (406) as Ironic refuses it.
func TestServiceVerb(t *testing.T) {
	c := testrig.Coordinator(t, testrig.Options{})
	testrig.Site(t, c, "site1", agent.SimOptions{Nodes: 4, StepDuration: 20 * time.Millisecond})
	api := testrig.NewClient(t, c)
	base := api.Base

	type node struct {
		State       string         `json:"provision_state"`
		Target      *string        `json:"target_provision_state"`
		LastError   *string        `json:"last_error"`
		Maintenance bool           `json:"maintenance"`
		Fault       *string        `json:"fault"`
		Reservation *string        `json:"reservation"`
		ServiceStep map[string]any `json:"service_step"`
		Instance    map[string]any `json:"instance_info"`
	}
	get := func(id string) node {
		t.Helper()
		a := vcurl(t, base, "1.87", "GET", "/v1/nodes/"+id, "")
		var n node
		if a.status != 200 || json.Unmarshal([]byte(a.body), &n) != nil {
			t.Fatalf("GET node %s at 1.87: %d %.300s", id, a.status, a.body)
		}
		return n
	}
	// rest waits until the node rests (unlocked, not -ing or wait) in want.
	rest := func(id, want string) node {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			n := get(id)
			busy := n.Reservation != nil || strings.HasSuffix(n.State, "ing") || strings.Contains(n.State, "wait")
			if !busy {
				if n.State != want {
					t.Fatalf("node %s rests in %q, want %q (last_error %v)", id, n.State, want, n.LastError)
				}
				return n
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %s still in %q, want it at rest in %q", id, n.State, want)
			}
			time.Sleep(30 * time.Millisecond)
		}
	}
	provision := func(id, ver, body string, want int) vAnswer {
		t.Helper()
		a := vcurl(t, base, ver, "PUT", "/v1/nodes/"+id+"/states/provision", body)
		if a.status != want {
			t.Fatalf("PUT provision %s at %s: %d, want %d: %.400s", body, ver, a.status, want, a.body)
		}
		return a
	}
	patch := func(id, body string) {
		t.Helper()
		if a := vcurl(t, base, "1.87", "PATCH", "/v1/nodes/"+id, body); a.status != 200 {
			t.Fatalf("PATCH %s: %d %.300s", body, a.status, a.body)
		}
	}
	unsetMaintenance := func(id string) {
		t.Helper()
		if a := vcurl(t, base, "1.87", "DELETE", "/v1/nodes/"+id+"/maintenance", ""); a.status != 202 {
			t.Fatalf("DELETE maintenance: %d %.300s", a.status, a.body)
		}
	}
	activeNode := func(name string) string {
		t.Helper()
		id := api.CreateNode(name, "site1", nil)
		patch(id, `[{"op":"add","path":"/instance_info/image_source","value":"http://127.0.0.1:1/img"}]`)
		for _, v := range []string{"manage", "provide", "active"} {
			provision(id, "1.87", `{"target":"`+v+`"}`, 202)
			rest(id, map[string]string{"manage": "manageable", "provide": "available", "active": "active"}[v])
		}
		return id
	}
	oob := `{"target":"service","service_steps":[{"interface":"management","step":"fake_reset_bmc","args":{"delay":0.05}}]}`
	inband := `{"target":"service","service_steps":[{"interface":"deploy","step":"inspect_hardware"}]}`

	// Below 1.87 the verb does not exist (Ironic: 406); the maximum
	// version is the API's.
	id := activeNode("svc1")
	a := provision(id, "1.86", oob, 406)
	if a.header["x-openstack-ironic-api-maximum-version"] != bmapi.MaxVersion {
		t.Fatalf("maximum version %q, want %s", a.header["x-openstack-ironic-api-maximum-version"], bmapi.MaxVersion)
	}
	if n := get(id); n.State != "active" {
		t.Fatalf("refused verb moved the node to %q", n.State)
	}
	if f := vcurl(t, base, "1.86", "GET", "/v1/nodes/"+id, "").obj(t); f["service_step"] != nil || hasKey(f, "service_step") {
		t.Fatalf("service_step shown at 1.86")
	}
	if f := vcurl(t, base, "1.87", "GET", "/v1/nodes/"+id, "").obj(t); !hasKey(f, "service_step") || f["firmware_interface"] != "no-firmware" || !hasKey(f, "parent_node") {
		t.Fatalf("at 1.87 the node lacks service_step, parent_node or firmware_interface: %v", keysOf(f))
	}

	// unhold (1.85): 406 below, and 400 at once in any state (there are
	// no hold states yet), as Ironic where there is nothing to release.
	provision(id, "1.84", `{"target":"unhold"}`, 406)
	if a := provision(id, "1.87", `{"target":"unhold"}`, 400); !strings.Contains(a.body, "unhold") || !strings.Contains(a.body, "active") {
		t.Fatalf("unhold refusal: %s", a.body)
	}

	// Refusals at 1.87: no list, a step that erases the instance's disk,
	// service_steps with another target, too many steps.
	provision(id, "1.87", `{"target":"service"}`, 400)
	if a := provision(id, "1.87", `{"target":"service","service_steps":[{"interface":"deploy","step":"erase_devices"}]}`, 400); !strings.Contains(a.body, "erase_devices") {
		t.Fatalf("erase_devices refusal does not name the step: %s", a.body)
	}
	provision(id, "1.87", `{"target":"service","service_steps":[{"interface":"deploy","step":"write_image"}]}`, 400)
	provision(id, "1.87", `{"target":"rebuild","service_steps":[{"interface":"management","step":"fake_reset_bmc"}]}`, 400)
	many := make([]map[string]any, 101)
	for i := range many {
		many[i] = map[string]any{"interface": "management", "step": "fake_reset_bmc"}
	}
	b, _ := json.Marshal(map[string]any{"target": "service", "service_steps": many})
	provision(id, "1.87", string(b), 400)

	// Success: an out-of-band step, the instance untouched.
	before := get(id).Instance
	provision(id, "1.87", oob, 202)
	n := rest(id, "active")
	if n.LastError != nil || n.Maintenance || n.ServiceStep == nil || len(n.ServiceStep) != 0 {
		t.Fatalf("after service: last_error %v maintenance %v service_step %v", n.LastError, n.Maintenance, n.ServiceStep)
	}
	if !reflect.DeepEqual(before, n.Instance) {
		t.Fatalf("instance_info changed by service: %v -> %v", before, n.Instance)
	}
	hist := vcurl(t, base, "1.87", "GET", "/v1/nodes/"+id+"/history?detail=True", "").body
	if !strings.Contains(hist, "fake_reset_bmc") {
		t.Fatalf("history lacks the service step: %.500s", hist)
	}
	if i := strings.LastIndex(hist, "service: active"); i < 0 || strings.Contains(hist[i:], "write_image") || strings.Contains(hist[i:], "erase") {
		t.Fatalf("service ran write_image or an erase step, or is not in the history: %.800s", hist)
	}

	// A failing (in-band) step: service failed, last_error, maintenance
	// with Ironic's fault.
	id2 := activeNode("svc2")
	patch(id2, `[{"op":"add","path":"/driver_info/fake_fail_step","value":"inspect_hardware"}]`)
	provision(id2, "1.87", inband, 202)
	n = rest(id2, "service failed")
	if n.LastError == nil || !strings.Contains(*n.LastError, "inspect_hardware") || !n.Maintenance || n.Fault == nil || *n.Fault != "service failure" {
		t.Fatalf("failed service: last_error %v maintenance %v fault %v", n.LastError, n.Maintenance, n.Fault)
	}
	if n.Target == nil || *n.Target != "active" {
		t.Fatalf("service failed target %v, want active", n.Target)
	}
	// Re-service is refused in maintenance (Ironic's NodeInMaintenance);
	// after it is unset, service again ends in active.
	provision(id2, "1.87", oob, 400)
	unsetMaintenance(id2)
	// (Replaced, not removed: the edge agent keeps a node's last
	// non-empty driver_info.)
	patch(id2, `[{"op":"replace","path":"/driver_info/fake_fail_step","value":"none"}]`)
	provision(id2, "1.87", inband, 202)
	if n := rest(id2, "active"); n.LastError != nil {
		t.Fatalf("re-service: last_error %v", *n.LastError)
	}

	// Rescue from service failed.
	patch(id2, `[{"op":"replace","path":"/driver_info/fake_fail_step","value":"inspect_hardware"}]`)
	provision(id2, "1.87", inband, 202)
	rest(id2, "service failed")
	unsetMaintenance(id2)
	provision(id2, "1.87", `{"target":"rescue","rescue_password":"s3cret"}`, 202)
	rest(id2, "rescue")

	// Abort in service wait: the step stops and the node is booted back
	// into its instance, in active with last_error (Ironic's _do_abort).
	id3 := activeNode("svc3")
	patch(id3, `[{"op":"add","path":"/driver_info/fake_step_seconds","value":"30"}]`)
	provision(id3, "1.87", inband, 202)
	deadline := time.Now().Add(60 * time.Second)
	for n = get(id3); n.State != "service wait" || len(n.ServiceStep) == 0; n = get(id3) {
		if time.Now().After(deadline) {
			t.Fatalf("node never in service wait with its step: %q %v", n.State, n.ServiceStep)
		}
		time.Sleep(30 * time.Millisecond)
	}
	if n.ServiceStep["step"] != "inspect_hardware" {
		t.Fatalf("service_step %v, want inspect_hardware", n.ServiceStep)
	}
	provision(id3, "1.87", `{"target":"abort"}`, 202)
	n = rest(id3, "active")
	if n.LastError == nil || !strings.Contains(*n.LastError, "aborted") || n.Maintenance {
		t.Fatalf("after abort: last_error %v maintenance %v", n.LastError, n.Maintenance)
	}
}

func hasKey(m map[string]any, k string) bool {
	_, ok := m[k]
	return ok
}
