package systest

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/lib/mqttlink"
	"github.com/bmedge/bmedge/lib/session"
	"github.com/bmedge/bmedge/protocol"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// wanTap records what crosses the WAN for a site: every message on the
// coordinator's broker under the site's topics, by kind and node.
type wanTap struct {
	mu    sync.Mutex
	kinds map[string]int            // kind → count (node events and bmc events)
	beats map[string]map[string]int // node → "direct"/"summary" → count
}

func tapWAN(t *testing.T, brokerURL, user, pass, site string) *wanTap {
	t.Helper()
	w := &wanTap{kinds: map[string]int{}, beats: map[string]map[string]int{}}
	note := func(node, how string) {
		if w.beats[node] == nil {
			w.beats[node] = map[string]int{}
		}
		w.beats[node][how]++
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	l, err := mqttlink.Dial(ctx, mqttlink.Config{URL: brokerURL, ClientID: "coordinator.tap", Username: user, Password: pass, CleanStart: true,
		Subscriptions: []string{protocol.TopicPrefix + "/site/" + site + "/node/+/evt", protocol.BMCEvtTopic(site)},
		Handler: func(topic string, payload []byte) {
			w.mu.Lock()
			defer w.mu.Unlock()
			for _, m := range siteMessages(t, site, payload) {
				w.kinds[m.Kind]++
				switch m.Kind {
				case protocol.KindHeartbeat:
					note(m.Node, "direct")
				case protocol.KindBeats:
					for _, b := range m.Beats {
						note(b.Node, "summary")
					}
				}
			}
		}, Logger: testrig.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if err := l.AwaitUp(wctx); err != nil {
		t.Fatal(err)
	}
	return w
}

func (w *wanTap) count(kind string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.kinds[kind]
}

func (w *wanTap) nodeBeats(node string) (direct, summary int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.beats[node]["direct"], w.beats[node]["summary"]
}

// inventoryRunner is a ramdisk's hardware for the relay test: inspection
// answers with a small inventory after a few heartbeats' time.
type inventoryRunner struct{ d time.Duration }

func (inventoryRunner) Steps() (clean, deploy []protocol.Step) {
	return []protocol.Step{{Interface: "deploy", Step: "erase_devices_metadata", Priority: 99}},
		[]protocol.Step{{Interface: "deploy", Step: "write_image"}}
}

func (r inventoryRunner) Run(ctx context.Context, step protocol.Step, progress func(float64, string)) (map[string]any, error) {
	for i := 1; i <= 4; i++ {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(r.d / 4):
		}
		progress(float64(i)/4, "")
	}
	if step.Step == "inspect_hardware" {
		return map[string]any{"inventory": map[string]any{"cpu": map[string]any{"count": 4}},
			"properties": map[string]any{"cpus": 4, "memory_mb": 2048, "local_gb": 10, "cpu_arch": "x86_64"}}, nil
	}
	return nil, nil
}

// ramdiskOn runs a ramdisk session for node over a real MQTT connection
// to brokerURL, as the ramdisk program does, until the test ends.
func ramdiskOn(t *testing.T, brokerURL, site, node, user, pass string) {
	t.Helper()
	var mu sync.Mutex
	var link *mqttlink.Link
	s := session.New(session.Config{Site: site, Node: node, Heartbeat: 200 * time.Millisecond, Runner: inventoryRunner{d: 2 * time.Second},
		Transport: transportFunc(func(ctx context.Context, topic string, payload []byte) error {
			mu.Lock()
			l := link
			mu.Unlock()
			return l.Publish(ctx, topic, payload, false)
		}), Log: testrig.Logger(t)})
	ctx, cancel := context.WithCancel(context.Background())
	l, err := mqttlink.Dial(ctx, mqttlink.Config{URL: brokerURL, ClientID: "ramdisk-" + node, Username: user, Password: pass, CleanStart: true,
		Subscriptions: []string{protocol.NodeCmdTopic(site, node)},
		Handler: func(_ string, payload []byte) {
			if m, err := protocol.Decode(payload); err == nil {
				s.Deliver(m)
			}
		}, Logger: testrig.Logger(t)})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	mu.Lock()
	link = l
	mu.Unlock()
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	t.Cleanup(func() { cancel(); s.Stop(); <-done; l.Close() })
}

type transportFunc func(ctx context.Context, topic string, payload []byte) error

func (f transportFunc) Publish(ctx context.Context, topic string, payload []byte) error {
	return f(ctx, topic, payload)
}

// TestSiteBrokerRelay: a ramdisk that connects to its site's broker (run
// by the edge agent, the coordinator's broker out of its reach) is
// inspected through the agent's relay; its heartbeats cross the WAN in
// the site's summaries, one at once per new step; the site broker admits
// only the node's current boot credential, under its own client ID, and
// refuses every other identity (tried with mosquitto_pub, an independent
// client).
func TestSiteBrokerRelay(t *testing.T) {
	pub := requireTool(t, "mosquitto_pub")
	c := testrig.Coordinator(t, testrig.Options{Machine: fsm.Config{WaitTimeout: 30 * time.Second}})
	cl := testrig.NewClient(t, c)
	var creds agent.Credentials
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "edge1"}, &creds); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	// The agent's log, kept to check that no credential reaches it.
	agentLog := &lockedBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent log:\n%s", agentLog.String())
		}
	})
	a := testrig.StartAgentConfig(t, creds, agent.Config{
		Sim:              agent.SimOptions{Nodes: 2, NoBoot: true},
		SiteBroker:       agent.SiteBrokerOptions{Listen: "127.0.0.1:0"},
		HeartbeatSummary: time.Second,
		MetricsListen:    "127.0.0.1:0",
		Log:              slog.New(slog.NewTextHandler(agentLog, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err := a.AwaitUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	site := "mqtt://" + a.SiteBrokerAddr()
	cu, cp := c.Engine.CoordinatorCredentials()
	wan := tapWAN(t, c.BrokerURL, cu, cp, "edge1")

	id, user, pass := bootingNode(t, c, cl, "r1", "edge1")
	id2, user2, pass2 := bootingNode(t, c, cl, "r2", "edge1")

	// Refusals first, while both boots are under way.
	refused := func(what, user, pass, clientID, topic string) {
		t.Helper()
		out, err := mosquitto(t, site, pub, user, pass, clientID, "-q", "1", "-t", topic, "-m", "{}")
		if err == nil || !refusedAtConnect(out) {
			t.Errorf("%s: site broker did not refuse the connection: err=%v out=%q", what, err, out)
		}
	}
	evt := protocol.NodeEvtTopic("edge1", id)
	refused("wrong password", user, pass+"x", "ramdisk-"+id, evt)
	refused("another node's client ID", user, pass, "ramdisk-"+id2, evt)
	refused("the other node's credential for this node", user, pass2, "ramdisk-"+id, evt)
	refused("the site's own credential", creds.Username, creds.Password, "edge-edge1", evt)
	refused("the coordinator's credential", cu, cp, "coordinator", evt)
	// The node's credential reaches only its own topics: a hello
	// published for r2 with r1's credential never reaches the coordinator.
	forged, _ := protocol.Encode(&protocol.Message{Kind: protocol.KindHello, ID: "forged", Site: "edge1", Node: id2, BootID: "forged", Sent: time.Now()})
	out, _ := mosquitto(t, site, pub, user, pass, "ramdisk-"+id, "-q", "1", "-t", protocol.NodeEvtTopic("edge1", id2), "-m", string(forged))
	waitFor(t, 30*time.Second, "the site broker counts the refused publish", func() (bool, string) {
		v, err := agentMetric(t, a.MetricsAddr(), "bmedge_agent_mqtt_publish_refused_total", `kind="topic"`)
		return err == nil && v == 1, fmt.Sprintf("%v refused (%v); mosquitto_pub said %q", v, err, out)
	})
	if n := wan.count(protocol.KindHello); n != 0 {
		t.Errorf("a hello for r2 sent with r1's credential crossed the WAN (%d hellos; mosquitto_pub said %q)", n, out)
	}
	_ = user2
	// Malformed messages on the node's own topic, with its credential,
	// are dropped by the relay with a reason; none crosses the WAN.
	time.Sleep(500 * time.Millisecond)
	before := wan.count(protocol.KindResult) + wan.count(protocol.KindCommand)
	for _, bad := range []string{"not json", `{"v":1,"kind":"result","id":"x","node":"` + id + `"}`, `{"v":1,"kind":"command","id":"x","node":"` + id + `"}`} {
		if out, err := mosquitto(t, site, pub, user, pass, "ramdisk-"+id, "-q", "1", "-t", evt, "-m", bad); err != nil {
			t.Fatalf("mosquitto_pub of a malformed message: %v %q", err, out)
		}
	}
	// A PUBLISH announcing 250 MB, from the node's own authenticated
	// session: the site broker closes the connection before reading it.
	const huge = 250 << 20
	if n := sendHuge(t, a.SiteBrokerAddr(), connectPacket("ramdisk-"+id, user, pass), 0x32, huge); n >= huge {
		t.Error("the site broker read a whole 250 MB PUBLISH")
	}
	// The relay has dealt with the three once it logged their refusals.
	for deadline := time.Now().Add(10 * time.Second); strings.Count(agentLog.String(), "ramdisk message rejected") < 3 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if n := wan.count(protocol.KindResult) + wan.count(protocol.KindCommand) - before; n != 0 {
		t.Errorf("%d malformed messages crossed the WAN", n)
	}
	if got := strings.Count(agentLog.String(), "ramdisk message rejected"); got < 3 {
		t.Errorf("the agent logged %d rejected ramdisk messages, want the 3 malformed ones (and the forged hello is refused by the broker's ACL)", got)
	}

	ramdiskOn(t, site, "edge1", id, user, pass)
	n := cl.WaitRest(id, 60*time.Second)
	if n.State != "manageable" || n.LastError != "" {
		t.Fatalf("r1 after inspection through the site broker: %s (%s)", n.State, n.LastError)
	}
	if n.Properties["cpus"] != float64(4) {
		b, _ := json.Marshal(n.Properties)
		t.Errorf("r1's properties after inspection: %s; want the inventory's cpus 4", b)
	}
	if wan.count(protocol.KindHello) == 0 || wan.count(protocol.KindResult) == 0 {
		t.Errorf("WAN carried %d hellos and %d results; want both relayed", wan.count(protocol.KindHello), wan.count(protocol.KindResult))
	}
	// The ramdisk beat every 200 ms for about 2 s: on the WAN, one
	// heartbeat went at once (the new step), the others in summaries.
	direct, summary := wan.nodeBeats(id)
	if direct > 2 || summary == 0 {
		t.Errorf("r1's heartbeats on the WAN: %d one by one, %d in summaries; want at most 2 one by one (a new step each) and the rest summarised", direct, summary)
	}
	if wan.count(protocol.KindBeats) == 0 {
		t.Error("no heartbeat summary crossed the WAN")
	}

	// Once the boot ended (the node powered off after inspection), its
	// credential is dead at the site broker too.
	refused("r1's credential after its boot ended", user, pass, "ramdisk-"+id, evt)
	// No boot credential reaches the agent's log.
	for _, p := range []string{pass, pass2} {
		if strings.Contains(agentLog.String(), p) {
			t.Error("a boot credential appears in the edge agent's log")
		}
	}
	if !strings.HasPrefix(site, "mqtt://127.0.0.1:") {
		t.Fatalf("site broker at %s; tests bind to 127.0.0.1 only", site)
	}
}

// siteMessages decodes what a site's agent published: a message, or a
// bundle of them (each checked as the coordinator checks it).
func siteMessages(t *testing.T, site string, payload []byte) []*protocol.Message {
	recs := []protocol.BundleRecord{{Payload: payload}}
	if protocol.IsBundle(payload) {
		var err error
		if recs, err = protocol.DecodeBundle(site, payload); err != nil {
			t.Errorf("the agent sent a bundle that does not decode: %v", err)
			return nil
		}
	}
	var out []*protocol.Message
	for _, r := range recs {
		if m, err := protocol.Decode(r.Payload); err == nil {
			out = append(out, m)
		}
	}
	return out
}
