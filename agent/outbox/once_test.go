package outbox

import (
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/bmedge/bmedge/protocol"
)

// clock is an injected clock the test moves by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// memOutbox is an outbox on an in-memory store, publishing into pub.
func memOutbox(t *testing.T, limit int, clk *clock, pub *[]string) *Outbox {
	t.Helper()
	o := New(Config{Site: "s1", Limit: limit, Log: slog.New(slog.DiscardHandler), Now: clk.now,
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
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	var pub []string
	o := memOutbox(t, 2, clk, &pub)
	runs := 0
	cmd := func(id string, seq uint64) Command {
		m := &protocol.Message{Kind: protocol.KindCommand, ID: id, Site: "s1", Node: "n1", Seq: seq, Deadline: clk.now().Add(time.Minute)}
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
				return &protocol.Message{Kind: protocol.KindResult, ID: "r-" + id, Site: "s1", Node: "n1", Sent: clk.now(), CommandID: id, Seq: seq, OK: true}
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
	o.Trim(clk.now())
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
	o.ResendDue(clk.now())
	if len(pub) != n {
		t.Fatalf("resent %d messages before the resend interval passed", len(pub)-n)
	}
	clk.add(5 * time.Second)
	o.ResendDue(clk.now())
	if len(pub)-n != 3 {
		t.Fatalf("resent %d messages after the interval, want the 3 unacked", len(pub)-n)
	}
}
