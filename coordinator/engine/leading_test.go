package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/coordinator/store"
)

// leaderCommitter is a replicated log's Committer as the engine sees
// it: commits go to the store, and VerifyLeader says whether this member
// still leads (deposed: it does not), waiting for hold to open while it
// is set.
type leaderCommitter struct {
	st       *store.Store
	deposed  atomic.Bool
	verifies atomic.Int64
	hold     atomic.Bool
	entered  chan struct{}
	gate     chan struct{}
}

func (c *leaderCommitter) Commit(ctx context.Context, b *store.Batch) error {
	return c.st.Commit(ctx, b)
}

func (c *leaderCommitter) VerifyLeader(ctx context.Context) error {
	c.verifies.Add(1)
	if c.hold.Load() {
		c.entered <- struct{}{}
		select {
		case <-c.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if c.deposed.Load() {
		return fmt.Errorf("%w: leadership lost", store.ErrNotLeading)
	}
	return nil
}

// TestRefusalsConfirmLeadership: a refusal decided from the engine's
// memory (a verb not allowed in the node's state, a change of a locked
// node) is answered only once the committer confirms the leadership,
// and is Unavailable (503) when it does not, without stopping the
// engine; a batch that commits is answered without asking (its commit
// needed the majority); and the loop does not wait for a confirmation.
func TestRefusalsConfirmLeadership(t *testing.T) {
	c := &leaderCommitter{entered: make(chan struct{}, 1), gate: make(chan struct{})}
	e, rec := newEngine(t, Config{Committer: func(st *store.Store) store.Committer { c.st = st; return c }})
	n, err := e.CreateNode(NodeSpec{Name: "a", Driver: "fake"})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.UpdateNode(n.UUID, func(x *fsm.Node) error { x.Description = "d1"; return nil }); err != nil {
		t.Fatal(err)
	}
	if v := c.verifies.Load(); v != 0 {
		t.Fatalf("committed writes asked for %d confirmations, want none", v)
	}

	// Leading: the refusal is the state machine's, after one
	// confirmation.
	var ee *Error
	err = e.Verb(n.UUID, fsm.VerbRequest{Verb: fsm.Provide})
	if !errors.As(err, &ee) || ee.Kind != Invalid || !strings.Contains(ee.Msg, `while it is in state "enroll"`) {
		t.Fatalf("provide from enroll while leading: %v, want the refusal naming enroll", err)
	}
	if v := c.verifies.Load(); v != 1 {
		t.Fatalf("the refusal asked for %d confirmations, want 1", v)
	}

	// Deposed: the same refusal, and a PATCH refused because the node
	// is locked, are Unavailable; the engine goes on.
	c.deposed.Store(true)
	err = e.Verb(n.UUID, fsm.VerbRequest{Verb: fsm.Provide})
	if !errors.As(err, &ee) || ee.Kind != Unavailable || !strings.Contains(ee.Msg, "cannot confirm that it still leads") {
		t.Fatalf("provide from enroll, not confirmed: %v, want Unavailable", err)
	}
	c.deposed.Store(false)
	if err := e.Verb(n.UUID, fsm.VerbRequest{Verb: fsm.Manage}); err != nil { // locks the node: validate is sent
		t.Fatal(err)
	}
	rec.next(t, n.UUID, 0)
	c.deposed.Store(true)
	err = e.UpdateNode(n.UUID, func(x *fsm.Node) error { x.Description = "d2"; return nil })
	if !errors.As(err, &ee) || ee.Kind != Unavailable {
		t.Fatalf("a change of the locked node, not confirmed: %v, want Unavailable", err)
	}
	if e.Err() != nil {
		t.Fatalf("an unconfirmed refusal stopped the engine: %v", e.Err())
	}
	c.deposed.Store(false)
	err = e.UpdateNode(n.UUID, func(x *fsm.Node) error { x.Description = "d2"; return nil })
	if !errors.As(err, &ee) || ee.Kind != Conflict {
		t.Fatalf("a change of the locked node, leading: %v, want Conflict (locked)", err)
	}

	// While a confirmation is under way, the loop commits other work.
	m, err := e.CreateNode(NodeSpec{Name: "b", Driver: "fake"})
	if err != nil {
		t.Fatal(err)
	}
	c.hold.Store(true)
	refusal := make(chan error, 1)
	go func() { refusal <- e.Verb(m.UUID, fsm.VerbRequest{Verb: fsm.Provide}) }()
	select {
	case <-c.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the refusal never asked for a confirmation")
	}
	c.hold.Store(false)
	if err := e.UpdateNode(m.UUID, func(x *fsm.Node) error { x.Description = "meanwhile"; return nil }); err != nil {
		t.Fatalf("a write while a confirmation waits: %v", err)
	}
	select {
	case err := <-refusal:
		t.Fatalf("the refusal was answered before its confirmation: %v", err)
	default:
	}
	close(c.gate)
	select {
	case err := <-refusal:
		if !errors.As(err, &ee) || ee.Kind != Invalid {
			t.Fatalf("provide from enroll, confirmed late: %v, want the refusal", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the refusal was not answered after its confirmation")
	}
}

// TestSingleStoreAsksNothing: on the plain store (a single coordinator)
// the engine answers a refusal from an empty batch at once: *Store is no
// LeaderVerifier.
func TestSingleStoreAsksNothing(t *testing.T) {
	var c store.Committer = (*store.Store)(nil)
	if _, ok := c.(store.LeaderVerifier); ok {
		t.Fatal("*store.Store is a LeaderVerifier: a single coordinator would pay for a confirmation")
	}
}
