package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bmedge/bmedge/coordinator/engine"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/protocol"
)

// hostileRig is a real engine behind the API on a real listener
// (127.0.0.1), site s1 online, and a publisher that keeps the commands
// and the acks the engine sends.
type hostileRig struct {
	e   *engine.Engine
	url string
	pub *ackPublisher
}

type ackPublisher struct {
	mu    sync.Mutex
	acked map[string]bool
	cmds  map[string]*protocol.Message // last command per node
}

func (p *ackPublisher) Publish(_ context.Context, _ string, payload []byte, _ bool) error {
	m, err := protocol.Decode(payload)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch m.Kind {
	case protocol.KindAck:
		for _, id := range m.AckIDs {
			p.acked[id] = true
		}
	case protocol.KindCommand:
		p.cmds[m.Node] = m
	}
	return nil
}

func newHostileRig(t *testing.T) *hostileRig {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := engine.New(engine.Config{DataDir: t.TempDir(), Log: log, TickInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	pub := &ackPublisher{acked: map[string]bool{}, cmds: map[string]*protocol.Message{}}
	if err := e.Start(pub); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	if _, _, err := e.AddSite("s1"); err != nil {
		t.Fatal(err)
	}
	p, _ := protocol.Encode(&protocol.Message{Kind: protocol.KindPresence, Site: "s1", Online: true, Sent: time.Now()})
	e.HandleMessage(protocol.SitePresenceTopic("s1"), p)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(New(e, log, "mqtt://127.0.0.1:1883"))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return &hostileRig{e: e, url: srv.URL, pub: pub}
}

// do sends one request with Go's HTTP client.
func (r *hostileRig) do(t *testing.T, method, path string, body []byte) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, r.url+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-OpenStack-Ironic-API-Version", "latest")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, path, err)
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (r *hostileRig) create(t *testing.T, name string) string {
	t.Helper()
	code, body := r.do(t, "POST", "/v1/nodes", []byte(`{"name":"`+name+`","driver":"fake","conductor_group":"s1"}`))
	if code != 201 {
		t.Fatalf("create %s: %d %s", name, code, body)
	}
	var n struct {
		UUID string `json:"uuid"`
	}
	_ = json.Unmarshal([]byte(body), &n)
	return n.UUID
}

func (r *hostileRig) acked(id string) bool {
	r.pub.mu.Lock()
	defer r.pub.mu.Unlock()
	return r.pub.acked[id]
}

// addOps is a JSON Patch of n "add /extra/kI" operations.
func addOps(n int) []byte {
	var b strings.Builder
	b.WriteByte('[')
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"op":"add","path":"/extra/k%d","value":"v%d"}`, i, i)
	}
	b.WriteByte(']')
	return []byte(b.String())
}

// faultOf returns the faultstring of an Ironic error body.
func faultOf(body string) string {
	var outer struct {
		ErrorMessage string `json:"error_message"`
	}
	var inner struct {
		Faultstring string `json:"faultstring"`
	}
	_ = json.Unmarshal([]byte(body), &outer)
	_ = json.Unmarshal([]byte(outer.ErrorMessage), &inner)
	return inner.Faultstring
}

// curlOrSkip finds curl, the independent client of the refusals.
func curlOrSkip(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("curl")
	if err != nil {
		if os.Getenv("BM_REQUIRE_ALL") == "1" {
			t.Fatal("curl is required (BM_REQUIRE_ALL=1): install it with scripts/install-test-deps.sh")
		}
		t.Skip("curl is not installed: install it (scripts/install-test-deps.sh) to run this test")
	}
	return p
}

// TestHostilePatchDoesNotHoldTheEngine is issue 17's acceptance point 3.
// A PATCH of 20,000 operations (under the body cap) is refused with a 400
// naming the cap, answered to curl, and changes nothing. A PATCH at the
// cap is applied (GET shows it); while it is being applied (paused, by
// the test, after its operations were applied to the node's copy and
// before its commit) another node's small PATCH is answered and an
// agent's result is acknowledged: they do not wait for it. The order is
// checked, not times: the big PATCH is held until both happened, which
// would never happen if they waited behind it.
func TestHostilePatchDoesNotHoldTheEngine(t *testing.T) {
	curl := curlOrSkip(t)
	r := newHostileRig(t)
	big := r.create(t, "big")
	r.create(t, "small")

	// 20,000 operations: refused, naming the cap, before any is applied.
	file := filepath.Join(t.TempDir(), "patch.json")
	body := addOps(20000)
	if len(body) >= MaxBodyBytes {
		t.Fatalf("the 20,000-operation patch is %d bytes, over the body cap: the test must stay under it", len(body))
	}
	if err := os.WriteFile(file, body, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, curl, "-sS", "--noproxy", "*", "-X", "PATCH", "-H", "Content-Type: application/json",
		"--data-binary", "@"+file, "-w", "\n%{http_code}", r.url+"/v1/nodes/big").Output()
	if err != nil {
		t.Fatalf("curl: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	code := lines[len(lines)-1]
	msg := faultOf(strings.Join(lines[:len(lines)-1], "\n"))
	if code != "400" || !strings.Contains(msg, "20000 operations") || !strings.Contains(msg, fmt.Sprintf("at most %d", MaxPatchOps)) {
		t.Fatalf("a 20,000-operation PATCH: %s %q; want 400 naming the cap of %d", code, msg, MaxPatchOps)
	}
	if c, b := r.do(t, "GET", "/v1/nodes/big", nil); c != 200 || strings.Contains(b, `"k0"`) {
		t.Fatalf("after the refused patch, GET: %d %s; want the node unchanged", c, b)
	}

	// At the cap, paused between its apply and its commit.
	paused, release := make(chan struct{}), make(chan struct{})
	var once, relOnce sync.Once
	hook := func(id string) {
		if id == big {
			once.Do(func() { close(paused) })
			<-release
		}
	}
	patchHook.Store(&hook)
	t.Cleanup(func() { relOnce.Do(func() { close(release) }); patchHook.Store(nil) })

	var mu sync.Mutex
	var order []string
	event := func(s string) {
		mu.Lock()
		order = append(order, s)
		mu.Unlock()
	}
	bigDone := make(chan string, 1)
	go func() {
		code, body := r.do(t, "PATCH", "/v1/nodes/big", addOps(MaxPatchOps))
		event("big PATCH answered")
		bigDone <- fmt.Sprintf("%d %s", code, body)
	}()
	// A generous bound that only catches a hang, never a slow machine.
	const hang = 60 * time.Second
	select {
	case <-paused:
	case s := <-bigDone:
		t.Fatalf("the PATCH at the cap answered without being applied outside the loop: %.300s", s)
	case <-time.After(hang):
		t.Fatal("the PATCH at the cap was never applied")
	}

	smallDone := make(chan string, 1)
	go func() {
		code, body := r.do(t, "PATCH", "/v1/nodes/small", []byte(`[{"op":"add","path":"/extra/rack","value":"r1"}]`))
		event("small PATCH answered")
		smallDone <- fmt.Sprintf("%d %s", code, body)
	}()
	select {
	case s := <-smallDone:
		if !strings.HasPrefix(s, "200 ") {
			t.Fatalf("small PATCH of another node: %.300s", s)
		}
	case <-time.After(hang):
		t.Fatal("another node's small PATCH waited for the big PATCH (the engine loop is held)")
	}

	// An edge agent's relayed result (about a node deleted meanwhile,
	// which is acknowledged all the same) goes through the loop to its
	// ack.
	const gone = "00000000-0000-0000-0000-00000000dead"
	res, _ := protocol.Encode(&protocol.Message{Kind: protocol.KindResult, ID: "r-during-big-patch", Site: "s1", Node: gone, Token: "t",
		CommandID: "c1", OK: true, Sent: time.Now()})
	r.e.HandleMessage(protocol.NodeEvtTopic("s1", gone), res)
	for deadline := time.Now().Add(hang); !r.acked("r-during-big-patch"); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("an agent's result was not acknowledged while the big PATCH was being applied (the engine loop is held)")
		}
	}
	event("agent result acked")

	relOnce.Do(func() { close(release) })
	select {
	case s := <-bigDone:
		if !strings.HasPrefix(s, "200 ") {
			t.Fatalf("PATCH at the cap (%d operations): %.300s; want 200", MaxPatchOps, s)
		}
	case <-time.After(hang):
		t.Fatal("the PATCH at the cap never answered once released")
	}
	mu.Lock()
	got := strings.Join(order, ", ")
	mu.Unlock()
	if want := "small PATCH answered, agent result acked, big PATCH answered"; got != want {
		t.Fatalf("order of events: %s; want %s", got, want)
	}
	c, b := r.do(t, "GET", "/v1/nodes/big", nil)
	var n struct {
		Extra map[string]any `json:"extra"`
	}
	_ = json.Unmarshal([]byte(b), &n)
	last := fmt.Sprintf("k%d", MaxPatchOps-1)
	if c != 200 || len(n.Extra) != MaxPatchOps || n.Extra["k0"] != "v0" || n.Extra[last] != fmt.Sprintf("v%d", MaxPatchOps-1) {
		t.Fatalf("GET after the PATCH at the cap: %d, %d extra members; want all %d", c, len(n.Extra), MaxPatchOps)
	}
	if c, b := r.do(t, "GET", "/v1/nodes/small", nil); c != 200 || !strings.Contains(b, `"rack":"r1"`) {
		t.Fatalf("GET of the small PATCH's node: %d %.300s", c, b)
	}
}

// manageable takes a node through "manage", answering its BMC
// validation as a healthy edge agent would.
func (r *hostileRig) manageable(t *testing.T, id string) {
	t.Helper()
	if err := r.e.Verb(id, fsm.VerbRequest{Verb: fsm.Manage}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	var cmd *protocol.Message
	for {
		r.pub.mu.Lock()
		cmd = r.pub.cmds[id]
		r.pub.mu.Unlock()
		if cmd != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no validate command for the node")
		}
		time.Sleep(time.Millisecond)
	}
	res, _ := protocol.Encode(&protocol.Message{Kind: protocol.KindResult, ID: "r-" + cmd.ID, Site: "s1", Node: id, Sent: time.Now(), CommandID: cmd.ID, OK: true})
	r.e.HandleMessage(protocol.BMCEvtTopic("s1"), res)
	for {
		var st fsm.State
		_ = r.e.View(id, func(n *fsm.Node, _ bool) error { st = n.ProvisionState; return nil })
		if st == fsm.Manageable {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("node in %s, not manageable", st)
		}
		time.Sleep(time.Millisecond)
	}
}

func stepsBody(target, field string, n int) []byte {
	steps := make([]map[string]any, n)
	for i := range steps {
		steps[i] = map[string]any{"interface": "deploy", "step": "erase_devices", "args": map[string]any{}}
	}
	b, _ := json.Marshal(map[string]any{"target": target, field: steps})
	return b
}

// TestStepsPerRequestCapped: a manual clean (or a deploy) with more than
// MaxStepsPerRequest steps is refused with a 400 naming the limit,
// answered to curl, and the node stays as it was; one at the limit is
// accepted.
func TestStepsPerRequestCapped(t *testing.T) {
	curl := curlOrSkip(t)
	r := newHostileRig(t)
	id := r.create(t, "n1")
	r.manageable(t, id)
	for _, x := range []struct{ target, field string }{{"clean", "clean_steps"}, {"active", "deploy_steps"}} {
		for _, n := range []int{MaxStepsPerRequest + 1, 10000} {
			file := filepath.Join(t.TempDir(), "steps.json")
			if err := os.WriteFile(file, stepsBody(x.target, x.field, n), 0o600); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(curl, "-sS", "--noproxy", "*", "-X", "PUT", "-H", "Content-Type: application/json",
				"--data-binary", "@"+file, "-w", "\n%{http_code}", r.url+"/v1/nodes/n1/states/provision").Output()
			if err != nil {
				t.Fatalf("curl: %v", err)
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			code, msg := lines[len(lines)-1], faultOf(strings.Join(lines[:len(lines)-1], "\n"))
			if code != "400" || !strings.Contains(msg, x.field) || !strings.Contains(msg, fmt.Sprintf("at most %d", MaxStepsPerRequest)) {
				t.Fatalf("%s with %d %s: %s %q; want 400 naming the limit of %d", x.target, n, x.field, code, msg, MaxStepsPerRequest)
			}
		}
	}
	var st fsm.State
	_ = r.e.View(id, func(n *fsm.Node, _ bool) error { st = n.ProvisionState; return nil })
	if st != fsm.Manageable {
		t.Fatalf("after the refused requests the node is %s, want manageable", st)
	}
	if code, body := r.do(t, "PUT", "/v1/nodes/n1/states/provision", stepsBody("clean", "clean_steps", MaxStepsPerRequest)); code != 202 {
		t.Fatalf("a manual clean of %d steps (the limit): %d %s; want 202", MaxStepsPerRequest, code, body)
	}
}
