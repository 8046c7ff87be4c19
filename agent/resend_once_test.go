package agent

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent/outbox"
	"github.com/bmedge/bmedge/agent/relay"
	"github.com/bmedge/bmedge/lib/waitfor"
	"github.com/bmedge/bmedge/protocol"
)

// TestResendAllRunsOneAtATime checks that calls of resendAll while one
// runs (the link came up several times: a flapping WAN) do not each
// queue the whole outbox: they make the running pass go once more.
func TestResendAllRunsOneAtATime(t *testing.T) {
	a := New(Config{Site: "s1", Log: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a.ctx = ctx
	const msgs = 100
	for i := range msgs {
		p, err := protocol.Encode(&protocol.Message{Kind: protocol.KindPower, ID: outbox.NewID(), Site: "s1", Node: "n", Sent: time.Now(), PowerState: protocol.PowerOn})
		if err != nil {
			t.Fatal(err)
		}
		a.ob.Inspect(func(s *outbox.State) {
			s.Items[outbox.NewID()] = outbox.Item{Topic: protocol.BMCEvtTopic("s1"), Payload: p, Sent: time.Now(), Seq: uint64(i + 1)}
		})
	}
	// The uplink is busy: the queue is full, so a pass waits in publish.
	for len(a.up.Queue()) < cap(a.up.Queue()) {
		a.up.Queue() <- relay.Item{Topic: "filler"}
	}
	const calls = 10
	var wg sync.WaitGroup
	var back atomic.Int32
	for range calls {
		wg.Add(1)
		go func() { defer wg.Done(); a.ob.ResendAll(); back.Add(1) }()
	}
	// Every call started: one pass waits in publish, the others have
	// asked it to go once more and returned.
	if !waitfor.Until(10*time.Second, func() bool { return back.Load() == calls-1 }) {
		t.Fatalf("%d of %d calls returned while a pass was running; want all but the pass's", back.Load(), calls)
	}
	returned := make(chan struct{})
	go func() { wg.Wait(); close(returned) }()
	copies := 0
	for {
		select {
		case it := <-a.up.Queue():
			if it.Topic != "filler" {
				copies++
			}
			continue
		case <-returned:
		}
		break
	}
	for len(a.up.Queue()) > 0 {
		if it := <-a.up.Queue(); it.Topic != "filler" {
			copies++
		}
	}
	if copies > 2*msgs {
		t.Errorf("%d calls of resendAll queued %d copies of %d messages; want at most two passes", calls, copies, msgs)
	}
	if copies < msgs {
		t.Errorf("queued %d copies of %d messages; want the whole outbox at least once", copies, msgs)
	}
}
