package systest

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/coordinator/cli"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/protocol"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestSimHealth: what make run shows. An edge agent simulating a node
// with health (agent --simulate-health) and a coordinator with
// --quarantine-on critical: the managed node is OK with plausible
// sensors of each kind (coordinator node sensors); provided, then
// driver_info fake_fail_sensor "Fan 2" and a power command that carries
// it to the site: the node is Critical, Fan 2 Critical in sensors, the
// failure in events, /metrics says 2, and the available node is
// quarantined naming Fan 2.
func TestSimHealth(t *testing.T) {
	t.Parallel()
	c := testrig.Coordinator(t, testrig.Options{NoAutomatedClean: true, Machine: fsm.Config{QuarantineOn: protocol.HealthCritical}})
	cl := testrig.NewClient(t, c)
	var creds agent.Credentials
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "site1"}, &creds); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	testrig.StartAgentConfig(t, creds, agent.Config{PowerSyncInterval: 200 * time.Millisecond,
		Sim: agent.SimOptions{Nodes: 1, Health: true, StepDuration: 20 * time.Millisecond}})
	id := cl.CreateNode("n1", "site1", nil)
	cl.MustVerb(id, "manage", nil)
	if n := cl.WaitRest(id, 20*time.Second); n.State != "manageable" {
		t.Fatalf("manage: %q %q", n.State, n.LastError)
	}
	type nodeView struct {
		Health      *string `json:"health"`
		Maintenance bool    `json:"maintenance"`
		Reason      *string `json:"maintenance_reason"`
	}
	get := func() nodeView {
		var n nodeView
		cl.Do("GET", "/v1/nodes/"+id, nil, &n)
		return n
	}
	waitUntil(t, "health OK", 20*time.Second, func() bool { h := get().Health; return h != nil && *h == "OK" })
	run := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if code := cli.Main(append([]string{"--url", c.APIURL}, args...), strings.NewReader(""), &out, &errOut); code != 0 {
			t.Fatalf("coordinator %s: exit %d: %s", strings.Join(args, " "), code, errOut.String())
		}
		return out.String()
	}
	out := run("node", "sensors", "n1", "-c", "name", "-c", "kind", "-c", "status", "-f", "value")
	for _, want := range []string{"Inlet Temp temperature OK\n", "Fan 2 fan OK\n", "PSU 1 power_supply OK\n", "12V voltage OK\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("node sensors of a healthy simulated node lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "Critical") || strings.Contains(out, "Warning") {
		t.Errorf("a healthy simulated node has a failing sensor:\n%s", out)
	}
	cl.MustVerb(id, "provide", nil)
	if n := cl.WaitRest(id, 20*time.Second); n.State != "available" {
		t.Fatalf("provide: %q %q", n.State, n.LastError)
	}
	if code := cl.Do("PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "add", "path": "/driver_info/fake_fail_sensor", "value": "Fan 2"}}, nil); code != 200 {
		t.Fatalf("PATCH driver_info: %d", code)
	}
	if code := cl.Do("PUT", "/v1/nodes/"+id+"/states/power", map[string]string{"target": "power on"}, nil); code != 202 {
		t.Fatalf("power on: %d", code)
	}
	waitUntil(t, "health Critical and quarantined", 20*time.Second, func() bool {
		n := get()
		return n.Health != nil && *n.Health == "Critical" && n.Maintenance
	})
	if n := get(); n.Reason == nil || !strings.Contains(*n.Reason, `fan "Fan 2" Critical (reading 0 RPM)`) {
		t.Errorf("maintenance_reason: %v; want it naming Fan 2", n.Reason)
	}
	if out := run("node", "sensors", "n1", "-c", "name", "-c", "status", "-f", "value"); !strings.Contains(out, "Fan 2 Critical\n") || strings.Count(out, "Critical") != 1 {
		t.Errorf("node sensors after Fan 2 failed:\n%s", out)
	}
	if out := run("node", "events", "n1", "-c", "severity", "-c", "message", "-f", "value"); !strings.Contains(out, "Critical Fan 2: failure asserted") {
		t.Errorf("node events after Fan 2 failed: %q", out)
	}
	_, text := scrape(t, c.APIURL+"/metrics", "", "")
	if v := sample(text, `bmedge_node_health{name="n1",node="`+id+`",site="site1"}`); v != 2 {
		t.Errorf("bmedge_node_health of n1: %v; want 2", v)
	}
}
