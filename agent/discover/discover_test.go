package discover

import (
	"net"
	"testing"
	"time"

	"github.com/bmedge/bmedge/lib/clock"
	"github.com/bmedge/bmedge/protocol"
)

func mac(i int) net.HardwareAddr { return net.HardwareAddr{0x52, 0x54, 0, 0, byte(i >> 8), byte(i)} }

// The gate: off answers nothing; on, a node's MAC is never answered, new
// machines at most the remaining cap and the rate; a machine's retries
// are answered again; a boot's credential admits only its own name
// while its boot is answered, and takes one report; a report the
// coordinator made a node of leaves the count.
func TestGate(t *testing.T) {
	fc := clock.NewFake(time.Unix(1e9, 0))
	g := New("s1", []byte("site secret"), fc)
	if ok, why := g.Admit(mac(1)); ok || why != ReasonOff {
		t.Fatalf("off: %v %s", ok, why)
	}
	g.SetConfig(protocol.DiscoveryConfig{Enabled: true, Remaining: 3, Rate: 2, KnownMACs: []string{mac(9).String()}})
	if ok, why := g.Admit(mac(9)); ok || why != ReasonKnown {
		t.Fatalf("a node's MAC: %v %s", ok, why)
	}
	for i := 1; i <= 2; i++ {
		if ok, why := g.Admit(mac(i)); !ok {
			t.Fatalf("machine %d: %s", i, why)
		}
	}
	if ok, _ := g.Admit(mac(1)); !ok {
		t.Fatal("a machine's DHCP retry was refused")
	}
	if ok, why := g.Admit(mac(3)); ok || why != ReasonRate {
		t.Fatalf("past the rate of 2 a minute: %v %s", ok, why)
	}
	fc.Advance(time.Minute)
	if ok, why := g.Admit(mac(3)); !ok {
		t.Fatalf("a minute later: %s", why)
	}
	if ok, why := g.Admit(mac(4)); ok || why != ReasonCap {
		t.Fatalf("past the cap of 3: %v %s", ok, why)
	}

	node := protocol.DiscoveryNode(mac(1))
	pw := g.Password(mac(1))
	if err := g.Check(node, pw); err != nil {
		t.Fatal(err)
	}
	if err := g.Check(node, g.Password(mac(2))); err == nil {
		t.Fatal("another machine's credential admitted")
	}
	if err := g.Check(protocol.DiscoveryNode(mac(5)), g.Password(mac(5))); err == nil {
		t.Fatal("a machine whose boot was never answered admitted")
	}
	if g2 := New("s1", []byte("another secret"), fc); g2.Password(mac(1)) == pw {
		t.Fatal("the credential does not depend on the site's secret")
	}
	if first, dup := g.Report(node, "r1"); !first || dup {
		t.Fatalf("first report: %v %v", first, dup)
	}
	if first, dup := g.Report(node, "r1"); first || !dup {
		t.Fatalf("the same report again: %v %v", first, dup)
	}
	if first, dup := g.Report(node, "r2"); first || dup {
		t.Fatalf("a second report: %v %v", first, dup)
	}
	if first, _ := g.Report(protocol.DiscoveryNode(mac(5)), "r3"); first {
		t.Fatal("a report of a boot never answered taken")
	}
	if err := g.Check(node, pw); err != nil {
		t.Fatalf("within the grace after its report (its ack): %v", err)
	}
	if ok, _ := g.Admit(mac(1)); ok {
		t.Fatal("a machine that reported was answered again")
	}
	fc.Advance(ReportGrace + time.Second)
	if err := g.Check(node, pw); err == nil {
		t.Fatal("admitted after the grace")
	}
	// Pending boots without a report free their place after PendingTTL;
	// the report counts until the coordinator lists the MAC as a node's.
	fc.Advance(PendingTTL)
	if boots, reports := g.Pending(); boots != 0 || reports != 1 {
		t.Fatalf("pending %d boots, %d reports", boots, reports)
	}
	g.SetConfig(protocol.DiscoveryConfig{Enabled: true, Remaining: 1, Rate: 10, KnownMACs: []string{mac(1).String()}})
	if ok, why := g.Admit(mac(6)); !ok {
		t.Fatalf("once the report is a node, the remaining 1 is free: %s", why)
	}
	if ok, why := g.Admit(mac(7)); ok || why != ReasonCap {
		t.Fatalf("then the cap: %v %s", ok, why)
	}
	g.SetConfig(protocol.DiscoveryConfig{Enabled: false})
	if ok, why := g.Admit(mac(6)); ok || why != ReasonOff {
		t.Fatalf("off again: %v %s", ok, why)
	}
	if err := g.Check(protocol.DiscoveryNode(mac(6)), g.Password(mac(6))); err != nil {
		t.Fatalf("a boot answered before discovery went off goes on: %v", err)
	}
}
