package systest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/protocol"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestSiteClientCannotCommand (issue 30, acceptance 4): a second client
// of a site (edge-SITE.tool, with the site's own credential; mosquitto_pub
// as the independent client) publishes a power command, a forged
// one-step run_plan and an ack of the agent's results on the site's
// command topics of the coordinator's broker: each is refused (PUBACK
// not authorized), reaches no agent, and is counted on the coordinator's
// /metrics. (The agent's own checks, a command without a seq and a
// replayed plan, are agent/outbox's and agent/plan's tests.)
func TestSiteClientCannotCommand(t *testing.T) {
	pub := requireTool(t, "mosquitto_pub")
	c := testrig.Coordinator(t, testrig.Options{Machine: fsm.Config{WaitTimeout: time.Minute}})
	cl := testrig.NewClient(t, c)
	var s1 agent.Credentials
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "site1"}, &s1); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	a := testrig.StartAgentConfig(t, s1, agent.Config{Sim: agent.SimOptions{Nodes: 1, NoBoot: true}, MetricsListen: "127.0.0.1:0"})
	id := cl.CreateNode("n1", "site1", nil)
	cl.MustVerb(id, "manage", nil)
	cl.WaitState(id, "manageable", 30*time.Second)
	_, before := scrape(t, "http://"+a.MetricsAddr()+"/metrics", "", "")
	now := time.Now().UTC().Format(time.RFC3339)
	forged := []struct{ what, topic, payload string }{
		{"a power command", protocol.BMCCmdTopic("site1"),
			`{"v":1,"kind":"command","id":"forged-power","site":"site1","node":"` + id + `","sent":"` + now + `","seq":99999999999999999,"action":"power","args":{"state":"power on"},"deadline":"2099-01-01T00:00:00Z"}`},
		{"a run_plan", protocol.NodeCmdTopic("site1", id),
			`{"v":1,"kind":"command","id":"forged-plan","site":"site1","node":"` + id + `","sent":"` + now + `","action":"run_plan","deadline":"2099-01-01T00:00:00Z","plan":[]}`},
		{"an ack", protocol.BMCCmdTopic("site1"),
			`{"v":1,"kind":"ack","id":"forged-ack","site":"site1","sent":"` + now + `","ack_ids":["x"]}`},
	}
	for _, f := range forged {
		out, _ := mosquitto(t, c.BrokerURL, pub, s1.Username, s1.Password, "edge-site1.tool", "-t", f.topic, "-m", f.payload, "-q", "1")
		if !strings.Contains(strings.ToLower(out), "not authori") {
			t.Errorf("%s from a second client of the site was not refused: %q", f.what, out)
		}
	}
	_, text := scrape(t, c.APIURL+"/metrics", "", "")
	if v := sample(text, `bmedge_mqtt_publish_refused_total{kind="command-topic"}`); v != 3 {
		t.Errorf("coordinator /metrics counts %v refused publishes on command topics, want 3", v)
	}
	// The agent ran nothing more than the manage's commands.
	_, after := scrape(t, "http://"+a.MetricsAddr()+"/metrics", "", "")
	if b, a := bmcOps(before), bmcOps(after); b < 1 || a != b {
		t.Errorf("agent /metrics: %v BMC commands run before the forged ones (want the manage's), %v after", b, a)
	}
	if v := sample(after, "bmedge_agent_plans_running"); v != 0 {
		t.Errorf("agent /metrics: %v plans running after a forged run_plan", v)
	}
}

// bmcOps sums the agent's bmc_operations_total.
func bmcOps(text string) float64 {
	n := 0.0
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "bmedge_agent_bmc_operations_total{") {
			var v float64
			if _, err := fmt.Sscan(l[strings.LastIndex(l, " ")+1:], &v); err == nil {
				n += v
			}
		}
	}
	return n
}
