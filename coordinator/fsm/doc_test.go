package fsm

import (
	"os"
	"testing"
)

// TestStatesDocFresh fails when docs/states.md no longer matches the table.
func TestStatesDocFresh(t *testing.T) {
	b, err := os.ReadFile("../../docs/states.md")
	if err != nil {
		t.Fatalf("docs/states.md: %v; run 'make states-doc'", err)
	}
	if string(b) != Markdown() {
		t.Fatal("docs/states.md is stale: run 'make states-doc' and commit it")
	}
}
