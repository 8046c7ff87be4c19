package api_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestInspectInterface: inspect_interface takes agent (the default) and,
// on a redfish node, redfish, on create and PATCH; it is stored, shown,
// reset by remove, and refused with a 400 naming what the driver
// supports otherwise, never accepted and dropped.
func TestInspectInterface(t *testing.T) {
	c := testrig.Coordinator(t, testrig.Options{})
	cl := testrig.NewClient(t, c)
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "site1"}, nil); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	var errBody map[string]any
	fault := func() string {
		s, _ := errBody["error_message"].(string)
		var inner map[string]any
		_ = json.Unmarshal([]byte(s), &inner)
		f, _ := inner["faultstring"].(string)
		return f
	}
	var n map[string]any
	create := func(name, driver, iface string) int {
		body := map[string]any{"name": name, "driver": driver, "conductor_group": "site1", "driver_info": map[string]any{"redfish_address": "http://127.0.0.1:9", "ipmi_address": "127.0.0.1"}}
		if iface != "" {
			body["inspect_interface"] = iface
		}
		n, errBody = nil, nil
		code := cl.Do("POST", "/v1/nodes", body, &n)
		if code != 201 {
			cl.Do("POST", "/v1/nodes", body, &errBody)
		}
		return code
	}
	if code := create("rf", "redfish", "redfish"); code != 201 || n["inspect_interface"] != "redfish" {
		t.Fatalf("create redfish node with inspect_interface redfish: %d %v %q", code, n["inspect_interface"], fault())
	}
	if code := create("rf2", "redfish", ""); code != 201 || n["inspect_interface"] != "agent" {
		t.Fatalf("create redfish node: %d, inspect_interface %v; want the default agent", code, n["inspect_interface"])
	}
	if code := create("ip", "ipmi", "redfish"); code != 400 || !strings.Contains(fault(), "inspect interface implementation 'redfish' is not supported by hardware type ipmi") {
		t.Fatalf("create ipmi node with inspect_interface redfish: %d %q", code, fault())
	}
	patch := func(id, op string, v any) int {
		p := map[string]any{"op": op, "path": "/inspect_interface"}
		if op != "remove" {
			p["value"] = v
		}
		n, errBody = nil, nil
		code := cl.Do("PATCH", "/v1/nodes/"+id, []map[string]any{p}, &n)
		if code != 200 {
			errBody = n
		}
		return code
	}
	if code := patch("rf2", "add", "redfish"); code != 200 || n["inspect_interface"] != "redfish" {
		t.Fatalf("PATCH rf2 inspect_interface redfish: %d %v", code, n["inspect_interface"])
	}
	var shown map[string]any
	cl.Do("GET", "/v1/nodes/rf2", nil, &shown)
	if shown["inspect_interface"] != "redfish" {
		t.Fatalf("GET rf2 shows inspect_interface %v", shown["inspect_interface"])
	}
	if code := patch("rf2", "replace", "inspector"); code != 400 || !strings.Contains(fault(), "It supports agent, redfish") {
		t.Fatalf("PATCH rf2 inspect_interface inspector: %d %q", code, fault())
	}
	if code := patch("rf2", "remove", nil); code != 200 || n["inspect_interface"] != "agent" {
		t.Fatalf("PATCH remove inspect_interface: %d %v", code, n["inspect_interface"])
	}
	var d map[string]any
	cl.Do("GET", "/v1/drivers/redfish", nil, &d)
	if got, _ := d["enabled_inspect_interfaces"].([]any); len(got) != 2 || got[0] != "agent" || got[1] != "redfish" || d["default_inspect_interface"] != "agent" {
		t.Errorf("driver redfish: enabled_inspect_interfaces %v, default %v", d["enabled_inspect_interfaces"], d["default_inspect_interface"])
	}
	cl.Do("GET", "/v1/drivers/ipmi", nil, &d)
	if got, _ := d["enabled_inspect_interfaces"].([]any); len(got) != 1 || got[0] != "agent" {
		t.Errorf("driver ipmi: enabled_inspect_interfaces %v", d["enabled_inspect_interfaces"])
	}
}
