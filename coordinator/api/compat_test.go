package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	bmapi "github.com/bmedge/bmedge/coordinator/api"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// faultstring unwraps Ironic's error body: error_message is a JSON
// document whose faultstring clients print.
func faultstring(t *testing.T, body map[string]any) string {
	t.Helper()
	s, _ := body["error_message"].(string)
	var f struct {
		Faultstring string `json:"faultstring"`
	}
	if err := json.Unmarshal([]byte(s), &f); err != nil || f.Faultstring == "" {
		t.Fatalf("not Ironic's error body: %v", body)
	}
	return f.Faultstring
}

// TestIronicCompat checks details Ironic's clients rely on, without a
// site agent: version negotiation, trailing slashes, error bodies for
// unknown paths and methods, and PATCH that renames.
func TestIronicCompat(t *testing.T) {
	c := testrig.Coordinator(t, testrig.Options{})
	api := testrig.NewClient(t, c)
	if code := api.Do("POST", "/v1/sites", map[string]string{"name": "site1"}, nil); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	id := api.CreateNode("n1", "", nil)

	get := func(path, version string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", api.Base+path, nil)
		if version != "" {
			req.Header.Set("X-OpenStack-Ironic-API-Version", version)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	// Without a version header a client gets the newest version, and the
	// header says so (Ironic serves 1.1: a deliberate difference in
	// docs/ironic-compat.md); the range is always announced; an
	// unsupported version is 406 so that the client negotiates down.
	r := get("/v1", "")
	if r.StatusCode != 200 || r.Header.Get("X-OpenStack-Ironic-API-Version") != bmapi.MaxVersion ||
		r.Header.Get("X-OpenStack-Ironic-API-Minimum-Version") != "1.1" || r.Header.Get("X-OpenStack-Ironic-API-Maximum-Version") == "" {
		t.Fatalf("GET /v1: %d %v", r.StatusCode, r.Header)
	}
	if r := get("/v1/nodes", "1.78"); r.StatusCode != 200 || r.Header.Get("X-OpenStack-Ironic-API-Version") != "1.78" {
		t.Fatalf("GET /v1/nodes at 1.78: %d %v", r.StatusCode, r.Header)
	}
	if r := get("/v1/nodes", "1.999"); r.StatusCode != 406 || r.Header.Get("X-OpenStack-Ironic-API-Maximum-Version") == "" {
		t.Fatalf("GET /v1/nodes at 1.999: %d %v", r.StatusCode, r.Header)
	}

	// ironicclient asks collections with a trailing slash.
	var list struct {
		Nodes []map[string]any `json:"nodes"`
	}
	if code := api.Do("GET", "/v1/nodes/?provision_state=enroll", nil, &list); code != 200 || len(list.Nodes) != 1 || list.Nodes[0]["uuid"] != id {
		t.Fatalf("GET /v1/nodes/?provision_state=enroll: %d %v", code, list)
	}

	// Unknown paths and methods answer in Ironic's error shape.
	var body map[string]any
	if code := api.Do("GET", "/v1/nosuch", nil, &body); code != 404 || !strings.Contains(faultstring(t, body), "/v1/nosuch") {
		t.Fatalf("GET /v1/nosuch: %d %v", code, body)
	}
	body = nil
	if code := api.Do("PUT", "/v1/nodes", map[string]any{}, &body); code != 405 || !strings.Contains(faultstring(t, body), "POST") {
		t.Fatalf("PUT /v1/nodes: %d %v", code, body)
	}
	body = nil
	if code := api.Do("GET", "/v1/nodes/nope", nil, &body); code != 404 {
		t.Fatalf("GET /v1/nodes/nope: %d %v", code, body)
	}
	faultstring(t, body)

	// PATCH that renames answers with the renamed node.
	var n map[string]any
	ops := []map[string]any{{"op": "replace", "path": "/name", "value": "n2"}}
	if code := api.Do("PATCH", "/v1/nodes/n1", ops, &n); code != 200 || n["name"] != "n2" || n["uuid"] != id {
		t.Fatalf("PATCH rename: %d %v", code, n)
	}

	// History entries are named by the node's UUID, whatever the client
	// called it by.
	var h struct {
		History []map[string]any `json:"history"`
	}
	if code := api.Do("GET", "/v1/nodes/n2/history", nil, &h); code != 200 || len(h.History) == 0 ||
		!strings.HasPrefix(h.History[0]["uuid"].(string), id) {
		t.Fatalf("history: %d %v", code, h)
	}
}
