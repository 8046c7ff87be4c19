package api_test

import (
	"strings"
	"testing"
)

// TestRescuePasswordRefusals: a rescue_password with another target is
// refused as Ironic refuses it, and so are an empty (or blank) one and
// one longer than the hash takes; each leaves the node in active.
func TestRescuePasswordRefusals(t *testing.T) {
	r := newVersionRig(t)
	id := r.node("site1", "active")
	base := r.api.Base
	for _, c := range []struct{ body, want string }{
		{`{"target":"deleted","rescue_password":"pw"}`, "is only valid when setting target provision state to rescue"},
		{`{"target":"rescue","rescue_password":"   "}`, "A non-empty rescue_password is required"},
		{`{"target":"rescue"}`, "A non-empty rescue_password is required"},
		{`{"target":"rescue","rescue_password":"` + strings.Repeat("x", 257) + `"}`, "longer than the 256 allowed"},
	} {
		a := vcurl(t, base, "1.82", "PUT", "/v1/nodes/"+id+"/states/provision", c.body)
		if a.status != 400 || !strings.Contains(a.body, c.want) {
			t.Errorf("%.60s: %d %s; want 400 saying %q", c.body, a.status, a.body, c.want)
		}
	}
	if n := r.settle(id, ""); n.State != "active" {
		t.Fatalf("node in %q after refused rescues", n.State)
	}
}

// TestStepListsOnlyWithTheirTarget: deploy_steps go with active or
// rebuild, clean_steps with clean, service_steps with service (Ironic's
// refusals); with another target each is refused, never taken and
// dropped, and the node stays where it was.
func TestStepListsOnlyWithTheirTarget(t *testing.T) {
	r := newVersionRig(t)
	id := r.node("site1", "active")
	base := r.api.Base
	steps := `[{"interface":"deploy","step":"erase_devices","args":{},"priority":50}]`
	for _, c := range []struct{ body, want string }{
		{`{"target":"deleted","deploy_steps":` + steps + `}`, `deploy_steps\\\" is only valid when setting target provision state to active or rebuild`},
		{`{"target":"deleted","clean_steps":` + steps + `}`, `clean_steps is only valid with target \\\"clean\\\"`},
		{`{"target":"deleted","service_steps":` + steps + `}`, `service_steps\\\" is only valid when setting target provision state to service`},
	} {
		a := vcurl(t, base, "1.88", "PUT", "/v1/nodes/"+id+"/states/provision", c.body)
		if a.status != 400 || !strings.Contains(a.body, c.want) {
			t.Errorf("%.60s: %d %s; want 400 saying %q", c.body, a.status, a.body, c.want)
		}
	}
	if n := r.settle(id, ""); n.State != "active" {
		t.Fatalf("node in %q after refused requests", n.State)
	}
}
