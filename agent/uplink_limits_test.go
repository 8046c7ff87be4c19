package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent/outbox"
	"github.com/bmedge/bmedge/lib/waitfor"
	"github.com/bmedge/bmedge/protocol"
)

// TestUplinkDropsOversizedMessage checks that a message larger than
// protocol.MaxMessageBytes is never published (the coordinator would
// refuse it; this one, beyond the broker's packet limit, would make the
// broker close the WAN connection): it is logged, dropped and taken out
// of the outbox, and the link goes on carrying the next messages.
func TestUplinkDropsOversizedMessage(t *testing.T) {
	var logs syncBuffer
	a, rec := linkedAgent(t, &logs)
	big, err := protocol.Encode(&protocol.Message{Kind: protocol.KindPower, ID: "big", Site: "s1", Node: "n1", Sent: time.Now(), Error: strings.Repeat("x", protocol.MaxMessageBytes+200<<10)})
	if err != nil {
		t.Fatal(err)
	}
	a.ob.Inspect(func(s *outbox.State) {
		s.Seq++
		s.Items["big"] = outbox.Item{Topic: protocol.BMCEvtTopic("s1"), Payload: big, Sent: time.Now(), Node: "n1", Seq: s.Seq}
	})
	a.publish(protocol.BMCEvtTopic("s1"), big)
	for i := range 3 {
		// After the big one, and apart from it in time (once the uplink
		// took the one before): bundled with it or not, they must arrive.
		if !waitfor.Until(10*time.Second, func() bool { return len(a.up.Queue()) == 0 }) {
			t.Fatal("the uplink does not take its queue")
		}
		p, err := protocol.Encode(&protocol.Message{Kind: protocol.KindPower, ID: "small" + string(rune('0'+i)), Site: "s1", Node: "n1", Sent: time.Now(), PowerState: protocol.PowerOn})
		if err != nil {
			t.Fatal(err)
		}
		a.publish(protocol.BMCEvtTopic("s1"), p)
	}
	waitfor.Until(20*time.Second, func() bool { return rec.count() >= 3 })
	if n := rec.count(); n != 3 {
		t.Fatalf("%d of the 3 small messages arrived", n)
	}
	if n := strings.Count(logs.String(), "edge agent connected"); n != 1 || !a.link.Up() {
		t.Errorf("the link connected %d times; up %v", n, a.link.Up())
	}
	_, kept := a.items()["big"]
	if kept {
		t.Error("the oversized message is still in the outbox")
	}
	if !strings.Contains(logs.String(), "larger than a message may be") {
		t.Error("the drop was not logged")
	}
}
