package agent

import (
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/bmedge/bmedge/agent/outbox"
	"github.com/bmedge/bmedge/protocol"
)

// TestDeposedLeaderFenced: what a coordinator cluster's leader sends
// carries its term; once the agent has seen a term, anything with an
// older one (a deposed leader that has not noticed yet) changes nothing
// and is counted as refused (older-term), while a newer term and a
// coordinator without a cluster (term 0) are taken. Here with acks: an
// ack of an older term leaves the result in the outbox.
func TestDeposedLeaderFenced(t *testing.T) {
	a := New(Config{Site: "s1", Log: slog.New(slog.DiscardHandler)})
	for _, id := range []string{"r1", "r2", "r3", "r4"} {
		a.ob.Inspect(func(s *outbox.State) {
			s.Items[id] = outbox.Item{Topic: protocol.BMCEvtTopic("s1"), Payload: []byte("{}"), Sent: time.Now()}
		})
	}
	ack := func(term uint64, id string) {
		t.Helper()
		b, err := protocol.Encode(&protocol.Message{V: protocol.Version, Kind: protocol.KindAck, ID: "ack", Sent: time.Now(), Term: term, AckIDs: []string{id}})
		if err != nil {
			t.Fatal(err)
		}
		a.handle(protocol.BMCCmdTopic("s1"), b)
	}
	refused := func() float64 {
		var m dto.Metric
		if err := a.metrics.refused.WithLabelValues(refusedOlderTerm).Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	ack(5, "r1") // the leader of term 5
	ack(4, "r2") // a deposed leader of term 4
	if _, ok := a.items()["r1"]; ok {
		t.Fatal("the ack of term 5 was not taken")
	}
	if _, ok := a.items()["r2"]; !ok || refused() != 1 {
		t.Fatalf("the ack of the older term 4: taken %v, refused %v; want not taken, refused once", !ok, refused())
	}
	ack(0, "r3") // a coordinator that is no cluster member
	ack(6, "r4") // a newer leader
	if _, ok := a.items()["r3"]; ok {
		t.Fatal("the ack without a term was not taken")
	}
	if _, ok := a.items()["r4"]; ok || a.term.highest.Load() != 6 {
		t.Fatalf("the ack of the newer term 6: taken %v, highest term %d", !ok, a.term.highest.Load())
	}
	ack(5, "r2")
	if _, ok := a.items()["r2"]; !ok || refused() != 2 {
		t.Fatalf("term 5 after term 6: taken %v, refused %v", !ok, refused())
	}
}

// TestTermKeptInStateFolder: the highest term survives a restart of the
// agent (its state folder), so a restarted agent still refuses a deposed
// leader.
func TestTermKeptInStateFolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	s, err := outbox.OpenStore(dir, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if s.LoadTerm() != 0 {
		t.Fatal("a new state folder has a term")
	}
	s.PutTerm(7)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = outbox.OpenStore(dir, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.LoadTerm(); got != 7 {
		t.Fatalf("term after reopening: %d, want 7", got)
	}
}
