package systest

import (
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/protocol"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// powerOns counts the power-ons of each simulated BMC, and those of them
// that boot the ramdisk (from the network).
type powerOns struct {
	mu           sync.Mutex
	all, ramdisk map[string]int
}

func (p *powerOns) watch(node, state, boot string) {
	if protocol.PowerIsOff(state) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.all[node]++
	if boot == protocol.BootPXE {
		p.ramdisk[node]++
	}
}

func (p *powerOns) get(node string) (all, ramdisk int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.all[node], p.ramdisk[node]
}

// TestFastTrackSimulatedSite: a coordinator with fast track (serve's
// --fast-track) and a simulated site. Node "fast" goes inspect → provide
// → deploy with one power-on into the ramdisk at its BMC (and one into
// the instance), staying powered on between the operations; node "slow",
// whose driver_info/fast_track is false, is powered on into the ramdisk
// three times. Node "idle" is only inspected: its kept ramdisk is powered
// off at the end of the fast track timeout. A bad driver_info/fast_track
// is refused (curl, an independent client).
func TestFastTrackSimulatedSite(t *testing.T) {
	t.Parallel()
	curl := requireTool(t, "curl")
	const timeout = 8 * time.Second
	c := testrig.Coordinator(t, testrig.Options{Machine: fsm.Config{FastTrack: true, FastTrackTimeout: timeout}})
	ons := &powerOns{all: map[string]int{}, ramdisk: map[string]int{}}
	testrig.Site(t, c, "site1", agent.SimOptions{Nodes: 4, StepDuration: 100 * time.Millisecond, Heartbeat: 300 * time.Millisecond, PowerWatch: ons.watch})
	cl := testrig.NewClient(t, c)
	fast := cl.CreateNode("fast", "site1", nil)
	slow := cl.CreateNode("slow", "site1", map[string]any{"fast_track": false})
	idle := cl.CreateNode("idle", "site1", nil)
	bad := cl.CreateNode("bad", "site1", map[string]any{"fast_track": "sometimes"})

	step := func(id, verb, want string) testrig.Node {
		t.Helper()
		cl.MustVerb(id, verb, nil)
		n := cl.WaitRest(id, 20*time.Second)
		if n.State != want {
			t.Fatalf("%s: %s ended in %q: %s", id, verb, n.State, n.LastError)
		}
		return n
	}
	for _, id := range []string{fast, slow, idle, bad} {
		step(id, "manage", "manageable")
	}
	// The idle node keeps its ramdisk after its inspection (until the
	// fast track timeout, checked at the end).
	if n := step(idle, "inspect", "manageable"); n.PowerState != "power on" {
		t.Fatalf("idle node after inspect: %q, want its ramdisk kept running", n.PowerState)
	}
	for _, id := range []string{fast, slow} {
		n := step(id, "inspect", "manageable")
		wantPower := "power on"
		if id == slow {
			wantPower = "power off"
		}
		if n.PowerState != wantPower {
			t.Fatalf("after inspect node %s is %q, want %q", id, n.PowerState, wantPower)
		}
		if n.InternalInfo["agent_last_heartbeat"] == nil {
			t.Fatalf("node %s shows no driver_internal_info.agent_last_heartbeat: %v", id, n.InternalInfo)
		}
		step(id, "provide", "available")
		if code := cl.Do("PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "add", "path": "/instance_info/image_source", "value": "http://127.0.0.1:1/img"}}, nil); code != 200 {
			t.Fatalf("patch: %d", code)
		}
		step(id, "active", "active")
	}
	if all, rd := ons.get(fast); all != 2 || rd != 1 {
		t.Errorf("fast track: inspect → provide → deploy powered the node on %d times (%d into the ramdisk); want 2 (1)", all, rd)
	}
	if all, rd := ons.get(slow); all != 4 || rd != 3 {
		t.Errorf("without fast track: %d power-ons (%d into the ramdisk); want 4 (3)", all, rd)
	}
	h := history(t, cl, fast)
	if !strings.Contains(h, "fast track: the running ramdisk") {
		t.Errorf("the fast-tracked node's history does not say so:\n%s", h)
	}

	// The idle node's kept ramdisk: powered off at the end of the timeout
	// (which may have passed already on a loaded machine).
	n := cl.Get(idle)
	deadline := time.Now().Add(timeout + time.Minute)
	for n.PowerState != "power off" || n.Reservation != "" {
		if time.Now().After(deadline) {
			t.Fatalf("the idle node's kept ramdisk is still %q %s after the timeout", n.PowerState, timeout)
		}
		time.Sleep(200 * time.Millisecond)
		n = cl.Get(idle)
	}
	if !strings.Contains(history(t, cl, idle), "no operation came within the fast track timeout") {
		t.Errorf("the idle node's history does not say why it was powered off:\n%s", history(t, cl, idle))
	}

	// driver_info/fast_track that is not a boolean: 400 naming it.
	out, err := exec.Command(curl, "-sS", "-X", "PUT", "-H", "Content-Type: application/json", "-H", "X-OpenStack-Ironic-API-Version: latest",
		"-d", `{"target":"provide"}`, "-w", "\n%{http_code}", c.APIURL+"/v1/nodes/"+bad+"/states/provision").CombinedOutput()
	if err != nil || !strings.HasSuffix(strings.TrimSpace(string(out)), "400") || !strings.Contains(string(out), "fast_track") {
		t.Fatalf("provide with driver_info/fast_track=sometimes: %v %s; want 400 naming fast_track", err, out)
	}
}

// history is a node's history, one event a line.
func history(t *testing.T, cl *testrig.Client, id string) string {
	t.Helper()
	var h struct {
		History []map[string]any `json:"history"`
	}
	cl.Do("GET", "/v1/nodes/"+id+"/history", nil, &h)
	var b strings.Builder
	for _, e := range h.History {
		b.WriteString(e["event"].(string) + "\n")
	}
	return b.String()
}
