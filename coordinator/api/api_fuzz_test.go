package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/bmedge/bmedge/coordinator/engine"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/protocol"
)

// The targets of this file send fuzzed request bodies to the API's node
// handlers (create, PATCH, provision) through ServeHTTP, against a real
// engine with Badger in a temp dir: the decoding of those bodies is
// inline in the handlers and ends in the engine's checks, so only the
// whole path is the real one. FuzzApplyPatch fuzzes the pure JSON Patch
// application alone, which runs a thousand times faster.

// patchSeeds are node PATCH bodies as the CLI and Ironic's clients send
// them (docs/cli.md, compat_test.go).
var patchSeeds = []string{
	`[{"op":"replace","path":"/name","value":"n2"}]`,
	`[{"op":"add","path":"/driver_info/ipmi_address","value":"10.0.0.5"},{"op":"add","path":"/driver_info/ipmi_password","value":"s3cret"}]`,
	`[{"op":"add","path":"/properties/root_device","value":{"size":">= 100","rotational":false}}]`,
	`[{"op":"add","path":"/instance_info/image_source","value":"http://img/1.raw.zst"},{"op":"add","path":"/instance_info/image_checksum","value":"sha256:00"}]`,
	`[{"op":"replace","path":"/retired","value":true},{"op":"replace","path":"/retired_reason","value":"EOL"}]`,
	`[{"op":"replace","path":"/maintenance","value":"True"},{"op":"replace","path":"/maintenance_reason","value":"disk"}]`,
	`[{"op":"remove","path":"/extra/a~1b~0c"}]`,
	`[{"op":"remove","path":"/extra"}]`,
	`[{"op":"replace","path":"/extra","value":[1]}]`,
	`[{"op":"replace","path":"/conductor_group","value":"s1"},{"op":"replace","path":"/driver","value":"fake-hardware"}]`,
	`[{"op":"move","path":"/name","from":"/extra/x"}]`,
	`[{"op":"replace","path":"name","value":"x"}]`,
	`[{"op":"replace","path":"/uuid","value":"x"}]`,
	`[{"op":"add","path":"/name"}]`,
	`[{"op":"replace","path":"/name","value":null}]`,
	`[]`,
	`{}`,
}

// FuzzApplyPatch applies fuzzed JSON Patch operations, decoded as
// patchNode decodes them, to a node. Every refusal must be a 400 naming
// the operation; whatever it accepts must leave a node the engine can
// store and copy (UpdateNode works on a JSON copy).
func FuzzApplyPatch(f *testing.F) {
	for _, s := range patchSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var ops []patchOp
		if err := json.Unmarshal(body, &ops); err != nil {
			return
		}
		n := &fsm.Node{UUID: "6f0c1c8e-1a2b-4c3d-8e9f-0a1b2c3d4e5f", Name: "n1", Driver: "fake", Site: "s1", ProvisionState: fsm.Manageable,
			DriverInfo: map[string]any{"fake_password": "x"}, Extra: map[string]any{"a/b~c": 1.0}}
		err := applyPatch(n, ops)
		if err != nil {
			var ee *engine.Error
			if !errors.As(err, &ee) || ee.Kind != engine.Invalid || ee.Msg == "" {
				t.Fatalf("applyPatch(%s): %v, want a 400", body, err)
			}
		}
		b, err := json.Marshal(n)
		if err != nil {
			t.Fatalf("patched node cannot be stored: %v", err)
		}
		var c fsm.Node
		if err := json.Unmarshal(b, &c); err != nil {
			t.Fatalf("patched node cannot be read back: %v", err)
		}
		if n.UUID != c.UUID || n.ProvisionState != fsm.Manageable {
			t.Fatalf("patch changed uuid or provision_state: %+v", n)
		}
	})
}

// fuzzAPI is a real engine behind the API handler, with a site "s1"
// online and a publisher that keeps the commands the engine sends.
type fuzzAPI struct {
	s   *Server
	e   *engine.Engine
	pub *fuzzPublisher
}

type fuzzPublisher struct {
	mu   sync.Mutex
	cmds map[string]*protocol.Message // last command per node
}

func (p *fuzzPublisher) Publish(_ context.Context, topic string, payload []byte, _ bool) error {
	m, err := protocol.Decode(payload)
	if err != nil {
		return err
	}
	if m.Kind == protocol.KindCommand {
		p.mu.Lock()
		p.cmds[m.Node] = m
		p.mu.Unlock()
	}
	return nil
}

func (p *fuzzPublisher) command(node string) *protocol.Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmds[node]
}

// newFuzzAPI starts the engine once per fuzzing process. Its data lives
// in /dev/shm when there is one: every request commits a synced Badger
// transaction, and a disk's fsync would make the fuzzer crawl.
func newFuzzAPI(f *testing.F) *fuzzAPI {
	dir := ""
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		d, err := os.MkdirTemp("/dev/shm", "bm-fuzz-api-")
		if err == nil {
			dir = d
			f.Cleanup(func() { os.RemoveAll(d) })
		}
	}
	if dir == "" {
		dir = f.TempDir()
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	// No automated cleaning, so that provide ends in available at once;
	// no concurrency cap, so that nodes left waiting do not turn later
	// verbs into 503s; no ticks, so that nothing moves on its own.
	e, err := engine.New(engine.Config{DataDir: dir, Log: log, TickInterval: time.Hour,
		MaxConcurrentClean: 1 << 30, MaxConcurrentDeploy: 1 << 30})
	if err != nil {
		f.Fatal(err)
	}
	pub := &fuzzPublisher{cmds: map[string]*protocol.Message{}}
	if err := e.Start(pub); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(e.Close)
	if _, _, err := e.AddSite("s1"); err != nil {
		f.Fatal(err)
	}
	p, _ := protocol.Encode(&protocol.Message{Kind: protocol.KindPresence, Site: "s1", Online: true, Sent: time.Now()})
	e.HandleMessage(protocol.SitePresenceTopic("s1"), p)
	return &fuzzAPI{s: New(e, log, "mqtt://127.0.0.1:1883"), e: e, pub: pub}
}

// do sends one request through the whole handler, as a client would.
func (a *fuzzAPI) do(method, path string, body []byte) (int, []byte) {
	req := httptest.NewRequest(method, path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-OpenStack-Ironic-API-Version", "latest")
	w := httptest.NewRecorder()
	a.s.ServeHTTP(w, req)
	return w.Code, w.Body.Bytes()
}

// checkAnswer asserts the shape every answer must have: one of the
// statuses a client can act on, never a 500, and errors in Ironic's form.
func checkAnswer(t *testing.T, what string, body []byte, code int, resp []byte, ok ...int) {
	t.Helper()
	for _, c := range ok {
		if code == c {
			return
		}
	}
	switch code {
	case 400, 409, 413, 415:
		var outer struct {
			ErrorMessage string `json:"error_message"`
		}
		var inner struct {
			Faultstring string `json:"faultstring"`
		}
		if json.Unmarshal(resp, &outer) != nil || json.Unmarshal([]byte(outer.ErrorMessage), &inner) != nil || inner.Faultstring == "" {
			t.Fatalf("%s %q: %d without Ironic's error body: %s", what, body, code, resp)
		}
		return
	}
	t.Fatalf("%s %q: status %d: %s", what, body, code, resp)
}

// createNode enrolls a node through the engine, with a name so that a
// PATCH can rename it.
func (a *fuzzAPI) createNode(t *testing.T, name string) string {
	t.Helper()
	n, err := a.e.CreateNode(engine.NodeSpec{Name: name, Driver: "fake", Site: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	return n.UUID
}

func (a *fuzzAPI) state(t *testing.T, id string) (st fsm.State, locked, maint bool) {
	t.Helper()
	err := a.e.View(id, func(n *fsm.Node, _ bool) error {
		st, locked, maint = n.ProvisionState, n.Locked(), n.Maintenance
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return st, locked, maint
}

// manageable enrolls a node and takes it through "manage", answering the
// BMC validation as a healthy edge agent would.
func (a *fuzzAPI) manageable(t *testing.T) string {
	t.Helper()
	id := a.createNode(t, "")
	if err := a.e.Verb(id, fsm.VerbRequest{Verb: fsm.Manage}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	var cmd *protocol.Message
	for cmd = a.pub.command(id); cmd == nil; cmd = a.pub.command(id) {
		if time.Now().After(deadline) {
			t.Fatal("no validate command for the new node")
		}
		time.Sleep(100 * time.Microsecond)
	}
	res, _ := protocol.Encode(&protocol.Message{Kind: protocol.KindResult, ID: "r-" + cmd.ID, Site: "s1", Node: id, Sent: time.Now(), CommandID: cmd.ID, OK: true})
	a.e.HandleMessage(protocol.BMCEvtTopic("s1"), res)
	for {
		if st, _, _ := a.state(t, id); st == fsm.Manageable {
			return id
		}
		if time.Now().After(deadline) {
			t.Fatal("node did not become manageable")
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// FuzzCreateNodeBody posts fuzzed bodies to POST /v1/nodes. A node it
// creates must read back and be deletable (which keeps the engine small).
func FuzzCreateNodeBody(f *testing.F) {
	for _, s := range []string{
		`{"driver":"fake","name":"n1","conductor_group":"s1"}`,
		`{"driver":"ipmi","name":"rack1-u07","driver_info":{"ipmi_address":"10.0.0.7","ipmi_username":"admin","ipmi_password":"s3cret"},"properties":{"root_device":{"serial":"WD-0001"}}}`,
		`{"driver":"redfish","uuid":"6f0c1c8e-1a2b-4c3d-8e9f-0a1b2c3d4e5f","driver_info":{"redfish_address":"https://10.0.0.8"},"resource_class":"baremetal","network_interface":"noop"}`,
		`{"driver":"fake-hardware","instance_info":{"image_source":"http://img/1.raw"},"extra":{"rack":"r1"},"description":"x","owner":null}`,
		`{"driver":"fake","name":"6f0c1c8e-1a2b-4c3d-8e9f-0a1b2c3d4e5f"}`,
		`{"driver":"fake","name":""}`,
		`{"driver":"fake","uuid":"not-a-uuid"}`,
		`{"driver":"fake","conductor_group":"nosuch"}`,
		`{"driver":"nosuch"}`,
		`{"name":"n1"}`,
		`{"driver":"fake","provision_state":"active"}`,
		`{"driver":"fake","driver_info":"x"}`,
		`[]`,
		`{"driver":"fake","extra":{"a":{"b":{"c":[[[[[[1]]]]]]}}}}`,
	} {
		f.Add([]byte(s))
	}
	a := newFuzzAPI(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		code, resp := a.do("POST", "/v1/nodes", body)
		checkAnswer(t, "POST /v1/nodes", body, code, resp, 201)
		if code != 201 {
			return
		}
		var n struct {
			UUID string `json:"uuid"`
		}
		if err := json.Unmarshal(resp, &n); err != nil || n.UUID == "" {
			t.Fatalf("created node without uuid: %s", resp)
		}
		if code, resp := a.do("GET", "/v1/nodes/"+n.UUID, nil); code != 200 {
			t.Fatalf("created node %s does not read back: %d %s", n.UUID, code, resp)
		}
		if code, resp := a.do("DELETE", "/v1/nodes/"+n.UUID, nil); code != 204 {
			t.Fatalf("created node %s cannot be deleted: %d %s", n.UUID, code, resp)
		}
	})
}

// FuzzPatchNodeBody sends fuzzed bodies to PATCH /v1/nodes/{id} for a
// fresh node each time. PATCH must never change the node's identity or
// state, and a node it accepted must still read back and delete.
func FuzzPatchNodeBody(f *testing.F) {
	for _, s := range patchSeeds {
		f.Add([]byte(s))
	}
	a := newFuzzAPI(f)
	seq := 0
	f.Fuzz(func(t *testing.T, body []byte) {
		seq++
		id := a.createNode(t, fmt.Sprintf("n%d", seq))
		defer func() {
			if code, resp := a.do("DELETE", "/v1/nodes/"+id, nil); code != 204 {
				t.Fatalf("patched node cannot be deleted: %d %s", code, resp)
			}
		}()
		code, resp := a.do("PATCH", "/v1/nodes/"+id, body)
		checkAnswer(t, "PATCH", body, code, resp, 200)
		var v struct {
			UUID           string `json:"uuid"`
			ProvisionState string `json:"provision_state"`
		}
		code, resp = a.do("GET", "/v1/nodes/"+id, nil)
		if code != 200 || json.Unmarshal(resp, &v) != nil || v.UUID != id || v.ProvisionState != string(fsm.Enroll) {
			t.Fatalf("after PATCH %q: GET %d %s", body, code, resp)
		}
	})
}

// FuzzProvisionBody sends fuzzed bodies to PUT
// /v1/nodes/{id}/states/provision on a manageable node: target,
// clean_steps, deploy_steps, rescue_password and the rest are decoded in
// the handler and checked by the state machine (a manual clean list is
// resolved at once for out-of-band steps). A node that moved is replaced
// by a fresh manageable one, so every input meets the same node.
func FuzzProvisionBody(f *testing.F) {
	for _, s := range []string{
		`{"target":"clean","clean_steps":[{"interface":"deploy","step":"erase_devices_metadata"},{"interface":"management","step":"fake_reset_bmc","args":{"delay":1}}]}`,
		`{"target":"clean","clean_steps":[{"interface":"management","step":"fake_reset_bmc","args":{"delay":1}}]}`,
		`{"target":"clean","clean_steps":[{"interface":"management","step":"fake_reset_bmc","args":{"speed":1}}]}`,
		`{"target":"clean","clean_steps":[{"interface":"disk","step":"x"}]}`,
		`{"target":"clean","clean_steps":[]}`,
		`{"target":"clean","clean_steps":{"interface":"deploy"}}`,
		`{"target":"clean","clean_steps":[1,null,"x"]}`,
		`{"target":"provide"}`,
		`{"target":"inspect"}`,
		`{"target":"manage"}`,
		`{"target":"active","deploy_steps":[{"interface":"deploy","step":"write_image","priority":80}],"configdrive":{"meta_data":{}}}`,
		`{"target":"provide","clean_steps":[{"interface":"deploy","step":"erase_devices"}]}`,
		`{"target":"rescue","rescue_password":"pw"}`,
		`{"target":"abort"}`,
		`{"target":"dance"}`,
		`{"target":""}`,
		`{}`,
		`null`,
	} {
		f.Add([]byte(s))
	}
	a := newFuzzAPI(f)
	var id string
	f.Fuzz(func(t *testing.T, body []byte) {
		if id != "" {
			if st, locked, maint := a.state(t, id); st != fsm.Manageable || locked || maint {
				id = ""
			}
		}
		if id == "" {
			id = a.manageable(t)
		}
		code, resp := a.do("PUT", "/v1/nodes/"+id+"/states/provision", body)
		checkAnswer(t, "PUT provision", body, code, resp, 202)
		if code != 202 {
			if st, _, _ := a.state(t, id); st != fsm.Manageable {
				t.Fatalf("refused request %q moved the node to %q", body, st)
			}
		}
	})
}
