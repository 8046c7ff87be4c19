package api_test

import (
	"strings"
	"testing"
)

// TestBIOSSettingsNotServed pins a difference docs/ironic-compat.md
// lists: GET /v1/nodes/{node}/bios (and a setting under it) is 404 at
// every version, as an unknown path, where Ironic lists the settings it
// cached; the node's BMC holds them. When the coordinator serves them,
// this test and that row of the document change together.
func TestBIOSSettingsNotServed(t *testing.T) {
	r := newVersionRig(t)
	id := r.node("site1", "manageable")
	for _, c := range []struct{ ver, path string }{
		{"1.39", "/bios"}, {"1.40", "/bios"}, {"1.92", "/bios"}, {"1.92", "/bios/ProcVirtualization"},
	} {
		if a := vcurl(t, r.api.Base, c.ver, "GET", "/v1/nodes/"+id+c.path, ""); a.status != 404 || strings.Contains(a.body, `"bios"`) {
			t.Errorf("GET /v1/nodes/{node}%s at %s: %d %.200s; want 404 (docs/ironic-compat.md)", c.path, c.ver, a.status, a.body)
		}
	}
}
