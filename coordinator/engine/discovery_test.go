package engine

import (
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/lib/clock"
	"github.com/bmedge/bmedge/protocol"
)

func discoveryReport(id, mac, serial, bmc string) *protocol.Message {
	inv := map[string]any{
		"interfaces":    []any{map[string]any{"name": "eth0", "mac_address": mac}},
		"memory":        map[string]any{"physical_mb": 65536.0},
		"system_vendor": map[string]any{"serial_number": serial, "manufacturer": "acme"},
	}
	if bmc != "" {
		inv["bmc_address"] = bmc
	}
	return &protocol.Message{Kind: protocol.KindDiscovery, ID: id, Site: "s1", Data: map[string]any{protocol.DataInventory: inv, protocol.DataBootMAC: mac}}
}

// waitAcked waits until the engine acked id.
func (r *recorder) waitAcked(t *testing.T, id string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		r.mu.Lock()
		for _, m := range r.msgs {
			if m.Kind == protocol.KindAck {
				for _, x := range m.AckIDs {
					if x == id {
						r.mu.Unlock()
						return
					}
				}
			}
		}
		r.mu.Unlock()
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("report %s never acked", id)
}

func discovered(t *testing.T, e *Engine) []DiscoveredNode {
	t.Helper()
	l, err := e.SiteDiscovered("s1")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Discovery enrolls one node per machine: a port per MAC, the BMC
// address in driver_info, auto_discovered, the inventory kept and the
// history saying so; the same machine again (by MAC, serial or BMC
// address, or the same report resent) is that node; the site's cap and
// its off switch refuse, and every report is acked.
func TestDiscoveryEnrolls(t *testing.T) {
	e, rec := newEngine(t, Config{})
	send := func(m *protocol.Message) {
		t.Helper()
		e.HandleMessage(protocol.BMCEvtTopic("s1"), mustJSON(m))
		rec.waitAcked(t, m.ID)
	}
	// Off (the default): refused, acked.
	send(discoveryReport("r0", "52:54:00:00:00:01", "SN1", "10.0.0.1"))
	if l := discovered(t, e); len(l) != 0 {
		t.Fatalf("discovery off enrolled %v", l)
	}
	on, two := true, 2
	if err := e.SetSiteDiscovery("s1", SiteDiscoveryChange{Enabled: &on, MaxNodes: &two}); err != nil {
		t.Fatal(err)
	}
	send(discoveryReport("r1", "52:54:00:00:00:01", "SN1", "10.0.0.1"))
	l := discovered(t, e)
	if len(l) != 1 {
		t.Fatalf("discovered %v; want one node", l)
	}
	var n *fsm.Node
	if err := e.View(l[0].UUID, func(x *fsm.Node, _ bool) error { c := *x; n = &c; return nil }); err != nil {
		t.Fatal(err)
	}
	if n.ProvisionState != fsm.Enroll || n.Driver != "ipmi" || n.DriverInfo["ipmi_address"] != "10.0.0.1" || !n.AutoDiscovered || n.PowerState != protocol.PowerOff {
		t.Fatalf("discovered node %+v", n)
	}
	ports, _ := e.Ports(n.UUID)
	if len(ports) != 1 || ports[0].Address != "52:54:00:00:00:01" || !ports[0].PXE {
		t.Fatalf("ports %+v", ports)
	}
	inv, err := e.Inventory(n.UUID)
	if err != nil || inv["plugin_data"].(map[string]any)["auto_discovered"] != true {
		t.Fatalf("inventory %v, %v", inv, err)
	}
	hist, _ := e.History(n.UUID)
	if len(hist) == 0 || hist[0].EventType != "discovery" {
		t.Fatalf("history %+v", hist)
	}
	// The same machine: resent report, its MAC, its serial with another
	// NIC, its BMC address with another NIC and serial.
	send(discoveryReport("r1", "52:54:00:00:00:01", "SN1", "10.0.0.1"))
	send(discoveryReport("r2", "52:54:00:00:00:01", "", ""))
	send(discoveryReport("r3", "52:54:00:00:00:99", "SN1", ""))
	send(discoveryReport("r4", "52:54:00:00:00:98", "", "10.0.0.1"))
	if l := discovered(t, e); len(l) != 1 {
		t.Fatalf("the same machine made %d nodes", len(l))
	}
	hist, _ = e.History(n.UUID)
	again := 0
	for _, h := range hist {
		if h.EventType == "discovery" && h.To == "" {
			again++
		}
	}
	if again != 3 {
		t.Fatalf("seen again %d times in the history; want 3 (the resent report is not): %+v", again, hist)
	}
	// Up to the cap of 2: of five new machines, one more node.
	for i := range 5 {
		send(discoveryReport(fmt.Sprintf("c%d", i), fmt.Sprintf("52:54:00:00:01:%02x", i), fmt.Sprintf("C%d", i), ""))
	}
	if l := discovered(t, e); len(l) != 2 {
		t.Fatalf("cap 2: %d discovered nodes", len(l))
	}
	c, ok := e.DiscoveryConfig("s1")
	if !ok || !c.Enabled || c.Remaining != 0 || len(c.KnownMACs) != 2 {
		t.Fatalf("site's configuration %+v", c)
	}
	// Deleting a discovered node frees its place.
	if err := e.DeleteNode(n.UUID); err != nil {
		t.Fatal(err)
	}
	if c, _ := e.DiscoveryConfig("s1"); c.Remaining != 1 || len(c.KnownMACs) != 1 {
		t.Fatalf("after the delete: %+v", c)
	}
}

// offsetClock is the real clock moved on by what the test adds.
type offsetClock struct {
	clock.Real
	off atomic.Int64
}

func (c *offsetClock) Now() time.Time { return time.Now().Add(time.Duration(c.off.Load())) }

// acked says whether the engine acked id.
func (r *recorder) acked(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.msgs {
		if m.Kind == protocol.KindAck && slices.Contains(m.AckIDs, id) {
			return true
		}
	}
	return false
}

// The coordinator bounds a site's enrolls by the site's discovery rate,
// whatever its agent does (the agent bounds the machines it answers by
// the same rate; a compromised one need not): of four new machines
// reported at once at a rate of 2 a minute, two are enrolled; the
// others are not acknowledged, so that the site sends them again, and
// are refused again while the minute lasts. A minute later the same
// reports, resent, are enrolled. A machine that is a node already is
// seen again whatever the rate.
func TestDiscoveryRateBound(t *testing.T) {
	clk := &offsetClock{}
	e, rec := newEngine(t, Config{Clock: clk})
	on, ten, two := true, 10, 2
	if err := e.SetSiteDiscovery("s1", SiteDiscoveryChange{Enabled: &on, MaxNodes: &ten, Rate: &two}); err != nil {
		t.Fatal(err)
	}
	send := func(m *protocol.Message) { e.HandleMessage(protocol.BMCEvtTopic("s1"), mustJSON(m)) }
	for i := range 4 {
		send(discoveryReport(fmt.Sprintf("r%d", i), fmt.Sprintf("52:54:00:00:02:%02x", i), fmt.Sprintf("R%d", i), ""))
	}
	rec.waitAcked(t, "r0")
	rec.waitAcked(t, "r1")
	// A report after them is handled after them: once it is acked, the
	// deferred ones were decided.
	send(discoveryReport("again", "52:54:00:00:02:00", "", ""))
	rec.waitAcked(t, "again")
	if l := discovered(t, e); len(l) != 2 {
		t.Fatalf("rate 2: %d nodes enrolled at once", len(l))
	}
	for _, id := range []string{"r2", "r3"} {
		if rec.acked(id) {
			t.Fatalf("report %s past the rate was acknowledged: the site would drop it", id)
		}
	}
	// Resent within the minute: still deferred.
	clk.off.Add(int64(30 * time.Second))
	send(discoveryReport("r2", "52:54:00:00:02:02", "R2", ""))
	send(discoveryReport("again2", "52:54:00:00:02:01", "", ""))
	rec.waitAcked(t, "again2")
	if l := discovered(t, e); len(l) != 2 || rec.acked("r2") {
		t.Fatalf("resent within the minute: %d nodes, r2 acked %v", len(l), rec.acked("r2"))
	}
	// A minute after the first enrolls: the resent reports are enrolled.
	clk.off.Add(int64(31 * time.Second))
	send(discoveryReport("r2", "52:54:00:00:02:02", "R2", ""))
	send(discoveryReport("r3", "52:54:00:00:02:03", "R3", ""))
	rec.waitAcked(t, "r2")
	rec.waitAcked(t, "r3")
	if l := discovered(t, e); len(l) != 4 {
		t.Fatalf("a minute later: %d nodes, want 4", len(l))
	}
}
