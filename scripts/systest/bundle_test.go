package systest

import (
	"bytes"
	"compress/flate"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/protocol"
	"github.com/bmedge/bmedge/protocol/bundletest"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestBundleRefusalsFromAnIndependentClient: mosquitto_pub, with a site's
// own credentials, sends the coordinator bundles a site's edge agent must
// not send: one that inflates far past the limit (read only to it: the
// process's allocations say so), and one whose message names a command
// topic. Neither has an effect, and the coordinator goes on; the same
// hello in a well-formed bundle on the node's event topic is taken (the
// control).
func TestBundleRefusalsFromAnIndependentClient(t *testing.T) {
	pub := requireTool(t, "mosquitto_pub")
	// The node must stay in inspect wait while the test builds a 200 MiB
	// bomb (slow under the race detector): no WAIT timeout in its way.
	// Its log says when it refused a bundle.
	coordLog := &lockedBuffer{}
	c := testrig.Coordinator(t, testrig.Options{Machine: fsm.Config{WaitTimeout: 10 * time.Minute},
		Log: slog.New(slog.NewTextHandler(coordLog, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	cl := testrig.NewClient(t, c)
	var creds agent.Credentials
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "site3"}, &creds); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	testrig.StartAgent(t, creds, agent.SimOptions{Nodes: 2, NoBoot: true})
	id, _, _ := bootingNode(t, c, cl, "n1", "site3")
	welcomed := func() bool {
		var tok string
		_ = c.Engine.View(id, func(n *fsm.Node, _ bool) error { tok = n.AgentToken; return nil })
		return tok != ""
	}
	dir := t.TempDir()
	send := func(name string, payload []byte) {
		t.Helper()
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, payload, 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := mosquitto(t, c.BrokerURL, pub, creds.Username, creds.Password, "edge-site3.intruder",
			"-q", "1", "-t", protocol.BMCEvtTopic("site3"), "-f", f); err != nil {
			t.Fatalf("mosquitto_pub %s: %v %s", name, err, out)
		}
	}
	hello, err := protocol.Encode(&protocol.Message{Kind: protocol.KindHello, ID: "h-" + id, Site: "site3", Node: id, Sent: time.Now(), BootID: "b1",
		CleanSteps: []protocol.Step{{Interface: "deploy", Step: "erase_devices_metadata", Priority: 99, Abortable: true}}})
	if err != nil {
		t.Fatal(err)
	}

	// 200 MiB of spaces in ~250 KiB: the coordinator (in this process)
	// must read it only to the 1 MiB limit, not inflate it all. Deflated
	// at the fastest level (4 s under the race detector, where the best
	// compression, 200 KiB, takes 20 s).
	bomb := fastBundle(bundletest.Record("node/"+id+"/evt", append(hello, bytes.Repeat([]byte(" "), 200<<20)...)))
	if len(bomb) > 512<<10 {
		t.Fatalf("the bomb is %d bytes compressed", len(bomb))
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	send("bomb", bomb)
	coordLog.await(t, "bundle rejected", 1, time.Minute)
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
		t.Errorf("the process allocated %d MiB while the coordinator took a 200 MiB bomb: it inflated past the limit", grew>>20)
	}
	// The hello on the node's command topic.
	send("cmd-topic", bundletest.Raw(protocol.BundleMagic[1], bundletest.Record("node/"+id+"/cmd", hello)))
	coordLog.await(t, "only event topics may be in an edge agent's bundle", 1, time.Minute)
	if welcomed() {
		t.Fatal("a refused bundle's hello was taken")
	}
	if n := cl.Get(id); n.State != "inspect wait" {
		t.Fatalf("after the refused bundles the node is %q", n.State)
	}

	// The control: the same hello in a well-formed bundle on its event topic.
	good, err := protocol.EncodeBundle("site3", []protocol.BundleRecord{{Topic: protocol.NodeEvtTopic("site3", id), Payload: hello}}, flate.BestSpeed)
	if err != nil {
		t.Fatal(err)
	}
	send("good", good)
	deadline := time.Now().Add(10 * time.Second)
	for !welcomed() {
		if time.Now().After(deadline) {
			t.Fatal("the hello of a well-formed bundle was not taken: the refusals above prove nothing")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(cl.Get(id).State, "inspect") {
		t.Fatalf("node state %q after its hello", cl.Get(id).State)
	}
}

// fastBundle is bundletest.Raw's bundle of one record, deflated with the
// protocol's dictionary at flate.BestSpeed.
func fastBundle(record []byte) []byte {
	var out bytes.Buffer
	out.Write([]byte{protocol.BundleMagic[0], protocol.BundleMagic[1]})
	w, _ := flate.NewWriterDict(&out, flate.BestSpeed, []byte(protocol.BundleDictionary))
	w.Write(record)
	w.Close()
	return out.Bytes()
}
