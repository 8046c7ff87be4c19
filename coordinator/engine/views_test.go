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

// gateCommitter is a Committer that counts the batches and, while hold
// is set, keeps each in Commit until the gate opens.
type gateCommitter struct {
	st      *store.Store
	hold    atomic.Bool
	entered chan struct{}
	gate    chan struct{}
	batches atomic.Int64
}

func (g *gateCommitter) Commit(ctx context.Context, b *store.Batch) error {
	g.batches.Add(1)
	if g.hold.Load() {
		g.entered <- struct{}{}
		<-g.gate
	}
	return g.st.Commit(ctx, b)
}

// TestReadsDoNotWaitOnTheLoop: while the loop is inside a commit (the
// committer holds it), GET of a node, lists and the web view's reads
// (View, Each, Views) answer at once, and with the state as committed
// before, never the one being committed; once the commit is done, they
// show the change. Every write of the loop goes through the Committer.
func TestReadsDoNotWaitOnTheLoop(t *testing.T) {
	g := &gateCommitter{entered: make(chan struct{}, 1), gate: make(chan struct{})}
	e, _ := newEngine(t, Config{Committer: func(st *store.Store) store.Committer { g.st = st; return g }})
	n, err := e.CreateNode(NodeSpec{Name: "a", Driver: "fake"})
	if err != nil {
		t.Fatal(err)
	}
	if g.batches.Load() == 0 {
		t.Fatal("the node's creation did not go through the Committer")
	}
	g.hold.Store(true)
	done := make(chan error, 1)
	go func() {
		done <- e.UpdateNode(n.UUID, func(c *fsm.Node) error { c.Description = "changed"; return nil })
	}()
	select {
	case <-g.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the change never reached the Committer")
	}
	type seen struct {
		view, each, views string
	}
	got := make(chan seen, 1)
	go func() {
		var s seen
		_ = e.View("a", func(x *fsm.Node, _ bool) error { s.view = x.Description; return nil })
		e.Each(func(x *fsm.Node) bool { s.each = x.Description; return true })
		v := e.Views([]string{n.UUID}, "k", true, func(x *fsm.Node, _ bool) any { return x.Description }, nil)
		s.views, _ = v[0].(string)
		got <- s
	}()
	select {
	case s := <-got:
		if s != (seen{}) {
			t.Fatalf("reads during the commit saw %+v, want the committed (empty) description", s)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("a read waited on the loop's commit")
	}
	g.hold.Store(false)
	close(g.gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var d string
	_ = e.View(n.UUID, func(x *fsm.Node, _ bool) error { d = x.Description; return nil })
	v := e.Views([]string{"a"}, "k", true, func(x *fsm.Node, _ bool) any { return x.Description }, nil)
	if d != "changed" || v[0] != "changed" {
		t.Fatalf("after the commit: view %q, kept view %v; want the change", d, v[0])
	}
}

// deposedCommitter refuses every commit once deposed is set, as a
// cluster's replicated log does on a member that no longer leads.
type deposedCommitter struct {
	st      *store.Store
	deposed atomic.Bool
}

func (d *deposedCommitter) Commit(ctx context.Context, b *store.Batch) error {
	if d.deposed.Load() {
		return fmt.Errorf("%w: leadership lost", store.ErrNotLeading)
	}
	return d.st.Commit(ctx, b)
}

// TestNotLeadingStops: a commit refused because the member no longer
// leads stops the engine (Failed closes, nothing of the batch is
// stored) and requests get Unavailable saying so, not that the database
// failed.
func TestNotLeadingStops(t *testing.T) {
	d := &deposedCommitter{}
	e, _ := newEngine(t, Config{Committer: func(st *store.Store) store.Committer { d.st = st; return d }})
	d.deposed.Store(true)
	_, err := e.CreateNode(NodeSpec{Name: "late", Driver: "fake"})
	var ee *Error
	if !errors.As(err, &ee) || ee.Kind != Unavailable {
		t.Fatalf("create on a deposed member: %v, want Unavailable", err)
	}
	select {
	case <-e.Failed():
	case <-time.After(5 * time.Second):
		t.Fatal("the engine did not stop")
	}
	_ = d.st.Scan(store.NodePrefix, func(_ string, v []byte) error {
		if strings.Contains(string(v), `"late"`) {
			t.Fatal("the refused batch's node is in the store")
		}
		return nil
	})
	if err := e.Stopped(); err == nil || !strings.Contains(err.Error(), "no longer leads its cluster") || strings.Contains(err.Error(), "database failed") {
		t.Fatalf("Stopped on a deposed member: %v", err)
	}
}
