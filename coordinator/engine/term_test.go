package engine

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/bmedge/bmedge/coordinator/fsm"
)

// TestCommandsCarryTheTerm: a cluster member's engine stamps its current
// term on what it sends, at each send: a resend after the term changed
// (a new leader resending the pending command) carries the new term, with
// the command's id and Seq unchanged. Without a cluster, no term.
func TestCommandsCarryTheTerm(t *testing.T) {
	var term atomic.Uint64
	term.Store(3)
	e, rec := newEngine(t, Config{Term: term.Load, Machine: fsm.Config{ResendInterval: 100 * time.Millisecond}})
	a, _ := e.CreateNode(NodeSpec{Name: "a", Driver: "fake"})
	if err := e.Verb("a", fsm.VerbRequest{Verb: fsm.Manage}); err != nil {
		t.Fatal(err)
	}
	first, seen := rec.next(t, a.UUID, 0)
	if first.Term != 3 {
		t.Fatalf("command term %d, want 3", first.Term)
	}
	term.Store(4)
	for {
		again, s := rec.next(t, a.UUID, seen)
		seen = s
		if again.ID != first.ID || again.Seq != first.Seq {
			t.Fatalf("resend: id %s seq %d, want %s %d", again.ID, again.Seq, first.ID, first.Seq)
		}
		if again.Term == 4 {
			break
		}
		if again.Term != 3 {
			t.Fatalf("resend term %d", again.Term)
		}
	}
	var pendingTerm uint64
	if err := e.View(a.UUID, func(n *fsm.Node, _ bool) error { pendingTerm = n.Pending.Msg.Term; return nil }); err != nil {
		t.Fatal(err)
	}
	if pendingTerm != 0 {
		t.Fatalf("the stored pending command got term %d: the term is stamped on the copy sent", pendingTerm)
	}

	e2, rec2 := newEngine(t, Config{})
	b, _ := e2.CreateNode(NodeSpec{Name: "b", Driver: "fake"})
	if err := e2.Verb("b", fsm.VerbRequest{Verb: fsm.Manage}); err != nil {
		t.Fatal(err)
	}
	if m, _ := rec2.next(t, b.UUID, 0); m.Term != 0 {
		t.Fatalf("a coordinator without a cluster sent term %d", m.Term)
	}
}
