package engine

import (
	"errors"
	"strings"
	"testing"

	"github.com/bmedge/bmedge/coordinator/fsm"
)

func extraOf(t *testing.T, e *Engine, id string) map[string]any {
	t.Helper()
	var x map[string]any
	if err := e.View(id, func(n *fsm.Node, _ bool) error { x = n.Extra; return nil }); err != nil {
		t.Fatal(err)
	}
	return x
}

// TestPatchNodeRetriesWhenTheNodeChanged: a change applied outside the
// loop to a snapshot is not committed over a change another request made
// meanwhile: it is applied again to a new snapshot, which has the other
// change, and both are kept.
func TestPatchNodeRetriesWhenTheNodeChanged(t *testing.T) {
	e, _ := newEngine(t, Config{})
	n, err := e.CreateNode(NodeSpec{Name: "n1", Driver: "fake", Site: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	id, err := e.PatchNode("n1", func(c *fsm.Node) error {
		calls++
		if calls == 1 {
			// Another request changes the node while this change is
			// being applied (fn runs outside the loop).
			if err := e.UpdateNode(c.UUID, func(o *fsm.Node) error { o.Extra = map[string]any{"other": "x"}; return nil }); err != nil {
				t.Fatal(err)
			}
		}
		if c.Extra == nil {
			c.Extra = map[string]any{}
		}
		c.Extra["mine"] = 1.0
		return nil
	})
	if err != nil || id != n.UUID {
		t.Fatalf("PatchNode: %q, %v", id, err)
	}
	if calls != 2 {
		t.Fatalf("the change was applied %d times, want 2 (once more on a snapshot with the other change)", calls)
	}
	if x := extraOf(t, e, n.UUID); x["other"] != "x" || x["mine"] != 1.0 {
		t.Fatalf("extra is %v: want both the other request's change and this one", x)
	}
}

// TestPatchNodeConflictAfterAttempts: a node that changes during every
// attempt gets a Conflict that says to send the request again, and the
// change is not committed.
func TestPatchNodeConflictAfterAttempts(t *testing.T) {
	e, _ := newEngine(t, Config{})
	n, err := e.CreateNode(NodeSpec{Name: "n1", Driver: "fake", Site: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	_, err = e.PatchNode("n1", func(c *fsm.Node) error {
		calls++
		if err := e.UpdateNode(c.UUID, func(o *fsm.Node) error { o.Description = strings.Repeat("x", calls); return nil }); err != nil {
			t.Fatal(err)
		}
		c.Extra = map[string]any{"mine": true}
		return nil
	})
	var ee *Error
	if !errors.As(err, &ee) || ee.Kind != Conflict || !strings.Contains(ee.Msg, "send the request again") {
		t.Fatalf("PatchNode on a node changed every time: %v, want a Conflict saying to send the request again", err)
	}
	if calls != PatchAttempts {
		t.Fatalf("%d attempts, want %d", calls, PatchAttempts)
	}
	if x := extraOf(t, e, n.UUID); x["mine"] != nil {
		t.Fatalf("the refused change was committed: extra %v", x)
	}
}

// TestPatchNodeChecksStateAtCommit: the state rules hold against the
// node as it is when the change is committed: a node that was locked by
// a verb while the change was being applied is refused as locked.
func TestPatchNodeChecksStateAtCommit(t *testing.T) {
	e, _ := newEngine(t, Config{})
	n, err := e.CreateNode(NodeSpec{Name: "n1", Driver: "fake", Site: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.PatchNode("n1", func(c *fsm.Node) error {
		if c.Locked() {
			return nil
		}
		if err := e.Verb(c.UUID, fsm.VerbRequest{Verb: fsm.Manage}); err != nil {
			t.Fatal(err)
		}
		c.Extra = map[string]any{"mine": true}
		return nil
	})
	var ee *Error
	if !errors.As(err, &ee) || ee.Kind != Conflict || !strings.Contains(ee.Msg, "locked") {
		t.Fatalf("PatchNode of a node locked meanwhile: %v, want a Conflict saying it is locked", err)
	}
	if x := extraOf(t, e, n.UUID); x["mine"] != nil {
		t.Fatalf("the change was committed to a locked node: extra %v", x)
	}
}
