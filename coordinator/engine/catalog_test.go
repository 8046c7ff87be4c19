package engine

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/bmedge/bmedge/coordinator/fsm"
)

// TestCatalogSurvivesRestart: a node's traits, deploy templates and
// runbooks are in the database, and the coordinator has them again after
// a restart (kept by name, with their steps); a deleted one stays
// deleted, names stay unique, and a trait change of a locked node is 409.
func TestCatalogSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	open := func() *Engine {
		t.Helper()
		e, err := New(Config{DataDir: dir, TickInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Start(&recorder{}); err != nil {
			t.Fatal(err)
		}
		return e
	}
	e := open()
	if _, _, err := e.AddSite("s1"); err != nil {
		t.Fatal(err)
	}
	n, err := e.CreateNode(NodeSpec{Name: "n1", Driver: "fake", Site: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.ChangeTraits("n1", func(id string, cur []string) ([]string, error) {
		return fsm.SetTraits(id, []string{"CUSTOM_B", "CUSTOM_A"})
	}); err != nil {
		t.Fatal(err)
	}
	tmpl, err := e.CreateDeployTemplate(fsm.DeployTemplate{Name: "CUSTOM_A", Steps: []fsm.TemplateStep{{Interface: "bios", Step: "apply_configuration", Priority: 150,
		Args: map[string]any{"settings": []any{map[string]any{"name": "X", "value": "Y"}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.CreateDeployTemplate(fsm.DeployTemplate{Name: "CUSTOM_A", Steps: tmpl.Steps}); !isKind(err, Conflict) {
		t.Fatalf("second template of the name: %v, want a conflict", err)
	}
	if _, err := e.CreateDeployTemplate(fsm.DeployTemplate{Name: "CUSTOM_GONE", Steps: tmpl.Steps}); err != nil {
		t.Fatal(err)
	}
	if err := e.DeleteDeployTemplate("CUSTOM_GONE"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.CreateRunbook(fsm.Runbook{Name: "CUSTOM_B", Owner: "p1", Steps: []fsm.RunbookStep{{Interface: "management", Step: "fake_reset_bmc", Order: 1}}}); err != nil {
		t.Fatal(err)
	}
	e.Close()

	e = open()
	t.Cleanup(e.Close)
	if tr, err := e.Traits(n.UUID); err != nil || !slices.Equal(tr, []string{"CUSTOM_A", "CUSTOM_B"}) {
		t.Fatalf("traits after restart: %v %v", tr, err)
	}
	got, err := e.DeployTemplate(tmpl.UUID)
	if err != nil || got.Name != "CUSTOM_A" || len(got.Steps) != 1 || got.Steps[0].Priority != 150 || !got.CreatedAt.Equal(tmpl.CreatedAt) {
		t.Fatalf("template after restart: %+v %v", got, err)
	}
	if _, err := e.DeployTemplate("CUSTOM_GONE"); !isKind(err, NotFound) {
		t.Fatalf("deleted template after restart: %v", err)
	}
	if rb, err := e.Runbook("CUSTOM_B"); err != nil || rb.Owner != "p1" || len(rb.Steps) != 1 {
		t.Fatalf("runbook after restart: %+v %v", rb, err)
	}
	if ts := e.templatesNamed([]string{"CUSTOM_A", "CUSTOM_NONE"}); len(ts) != 1 || ts[0].UUID != tmpl.UUID {
		t.Fatalf("templatesNamed: %+v", ts)
	}

	// A locked node's traits do not change.
	if err := e.do(func(t *tx) error { e.reg.nodes[n.UUID].Reservation = "coordinator"; return nil }); err != nil {
		t.Fatal(err)
	}
	err = e.ChangeTraits("n1", func(id string, cur []string) ([]string, error) { return nil, nil })
	if !isKind(err, Conflict) {
		t.Fatalf("traits of a locked node: %v, want a conflict", err)
	}
}

func isKind(err error, k Kind) bool {
	var e *Error
	return errors.As(err, &e) && e.Kind == k
}
