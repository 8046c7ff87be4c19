package agent

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/bmedge/bmedge/agent/outbox"
	"github.com/bmedge/bmedge/agent/relay"
	"github.com/bmedge/bmedge/protocol"
)

// beatFrom hands the relay a ramdisk's heartbeat, as the site broker does.
func beatFrom(t *testing.T, a *Agent, m *protocol.Message) {
	t.Helper()
	p, err := protocol.Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	a.relay.FromRamdisk(protocol.NodeEvtTopic("s1", m.Node), p)
}

// drainSummaries runs summarize and decodes every summary it queued,
// failing on any the coordinator would refuse.
func drainSummaries(t *testing.T, a *Agent) []*protocol.Message {
	t.Helper()
	for len(a.up.Queue()) > 0 { // the fresh heartbeats, sent at once
		<-a.up.Queue()
	}
	a.relay.Summarize()
	var out []*protocol.Message
	for len(a.up.Queue()) > 0 {
		it := <-a.up.Queue()
		m, err := protocol.Decode(it.Payload)
		if err != nil {
			t.Fatalf("a summary of %d bytes is refused by the coordinator's Decode (limit %d): %v", len(it.Payload), protocol.MaxMessageBytes, err)
		}
		out = append(out, m)
	}
	return out
}

// TestSummariesFitMessageLimit checks that heartbeat summaries stay
// within protocol.MaxMessageBytes, however long the beats' details: a
// detail longer than relay.MaxBeatDetail is cut (marked, at a character's
// start), and beats whose details are long but allowed are spread over
// several summaries, every beat in one of them.
func TestSummariesFitMessageLimit(t *testing.T) {
	a := New(Config{Site: "s1", Log: slog.New(slog.DiscardHandler)})
	a.ctx = context.Background()
	// Two beats each a valid message of 600 KiB.
	huge := strings.Repeat("é", 300<<10)
	for _, node := range []string{"big1", "big2"} {
		beatFrom(t, a, &protocol.Message{Kind: protocol.KindHeartbeat, ID: outbox.NewID(), Site: "s1", Node: node, Sent: time.Now(), Token: "t", Running: "c-" + node, Progress: 0.5, Detail: huge})
	}
	// A thousand beats with the longest detail taken whole: together
	// over the message limit.
	long := strings.Repeat("d", relay.MaxBeatDetail)
	const nodes = 1000
	for i := range nodes {
		beatFrom(t, a, &protocol.Message{Kind: protocol.KindHeartbeat, ID: outbox.NewID(), Site: "s1", Node: fmt.Sprintf("n%04d", i), Sent: time.Now(), Token: "t", Running: "c", Progress: 0.5, Detail: long})
	}
	sums := drainSummaries(t, a)
	seen := map[string]string{}
	for _, m := range sums {
		if len(m.Beats) > relay.MaxBeatsPerSummary {
			t.Errorf("a summary carries %d beats; at most %d", len(m.Beats), relay.MaxBeatsPerSummary)
		}
		for _, b := range m.Beats {
			seen[b.Node] = b.Detail
		}
	}
	if len(seen) != nodes+2 {
		t.Fatalf("the summaries carry %d nodes' beats, want %d", len(seen), nodes+2)
	}
	for _, node := range []string{"big1", "big2"} {
		d := seen[node]
		if len(d) > relay.MaxBeatDetail || !strings.HasSuffix(d, relay.DetailCut) || !utf8.ValidString(d) || !strings.HasPrefix(huge, strings.TrimSuffix(d, relay.DetailCut)) {
			t.Errorf("%s's detail of %d bytes was carried as %d bytes (want at most %d, a prefix marked %q)", node, len(huge), len(d), relay.MaxBeatDetail, relay.DetailCut)
		}
	}
	if seen["n0000"] != long {
		t.Errorf("a detail of maxBeatDetail bytes was changed")
	}
	if len(sums) < 2 {
		t.Errorf("%d summaries for beats of more than a message's size", len(sums))
	}
}

// TestSummaryKeepsOtherBeatsBesideBadOne checks that one heartbeat the
// summary's rules refuse does not cost the other beats of its chunk: a
// heartbeat without a site is taken as one of this site, one with
// nested beats is refused as the relay takes it in, and a bad beat
// that reaches summarize all the same is left out alone; a beat is
// marked sent only once a summary carrying it was made.
func TestSummaryKeepsOtherBeatsBesideBadOne(t *testing.T) {
	a := New(Config{Site: "s1", Log: slog.New(slog.DiscardHandler)})
	a.ctx = context.Background()
	beatFrom(t, a, &protocol.Message{Kind: protocol.KindHeartbeat, ID: outbox.NewID(), Site: "s1", Node: "good", Sent: time.Now(), Token: "t", Running: "c1", Progress: 0.5})
	beatFrom(t, a, &protocol.Message{Kind: protocol.KindHeartbeat, ID: outbox.NewID(), Node: "nosite", Sent: time.Now(), Token: "t", Running: "c2", Progress: 0.5})
	nested := protocol.Message{V: protocol.Version, Kind: protocol.KindHeartbeat, ID: outbox.NewID(), Site: "s1", Node: "x", Sent: time.Now(), Token: "t"}
	beatFrom(t, a, &protocol.Message{Kind: protocol.KindHeartbeat, ID: outbox.NewID(), Site: "s1", Node: "nested", Sent: time.Now(), Token: "t", Running: "c3", Beats: []protocol.Message{nested}})
	// One of another site, put where the relay keeps beats.
	a.relay.Inspect(func(st *relay.State) {
		st.Beats["alien"] = protocol.Message{V: protocol.Version, Kind: protocol.KindHeartbeat, ID: outbox.NewID(), Site: "s2", Node: "alien", Sent: time.Now(), Token: "t", Running: "c4", Progress: 0.5}
	})
	sums := drainSummaries(t, a)
	got := map[string]bool{}
	for _, m := range sums {
		for _, b := range m.Beats {
			got[b.Node] = true
		}
	}
	if !got["good"] || !got["nosite"] || got["nested"] || got["alien"] {
		t.Errorf("the summaries carry %v; want good and nosite only", got)
	}
	var goodSent, alienSent bool
	a.relay.Inspect(func(st *relay.State) {
		_, goodSent = st.Sent["good"]
		_, alienSent = st.Sent["alien"]
	})
	if !goodSent || alienSent {
		t.Errorf("marked sent: good %v (want true), alien %v (want false)", goodSent, alienSent)
	}
}

// TestOversizedResultSentAsFailure checks that a BMC command's result
// larger than protocol.MaxMessageBytes (a huge inventory) is not put in
// the outbox as is, which the coordinator would refuse and the broker
// answer by closing the WAN connection: the command fails, saying why.
func TestOversizedResultSentAsFailure(t *testing.T) {
	a := storedAgent(t, "", 0, nil)
	defer a.closeStore(t)
	data := map[string]any{"blob": strings.Repeat("i", protocol.MaxMessageBytes)}
	a.ob.Send(protocol.BMCEvtTopic("s1"), &protocol.Message{Kind: protocol.KindResult, ID: "r1", Site: "s1", Node: "n1", Sent: time.Now(), CommandID: "c1", OK: true, Data: data}, time.Now().Add(time.Hour))
	it, ok := a.items()["r1"]
	if !ok {
		t.Fatal("no result in the outbox")
	}
	m, err := protocol.Decode(it.Payload)
	if err != nil {
		t.Fatalf("the result in the outbox (%d bytes) is refused: %v", len(it.Payload), err)
	}
	if m.OK || !strings.Contains(m.Error, "larger than a message may be") || m.CommandID != "c1" {
		t.Errorf("result sent: ok %v, error %q; want a failure of command c1 saying it was too large", m.OK, m.Error)
	}
}
