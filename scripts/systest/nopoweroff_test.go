package systest

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestDisablePowerOffSimulatedSite: a node created with disable_power_off
// true (API 1.95) on a simulated site goes through manage, inspect,
// provide, deploy, undeploy with its automated clean, and its simulated
// BMC never sees a power-off (the operations reboot instead, as Ironic's);
// a power off request is Ironic's 409 (curl, an independent client), and a
// reboot is taken. A node beside it without the flag is powered off as
// usual.
func TestDisablePowerOffSimulatedSite(t *testing.T) {
	t.Parallel()
	curl := requireTool(t, "curl")
	power := &powerLog{changes: map[string][]string{}}
	c := testrig.Coordinator(t, testrig.Options{})
	cl := testrig.NewClient(t, c)
	testrig.Site(t, c, "site1", agent.SimOptions{Nodes: 2, StepDuration: 50 * time.Millisecond, BootDelay: 50 * time.Millisecond, PowerWatch: power.watch})
	var n testrig.Node
	if code := cl.Do("POST", "/v1/nodes", map[string]any{"name": "never-off", "driver": "fake", "conductor_group": "site1", "disable_power_off": true}, &n); code != 201 {
		t.Fatalf("create with disable_power_off: %d", code)
	}
	id := n.UUID
	other := cl.CreateNode("usual", "site1", nil)
	step := func(id, verb, want string) testrig.Node {
		t.Helper()
		cl.MustVerb(id, verb, nil)
		n := cl.WaitRest(id, 60*time.Second)
		if n.State != want {
			t.Fatalf("%s: %s ended in %q: %s", id, verb, n.State, n.LastError)
		}
		return n
	}
	for _, node := range []string{id, other} {
		step(node, "manage", "manageable")
		step(node, "inspect", "manageable")
		step(node, "provide", "available")
		if code := cl.Do("PATCH", "/v1/nodes/"+node, []map[string]any{{"op": "add", "path": "/instance_info/image_source", "value": "http://127.0.0.1:1/img"}}, nil); code != 200 {
			t.Fatalf("patch: %d", code)
		}
		step(node, "active", "active")
	}
	if got := cl.Get(id); got.PowerState != "power on" {
		t.Fatalf("active node with disable_power_off: %q", got.PowerState)
	}
	out, err := exec.Command(curl, "-sS", "-X", "PUT", "-H", "Content-Type: application/json", "-H", "X-OpenStack-Ironic-API-Version: 1.95",
		"-d", `{"target":"power off"}`, "-w", "\n%{http_code}", c.APIURL+"/v1/nodes/"+id+"/states/power").CombinedOutput()
	if err != nil || !strings.HasSuffix(strings.TrimSpace(string(out)), "409") || !strings.Contains(string(out), "Failed to set node power state to power off.") {
		t.Fatalf("power off of a disable_power_off node: %v %s; want Ironic's 409", err, out)
	}
	if code := cl.Do("PUT", "/v1/nodes/"+id+"/states/power", map[string]any{"target": "rebooting"}, nil); code != 202 {
		t.Fatalf("reboot: %d", code)
	}
	if got := cl.WaitRest(id, 30*time.Second); got.PowerState != "power on" {
		t.Fatalf("after the reboot: %q", got.PowerState)
	}
	for _, node := range []string{id, other} {
		step(node, "deleted", "available")
	}
	ch := power.of(id)
	if slices.Contains(ch, "power off") || slices.Contains(ch, "soft power off") {
		t.Fatalf("the simulated BMC of the disable_power_off node saw a power-off: %v", ch)
	}
	if len(ch) < 6 {
		t.Fatalf("the node's power changes %v; want the reboots of inspect, provide, deploy, undeploy and its cleaning", ch)
	}
	if !slices.Contains(power.of(other), "power off") {
		t.Fatalf("the usual node was never powered off: %v", power.of(other))
	}
	if h := history(t, cl, id); !strings.Contains(h, "rebooting the node instead of powering it off: disable_power_off is set") {
		t.Errorf("the history does not say why the node rebooted:\n%s", h)
	}
}
