package engine_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bmedge/bmedge/coordinator/engine"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/protocol"
)

// Ids and tokens are deterministic in this target so that its seeds can
// name the command a node waits for and the agent token of its ramdisk.
const (
	fuzzNode  = "6f0c1c8e-1a2b-4c3d-8e9f-0a1b2c3d4e5f"
	fuzzToken = "tok"
	// fuzzStepCmd is the first clean step's command: validate, boot
	// device, reboot and welcome take cmd-1 to cmd-4.
	fuzzStepCmd = "cmd-5"
)

// fuzzPub checks that everything the engine publishes decodes.
type fuzzPub struct{}

func (fuzzPub) Publish(_ context.Context, topic string, payload []byte, _ bool) error {
	if _, err := protocol.Decode(payload); err != nil {
		panic(fmt.Sprintf("the engine published an invalid message on %s: %v", topic, err))
	}
	return nil
}

// FuzzHandleMessage hands fuzzed MQTT messages (topic and payload) to
// Engine.HandleMessage, the coordinator's entry point for everything an
// edge agent or a ramdisk publishes, while node fuzzNode waits in clean
// wait for its ramdisk's first clean step (command "cmd-5", token "tok").
// The engine must survive every message (a panic in its loop would take
// the coordinator down) and keep answering. A node that a message moved
// on is replaced, so that most inputs meet the same waiting node.
func FuzzHandleMessage(f *testing.F) {
	evt := protocol.NodeEvtTopic("s1", fuzzNode)
	for _, s := range [][2]string{
		{evt, `{"v":1,"kind":"heartbeat","id":"hb1","site":"s1","node":"` + fuzzNode + `","sent":"2030-01-01T00:00:00Z","token":"tok","running":"cmd-5","progress":0.5,"detail":"/dev/vda"}`},
		{evt, `{"v":1,"kind":"result","id":"r1","site":"s1","node":"` + fuzzNode + `","sent":"2030-01-01T00:00:00Z","token":"tok","command_id":"cmd-5","ok":true,"data":{"summary":"vda zeroed"}}`},
		{evt, `{"v":1,"kind":"result","id":"r2","site":"s1","node":"` + fuzzNode + `","sent":"2030-01-01T00:00:00Z","token":"forged","command_id":"cmd-5","error":"x"}`},
		{evt, `{"v":1,"kind":"hello","id":"h2","site":"s1","node":"` + fuzzNode + `","sent":"2030-01-01T00:00:00Z","boot_id":"boot-2","clean_steps":[{"interface":"deploy","step":"erase_devices","priority":10}]}`},
		{protocol.BMCEvtTopic("s1"), `{"v":1,"kind":"result","id":"r3","site":"s1","node":"` + fuzzNode + `","sent":"2030-01-01T00:00:00Z","command_id":"cmd-5","ok":true}`},
		{protocol.SitePresenceTopic("s1"), `{"v":1,"kind":"presence","site":"s1","sent":"2030-01-01T00:00:00Z","online":false}`},
		{protocol.SitePresenceTopic("s2"), `{"v":1,"kind":"presence","site":"s2","sent":"2030-01-01T00:00:00Z","online":true}`},
		{protocol.NodeEvtTopic("s1", "other"), `{"v":1,"kind":"heartbeat","id":"hb1","node":"` + fuzzNode + `","token":"tok"}`},
		{protocol.NodeCmdTopic("s1", fuzzNode), `{"v":1,"kind":"ack","ack_ids":["r1"]}`},
		{"bm/v1/site/s1", `{}`},
	} {
		f.Add(s[0], []byte(s[1]))
	}
	dir := f.TempDir()
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		// Every message commits a synced transaction: keep it in memory.
		if d, err := os.MkdirTemp("/dev/shm", "bm-fuzz-engine-"); err == nil {
			dir = d
			f.Cleanup(func() { os.RemoveAll(d) })
		}
	}
	var ids atomic.Int64
	pub := fuzzPub{}
	e, err := engine.New(engine.Config{DataDir: dir, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), TickInterval: time.Hour,
		MaxConcurrentClean: 1 << 30, MaxConcurrentDeploy: 1 << 30,
		Machine: fsm.Config{AutomatedClean: true,
			NewID:    func() string { return fmt.Sprintf("cmd-%d", ids.Add(1)) },
			NewToken: func() string { return fuzzToken }}})
	if err != nil {
		f.Fatal(err)
	}
	if err := e.Start(pub); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(e.Close)
	if _, _, err := e.AddSite("s1"); err != nil {
		f.Fatal(err)
	}
	online := func() {
		p, _ := protocol.Encode(&protocol.Message{Kind: protocol.KindPresence, Site: "s1", Online: true, Sent: time.Now()})
		e.HandleMessage(protocol.SitePresenceTopic("s1"), p)
	}
	// flush waits until the engine's loop has handled everything queued
	// before it: requests are served in order.
	flush := func() { _ = e.UpdateNode(fuzzNode, func(*fsm.Node) error { return errors.New("read only") }) }
	waiting := func() bool {
		ok := false
		_ = e.View(fuzzNode, func(n *fsm.Node, _ bool) error {
			ok = n.ProvisionState == fsm.CleanWait && n.Pending != nil && n.Pending.ID == fuzzStepCmd && n.AgentToken == fuzzToken && !n.Maintenance
			return nil
		})
		return ok
	}
	f.Fuzz(func(t *testing.T, topic string, payload []byte) {
		if !waiting() {
			// Ids restart with every fresh node, so that the seeds' command
			// id is the one it waits for.
			ids.Store(0)
			prepareCleanWait(t, e, online)
		}
		e.HandleMessage(topic, payload)
		flush()
		if err := e.View(fuzzNode, func(*fsm.Node, bool) error { return nil }); err != nil {
			t.Fatalf("engine lost the node after %q on %s: %v", payload, topic, err)
		}
	})
}

// prepareCleanWait (re)creates fuzzNode and takes it through manage and
// provide until its ramdisk runs the first clean step, answering the BMC
// and saying hello as a healthy site would.
func prepareCleanWait(t *testing.T, e *engine.Engine, online func()) {
	t.Helper()
	online()
	// A message may have left the node anywhere, even locked in an -ING
	// state with a BMC command outstanding: fail what is outstanding,
	// abort what waits, then delete it under maintenance.
	for try := 0; ; try++ {
		err := e.DeleteNode(fuzzNode)
		if err == nil || isNotFound(err) {
			break
		}
		if try == 5 {
			t.Fatalf("cannot reset the node: %v", err)
		}
		_ = e.SetMaintenance(fuzzNode, false, "")
		var pending *fsm.Command
		var token string
		_ = e.View(fuzzNode, func(n *fsm.Node, _ bool) error {
			if n.Pending != nil {
				c := *n.Pending
				pending, token = &c, n.AgentToken
			}
			return nil
		})
		if pending != nil {
			topic := protocol.BMCEvtTopic("s1")
			if pending.InBand {
				topic = protocol.NodeEvtTopic("s1", fuzzNode)
			}
			res, _ := protocol.Encode(&protocol.Message{Kind: protocol.KindResult, ID: "reset-" + pending.ID, Site: "s1", Node: fuzzNode,
				Sent: time.Now(), Token: token, CommandID: pending.ID, Error: "fuzz reset"})
			e.HandleMessage(topic, res)
		}
		_ = e.Verb(fuzzNode, fsm.VerbRequest{Verb: fsm.Abort})
		_ = e.SetMaintenance(fuzzNode, true, "fuzz reset")
	}
	if _, err := e.CreateNode(engine.NodeSpec{UUID: fuzzNode, Driver: "fake", Site: "s1"}); err != nil {
		t.Fatal(err)
	}
	// answer answers the node's outstanding command of action, as read
	// from the node itself: commands of a deleted incarnation of the node
	// may still be leaving the engine's publisher queues, with the same
	// ids (ids restart with each node), so what was published cannot tell
	// which command the node waits for (the harness once waited for an
	// answer it had given to the wrong command: a "hung" worker).
	answer := func(action string) {
		deadline := time.Now().Add(60 * time.Second)
		for {
			var id string
			_ = e.View(fuzzNode, func(n *fsm.Node, _ bool) error {
				if n.Pending != nil && n.Pending.Msg != nil && n.Pending.Msg.Action == action {
					id = n.Pending.ID
				}
				return nil
			})
			if id != "" {
				res, _ := protocol.Encode(&protocol.Message{Kind: protocol.KindResult, ID: "r-" + id, Site: "s1", Node: fuzzNode, Sent: time.Now(), CommandID: id, OK: true})
				e.HandleMessage(protocol.BMCEvtTopic("s1"), res)
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %s command", action)
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	if err := e.Verb(fuzzNode, fsm.VerbRequest{Verb: fsm.Manage}); err != nil {
		t.Fatal(err)
	}
	answer(protocol.ActionValidate)
	deadline := time.Now().Add(60 * time.Second)
	for e.Verb(fuzzNode, fsm.VerbRequest{Verb: fsm.Provide}) != nil {
		if time.Now().After(deadline) {
			t.Fatal("node did not become manageable")
		}
		time.Sleep(100 * time.Microsecond)
	}
	answer(protocol.ActionPower)
	hello, _ := protocol.Encode(&protocol.Message{Kind: protocol.KindHello, ID: "hello-1", Site: "s1", Node: fuzzNode, Sent: time.Now(), BootID: "boot-1",
		CleanSteps: []protocol.Step{{Interface: "deploy", Step: "erase_devices_metadata", Priority: 99, Abortable: true},
			{Interface: "deploy", Step: "erase_devices", Priority: 10, Abortable: true}, {Interface: "deploy", Step: "inspect_hardware", Abortable: true}},
		DeploySteps: []protocol.Step{{Interface: "deploy", Step: "write_image", Priority: 80}}})
	e.HandleMessage(protocol.NodeEvtTopic("s1", fuzzNode), hello)
	var st fsm.State
	for {
		_ = e.View(fuzzNode, func(n *fsm.Node, _ bool) error { st = n.ProvisionState; return nil })
		if st == fsm.CleanWait {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("node in %q, not waiting for its first clean step", st)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func isNotFound(err error) bool {
	var ee *engine.Error
	return errors.As(err, &ee) && ee.Kind == engine.NotFound
}
