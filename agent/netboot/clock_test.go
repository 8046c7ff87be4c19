package netboot

import (
	"net"
	"testing"
	"time"

	"github.com/bmedge/bmedge/lib/clock"
	"github.com/insomniacslk/dhcp/iana"
)

// TestBootTTLOnTheClock: an armed boot runs out on the server's clock:
// at its TTL it is still armed, its MAC answered and its script's token
// known; a second later it is forgotten (no DHCP answer, no script).
func TestBootTTLOnTheClock(t *testing.T) {
	s := handlerServer(t, ModeDHCP)
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s.cfg.Clock = fake
	node := mac("52:54:00:00:00:01")
	if err := s.Arm(Boot{Node: "n1", MACs: []net.HardwareAddr{node}, Cmdline: "bm.password=secret"}); err != nil {
		t.Fatal(err)
	}
	tok := s.boots["n1"].token
	fake.Advance(s.cfg.TTL)
	if !s.Armed("n1") || s.bootOfToken(tok) == nil {
		t.Fatalf("boot forgotten at its TTL (%s) on the fake clock", s.cfg.TTL)
	}
	if r := s.answer(discover(t, node, pxeMods(iana.INTEL_X86PC)...), false); r == nil {
		t.Fatal("no DHCP answer at the boot's TTL")
	}
	fake.Advance(time.Second)
	if r := s.answer(discover(t, node, pxeMods(iana.INTEL_X86PC)...), false); r != nil {
		t.Fatalf("DHCP answer a second after the boot's TTL: %s", r.Summary())
	}
	if s.bootOfToken(tok) != nil || s.Armed("n1") {
		t.Fatal("boot still armed a second after its TTL")
	}
}
