package agent

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent/outbox"
	"github.com/bmedge/bmedge/agent/relay"
	"github.com/bmedge/bmedge/protocol"
)

// Only news crosses the WAN in the heartbeat summaries: a node whose
// beats bring nothing new is left out until beatRefresh has passed, and
// then its latest beat goes; a summary never delivered makes its beats
// news again.
func TestSummaryCarriesNews(t *testing.T) {
	a := New(Config{Site: "s1", Log: slog.New(slog.DiscardHandler)})
	a.ctx = context.Background()
	beat := func(node, running string, progress float64) {
		a.relay.Inspect(func(st *relay.State) {
			st.Beats[node] = protocol.Message{V: protocol.Version, Kind: protocol.KindHeartbeat, ID: outbox.NewID(), Site: "s1", Node: node,
				Sent: time.Now(), Token: "tok-" + node, Running: running, Progress: progress}
		})
	}
	// summary runs summarize and returns the nodes it carried (none if
	// it sent nothing); the coordinator acks it unless lost is set.
	lost := false
	summary := func() map[string]float64 {
		a.relay.Summarize()
		select {
		case it := <-a.up.Queue():
			m, err := protocol.Decode(it.Payload)
			if err != nil || m.Kind != protocol.KindBeats {
				t.Fatalf("summary: %v %v", m, err)
			}
			if !lost {
				a.ob.Ack([]string{m.ID})
			}
			got := map[string]float64{}
			for _, b := range m.Beats {
				got[b.Node] = b.Progress
			}
			return got
		default:
			return nil
		}
	}
	beat("n1", "c1", 0.1)
	beat("n2", "c2", 0.1)
	if got := summary(); len(got) != 2 {
		t.Fatalf("first summary carried %v; want both nodes", got)
	}
	beat("n1", "c1", 0.15) // no news
	beat("n2", "c2", 0.3)  // progress moved
	if got := summary(); len(got) != 1 || got["n2"] != 0.3 {
		t.Fatalf("second summary carried %v; want only n2", got)
	}
	beat("n2", "c3", 0.3) // a new step
	if got := summary(); len(got) != 1 || got["n2"] != 0.3 {
		t.Fatalf("third summary carried %v; want only n2 (new step)", got)
	}
	// n1's held beat goes once beatRefresh has passed since it was sent.
	a.relay.Inspect(func(st *relay.State) {
		s := st.Sent["n1"]
		s.At = time.Now().Add(-relay.BeatRefresh)
		st.Sent["n1"] = s
	})
	if got := summary(); len(got) != 1 || got["n1"] != 0.15 {
		t.Fatalf("after the refresh: %v; want n1's latest beat", got)
	}
	if got := summary(); got != nil {
		t.Fatalf("nothing new: a summary carried %v", got)
	}
	// A summary still in the outbox (never acked: the WAN is down) is
	// replaced by the next, and its beats are news again.
	lost = true
	beat("n2", "c3", 0.5)
	if got := summary(); len(got) != 1 || got["n2"] != 0.5 {
		t.Fatalf("summary: %v; want n2", got)
	}
	lost = false
	beat("n2", "c3", 0.52)
	if got := summary(); len(got) != 1 || got["n2"] != 0.52 {
		t.Fatalf("the lost summary's n2 is not news again: %v", got)
	}
	if a.Outbox() != 0 {
		t.Fatalf("%d summaries left in the outbox; the lost one is replaced", a.Outbox())
	}
}
