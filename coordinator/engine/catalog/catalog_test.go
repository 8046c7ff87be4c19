package catalog

import (
	"errors"
	"testing"
	"time"

	"github.com/bmedge/bmedge/coordinator/fsm"
)

// The book writes every change through Save before it keeps it, keeps
// names unique, finds entries by UUID or name, and keeps nothing that
// Save refused.
func TestBook(t *testing.T) {
	saved := map[string]any{}
	var refuse error
	now := time.Unix(1000, 0)
	b := New(func(key string, v any) error {
		if refuse != nil {
			return refuse
		}
		if v == nil {
			delete(saved, key)
		} else {
			saved[key] = v
		}
		return nil
	}, func() time.Time { return now })
	tp, err := b.CreateDeployTemplate(fsm.DeployTemplate{Name: "CUSTOM_A"})
	if err != nil || tp.UUID == "" || !tp.CreatedAt.Equal(now) || len(saved) != 1 {
		t.Fatalf("create: %+v %v %v", tp, err, saved)
	}
	var ce *Error
	if _, err := b.CreateDeployTemplate(fsm.DeployTemplate{Name: "CUSTOM_A"}); !errors.As(err, &ce) || ce.Kind != Conflict {
		t.Fatalf("same name: %v", err)
	}
	if got, err := b.DeployTemplate("CUSTOM_A"); err != nil || got.UUID != tp.UUID {
		t.Fatalf("by name: %+v %v", got, err)
	}
	refuse = errors.New("disk gone")
	if _, err := b.CreateRunbook(fsm.Runbook{Name: "CUSTOM_R"}); err != refuse {
		t.Fatalf("refused save: %v", err)
	}
	refuse = nil
	if len(b.Runbooks()) != 0 {
		t.Fatal("a runbook Save refused was kept")
	}
	now = now.Add(time.Minute)
	up, err := b.UpdateDeployTemplate(tp.UUID, func(c fsm.DeployTemplate) (fsm.DeployTemplate, error) { c.Name = "CUSTOM_B"; return c, nil })
	if err != nil || up.Name != "CUSTOM_B" || up.UpdatedAt == nil || !up.UpdatedAt.Equal(now) || !up.CreatedAt.Equal(tp.CreatedAt) {
		t.Fatalf("update: %+v %v", up, err)
	}
	if err := b.DeleteDeployTemplate("CUSTOM_B"); err != nil || len(saved) != 0 {
		t.Fatalf("delete: %v %v", err, saved)
	}
	if _, err := b.DeployTemplate(tp.UUID); !errors.As(err, &ce) || ce.Kind != NotFound {
		t.Fatalf("deleted: %v", err)
	}
}
