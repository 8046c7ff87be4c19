package systest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/lib/netbudget"
	"github.com/bmedge/bmedge/protocol"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestPreConnectFloodFromAnotherAddress (issue 17, acceptance 4): 2300
// sockets from 127.0.0.2 that never send CONNECT, reopened as they are
// closed, neither stop a site from logging in to the coordinator's
// broker from 127.0.0.1 nor a ramdisk from logging in to the site broker
// from 127.0.0.1 (mosquitto_sub, an independent client, with the site's
// and the boot's credentials). 127.0.0.2 gets its pending budget
// (--mqtt-max-pending-per-source); the rest is closed at accept. Before
// the budgets, the 2048 pending slots were shared by everybody and the
// flood took them all.
func TestPreConnectFloodFromAnotherAddress(t *testing.T) {
	if testing.Short() {
		t.Skip("floods with 2300 connections (-short)")
	}
	sub := requireTool(t, "mosquitto_sub")
	c := testrig.Coordinator(t, testrig.Options{Machine: fsm.Config{WaitTimeout: 10 * time.Minute}})
	cl := testrig.NewClient(t, c)
	var edge, other agent.Credentials
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "edge1"}, &edge); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "s2"}, &other); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	a := testrig.StartAgentConfig(t, edge, agent.Config{
		Sim:        agent.SimOptions{Nodes: 1, NoBoot: true},
		SiteBroker: agent.SiteBrokerOptions{Listen: "127.0.0.1:0"},
	})
	if err := a.AwaitUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	id, user, pass := bootingNode(t, c, cl, "r1", "edge1")
	// Three logins in a row, each given 5 s (mosquitto_sub reconnects
	// on its own within that time); under the flood before the budgets
	// each waited in vain for a pending slot.
	login := func(what, brokerURL, user, pass, clientID, topic string) {
		t.Helper()
		for i := 0; i < 3; i++ {
			out, err := mosquitto(t, brokerURL, sub, user, pass, clientID, "-t", topic, "-E", "-W", "5")
			if err != nil {
				t.Fatalf("%s from 127.0.0.1 during a pre-CONNECT flood from 127.0.0.2 (try %d): %v %q", what, i+1, err, out)
			}
		}
	}
	const n = 2300

	// The coordinator's broker.
	f := startFlood(t, "127.0.0.2", c.Broker.Addr, n)
	f.await(t, 200, time.Minute)
	login("a site's login to the coordinator's broker", c.BrokerURL, other.Username, other.Password, "edge-s2", protocol.BMCCmdTopic("s2"))
	st := c.Broker.ConnStats()
	if st.Refused[netbudget.RefusedPendingPerSource] == 0 {
		t.Errorf("the coordinator's broker counted no refusal over the pending budget per source: %+v", st)
	}
	if st.Pending > 128+1 {
		t.Errorf("the coordinator's broker holds %d pending connections, over the default budget of 128 for 127.0.0.2 (+1 for the login)", st.Pending)
	}
	f.close()

	// The site broker.
	site := "mqtt://" + a.SiteBrokerAddr()
	f = startFlood(t, "127.0.0.2", a.SiteBrokerAddr(), n)
	f.await(t, 200, time.Minute)
	login("a ramdisk's login to the site broker", site, user, pass, "ramdisk-"+id, protocol.NodeCmdTopic("edge1", id))
	f.close()
	if !strings.HasPrefix(site, "mqtt://127.0.0.1:") {
		t.Fatalf("site broker at %s", site)
	}
}
