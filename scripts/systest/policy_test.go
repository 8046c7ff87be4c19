package systest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/coordinator/server"
	"github.com/bmedge/bmedge/lib/mqttbroker"
	"github.com/bmedge/bmedge/lib/ratelog"
	"github.com/bmedge/bmedge/lib/waitfor"
	"github.com/bmedge/bmedge/protocol"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestSecondaryClientCannotSayOffline: a second client of a live site
// (the site's credential, another client ID), as mosquitto_pub and
// mosquitto_sub, cannot say that the site is offline: an offline presence
// published (retained, QoS 1 and QoS 0) is refused, a last will on the
// presence topic is refused at CONNECT; the site stays online, its
// retained presence stays the agent's, and its node still times out
// (a site counted offline stops its nodes' timeouts).
func TestSecondaryClientCannotSayOffline(t *testing.T) {
	pub := requireTool(t, "mosquitto_pub")
	c := testrig.Coordinator(t, testrig.Options{Machine: fsm.Config{WaitTimeout: 8 * time.Second}})
	cl := testrig.NewClient(t, c)
	var s1 agent.Credentials
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "site1"}, &s1); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	testrig.StartAgent(t, s1, agent.SimOptions{Nodes: 2, NoBoot: true})
	// The node waits for a ramdisk that never comes: it must time out.
	n, _, _ := bootingNode(t, c, cl, "n1", "site1")
	presence := protocol.SitePresenceTopic("site1")
	offline := `{"v":1,"kind":"presence","site":"site1","sent":"2026-01-01T00:00:00Z","online":false}`

	out, _ := mosquitto(t, c.BrokerURL, pub, s1.Username, s1.Password, "edge-site1.tool", "-t", presence, "-m", offline, "-q", "1", "-r")
	if !strings.Contains(strings.ToLower(out), "not authori") {
		t.Errorf("a retained offline presence from a second client of the site (QoS 1) was not refused: %q", out)
	}
	if out, err := mosquitto(t, c.BrokerURL, pub, s1.Username, s1.Password, "edge-site1.tool", "-t", presence, "-m", offline, "-q", "0"); err != nil {
		t.Fatalf("mosquitto_pub QoS 0: %v %q", err, out)
	}
	s := startSub(t, c.BrokerURL, s1.Username, s1.Password, "edge-site1.w", "bm/v1/site/site1/bmc/cmd",
		"--will-topic", presence, "--will-payload", offline, "--will-qos", "1")
	if s.connected {
		s.kill()
		t.Errorf("a second client's last will on the site's presence was taken at CONNECT")
	} else if !strings.Contains(s.out, "CONNACK (135)") && !strings.Contains(s.out, "CONNACK (134)") {
		t.Errorf("a second client's presence will: refused, but not as not authorized:\n%s", s.out)
	}
	// Gone from the broker, a client's publishes and its will (had it
	// been taken) are handed to the engine.
	if !waitfor.Until(10*time.Second, func() bool { return !c.Broker.HasClient("edge-site1.w") && !c.Broker.HasClient("edge-site1.tool") }) {
		t.Fatal("the broker still holds edge-site1.w or edge-site1.tool 10 s after they ended")
	}
	if on, _ := siteOnline(cl, "site1"); !on {
		t.Fatal("a second client of the site made it offline")
	}
	if got := retained(t, c.BrokerURL, s1.Username, s1.Password, "edge-site1.r", presence); !strings.Contains(got, `"online":true`) {
		t.Errorf("site1's retained presence is %q, not its agent's online presence", got)
	}
	// Timeouts still run for the site's nodes.
	if got := cl.WaitRest(n, 40*time.Second); got.State != "inspect failed" {
		t.Fatalf("node waiting for its ramdisk: %q (last_error %q); want inspect failed by the wait timeout", got.State, got.LastError)
	}
	if on, _ := siteOnline(cl, "site1"); !on {
		t.Error("site1 went offline")
	}
}

// TestRamdiskRefusedWhereSiteBroker: at a site whose edge agent runs the
// site broker, a ramdisk's credential is refused by the coordinator's
// broker (mosquitto_sub), while the site broker admits it; at a site
// without one the coordinator's broker admits a ramdisk's credential
// (the control). A restarted coordinator, which no agent has reached
// yet, refuses and admits the same.
func TestRamdiskRefusedWhereSiteBroker(t *testing.T) {
	sub := requireTool(t, "mosquitto_sub")
	dir := t.TempDir()
	c := testrig.Coordinator(t, testrig.Options{DataDir: dir})
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
	testrig.Site(t, c, "plain", agent.SimOptions{Nodes: 2, NoBoot: true})

	id, user, pass := bootingNode(t, c, cl, "r1", "edge1")
	out, err := mosquitto(t, c.BrokerURL, sub, user, pass, "ramdisk-"+id, "-t", protocol.NodeCmdTopic("edge1", id), "-W", "2")
	if err == nil || !refusedAtConnect(out) {
		t.Errorf("the coordinator's broker admitted a ramdisk of a site with a site broker: %v %q", err, out)
	}
	siteBroker := "mqtt://" + a.SiteBrokerAddr()
	if out, err := mosquitto(t, siteBroker, sub, user, pass, "ramdisk-"+id, "-t", protocol.NodeCmdTopic("edge1", id), "-W", "1"); refusedAtConnect(out) {
		t.Errorf("the site broker refused its ramdisk's credential (the control): %v %q", err, out)
	}
	pid, puser, ppass := bootingNode(t, c, cl, "p1", "plain")
	if out, err := mosquitto(t, c.BrokerURL, sub, puser, ppass, "ramdisk-"+pid, "-t", protocol.NodeCmdTopic("plain", pid), "-W", "1"); refusedAtConnect(out) {
		t.Errorf("a ramdisk of a site without a site broker was refused by the coordinator's broker (the control): %v %q", err, out)
	}

	// Restarted on another broker address, which the agents do not know:
	// what the agent said of its site broker was stored.
	c.Close()
	c = testrig.Coordinator(t, testrig.Options{DataDir: dir})
	if _, _, ok := c.Engine.NodeCredentials(id); !ok {
		t.Fatal("the boot of r1 ended with the restart")
	}
	out, err = mosquitto(t, c.BrokerURL, sub, user, pass, "ramdisk-"+id, "-t", protocol.NodeCmdTopic("edge1", id), "-W", "2")
	if err == nil || !refusedAtConnect(out) {
		t.Errorf("after a restart the coordinator's broker admitted a ramdisk of a site with a site broker: %v %q", err, out)
	}
	if out, err := mosquitto(t, c.BrokerURL, sub, puser, ppass, "ramdisk-"+pid, "-t", protocol.NodeCmdTopic("plain", pid), "-W", "1"); refusedAtConnect(out) {
		t.Errorf("after a restart a ramdisk of a site without a site broker was refused (the control): %v %q", err, out)
	}
}

// TestBadConnectLogBounded: 2000 bad CONNECTs (wrong password, unknown
// site, another site's client ID, unknown node, unknown user) from a raw
// client write a bounded number of log lines, one per kind per ratelog
// interval with the count, never one per attempt; a good login still
// works afterwards (mosquitto_sub).
func TestBadConnectLogBounded(t *testing.T) {
	sub := requireTool(t, "mosquitto_sub")
	logs := &lockedBuffer{}
	c, err := server.Start(context.Background(), server.Options{DataDir: t.TempDir(), APIListen: "127.0.0.1:0", MQTTListen: testrig.FreeAddr(t),
		TickInterval: 100 * time.Millisecond, Log: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	cl := testrig.NewClient(t, c)
	var s1 agent.Credentials
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "site1"}, &s1); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	_, addr, _ := strings.Cut(c.BrokerURL, "://")
	bad := [][3]string{
		{"edge-site1", s1.Username, "wrong-password"},
		{"edge-nosuch", "site:nosuch", "pw"},
		{"intruder", s1.Username, s1.Password},
		{"ramdisk-x", "node:00000000-0000-0000-0000-000000000000", "pw"},
		{"x", strings.Repeat("u", 4000), strings.Repeat("p", 4000)},
	}
	const n = 2000
	before := len(logs.String())
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[byte]int{}
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < n; i += 8 {
				b := bad[i%len(bad)]
				code := rawConnect(addr, b[0], b[1], b[2])
				mu.Lock()
				codes[code]++
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	elapsed := time.Since(start)
	flood := logs.String()[before:]
	lines := strings.Count(flood, "\n")
	// Each kind of refusal (five here; the broker has a handful more)
	// at most once per interval that began during the flood.
	const kinds = 8
	bound := kinds * (int(elapsed/ratelog.DefaultInterval) + 1)
	t.Logf("%d bad CONNECTs in %s (CONNACK codes %v) wrote %d log lines, %d bytes (bound %d)", n, elapsed.Round(time.Millisecond), codes, lines, len(flood), bound)
	if codes[0] != 0 || codes[0xFF] > n/20 {
		t.Errorf("CONNACK codes %v: a bad CONNECT was admitted, or many got no answer", codes)
	}
	if lines > bound {
		t.Fatalf("%d bad CONNECTs wrote %d log lines; want at most %d:\n%.3000s", n, lines, bound, flood)
	}
	if !strings.Contains(flood, "MQTT login refused") {
		t.Fatalf("the refusals were not logged at all:\n%s", flood)
	}
	if strings.Contains(flood, "wrong-password") || strings.Contains(flood, s1.Password) || strings.Contains(flood, strings.Repeat("u", 100)) {
		t.Errorf("a password, or a stranger's long user name, reached the log:\n%.3000s", flood)
	}
	// The control: the site's own login works.
	if out, err := mosquitto(t, c.BrokerURL, sub, s1.Username, s1.Password, "edge-site1", "-t", protocol.BMCCmdTopic("site1"), "-W", "1"); refusedAtConnect(out) {
		t.Fatalf("the site's own login was refused after the flood: %v %q", err, out)
	}
}

// rawConnect sends one MQTT v5 CONNECT and returns the CONNACK's reason
// code (0xFF when none came).
func rawConnect(addr, clientID, user, pass string) byte {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return 0xFF
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(connectPacket(clientID, user, pass)); err != nil {
		return 0xFF
	}
	ack := make([]byte, 4)
	if _, err := io.ReadFull(c, ack); err != nil || ack[0]>>4 != 2 {
		return 0xFF
	}
	return ack[3]
}

// TestSubscriptionCapPerClient: a site's client that subscribes to more
// filters than the cap in one SUBSCRIBE (mosquitto_sub with many -t) gets
// quota exceeded (0x97) for those past it, and its first filters work:
// a message published there arrives, one on a refused filter does not.
func TestSubscriptionCapPerClient(t *testing.T) {
	pub := requireTool(t, "mosquitto_pub")
	c := testrig.Coordinator(t, testrig.Options{})
	cl := testrig.NewClient(t, c)
	var s2 agent.Credentials
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "site2"}, &s2); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	const total = mqttbroker.DefaultMaxSubscriptions + 6
	topic := func(i int) string { return fmt.Sprintf("bm/v1/site/site2/t/%d", i) }
	var extra []string
	for i := 1; i < total; i++ {
		extra = append(extra, "-t", topic(i))
	}
	extra = append(extra, "-v")
	s := startSub(t, c.BrokerURL, s2.Username, s2.Password, "edge-site2.many", topic(0), extra...)
	if !s.connected {
		t.Fatalf("mosquitto_sub refused at CONNECT:\n%s", s.out)
	}
	select {
	case <-s.subscribed:
	case <-time.After(10 * time.Second):
		t.Fatal("mosquitto_sub read no SUBACK within 10 s")
	}
	// The message on the refused filter first: the broker delivers to a
	// subscriber in the order it took the publishes, so once the second
	// arrived, the first would have.
	for _, i := range []int{total - 1, 0} {
		if out, err := mosquitto(t, c.BrokerURL, pub, s2.Username, s2.Password, "edge-site2.pub", "-t", topic(i), "-m", fmt.Sprintf("msg-%d", i), "-q", "1"); err != nil {
			t.Fatalf("mosquitto_pub: %v %q", err, out)
		}
	}
	waitfor.Until(10*time.Second, func() bool { return strings.Contains(s.printed.String(), topic(0)+" msg-0") })
	s.kill()
	out := <-s.exited
	var suback string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "Subscribed (mid") {
			suback = l
		}
	}
	codes := strings.Split(suback[strings.Index(suback, "):")+2:], ",")
	if len(codes) != total {
		t.Fatalf("SUBACK of %d filters: %q", total, suback)
	}
	for i, code := range codes {
		want := "0" // granted QoS 0, mosquitto_sub's default
		if i >= mqttbroker.DefaultMaxSubscriptions {
			want = "151" // 0x97 quota exceeded
		}
		if strings.TrimSpace(code) != want {
			t.Errorf("filter %d: SUBACK code %s, want %s (%s)", i, strings.TrimSpace(code), want, suback)
			break
		}
	}
	if !strings.Contains(out, topic(0)+" msg-0") {
		t.Errorf("a message on an allowed filter did not arrive:\n%s", out)
	}
	if strings.Contains(out, fmt.Sprintf("msg-%d", total-1)) {
		t.Errorf("a message on a filter over the cap arrived:\n%s", out)
	}
}

// TestAgentMessageMarksSiteOnline: any message from a site's edge agent
// connection (its own client ID) while the site counts as offline (its
// own offline presence, or an earlier connection's will that came after
// the agent reconnected) brings the site back online; a message from
// another client of the site does not. All with mosquitto_pub.
func TestAgentMessageMarksSiteOnline(t *testing.T) {
	pub := requireTool(t, "mosquitto_pub")
	c := testrig.Coordinator(t, testrig.Options{})
	cl := testrig.NewClient(t, c)
	var s3 agent.Credentials
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "site3"}, &s3); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	send := func(clientID, topic, payload string) {
		t.Helper()
		if out, err := mosquitto(t, c.BrokerURL, pub, s3.Username, s3.Password, clientID, "-t", topic, "-m", payload, "-q", "1"); err != nil {
			t.Fatalf("mosquitto_pub as %s on %s: %v %q", clientID, topic, err, out)
		}
	}
	waitOnline := func(want bool, what string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			if on, _ := siteOnline(cl, "site3"); on == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: site3 online is not %v", what, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	presence := protocol.SitePresenceTopic("site3")
	send("edge-site3", presence, `{"v":1,"kind":"presence","site":"site3","sent":"2026-01-01T00:00:00Z","online":true}`)
	waitOnline(true, "the agent's own online presence")
	send("edge-site3", presence, `{"v":1,"kind":"presence","site":"site3","sent":"2026-01-01T00:00:01Z","online":false}`)
	waitOnline(false, "the agent's own offline presence")
	// A message of another client of the site is no sign of the agent.
	send("edge-site3.tool", protocol.BMCEvtTopic("site3"), "{}")
	// Gone from the broker, its publish went through the broker's note
	// of who published; settled, the engine did what that asked of it.
	if !waitfor.Until(10*time.Second, func() bool { return !c.Broker.HasClient("edge-site3.tool") }) {
		t.Fatal("the broker still holds edge-site3.tool 10 s after its publish")
	}
	if err := c.Engine.Settle(); err != nil {
		t.Fatal(err)
	}
	if on, _ := siteOnline(cl, "site3"); on {
		t.Fatal("a message from a second client of the site brought it online")
	}
	// Any message of the agent's own client is (even one the coordinator
	// then rejects as malformed).
	send("edge-site3", protocol.BMCEvtTopic("site3"), "{}")
	waitOnline(true, "a message from the agent's own client")
}
