package agent

import (
	"bytes"
	"context"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent/outbox"
	"github.com/bmedge/bmedge/protocol"
	"github.com/bmedge/bmedge/protocol/bundletest"
)

// The agent takes from the coordinator's bundles only command topics of
// its own site, reads a bundle only to the size limit, and handles a good
// bundle's messages as if each had come alone (here an ack that empties
// the outbox: the control).
func TestAgentBundleRefusals(t *testing.T) {
	a := New(Config{Site: "s1", Log: slog.New(slog.DiscardHandler)})
	a.ctx = context.Background()
	a.ob.Inspect(func(s *outbox.State) {
		s.Items["r1"] = outbox.Item{Topic: protocol.BMCEvtTopic("s1"), Payload: []byte("{}"), Sent: time.Now(), MemOnly: true}
	})
	ack, err := protocol.Encode(&protocol.Message{Kind: protocol.KindAck, ID: "ack", Sent: time.Now(), AckIDs: []string{"r1"}})
	if err != nil {
		t.Fatal(err)
	}
	bundle := func(topic string, payload []byte) []byte {
		return bundletest.Raw(protocol.BundleMagic[1], bundletest.Record(topic, payload))
	}
	for name, b := range map[string][]byte{
		"an event topic":           bundle("bmc/evt", ack),
		"not deflate":              append(protocol.BundleMagic[:], 0xff, 0xfe),
		"a newer bundle format":    bundletest.Raw(9, bundletest.Record("bmc/cmd", ack)),
		"another site (as a path)": bundle("../s2/bmc/cmd", ack),
	} {
		a.handle(protocol.BMCCmdTopic("s1"), b)
		if a.Outbox() != 1 {
			t.Fatalf("a bundle with %s was taken: the ack in it emptied the outbox", name)
		}
	}
	// 200 MiB in ~200 KiB: read only to the 1 MiB limit (the process's
	// allocations say so), and not taken.
	bomb := bundle("bmc/cmd", append(ack, bytes.Repeat([]byte(" "), 200<<20)...))
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	a.handle(protocol.BMCCmdTopic("s1"), bomb)
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 32<<20 {
		t.Errorf("the agent allocated %d MiB taking a 200 MiB bomb: it inflated past the limit", grew>>20)
	}
	if a.Outbox() != 1 {
		t.Fatal("the bomb's ack was taken")
	}
	a.handle(protocol.BMCCmdTopic("s1"), bundle("bmc/cmd", ack))
	if a.Outbox() != 0 {
		t.Fatal("a good bundle's ack was not taken: the refusals above prove nothing")
	}
}
