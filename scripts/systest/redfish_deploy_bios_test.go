package systest

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestRedfishDeployStepBIOS: bios.apply_configuration given as a deploy
// step (deploy_steps, API 1.69) on a redfish node behind the virtual
// Redfish BMC stages the settings during the deploy; the instance's
// power-on applies them, and GET /v1/nodes/{id}/bios (read by the edge
// agent after boot_instance) shows the values the BMC's own Bios
// resource shows to curl, an independent client.
func TestRedfishDeployStepBIOS(t *testing.T) {
	curlPath, err := exec.LookPath("curl")
	if err != nil {
		if os.Getenv("BM_REQUIRE_ALL") == "1" {
			t.Fatal("curl is missing (Debian package curl)")
		}
		t.Skip("curl is missing (Debian package curl)")
	}
	r := newRedfishRig(t)
	srv, sysID, cl, id := r.srv, r.sysID, r.cl, r.id
	bmcBIOS := func() map[string]any {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, curlPath, "-sS", "--noproxy", "*", "-u", "root:calvin", srv.URL+"/redfish/v1/Systems/"+sysID+"/Bios").Output()
		var doc struct {
			Attributes map[string]any `json:"Attributes"`
		}
		if err != nil || json.Unmarshal(out, &doc) != nil {
			t.Fatalf("curl the BMC's Bios: %v %.300s", err, out)
		}
		return doc.Attributes
	}
	nodeBIOS := func() map[string]string {
		t.Helper()
		var doc struct {
			Bios []struct {
				Name  string `json:"name"`
				Value string `json:"value"`
			} `json:"bios"`
		}
		if code := cl.Do("GET", "/v1/nodes/"+id+"/bios", nil, &doc); code != 200 {
			t.Fatalf("GET bios: %d", code)
		}
		out := map[string]string{}
		for _, s := range doc.Bios {
			out[s.Name] = s.Value
		}
		return out
	}
	for _, v := range []struct{ verb, want string }{{"manage", "manageable"}, {"provide", "available"}} {
		cl.MustVerb(id, v.verb, nil)
		if got := cl.WaitRest(id, 90*time.Second); got.State != v.want || got.LastError != "" {
			t.Fatalf("%s: %q, last_error %q; want %s", v.verb, got.State, got.LastError, v.want)
		}
	}
	if got := nodeBIOS()["ProcVirtualization"]; got != "Enabled" || bmcBIOS()["ProcVirtualization"] != "Enabled" {
		t.Fatalf("before the deploy: node bios ProcVirtualization %q, BMC %v; want Enabled", got, bmcBIOS()["ProcVirtualization"])
	}

	steps := []map[string]any{{"interface": "bios", "step": "apply_configuration", "priority": 95,
		"args": map[string]any{"settings": []map[string]any{{"name": "ProcVirtualization", "value": "Disabled"}, {"name": "NumLock", "value": "Off"}}}}}
	cl.MustVerb(id, "active", map[string]any{"deploy_steps": steps})
	if got := cl.WaitRest(id, 90*time.Second); got.State != "active" || got.LastError != "" {
		t.Fatalf("deploy: %q, last_error %q; want active", got.State, got.LastError)
	}
	if cur := bmcBIOS(); cur["ProcVirtualization"] != "Disabled" || cur["NumLock"] != "Off" {
		t.Fatalf("after the deploy the BMC's BIOS holds %v; want ProcVirtualization Disabled and NumLock Off", cur)
	}
	if got := nodeBIOS(); got["ProcVirtualization"] != "Disabled" || got["NumLock"] != "Off" {
		t.Fatalf("after the deploy GET …/bios shows ProcVirtualization %q NumLock %q; want the applied Disabled and Off", got["ProcVirtualization"], got["NumLock"])
	}
	var hist struct {
		History []struct {
			Event string `json:"event"`
		} `json:"history"`
	}
	cl.Do("GET", "/v1/nodes/"+id+"/history?detail=True", nil, &hist)
	found := false
	for _, h := range hist.History {
		found = found || strings.Contains(h.Event, "bios.apply_configuration")
	}
	if !found {
		t.Fatalf("the deploy's history does not name bios.apply_configuration: %+v", hist.History)
	}
}
