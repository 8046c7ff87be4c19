package api_test

import (
	"strings"
	"testing"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestOperatorFieldsKept: resource_class, description and owner are kept
// as given at create and by PATCH (Ironic keeps them; before, they were
// accepted and dropped), removed back to null, and bounded as Ironic's
// columns are.
func TestOperatorFieldsKept(t *testing.T) {
	c := testrig.Coordinator(t, testrig.Options{})
	cl := testrig.NewClient(t, c)
	testrig.Site(t, c, "s1", agent.SimOptions{Nodes: 2})
	var n map[string]any
	body := map[string]any{"name": "f1", "driver": "fake", "conductor_group": "s1", "resource_class": "baremetal-large",
		"description": "rack 7, slot 3", "owner": "team-a"}
	if code := cl.Do("POST", "/v1/nodes", body, &n); code != 201 {
		t.Fatalf("create: %d", code)
	}
	check := func(when string, want map[string]any) {
		t.Helper()
		var got map[string]any
		if code := cl.Do("GET", "/v1/nodes/f1", nil, &got); code != 200 {
			t.Fatalf("%s: get: %d", when, code)
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: %s = %#v, want %#v", when, k, got[k], v)
			}
		}
	}
	check("after create", map[string]any{"resource_class": "baremetal-large", "description": "rack 7, slot 3", "owner": "team-a"})
	patch := []map[string]any{{"op": "replace", "path": "/resource_class", "value": "gpu"},
		{"op": "replace", "path": "/description", "value": "moved"}, {"op": "remove", "path": "/owner"}}
	if code := cl.Do("PATCH", "/v1/nodes/f1", patch, nil); code != 200 {
		t.Fatalf("patch: %d", code)
	}
	check("after patch", map[string]any{"resource_class": "gpu", "description": "moved", "owner": nil})
	var e struct {
		ErrorMessage string `json:"error_message"`
	}
	long := []map[string]any{{"op": "replace", "path": "/resource_class", "value": strings.Repeat("x", 81)}}
	if code := cl.Do("PATCH", "/v1/nodes/f1", long, &e); code != 400 || !strings.Contains(e.ErrorMessage, "resource_class") {
		t.Errorf("an 81-character resource_class: %d %q; want 400 naming the field", code, e.ErrorMessage)
	}
	check("after the refused patch", map[string]any{"resource_class": "gpu"})
}
