package sim

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bmedge/bmedge/lib/waitfor"
	"github.com/bmedge/bmedge/protocol"
)

// hellos counts the hello messages the simulated ramdisks publish.
type hellos struct {
	mu sync.Mutex
	n  map[string]int
}

func (h *hellos) Publish(_ context.Context, topic string, payload []byte) error {
	m, err := protocol.Decode(payload)
	if err == nil && m.Kind == protocol.KindHello {
		h.mu.Lock()
		h.n[m.Node]++
		h.mu.Unlock()
	}
	return nil
}

func (h *hellos) count(node string) int { h.mu.Lock(); defer h.mu.Unlock(); return h.n[node] }

// TestSimulatedRamdisks: a simulated node's power-on from the network
// boots a ramdisk that says hello through the transport (no MQTT); a
// power-on from disk or a power-off stops it; driver_info fake_no_boot
// keeps a node from booting; the site's node count bounds the BMCs;
// forget stops a node's ramdisk.
func TestSimulatedRamdisks(t *testing.T) {
	tr := &hellos{n: map[string]int{}}
	info := map[string]map[string]any{"n3": {"fake_no_boot": "true"}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := New(Config{Site: "s1", Log: slog.New(slog.DiscardHandler), Opts: Options{Nodes: 2, Heartbeat: time.Hour}, ResendInterval: time.Hour,
		Info: func(node string) map[string]any { return info[node] }, Transport: tr, Context: func() context.Context { return ctx },
	})
	waitHello := func(node string, n int) {
		t.Helper()
		if !waitfor.Until(10*time.Second, func() bool { return tr.count(node) >= n }) {
			t.Fatalf("%s said hello %d times, want %d", node, tr.count(node), n)
		}
	}
	ping := &protocol.Message{Kind: protocol.KindAck, Site: "s1", Node: "n1"}
	s.OnPower("n1", protocol.PowerOn, protocol.BootDisk)
	if s.Deliver("n1", ping) {
		t.Fatal("a power-on from disk booted a ramdisk")
	}
	s.OnPower("n1", protocol.PowerOn, protocol.BootPXE)
	waitHello("n1", 1)
	if !s.Deliver("n1", ping) {
		t.Fatal("no ramdisk runs after a power-on from the network")
	}
	s.OnPower("n1", protocol.PowerOff, "")
	if s.Deliver("n1", ping) {
		t.Fatal("the ramdisk runs on after a power-off")
	}
	s.OnPower("n3", protocol.PowerOn, protocol.BootPXE)
	if s.Deliver("n3", ping) {
		t.Fatal("a node with fake_no_boot booted")
	}
	s.OnPower("n2", protocol.PowerOn, protocol.BootPXE)
	waitHello("n2", 1)
	s.Forget("n2")
	if s.Deliver("n2", ping) {
		t.Fatal("forget left the ramdisk running")
	}
	if _, err := s.NewBMC("n1", nil, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.NewBMC("n4", nil, 2); err == nil || !strings.Contains(err.Error(), "larger --simulate") {
		t.Fatalf("a BMC beyond the site's 2 simulated nodes: %v", err)
	}
}
