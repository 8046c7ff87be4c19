package systest

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/coordinator/server"
	"github.com/bmedge/bmedge/protocol"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// mosquitto runs mosquitto_sub or mosquitto_pub (MQTT v5) against the
// coordinator's broker and returns what it printed.
func mosquitto(t *testing.T, brokerURL, bin, user, pass, clientID string, args ...string) (string, error) {
	t.Helper()
	host, port := splitAddr(brokerURL)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	all := append([]string{"-V", "mqttv5", "-h", host, "-p", port, "-u", user, "-P", pass, "-i", clientID}, args...)
	out, err := exec.CommandContext(ctx, bin, all...).CombinedOutput()
	return string(out), err
}

// bootingNode creates a node at site, manages it and starts an
// inspection; it returns once the node waits for its ramdisk, with the
// credential of that boot.
func bootingNode(t *testing.T, c *server.Coordinator, cl *testrig.Client, name, site string) (id, user, pass string) {
	t.Helper()
	id = cl.CreateNode(name, site, nil)
	cl.MustVerb(id, "manage", nil)
	cl.WaitState(id, "manageable", 10*time.Second)
	cl.MustVerb(id, "inspect", nil)
	cl.WaitState(id, "inspect wait", 10*time.Second)
	user, pass, ok := c.Engine.NodeCredentials(id)
	if !ok {
		t.Fatalf("node %s has no boot credential while it waits for its ramdisk", name)
	}
	return id, user, pass
}

// refusedAtConnect tells whether mosquitto's output is a CONNACK refusal.
func refusedAtConnect(out string) bool {
	o := strings.ToLower(out)
	return strings.Contains(o, "not authori") || strings.Contains(o, "bad user name or password")
}

// TestSessionTakeoverRefused: a client with another site's valid
// credentials, or with a node's, and the client ID of site1's edge agent
// is refused at CONNECT, receives nothing, and the real edge agent stays
// connected and keeps working.
func TestSessionTakeoverRefused(t *testing.T) {
	sub := requireTool(t, "mosquitto_sub")
	c := testrig.Coordinator(t, testrig.Options{})
	cl := testrig.NewClient(t, c)
	testrig.Site(t, c, "site1", agent.SimOptions{Nodes: 4})
	var site2 agent.Credentials
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "site2"}, &site2); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	testrig.Site(t, c, "site3", agent.SimOptions{Nodes: 4, NoBoot: true})
	n1 := cl.CreateNode("n1", "site1", nil)
	n3, nodeUser, nodePass := bootingNode(t, c, cl, "n3", "site3")

	// Positive controls: each credential works under its own client ID.
	if out, err := mosquitto(t, c.BrokerURL, sub, site2.Username, site2.Password, "edge-site2", "-t", "bm/v1/site/site2/bmc/cmd", "-W", "1"); refusedAtConnect(out) {
		t.Fatalf("site2's own client ID refused: %v %q", err, out)
	}
	if out, err := mosquitto(t, c.BrokerURL, sub, nodeUser, nodePass, "ramdisk-"+n3, "-t", "bm/v1/site/site3/node/"+n3+"/cmd", "-W", "1"); refusedAtConnect(out) {
		t.Fatalf("node n3's own client ID refused: %v %q", err, out)
	}

	cl.MustVerb(n1, "manage", nil)
	cl.WaitState(n1, "manageable", 10*time.Second)
	for _, who := range []struct{ name, user, pass string }{
		{"another site's credentials", site2.Username, site2.Password},
		{"a node's credentials", nodeUser, nodePass},
	} {
		// While it tries, site1 gets commands (a power command carries a
		// boot credential) that a taken-over session would receive.
		cl.MustVerb(n1, "provide", nil)
		out, err := mosquitto(t, c.BrokerURL, sub, who.user, who.pass, "edge-site1", "-t", "bm/v1/site/site1/#", "-v", "-W", "3")
		t.Logf("%s as edge-site1: %v %q", who.name, err, out)
		if err == nil || !refusedAtConnect(out) {
			t.Errorf("%s with site1's client ID was not refused at CONNECT: %v %q", who.name, err, out)
		}
		if strings.Contains(out, "bm/v1/") || strings.Contains(out, "{") {
			t.Errorf("%s received site1's messages: %q", who.name, out)
		}
		// The real agent was not kicked off: the provide completes.
		if n := cl.WaitRest(n1, 30*time.Second); n.State != "available" {
			t.Fatalf("site1's node after the attempt: %q (last_error %q)", n.State, n.LastError)
		}
		cl.MustVerb(n1, "manage", nil)
		cl.WaitState(n1, "manageable", 10*time.Second)
	}
	var sites struct {
		Sites []map[string]any `json:"sites"`
	}
	cl.Do("GET", "/v1/sites", nil, &sites)
	for _, s := range sites.Sites {
		if s["name"] == "site1" && s["online"] != true {
			t.Errorf("site1's edge agent was kicked off: %v", s)
		}
	}
}

// TestEarlierBootCredentialRefused: the credential of a ramdisk boot
// stops working when the boot ends; the next boot gets another one.
func TestEarlierBootCredentialRefused(t *testing.T) {
	pub := requireTool(t, "mosquitto_pub")
	c := testrig.Coordinator(t, testrig.Options{})
	cl := testrig.NewClient(t, c)
	testrig.Site(t, c, "site1", agent.SimOptions{Nodes: 4, BootDelay: 1500 * time.Millisecond, StepDuration: 300 * time.Millisecond})
	n, user, first := bootingNode(t, c, cl, "n1", "site1")
	evt := protocol.NodeEvtTopic("site1", n)
	// While the boot lasts the credential connects (and may publish).
	if out, err := mosquitto(t, c.BrokerURL, pub, user, first, "ramdisk-"+n, "-q", "1", "-t", protocol.NodePresenceTopic("site1", n), "-m", "{}"); err != nil || refusedAtConnect(out) {
		t.Fatalf("the current boot's credential was refused: %v %q", err, out)
	}
	if got := cl.WaitRest(n, 30*time.Second); got.State != "manageable" {
		t.Fatalf("inspection ended in %q (last_error %q)", got.State, got.LastError)
	}
	if _, _, ok := c.Engine.NodeCredentials(n); ok {
		t.Error("a boot credential is still valid after the inspection ended")
	}
	out, err := mosquitto(t, c.BrokerURL, pub, user, first, "ramdisk-"+n, "-q", "1", "-t", evt, "-m", "{}")
	t.Logf("earlier boot's credential: %v %q", err, out)
	if err == nil || !refusedAtConnect(out) {
		t.Fatalf("an earlier boot's credential was not refused at CONNECT: %v %q", err, out)
	}
	// The next boot has a credential of its own; the old one stays dead.
	cl.MustVerb(n, "provide", nil)
	cl.WaitState(n, "clean wait", 10*time.Second)
	_, second, ok := c.Engine.NodeCredentials(n)
	if !ok || second == first {
		t.Fatalf("the second boot reuses the first boot's credential (ok %v)", ok)
	}
	if out, err := mosquitto(t, c.BrokerURL, pub, user, first, "ramdisk-"+n, "-q", "1", "-t", evt, "-m", "{}"); err == nil || !refusedAtConnect(out) {
		t.Errorf("the first boot's credential connects during the second boot: %v %q", err, out)
	}
	if got := cl.WaitRest(n, 30*time.Second); got.State != "available" {
		t.Fatalf("provide ended in %q (last_error %q)", got.State, got.LastError)
	}
}

// TestForgedHelloCannotSkipCleaning: even with the boot's valid
// credential, a hello that offers no erase step does not take the node
// from clean wait to available: cleaning fails, naming what is missing.
func TestForgedHelloCannotSkipCleaning(t *testing.T) {
	pub := requireTool(t, "mosquitto_pub")
	c := testrig.Coordinator(t, testrig.Options{})
	cl := testrig.NewClient(t, c)
	testrig.Site(t, c, "site1", agent.SimOptions{Nodes: 4})
	n := cl.CreateNode("n1", "site1", map[string]any{"fake_no_boot": "true"})
	cl.MustVerb(n, "manage", nil)
	cl.WaitState(n, "manageable", 10*time.Second)
	cl.MustVerb(n, "provide", nil)
	cl.WaitState(n, "clean wait", 10*time.Second)
	user, pass, ok := c.Engine.NodeCredentials(n)
	if !ok {
		t.Fatal("no boot credential in clean wait")
	}
	hello, err := protocol.Encode(&protocol.Message{V: protocol.Version, Kind: protocol.KindHello, ID: "forged-1", Site: "site1", Node: n,
		Sent: time.Now(), BootID: "forged-boot"})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := mosquitto(t, c.BrokerURL, pub, user, pass, "ramdisk-"+n, "-q", "1", "-t", protocol.NodeEvtTopic("site1", n), "-m", string(hello)); err != nil {
		t.Fatalf("publish: %v %q", err, out)
	}
	got := cl.WaitRest(n, 20*time.Second)
	if got.State != "clean failed" || !strings.Contains(got.LastError, "deploy.erase_devices") {
		t.Fatalf("after a hello offering no clean steps: %q, last_error %q; want clean failed naming the erase steps", got.State, got.LastError)
	}
}

// TestOversizePacketsRefused: a 250 MB packet before CONNECT, a 250 MB
// CONNECT, and a 250 MB PUBLISH after authentication are all refused
// without the coordinator's memory growing by more than 32 MB (the
// coordinator runs in this process: its RSS is this process's).
func TestOversizePacketsRefused(t *testing.T) {
	c := testrig.Coordinator(t, testrig.Options{Machine: fsm.Config{}})
	cl := testrig.NewClient(t, c)
	var site agent.Credentials
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "site1"}, &site); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	addr := strings.TrimPrefix(c.BrokerURL, "mqtt://")
	const huge = 250 << 20
	before := rss(t)

	// No CONNECT first: a PUBLISH header announcing 250 MB.
	if n := sendHuge(t, addr, nil, 0x30, huge); n >= huge {
		t.Error("the broker read a whole 250 MB packet sent before CONNECT")
	}
	// A CONNECT that claims 250 MB.
	if n := sendHuge(t, addr, nil, 0x10, huge); n >= huge {
		t.Error("the broker read a whole 250 MB CONNECT")
	}
	// Authenticated, then a 250 MB PUBLISH.
	connect := connectPacket("edge-site1", site.Username, site.Password)
	if n := sendHuge(t, addr, connect, 0x32, huge); n >= huge {
		t.Error("the broker read a whole 250 MB PUBLISH from an authenticated client")
	}
	after := rss(t)
	t.Logf("RSS before %d MiB, after %d MiB", before>>20, after>>20)
	if after-before > 32<<20 {
		t.Errorf("RSS rose by %d MiB (limit 32 MiB)", (after-before)>>20)
	}
	// The broker still serves: a node's verb goes through it.
	testrig.StartAgent(t, site, agent.SimOptions{Nodes: 4})
	n := cl.CreateNode("n1", "site1", nil)
	cl.MustVerb(n, "manage", nil)
	cl.WaitState(n, "manageable", 10*time.Second)
}

// rss is this process's resident set size, after a GC that returns freed
// memory to the system.
func rss(t *testing.T) int64 {
	t.Helper()
	runtime.GC()
	debug.FreeOSMemory()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			f := strings.Fields(l)
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// sendHuge connects, sends prefix (a CONNECT, whose CONNACK must accept
// it) and then a packet of type byte first whose remaining length is
// size, streaming zeros until the broker closes. It returns how many body
// bytes were written.
func sendHuge(t *testing.T, addr string, prefix []byte, first byte, size int) int {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(60 * time.Second))
	if prefix != nil {
		if _, err := conn.Write(prefix); err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(conn)
		hdr := make([]byte, 4)
		if _, err := io.ReadFull(r, hdr); err != nil {
			t.Fatalf("no CONNACK: %v", err)
		}
		if hdr[0] != 0x20 || hdr[3] != 0 {
			t.Fatalf("CONNACK % x: the broker did not accept the client", hdr)
		}
	}
	if _, err := conn.Write(append([]byte{first}, varint(size)...)); err != nil {
		return 0
	}
	chunk := make([]byte, 64<<10)
	n := 0
	for n < size {
		w, err := conn.Write(chunk[:min(len(chunk), size-n)])
		n += w
		if err != nil {
			break
		}
	}
	return n
}

func varint(n int) []byte {
	var out []byte
	for {
		b := byte(n % 128)
		n /= 128
		if n > 0 {
			b |= 0x80
		}
		out = append(out, b)
		if n == 0 {
			return out
		}
	}
}

// connectPacket is an MQTT v5 CONNECT with clean start, user and password.
func connectPacket(clientID, user, pass string) []byte {
	str := func(s string) []byte {
		b := make([]byte, 2, 2+len(s))
		binary.BigEndian.PutUint16(b, uint16(len(s)))
		return append(b, s...)
	}
	var body []byte
	body = append(body, str("MQTT")...)
	body = append(body, 5, 0xC2, 0, 60, 0) // v5; user, password, clean start; keepalive 60; no properties
	body = append(body, str(clientID)...)
	body = append(body, str(user)...)
	body = append(body, str(pass)...)
	return append(append([]byte{0x10}, varint(len(body))...), body...)
}

// TestEdgeAgentOverTLS: with --tls-cert/--tls-key the embedded broker
// speaks only MQTT over TLS; an edge agent that trusts the CA file works,
// one with another CA is refused with an error that says so, and a plain
// MQTT client gets nowhere.
func TestEdgeAgentOverTLS(t *testing.T) {
	cert, key, caFile := testrig.LabCerts(t, "127.0.0.1")
	_, _, otherCA := testrig.LabCerts(t, "127.0.0.1")
	c := testrig.Coordinator(t, testrig.Options{TLSCert: cert, TLSKey: key, CACert: caFile})
	if !strings.HasPrefix(c.BrokerURL, "mqtts://") {
		t.Fatalf("broker URL %s with TLS on", c.BrokerURL)
	}
	cl := testrig.NewClient(t, c)
	var creds agent.Credentials
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "site1"}, &creds); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	if creds.BrokerURL != c.BrokerURL {
		t.Fatalf("site credentials name broker %s, want %s", creds.BrokerURL, c.BrokerURL)
	}

	// Another CA: refused, and the error says why.
	bad := agent.New(agent.Config{Site: "site1", BrokerURL: creds.BrokerURL, Username: creds.Username, Password: creds.Password,
		CAFile: otherCA, Log: testrig.Logger(t)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = bad.Run(ctx) }()
	wctx, wcancel := context.WithTimeout(ctx, 3*time.Second)
	err := bad.AwaitUp(wctx)
	wcancel()
	cancel()
	<-done
	if err == nil || !strings.Contains(err.Error(), "not signed by the CA this client trusts") {
		t.Fatalf("edge agent with another CA: %v; want a refusal that names the CA", err)
	}

	// Plain MQTT to the TLS port: mosquitto_sub cannot even connect.
	if sub, err := exec.LookPath("mosquitto_sub"); err == nil {
		host, port := splitAddr(strings.Replace(c.BrokerURL, "mqtts://", "mqtt://", 1))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, err := exec.CommandContext(ctx, sub, "-V", "mqttv5", "-h", host, "-p", port, "-u", creds.Username, "-P", creds.Password,
			"-i", "edge-site1", "-t", "bm/v1/site/site1/#", "-W", "2").CombinedOutput()
		cancel()
		if err == nil {
			t.Errorf("plain MQTT client connected to the TLS listener: %q", out)
		}
		// With the CA, mosquitto_sub (an independent TLS client) connects.
		ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
		out, err = exec.CommandContext(ctx, sub, "-V", "mqttv5", "-h", host, "-p", port, "--cafile", caFile, "-u", creds.Username, "-P", creds.Password,
			"-i", "edge-site1.probe", "-t", "bm/v1/site/site1/presence", "-C", "1", "-W", "5").CombinedOutput()
		cancel()
		if err != nil && refusedAtConnect(string(out)) || strings.Contains(strings.ToLower(string(out)), "error") {
			t.Errorf("mosquitto_sub over TLS with the CA: %v %q", err, out)
		}
	} else if os.Getenv("BM_REQUIRE_ALL") == "1" {
		t.Fatal("mosquitto_sub is not installed; run scripts/install-test-deps.sh")
	}

	// The right CA: the agent connects and drives a node.
	testrig.StartAgentConfig(t, creds, agent.Config{CAFile: caFile, Sim: agent.SimOptions{Nodes: 2}})
	n := cl.CreateNode("n1", "site1", nil)
	cl.MustVerb(n, "manage", nil)
	cl.WaitState(n, "manageable", 10*time.Second)
	cl.MustVerb(n, "provide", nil)
	if got := cl.WaitRest(n, 30*time.Second); got.State != "available" {
		t.Fatalf("provide over TLS ended in %q (last_error %q)", got.State, got.LastError)
	}
}

// TestExternalBrokerOverTLS: the coordinator and an edge agent reach a
// real Mosquitto over mqtts, each trusting the lab CA's file.
func TestExternalBrokerOverTLS(t *testing.T) {
	mosq := requireTool(t, "mosquitto")
	cert, key, caFile := testrig.LabCerts(t, "127.0.0.1")
	dir := t.TempDir()
	addr := testrig.FreeAddr(t)
	port := addr[strings.LastIndex(addr, ":")+1:]
	conf := filepath.Join(dir, "mosquitto.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf("user root\nlistener %s 127.0.0.1\ncertfile %s\nkeyfile %s\nallow_anonymous true\npersistence false\nmax_queued_messages 100000\n",
		port, cert, key)), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(mosq, "-c", conf)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("mosquitto said: %s", out.String())
		}
	})
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(p.kill)
	p.awaitListening(t, addr)

	c := testrig.Coordinator(t, testrig.Options{BrokerURL: "mqtts://" + addr, BrokerCAFile: caFile})
	if !c.Link.Up() {
		t.Fatal("the coordinator did not connect to Mosquitto over TLS")
	}
	cl := testrig.NewClient(t, c)
	var creds agent.Credentials
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "site1"}, &creds); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	testrig.StartAgentConfig(t, creds, agent.Config{CAFile: caFile, Sim: agent.SimOptions{Nodes: 2}})
	n := cl.CreateNode("n1", "site1", nil)
	cl.MustVerb(n, "manage", nil)
	cl.WaitState(n, "manageable", 10*time.Second)
	cl.MustVerb(n, "provide", nil)
	if got := cl.WaitRest(n, 30*time.Second); got.State != "available" {
		t.Fatalf("provide through Mosquitto over TLS ended in %q (last_error %q)", got.State, got.LastError)
	}
}
