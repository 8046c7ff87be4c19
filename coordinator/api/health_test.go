package api_test

import (
	"strings"
	"testing"
)

// TestHealthFieldGates: health is read-only (PATCH 400, as Ironic's),
// ?fields=health is 406 below 1.109 and taken from it; the sensors and
// events of a node no BMC reported for are empty, and their paths take
// only their own parameters (curl).
func TestHealthFieldGates(t *testing.T) {
	r := newVersionRig(t)
	id := r.node("site1", "manageable")
	base := r.api.Base
	if a := vcurl(t, base, "1.109", "GET", "/v1/nodes/"+id+"?fields=health,uuid", ""); a.status != 200 || !strings.Contains(a.body, `"health":null`) {
		t.Errorf("?fields=health at 1.109: %d %s", a.status, a.body)
	}
	if a := vcurl(t, base, "1.108", "GET", "/v1/nodes/"+id+"?fields=health", ""); a.status != 406 {
		t.Errorf("?fields=health at 1.108: %d %s; want 406", a.status, a.body)
	}
	if a := vcurl(t, base, "1.109", "PATCH", "/v1/nodes/"+id, `[{"op":"replace","path":"/health","value":"OK"}]`); a.status != 400 {
		t.Errorf("PATCH /health: %d %s; want 400", a.status, a.body)
	}
	if a := vcurl(t, base, "1.109", "GET", "/v1/nodes/"+id, ""); !strings.Contains(a.body, `"health":null`) {
		t.Errorf("health after the refused PATCH: %s", a.body)
	}
	if a := vcurl(t, base, "1.1", "GET", "/v1/nodes/"+id+"/sensors", ""); a.status != 200 || !strings.Contains(a.body, `"sensors":[]`) || !strings.Contains(a.body, `"read_at":null`) {
		t.Errorf("sensors of a node without readings: %d %s", a.status, a.body)
	}
	if a := vcurl(t, base, "", "GET", "/v1/nodes/"+id+"/events", ""); a.status != 200 || !strings.Contains(a.body, `"events":[]`) || !strings.Contains(a.body, `"last_seq":0`) {
		t.Errorf("events of a node without readings: %d %s", a.status, a.body)
	}
	for _, q := range []string{"?since=x", "?limit=501", "?marker=1"} {
		if a := vcurl(t, base, "", "GET", "/v1/nodes/"+id+"/events"+q, ""); a.status != 400 {
			t.Errorf("events%s: %d %s; want 400", q, a.status, a.body)
		}
	}
	if a := vcurl(t, base, "", "GET", "/v1/nodes/nosuchnode/sensors", ""); a.status != 404 {
		t.Errorf("sensors of an unknown node: %d %s; want 404", a.status, a.body)
	}
}
