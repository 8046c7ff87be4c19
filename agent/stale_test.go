package agent

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent/outbox"
	"github.com/bmedge/bmedge/protocol"
	dto "github.com/prometheus/client_model/go"
)

// seqAgent is an agent with its outbox on disk in dir and one simulated
// BMC, whose commands run (a live context) but publish nowhere.
func seqAgent(t *testing.T, dir string) *Agent {
	t.Helper()
	a := New(Config{Site: "s1", StateDir: dir, Log: slog.New(slog.DiscardHandler), Sim: SimOptions{Nodes: 1}})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	a.ctx = ctx
	s, err := outbox.OpenStore(dir, a.log)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.ob.Load(s); err != nil {
		t.Fatal(err)
	}
	return a
}

// A node's command with a Seq lower than one the agent has started is a
// stale copy: it does not run, and once acked the done-records of such
// older commands are forgotten at once (not after doneRetention), so the
// agent keeps about one per node however fast its nodes cycle. The rule
// holds across a restart. An unstamped command (Seq 0, an older
// coordinator) keeps the time-based retention.
func TestStaleCommandNotRun(t *testing.T) {
	dir := t.TempDir()
	a := seqAgent(t, dir)
	power := func(id string, seq uint64) *protocol.Message {
		return &protocol.Message{V: protocol.Version, Kind: protocol.KindCommand, ID: id, Site: "s1", Node: "n1", Seq: seq,
			Sent: time.Now(), Deadline: time.Now().Add(time.Minute), Action: protocol.ActionPower, Driver: "fake",
			Args: map[string]any{"state": protocol.PowerOff}}
	}
	resultOf := func(cmd string) string {
		return a.doneRec(cmd).ID
	}
	ack := func(cmd string) {
		a.ob.Ack([]string{resultOf(cmd)})
	}
	has := func(cmd string) bool {
		_, ok := a.hasDone(cmd)
		return ok
	}

	a.runBMC(power("c0", 0)) // unstamped
	a.runBMC(power("c1", 10))
	if !has("c0") || !has("c1") {
		t.Fatal("the commands did not run (no done-records)")
	}
	ack("c0")
	ack("c1")
	a.runBMC(power("c2", 11))
	a.ob.Trim(time.Now())
	if has("c1") {
		t.Error("the acked done-record of c1 (Seq 10) was kept after c2 (Seq 11) started; want it forgotten at once")
	}
	if !has("c0") {
		t.Error("the acked done-record of the unstamped c0 was forgotten before doneRetention")
	}
	if !has("c2") {
		t.Error("c2's done-record (not acked) was forgotten")
	}

	// A late copy of c1 does not run: no new result, counted as stale.
	before := a.Outbox()
	a.runBMC(power("c1", 10))
	if has("c1") || a.Outbox() != before {
		t.Fatalf("a stale copy of c1 ran: done-record %v, outbox %d → %d", has("c1"), before, a.Outbox())
	}
	var stale dto.Metric
	if err := a.metrics.stale.Write(&stale); err != nil {
		t.Fatal(err)
	}
	if got := stale.GetCounter().GetValue(); got != 1 {
		t.Errorf("stale commands counted: %v, want 1", got)
	}

	// After a restart the agent still knows n1's latest Seq (from c2's
	// record) and refuses the copy again.
	ack("c2")
	a.closeStore(t)
	b := seqAgent(t, dir)
	b.runBMC(power("c1", 10))
	_, ran := b.hasDone("c1")
	var latest uint64
	b.ob.Inspect(func(s *outbox.State) { latest = s.Latest["n1"] })
	if ran || latest != 11 {
		t.Fatalf("after a restart: stale c1 ran %v, latest Seq of n1 %d (want not run, 11)", ran, latest)
	}
	// A newer command runs.
	b.runBMC(power("c3", 12))
	_, ran = b.hasDone("c3")
	if !ran {
		t.Fatal("after a restart, a newer command (Seq 12) did not run")
	}
	b.closeStore(t)
}
