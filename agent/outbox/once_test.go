package outbox

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/bmedge/bmedge/lib/clock"
	"github.com/bmedge/bmedge/lib/waitfor"
	"github.com/bmedge/bmedge/protocol"
)

// memOutbox is an outbox on an in-memory store, publishing into pub.
func memOutbox(t *testing.T, limit int, clk *clock.Fake, pub *[]string) *Outbox {
	t.Helper()
	o := New(Config{Site: "s1", Limit: limit, Log: slog.New(slog.DiscardHandler), Clock: clk,
		Publish: func(topic string, payload []byte) {
			m, _ := protocol.Decode(payload)
			*pub = append(*pub, m.ID)
		}})
	s, err := OpenStore("", o.log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := o.Load(s); err != nil {
		t.Fatal(err)
	}
	return o
}

// TestOnceRunsEachCommandOnce: the one command runner runs a command
// once however many copies come; a copy answers with the stored result
// until acked, and with nothing after; a stale copy (lower Seq than one
// its node started) and a command arriving while the outbox is full do
// not run (when the command asks for those checks); Start and End frame
// the run, End after the result is in the outbox.
func TestOnceRunsEachCommandOnce(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var pub []string
	o := memOutbox(t, 2, clk, &pub)
	runs := 0
	cmd := func(id string, seq uint64) Command {
		m := &protocol.Message{Kind: protocol.KindCommand, ID: id, Site: "s1", Node: "n1", Seq: seq, Deadline: clk.Now().Add(time.Minute)}
		var started bool
		return Command{Msg: m, CheckSeq: true, CheckFull: true,
			Start: func() { started = true },
			End: func() {
				if !started || o.Len() == 0 {
					t.Errorf("End of %s: started %v, outbox %d (want after Start, with the result in)", id, started, o.Len())
				}
			},
			Run: func() *protocol.Message {
				runs++
				return &protocol.Message{Kind: protocol.KindResult, ID: "r-" + id, Site: "s1", Node: "n1", Sent: clk.Now(), CommandID: id, Seq: seq, OK: true}
			}}
	}
	if got := o.Once(cmd("c1", 10)); got != Ran || runs != 1 {
		t.Fatalf("first copy: outcome %v, runs %d", got, runs)
	}
	if got := o.Once(cmd("c1", 10)); got != Redone || runs != 1 || pub[len(pub)-1] != "r-c1" {
		t.Fatalf("second copy: outcome %v, runs %d, last published %v; want Redone, 1 run, the stored result again", got, runs, pub)
	}
	o.Ack([]string{"r-c1"})
	n := len(pub)
	if got := o.Once(cmd("c1", 10)); got != Redone || runs != 1 || len(pub) != n {
		t.Fatalf("copy after the ack: outcome %v, runs %d, published %d more; want Redone, no run, nothing sent", got, runs, len(pub)-n)
	}
	if got := o.Once(cmd("c0", 9)); got != Stale || runs != 1 {
		t.Fatalf("older command of the node: outcome %v, runs %d; want Stale, not run", got, runs)
	}
	if got := o.Once(cmd("c2", 11)); got != Ran || runs != 2 {
		t.Fatalf("newer command: outcome %v, runs %d", got, runs)
	}
	// The acked c1 (Seq 10) is superseded by c2 (Seq 11): trimmed at once.
	o.Trim(clk.Now())
	if _, ok := o.Redo("c1"); ok {
		t.Error("the acked, superseded done-record of c1 was kept")
	}
	if got := o.Once(cmd("c3", 12)); got != Ran || runs != 3 {
		t.Fatalf("c3: outcome %v, runs %d", got, runs)
	}
	// Two results unacked: the outbox is at its limit of 2.
	if got := o.Once(cmd("c4", 13)); got != Full || runs != 3 || !o.Full() {
		t.Fatalf("with a full outbox: outcome %v, runs %d, full %v; want Full, not run", got, runs, o.Full())
	}
	// Without the checks (an image pre-seed), a command still runs.
	c := cmd("c5", 0)
	c.CheckFull, c.CheckSeq = false, false
	if got := o.Once(c); got != Ran || runs != 4 {
		t.Fatalf("unchecked command: outcome %v, runs %d", got, runs)
	}
	// The resend follows the injected clock.
	n = len(pub)
	o.ResendDue(clk.Now())
	if len(pub) != n {
		t.Fatalf("resent %d messages before the resend interval passed", len(pub)-n)
	}
	clk.Advance(5 * time.Second)
	o.ResendDue(clk.Now())
	if len(pub)-n != 3 {
		t.Fatalf("resent %d messages after the interval, want the 3 unacked", len(pub)-n)
	}
}

// TestResendLoopOnTheClock: ResendLoop sends again what waited Resend
// without an ack when its clock passes Resend, not before.
func TestResendLoopOnTheClock(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var mu sync.Mutex
	var pub []string
	o := memOutbox(t, 10, clk, &pub)
	o.cfg.Publish = func(topic string, payload []byte) {
		mu.Lock()
		pub = append(pub, topic)
		mu.Unlock()
	}
	published := func() int { mu.Lock(); defer mu.Unlock(); return len(pub) }
	o.PutMemOnly("m1", "bm/v1/s1/bmc/evt", []byte(`{"kind":"summary"}`))
	first := published()
	if first != 1 {
		t.Fatalf("%d publishes of the message put, want 1", first)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { o.ResendLoop(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	if !clk.WaitTimers(1, 10*time.Second) {
		t.Fatal("ResendLoop armed no ticker on the outbox's clock")
	}
	clk.Advance(o.cfg.Resend / 2)
	// Two ticks: the loop resends at whichever it handles with the
	// clock at Resend, once (the message's Sent is then now).
	clk.Advance(o.cfg.Resend / 2)
	waitfor.Until(10*time.Second, func() bool { return published() != first })
	if published() != first+1 {
		t.Fatalf("after the clock passed Resend: %d publishes, want %d (one resend)", published(), first+1)
	}
}

// TestOnceRefusesUnsequenced (issue 30, point 4): a node's command without
// a Seq runs while the site has sent none with one (an older
// coordinator), and is refused, not run, once one has been started; a
// site-wide command (no node) is not concerned.
func TestOnceRefusesUnsequenced(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var pub []string
	o := memOutbox(t, 100, clk, &pub)
	runs := 0
	cmd := func(id, node string, seq uint64) Command {
		m := &protocol.Message{Kind: protocol.KindCommand, ID: id, Site: "s1", Node: node, Seq: seq, Deadline: clk.Now().Add(time.Minute)}
		return Command{Msg: m, CheckSeq: true, Run: func() *protocol.Message {
			runs++
			return &protocol.Message{Kind: protocol.KindResult, ID: "r-" + id, Site: "s1", Node: node, Sent: clk.Now(), CommandID: id, Seq: seq, OK: true}
		}}
	}
	if got := o.Once(cmd("old", "n1", 0)); got != Ran || runs != 1 {
		t.Fatalf("unsequenced command before any sequenced one: %v, runs %d; want Ran", got, runs)
	}
	if got := o.Once(cmd("c1", "n1", 10)); got != Ran || runs != 2 {
		t.Fatalf("sequenced command: %v, runs %d", got, runs)
	}
	for _, node := range []string{"n1", "n2"} {
		if got := o.Once(cmd("forged-"+node, node, 0)); got != Unsequenced || runs != 2 {
			t.Fatalf("unsequenced command of %s after a sequenced one: %v, runs %d; want Unsequenced, not run", node, got, runs)
		}
	}
	if got := o.Once(cmd("site-wide", "", 0)); got != Ran || runs != 3 {
		t.Fatalf("site-wide command: %v, runs %d; want Ran", got, runs)
	}
}
