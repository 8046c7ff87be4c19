package systest

import (
	"bytes"
	"net/http"
	"testing"
	"time"
)

// TestInspectionRereadsBIOS: a BIOS setting changed behind the
// coordinator's back (straight at the BMC, staged for the next start) is
// what GET /v1/nodes/{id}/bios shows after an inspection, whose reboot
// applies it: the inspection's boot command has the edge agent read the
// BMC's firmware and BIOS again, as manage does.
func TestInspectionRereadsBIOS(t *testing.T) {
	r := newRedfishRig(t)
	cl, id := r.cl, r.id
	bios := func() string {
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
		for _, s := range doc.Bios {
			if s.Name == "ProcVirtualization" {
				return s.Value
			}
		}
		return ""
	}
	cl.MustVerb(id, "manage", nil)
	if got := cl.WaitRest(id, 60*time.Second); got.State != "manageable" {
		t.Fatalf("manage: %+v", got)
	}
	if v := bios(); v != "Enabled" {
		t.Fatalf("after manage ProcVirtualization is %q; want Enabled", v)
	}
	req, _ := http.NewRequest("PATCH", r.srv.URL+"/redfish/v1/Systems/"+r.sysID+"/Bios/Settings",
		bytes.NewReader([]byte(`{"Attributes": {"ProcVirtualization": "Disabled"}}`)))
	req.SetBasicAuth("root", "calvin")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("PATCH Bios/Settings at the BMC: %d", resp.StatusCode)
	}
	if v := bios(); v != "Enabled" {
		t.Fatalf("before the inspection ProcVirtualization is %q; want the manage reading, Enabled", v)
	}
	cl.MustVerb(id, "inspect", nil)
	if got := cl.WaitRest(id, 60*time.Second); got.State != "manageable" || got.LastError != "" {
		t.Fatalf("inspect: %q, last_error %q", got.State, got.LastError)
	}
	if v := bios(); v != "Disabled" {
		t.Fatalf("after the inspection ProcVirtualization is %q; want Disabled (read again at inspection)", v)
	}
}
