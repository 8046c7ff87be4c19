package systest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/protocol"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestAbortEndsTheBootAtTheSite: an aborted inspection leaves the node
// powered on with its ramdisk; the boot's credential stops working at the
// site broker as it does at the coordinator's: a mosquitto_sub connected
// with it (an independent client, the control: it connected) is
// disconnected, and a new connection with it is refused.
func TestAbortEndsTheBootAtTheSite(t *testing.T) {
	pub := requireTool(t, "mosquitto_pub")
	c := testrig.Coordinator(t, testrig.Options{Machine: fsm.Config{WaitTimeout: 5 * time.Minute}})
	cl := testrig.NewClient(t, c)
	var creds agent.Credentials
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "edge1"}, &creds); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	a := testrig.StartAgentConfig(t, creds, agent.Config{
		Sim:        agent.SimOptions{Nodes: 2, NoBoot: true},
		SiteBroker: agent.SiteBrokerOptions{Listen: "127.0.0.1:0"},
	})
	if err := a.AwaitUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	site := "mqtt://" + a.SiteBrokerAddr()
	id, user, pass := bootingNode(t, c, cl, "r1", "edge1")
	// The node's boot command reached the agent: its credential works at
	// the site broker (the control).
	var ramdisk *subSession
	deadline := time.Now().Add(15 * time.Second)
	for {
		ramdisk = startSub(t, site, user, pass, "ramdisk-"+id, protocol.NodeCmdTopic("edge1", id))
		if ramdisk.connected {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the boot's credential was never admitted by the site broker: %q", ramdisk.out)
		}
		time.Sleep(200 * time.Millisecond)
	}

	cl.MustVerb(id, "abort", nil)
	if n := cl.WaitState(id, "inspect failed", 10*time.Second); !strings.Contains(n.LastError, "abort") {
		t.Errorf("last_error after abort: %q", n.LastError)
	}
	select {
	case out := <-ramdisk.exited:
		t.Logf("the ramdisk's connection after the abort:\n%s", out)
	case <-time.After(10 * time.Second):
		t.Error("the aborted boot's connection to the site broker is still open 10 s after the abort")
	}
	if out, err := mosquitto(t, site, pub, user, pass, "ramdisk-"+id, "-q", "1", "-t", protocol.NodeEvtTopic("edge1", id), "-m", "{}"); err == nil || !refusedAtConnect(out) {
		t.Errorf("the aborted boot's credential at the site broker: %v %q; want refused", err, out)
	}
}
