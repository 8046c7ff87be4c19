package systest

import (
	"bufio"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/lib/waitfor"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// subSession is a mosquitto_sub run in the background (line-buffered,
// with -d), connected or refused.
type subSession struct {
	connected bool
	out       string      // what it printed until it connected or ended
	exited    chan string // what it printed after, once it ends
	// subscribed is closed once mosquitto_sub has read its SUBACK.
	subscribed chan struct{}
	kill       func()
	// printed is what it printed so far.
	printed lockedBuffer
}

// startSub starts mosquitto_sub as user/clientID on filter with extra
// arguments and returns once the broker answered its CONNECT: connected
// (CONNACK 0) or refused (the process has ended). kill ends it as kill -9
// would (a last will is then published).
func startSub(t *testing.T, brokerURL, user, pass, clientID, filter string, extra ...string) *subSession {
	t.Helper()
	sub := requireTool(t, "mosquitto_sub")
	host, port := splitAddr(brokerURL)
	args := append([]string{"-oL", sub, "-V", "mqttv5", "-h", host, "-p", port, "-u", user, "-P", pass, "-i", clientID, "-d",
		"-t", filter, "-W", "60"}, extra...)
	// Line-buffered (stdbuf): mosquitto's debug lines must arrive while it runs.
	cmd := exec.Command("stdbuf", args...)
	pipe, _ := cmd.StdoutPipe()
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &subSession{exited: make(chan string, 1), subscribed: make(chan struct{})}
	s.kill = func() { _ = cmd.Process.Kill() }
	t.Cleanup(s.kill)
	acked := make(chan bool, 1)
	go func() {
		var all strings.Builder
		sc := bufio.NewScanner(pipe)
		once, subacked := false, false
		for sc.Scan() {
			l := sc.Text()
			all.WriteString(l + "\n")
			_, _ = s.printed.Write([]byte(l + "\n"))
			if !subacked && strings.Contains(l, "Subscribed (mid") {
				subacked = true
				close(s.subscribed)
			}
			if !once && strings.Contains(l, "CONNACK (") {
				once = true
				acked <- strings.Contains(l, "CONNACK (0)")
			}
		}
		_ = cmd.Wait()
		if !once {
			acked <- false
		}
		s.exited <- all.String()
	}()
	select {
	case ok := <-acked:
		s.connected = ok
		if !ok {
			s.out = <-s.exited
		}
	case <-time.After(10 * time.Second):
		s.kill()
		t.Fatalf("mosquitto_sub neither connected nor was refused within 10 s:\n%s", <-s.exited)
	}
	return s
}

// startWithWill is startSub with a last will (topic, payload, retained or
// not) on a filter the identity may use.
func startWithWill(t *testing.T, brokerURL, user, pass, clientID, willTopic, willPayload string, retain bool) (connected bool, out string, kill func()) {
	t.Helper()
	filter := "bm/v1/site/" + strings.TrimPrefix(user, "site:") + "/bmc/cmd"
	if node, ok := strings.CutPrefix(user, "node:"); ok {
		filter = "bm/v1/site/site1/node/" + node + "/cmd"
	}
	extra := []string{"--will-topic", willTopic, "--will-payload", willPayload, "--will-qos", "1"}
	if retain {
		extra = append(extra, "--will-retain")
	}
	s := startSub(t, brokerURL, user, pass, clientID, filter, extra...)
	return s.connected, s.out, s.kill
}

// retained reads the retained message of topic (empty if none) with
// mosquitto_sub as user.
func retained(t *testing.T, brokerURL, user, pass, clientID, topic string) string {
	t.Helper()
	sub := requireTool(t, "mosquitto_sub")
	host, port := splitAddr(brokerURL)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, sub, "-V", "mqttv5", "-h", host, "-p", port, "-u", user, "-P", pass, "-i", clientID,
		"-t", topic, "--retained-only", "-W", "2").CombinedOutput()
	// -W ends it with "Timed out" on its output.
	return strings.TrimSpace(strings.ReplaceAll(string(out), "Timed out", ""))
}

// TestLastWillAndRetainRules: a last will is held to the rules of a
// publish (mochi publishes it without them): a site's will on another
// site's topics, or retained anywhere but on its own presence topic, and a
// ramdisk's will on another node's topic are refused at CONNECT; a will on
// the site's own presence topic is taken and published when the client
// dies (the control), but not when its credential was revoked first (the
// site re-keyed). A retained publish on a topic that only ends in
// /presence is refused. All with mosquitto_sub and mosquitto_pub.
func TestLastWillAndRetainRules(t *testing.T) {
	pub := requireTool(t, "mosquitto_pub")
	c := testrig.Coordinator(t, testrig.Options{})
	cl := testrig.NewClient(t, c)
	var s1, s2 agent.Credentials
	for name, cr := range map[string]*agent.Credentials{"site1": &s1, "site2": &s2} {
		if code := cl.Do("POST", "/v1/sites", map[string]string{"name": name}, cr); code != 201 {
			t.Fatalf("site add %s: %d", name, code)
		}
	}
	testrig.StartAgent(t, s1, agent.SimOptions{Nodes: 2, NoBoot: true})
	n1, nodeUser, nodePass := bootingNode(t, c, cl, "n1", "site1")
	n2 := cl.CreateNode("n2", "site1", nil)
	forged := `{"v":1,"kind":"presence","site":"site2","sent":"2026-01-01T00:00:00Z","online":true}`

	for _, r := range []struct {
		what, user, pass, client, topic string
		retain                          bool
	}{
		{"a retained will on another site's presence", s1.Username, s1.Password, "edge-site1.w1", "bm/v1/site/site2/presence", true},
		{"a will on another site's command topic", s1.Username, s1.Password, "edge-site1.w2", "bm/v1/site/site2/bmc/cmd", false},
		{"a retained will on the site's own event topic", s2.Username, s2.Password, "edge-site2.w3", "bm/v1/site/site2/bmc/evt", true},
		{"a retained will on a topic that only ends in /presence", s2.Username, s2.Password, "edge-site2.w4", "bm/v1/site/site2/x/presence", true},
		{"a ramdisk's will on another node's event topic", nodeUser, nodePass, "ramdisk-" + n1, "bm/v1/site/site1/node/" + n2 + "/evt", false},
	} {
		if ok, out, kill := startWithWill(t, c.BrokerURL, r.user, r.pass, r.client, r.topic, forged, r.retain); ok {
			kill()
			t.Errorf("%s was taken at CONNECT:\n%s", r.what, out)
		} else if !strings.Contains(out, "CONNACK (135)") && !strings.Contains(out, "CONNACK (134)") {
			t.Errorf("%s: refused, but not as not authorized:\n%s", r.what, out)
		}
	}
	if got := retained(t, c.BrokerURL, s2.Username, s2.Password, "edge-site2.r", "bm/v1/site/site2/presence"); strings.Contains(got, "2026-01-01") {
		t.Errorf("site2's presence holds the forged will: %q", got)
	}
	if on, _ := siteOnline(cl, "site2"); on {
		t.Error("site2 is online though its agent never connected")
	}

	// The control: site2's own presence will, from its edge agent's own client
	// ID (only that client may say the site's presence), published when it dies.
	own := `{"v":1,"kind":"presence","site":"site2","sent":"2026-02-02T00:00:00Z","online":false}`
	ok, out, kill := startWithWill(t, c.BrokerURL, s2.Username, s2.Password, "edge-site2", "bm/v1/site/site2/presence", own, true)
	if !ok {
		t.Fatalf("a retained will on the site's own presence topic was refused (the control):\n%s", out)
	}
	kill()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(retained(t, c.BrokerURL, s2.Username, s2.Password, "edge-site2.r", "bm/v1/site/site2/presence"), "2026-02-02") {
		if time.Now().After(deadline) {
			t.Fatal("the will of a client killed with a valid credential was not published (the control)")
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Revoked first: the will is dropped; the coordinator's own offline
	// presence replaces the retained one.
	revoked := `{"v":1,"kind":"presence","site":"site2","sent":"2026-03-03T00:00:00Z","online":true}`
	ok, out, kill = startWithWill(t, c.BrokerURL, s2.Username, s2.Password, "edge-site2", "bm/v1/site/site2/presence", revoked, true)
	if !ok {
		t.Fatalf("own presence will refused:\n%s", out)
	}
	defer kill()
	var rot agent.Credentials
	if code := cl.Do("POST", "/v1/sites/site2/credentials", nil, &rot); code != 200 {
		t.Fatalf("site rotate: %d", code)
	}
	// The broker drops the revoked client only after it would have
	// published its will.
	if !waitfor.Until(10*time.Second, func() bool { return !c.Broker.HasClient("edge-site2") }) {
		t.Fatal("the broker still holds the revoked client edge-site2 10 s after the rotation")
	}
	if got := retained(t, c.BrokerURL, rot.Username, rot.Password, "edge-site2.r", "bm/v1/site/site2/presence"); strings.Contains(got, "2026-03-03") || strings.Contains(got, `"online":true`) || !strings.Contains(got, `"kind":"presence"`) {
		t.Errorf("after the rotation site2's retained presence is %q; want the coordinator's offline presence, not the revoked client's will", got)
	}

	// A retained publish on a topic that only ends in /presence.
	host, port := splitAddr(c.BrokerURL)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	pout, _ := exec.CommandContext(ctx, pub, "-V", "mqttv5", "-h", host, "-p", port, "-u", s1.Username, "-P", s1.Password,
		"-i", "edge-site1.r", "-t", "bm/v1/site/site1/bulk/presence", "-m", strings.Repeat("x", 1000), "-r", "-q", "1").CombinedOutput()
	if got := retained(t, c.BrokerURL, s1.Username, s1.Password, "edge-site1.r", "bm/v1/site/site1/bulk/presence"); got != "" {
		t.Errorf("a retained message on bm/v1/site/site1/bulk/presence was kept (%d bytes); mosquitto_pub said %q", len(got), pout)
	}
	// Site1's own presence is retained as before (the agent's).
	if got := retained(t, c.BrokerURL, s1.Username, s1.Password, "edge-site1.r", "bm/v1/site/site1/presence"); !strings.Contains(got, `"online":true`) {
		t.Errorf("site1's own retained presence: %q", got)
	}
}
