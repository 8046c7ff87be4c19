package systest

import (
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/drivers/ipmi/ipmisim"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestIPMINodeThroughTheEdgeAgent: a node of driver ipmi behind ipmi_sim,
// driven by the edge agent in real mode (no simulation): a wrong password
// sends it back to enroll with the BMC's refusal in last_error; with the
// right one it is managed, and power actions through the API reach the
// BMC (checked with ipmitool, an independent client).
func TestIPMINodeThroughTheEdgeAgent(t *testing.T) {
	sim := ipmisim.StartTest(t, ipmisim.Options{})
	c := testrig.Coordinator(t, testrig.Options{})
	cl := testrig.NewClient(t, c)
	testrig.Site(t, c, "rack1", agent.SimOptions{}) // real mode: no simulated nodes

	info := sim.DriverInfo()
	info["ipmi_password"] = "not-the-password"
	var n testrig.Node
	if code := cl.Do("POST", "/v1/nodes", map[string]any{"name": "srv1", "driver": "ipmi", "conductor_group": "rack1", "driver_info": info}, &n); code != 201 {
		t.Fatalf("create: %d", code)
	}
	cl.MustVerb(n.UUID, "manage", nil)
	got := cl.WaitRest(n.UUID, 60*time.Second)
	if got.State != "enroll" || !strings.Contains(got.LastError, "refused user admin") {
		t.Fatalf("manage with a wrong password: %q, last_error %q; want enroll with the BMC's refusal", got.State, got.LastError)
	}
	if strings.Contains(got.LastError, "not-the-password") {
		t.Fatalf("last_error shows the password: %q", got.LastError)
	}

	patch := []map[string]any{{"op": "replace", "path": "/driver_info/ipmi_password", "value": sim.DriverInfo()["ipmi_password"]}}
	if code := cl.Do("PATCH", "/v1/nodes/"+n.UUID, patch, nil); code != 200 {
		t.Fatalf("patch: %d", code)
	}
	cl.MustVerb(n.UUID, "manage", nil)
	if got := cl.WaitRest(n.UUID, 60*time.Second); got.State != "manageable" {
		t.Fatalf("manage with the right password: %q, last_error %q", got.State, got.LastError)
	}

	for _, p := range []struct{ target, want string }{{"power on", "on"}, {"power off", "off"}, {"rebooted", "on"}} {
		if code := cl.Do("PUT", "/v1/nodes/"+n.UUID+"/states/power", map[string]string{"target": p.target}, nil); code != 202 {
			t.Fatalf("%s: %d", p.target, code)
		}
		got := cl.WaitRest(n.UUID, 60*time.Second)
		if got.LastError != "" {
			t.Fatalf("%s: last_error %q", p.target, got.LastError)
		}
		out, err := sim.Ipmitool("chassis", "power", "status")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, "Chassis Power is "+p.want) {
			t.Fatalf("after %s ipmitool says %q", p.target, out)
		}
		if got.PowerState != p.target && !(p.target == "rebooted" && got.PowerState == "power on") {
			t.Errorf("after %s the node's power_state is %q", p.target, got.PowerState)
		}
	}

	// Soft power off, as Ironic's: the BMC asks the OS to shut down (an
	// ACPI soft-off, "set shutdown 1" at the chassis); an OS that ignores
	// it is powered off by force when its time is up. Soft reboot is a
	// soft power off, then on.
	softPower := func(target, wantPower string) {
		t.Helper()
		sim.ClearEvents()
		if code := cl.Do("PUT", "/v1/nodes/"+n.UUID+"/states/power", map[string]string{"target": target}, nil); code != 202 {
			t.Fatalf("%s: %d", target, code)
		}
		got := cl.WaitRest(n.UUID, 60*time.Second)
		if got.LastError != "" || got.PowerState != wantPower {
			t.Fatalf("%s: power_state %q, last_error %q", target, got.PowerState, got.LastError)
		}
	}
	softPower("soft power off", "power off")
	if ev := strings.Join(sim.Events(), ","); !strings.Contains(ev, "shutdown 1") || strings.Contains(ev, "power 0") {
		t.Fatalf("soft power off: the chassis saw %q; want the OS asked (shutdown 1), no forced power 0", ev)
	}
	softPower("power on", "power on")
	if err := sim.IgnoreSoftOff(true); err != nil {
		t.Fatal(err)
	}
	softPower("soft rebooting", "power on")
	if ev := strings.Join(sim.Events(), ","); !strings.Contains(ev, "shutdown 1") || !strings.Contains(ev, "power 0") || !strings.Contains(ev, "power 1") {
		t.Fatalf("soft reboot of an OS that ignores the request: the chassis saw %q; want shutdown 1, then forced power 0, then power 1", ev)
	}
	sim.IgnoreSoftOff(false)

	// ipmi nodes boot the ramdisk by the edge agent's network boot
	// (docs/netboot.md); this agent serves none, so inspection fails at
	// once, saying which flags the agent needs.
	cl.MustVerb(n.UUID, "inspect", nil)
	if got := cl.WaitRest(n.UUID, 60*time.Second); got.State != "inspect failed" || !strings.Contains(got.LastError, "--netboot-interface") {
		t.Fatalf("inspect of an ipmi node through an agent without network boot: %q, last_error %q; want inspect failed naming --netboot-interface", got.State, got.LastError)
	}
	var v map[string]struct {
		Result *bool  `json:"result"`
		Reason string `json:"reason"`
	}
	if code := cl.Do("GET", "/v1/nodes/"+n.UUID+"/validate", nil, &v); code != 200 {
		t.Fatalf("validate: %d", code)
	}
	if r := v["power"].Result; r == nil || !*r {
		t.Errorf("validate power: %+v", v["power"])
	}
	if r := v["boot"].Result; r == nil || !*r {
		t.Errorf("validate boot: %+v; want true (network boot)", v["boot"])
	}
	for _, iface := range []string{"console", "bios"} {
		if r := v[iface].Result; r == nil || *r || !strings.Contains(v[iface].Reason, "does not support "+iface) {
			t.Errorf("validate %s %+v; want false with Ironic's reason for an interface the driver has not", iface, v[iface])
		}
	}
}
