package api_test

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestFirmwareAndBIOSVersionGates: GET /v1/nodes/{node}/firmware and
// /bios answer as Ironic's controllers do, asked with curl: firmware is
// 404 below 1.86, bios below 1.40; a node whose BMC reported nothing
// has empty lists; ?detail and ?fields of bios need 1.74 (400 before),
// not both at once; firmware's identity fields need 1.114, past this
// API's maximum (400); an unknown setting is Ironic's BIOSSettingNotFound
// 404; an unknown parameter is 400. The lists' content, read from a
// virtual Redfish BMC, is TestFirmwareUpdateThroughTheSiteCache's.
func TestFirmwareAndBIOSVersionGates(t *testing.T) {
	r := newVersionRig(t)
	id := r.node("site1", "manageable")
	for _, c := range []struct {
		ver, path string
		status    int
		want      string
	}{
		{"1.39", "/bios", 404, ""},
		{"1.40", "/bios", 200, `{"bios":[]}`},
		{"1.40", "/bios?detail=True", 400, "Invalid query parameter ?detail=True"},
		{"1.73", "/bios?fields=name", 400, "Invalid query parameter ?fields=name"},
		{"1.74", "/bios?detail=True", 200, `{"bios":[]}`},
		{"1.74", "/bios?fields=name,value", 200, `{"bios":[]}`},
		{"1.74", "/bios?fields=name&detail=True", 400, "Can not specify ?detail=True and fields"},
		{"1.74", "/bios?fields=colour", 400, "is not one of allowable_values"},
		{"1.74", "/bios?limit=3", 400, "Invalid query parameter ?limit=3"},
		{"1.92", "/bios/ProcVirtualization", 404, "doesn't have a BIOS setting 'ProcVirtualization'"},
		{"1.85", "/firmware", 404, ""},
		{"1.86", "/firmware", 200, `{"firmware":[]}`},
		{"1.86", "/firmware?fields=component,current_version", 200, `{"firmware":[]}`},
		{"1.92", "/firmware?fields=vendor,component", 400, "Fields vendor are not allowed in this API version. They require at least API version 1.114."},
		{"1.92", "/firmware?sort_key=component", 400, "Invalid query parameter ?sort_key=component"},
	} {
		a := vcurl(t, r.api.Base, c.ver, "GET", "/v1/nodes/"+id+c.path, "")
		body := a.body
		if a.status == 200 {
			var v any
			if err := json.Unmarshal([]byte(a.body), &v); err != nil {
				t.Fatalf("%s at %s: not JSON: %q", c.path, c.ver, a.body)
			}
			b, _ := json.Marshal(v)
			body = string(b)
		} else {
			body = strings.ReplaceAll(body, `\"`, `"`)
		}
		if a.status != c.status || !strings.Contains(body, c.want) {
			t.Errorf("GET /v1/nodes/{node}%s at %s: %d %.300s; want %d with %q", c.path, c.ver, a.status, a.body, c.status, c.want)
		}
	}
	if a := vcurl(t, r.api.Base, "1.92", "GET", "/v1/nodes/no-such-node/firmware", ""); a.status != 404 {
		t.Errorf("firmware of an unknown node: %d %s", a.status, a.body)
	}
}
