package engine

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/coordinator/store"
)

// startAt starts an engine on dir with a history cap; Close is the
// caller's (the tests restart engines on the same folder).
func startAt(t *testing.T, dir string, historyMax int) *Engine {
	t.Helper()
	e, err := New(Config{DataDir: dir, HistoryMaxEntries: historyMax, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(&recorder{}); err != nil {
		e.Close()
		t.Fatal(err)
	}
	return e
}

// toggle adds 2*n history entries to a node: maintenance set with reason
// r<i>, then unset.
func toggle(t *testing.T, e *Engine, id string, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		if err := e.SetMaintenance(id, true, fmt.Sprintf("r%d", i)); err != nil {
			t.Fatal(err)
		}
		if err := e.SetMaintenance(id, false, ""); err != nil {
			t.Fatal(err)
		}
	}
}

func events(t *testing.T, e *Engine, id string) []string {
	t.Helper()
	h, err := e.History(id)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(h))
	for i, x := range h {
		out[i] = x.Event
	}
	return out
}

// storedHistory counts a node's history keys in the store.
func storedHistory(t *testing.T, e *Engine, id string) int {
	t.Helper()
	n := 0
	if err := e.st.Keys(store.HistoryPrefix+id+"/", "", func(string) bool { n++; return true }); err != nil {
		t.Fatal(err)
	}
	return n
}

func wantEvents(t *testing.T, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("history:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// A node past its cap loses its oldest entries, in the order they were
// made; other nodes keep theirs.
func TestHistoryCappedPerNode(t *testing.T) {
	e := startAt(t, t.TempDir(), 5)
	defer e.Close()
	if _, _, err := e.AddSite("s1"); err != nil {
		t.Fatal(err)
	}
	a, err := e.CreateNode(NodeSpec{Name: "a", Driver: "fake"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.CreateNode(NodeSpec{Name: "b", Driver: "fake"}); err != nil {
		t.Fatal(err)
	}
	// 1 creation + 40 entries: more than histReadAhead past the cap, so
	// trimming reads the store more than once.
	toggle(t, e, a.UUID, 0, 20)
	wantEvents(t, events(t, e, "a"), "maintenance unset", "maintenance set: r18", "maintenance unset", "maintenance set: r19", "maintenance unset")
	if n := storedHistory(t, e, a.UUID); n != 5 {
		t.Fatalf("%d history keys stored for a, want 5", n)
	}
	wantEvents(t, events(t, e, "b"), "node created in enroll")
}

// The cap holds across restarts: a lowered cap trims at start, counts are
// right afterwards, and history of a node that is gone is deleted.
func TestHistoryCapAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	e := startAt(t, dir, 10)
	if _, _, err := e.AddSite("s1"); err != nil {
		t.Fatal(err)
	}
	a, err := e.CreateNode(NodeSpec{Name: "a", Driver: "fake"})
	if err != nil {
		t.Fatal(err)
	}
	toggle(t, e, a.UUID, 0, 10) // 21 entries, 10 kept
	if n := len(events(t, e, "a")); n != 10 {
		t.Fatalf("%d entries, want 10", n)
	}
	e.Close()

	// History left behind by a node deleted in a crash.
	var b store.Batch
	orphan := "00000000-0000-4000-8000-000000000001"
	for i := 0; i < 3; i++ {
		b.Set(fmt.Sprintf("%s%s/%020d-%08d", store.HistoryPrefix, orphan, time.Now().UnixNano(), i), []byte(`{"event":"orphan"}`))
	}
	writeOffline(t, dir, &b)

	e = startAt(t, dir, 4)
	wantEvents(t, events(t, e, "a"), "maintenance set: r8", "maintenance unset", "maintenance set: r9", "maintenance unset")
	if n := storedHistory(t, e, orphan); n != 0 {
		t.Fatalf("%d history keys of a node that does not exist survived the start", n)
	}
	toggle(t, e, a.UUID, 10, 1)
	wantEvents(t, events(t, e, "a"), "maintenance set: r9", "maintenance unset", "maintenance set: r10", "maintenance unset")
	e.Close()

	e = startAt(t, dir, 300)
	defer e.Close()
	toggle(t, e, a.UUID, 11, 1)
	if n := len(events(t, e, "a")); n != 6 {
		t.Fatalf("%d entries under a raised cap, want 6", n)
	}
}

// Entries of one batch beyond the cap trim the batch's own oldest.
func TestHistoryCapWithinOneBatch(t *testing.T) {
	e := startAt(t, t.TempDir(), 2)
	defer e.Close()
	if _, _, err := e.AddSite("s1"); err != nil {
		t.Fatal(err)
	}
	a, err := e.CreateNode(NodeSpec{Name: "a", Driver: "fake"})
	if err != nil {
		t.Fatal(err)
	}
	err = e.do(func(tx *tx) error {
		n := e.reg.nodes[a.UUID]
		for i := 0; i < 5; i++ {
			tx.addHistory(n, fsm.HistoryEntry{Time: tx.now.Add(time.Duration(i)), Severity: "INFO", Event: fmt.Sprintf("e%d", i)})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	wantEvents(t, events(t, e, "a"), "e3", "e4")
	if n := storedHistory(t, e, a.UUID); n != 2 {
		t.Fatalf("%d keys stored, want 2", n)
	}
}

// Deleting a node deletes its history and what the engine knew of it.
func TestDeleteNodeDropsHistory(t *testing.T) {
	e := startAt(t, t.TempDir(), 5)
	defer e.Close()
	if _, _, err := e.AddSite("s1"); err != nil {
		t.Fatal(err)
	}
	a, err := e.CreateNode(NodeSpec{Name: "a", Driver: "fake"})
	if err != nil {
		t.Fatal(err)
	}
	toggle(t, e, a.UUID, 0, 5)
	if err := e.DeleteNode("a"); err != nil {
		t.Fatal(err)
	}
	if n := storedHistory(t, e, a.UUID); n != 0 {
		t.Fatalf("%d history keys left after delete", n)
	}
	e.reg.mu.RLock()
	_, known := e.reg.hist[a.UUID]
	e.reg.mu.RUnlock()
	if known {
		t.Fatal("the engine still counts the deleted node's history")
	}
}
