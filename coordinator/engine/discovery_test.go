package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/bmedge/bmedge/coordinator/fsm"
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
