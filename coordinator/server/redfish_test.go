package server_test

import (
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/coordinator/testrig"
	"github.com/bmedge/bmedge/drivers/redfish/vbmc"
)

// TestRedfishNodeThroughTheEdgeAgent: a node of driver redfish behind the
// virtual Redfish BMC over TLS (redfish_verify_ca = the lab CA), driven
// by the edge agent in real mode: a wrong password goes back to enroll
// with the BMC's refusal; the right one manages; power reaches the BMC;
// a manual clean with bios.apply_configuration stages the settings, which
// the BMC applies at the next reset; the same list without settings fails
// naming the step and the argument, and runs nothing.
func TestRedfishNodeThroughTheEdgeAgent(t *testing.T) {
	cert, key, caFile := testrig.LabCerts(t, "127.0.0.1")
	m := vbmc.NewMemoryMachine(vbmc.MemoryOptions{})
	b, err := vbmc.New(vbmc.Config{Username: "root", Password: "calvin", Systems: []vbmc.SystemConfig{{Machine: m}}})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := vbmc.Serve(b, vbmc.ServeOptions{CertFile: cert, KeyFile: key})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(); b.Close() })
	sysID := b.SystemIDs()[0]

	c := testrig.Coordinator(t, testrig.Options{})
	cl := testrig.NewClient(t, c)
	testrig.Site(t, c, "rack1", agent.SimOptions{}) // real mode: no simulated nodes

	info := map[string]any{"redfish_address": srv.URL, "redfish_username": "root", "redfish_password": "wrong", "redfish_verify_ca": caFile}
	var n testrig.Node
	if code := cl.Do("POST", "/v1/nodes", map[string]any{"name": "srv1", "driver": "redfish", "conductor_group": "rack1", "driver_info": info}, &n); code != 201 {
		t.Fatalf("create: %d", code)
	}
	cl.MustVerb(n.UUID, "manage", nil)
	got := cl.WaitRest(n.UUID, 60*time.Second)
	if got.State != "enroll" || !strings.Contains(got.LastError, "401") {
		t.Fatalf("manage with a wrong password: %q, last_error %q; want enroll with the BMC's 401", got.State, got.LastError)
	}
	patch := []map[string]any{{"op": "replace", "path": "/driver_info/redfish_password", "value": "calvin"}}
	if code := cl.Do("PATCH", "/v1/nodes/"+n.UUID, patch, nil); code != 200 {
		t.Fatalf("patch: %d", code)
	}
	cl.MustVerb(n.UUID, "manage", nil)
	if got := cl.WaitRest(n.UUID, 60*time.Second); got.State != "manageable" {
		t.Fatalf("manage with the right password: %q, last_error %q", got.State, got.LastError)
	}

	power := func(target, want string) {
		t.Helper()
		if code := cl.Do("PUT", "/v1/nodes/"+n.UUID+"/states/power", map[string]string{"target": target}, nil); code != 202 {
			t.Fatalf("%s: %d", target, code)
		}
		if got := cl.WaitRest(n.UUID, 60*time.Second); got.LastError != "" {
			t.Fatalf("%s: last_error %q", target, got.LastError)
		}
		st, err := b.State(sysID)
		if err != nil {
			t.Fatal(err)
		}
		if st.PowerState != want {
			t.Fatalf("after %s the BMC says %s", target, st.PowerState)
		}
	}
	power("power on", "On")
	power("power off", "Off")

	// A list without the required settings: clean failed, nothing staged.
	bad := []map[string]any{{"interface": "bios", "step": "apply_configuration"}}
	cl.MustVerb(n.UUID, "clean", map[string]any{"clean_steps": bad})
	got = cl.WaitRest(n.UUID, 30*time.Second)
	if got.State != "clean failed" || !strings.Contains(got.LastError, "apply_configuration") || !strings.Contains(got.LastError, "settings") {
		t.Fatalf("clean without settings: %q, last_error %q", got.State, got.LastError)
	}
	if st, _ := b.State(sysID); len(st.PendingBios) != 0 {
		t.Fatalf("a refused clean staged BIOS settings: %v", st.PendingBios)
	}
	cl.MustVerb(n.UUID, "manage", nil)
	cl.WaitState(n.UUID, "manageable", 10*time.Second)

	good := []map[string]any{{"interface": "bios", "step": "apply_configuration",
		"args": map[string]any{"settings": []map[string]any{{"name": "ProcVirtualization", "value": "Disabled"}, {"name": "NumLock", "value": "Off"}}}}}
	cl.MustVerb(n.UUID, "clean", map[string]any{"clean_steps": good})
	if got := cl.WaitRest(n.UUID, 60*time.Second); got.State != "manageable" {
		t.Fatalf("clean with bios.apply_configuration: %q, last_error %q", got.State, got.LastError)
	}
	st, _ := b.State(sysID)
	if st.PendingBios["ProcVirtualization"] != "Disabled" || st.Bios["ProcVirtualization"] != "Enabled" {
		t.Fatalf("after the clean step: pending %v, current %v; want the settings pending", st.PendingBios, st.Bios)
	}
	power("power on", "On")
	power("rebooted", "On")
	st, _ = b.State(sysID)
	if st.Bios["ProcVirtualization"] != "Disabled" || st.Bios["NumLock"] != "Off" {
		t.Fatalf("after a reset the BIOS holds %v; want the staged settings applied", st.Bios)
	}
}
