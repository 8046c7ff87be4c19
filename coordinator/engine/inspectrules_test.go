package engine

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/bmedge/bmedge/coordinator/inspectrules"
	"github.com/bmedge/bmedge/coordinator/store"
)

// TestInspectionRulesSurviveRestart: the inspection rules are records of
// their own key prefix in the database, there again after a restart; a
// deleted one stays deleted; the built-in rules of the configuration are
// listed after the stored ones.
func TestInspectionRulesSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	builtIn, err := inspectrules.ParseBuiltIn([]byte(`[{"actions": [{"op": "log", "args": {"msg": "built in"}}]}]`))
	if err != nil {
		t.Fatal(err)
	}
	open := func() *Engine {
		t.Helper()
		e, err := New(Config{DataDir: dir, TickInterval: time.Hour, BuiltInInspectionRules: builtIn})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Start(&recorder{}); err != nil {
			t.Fatal(err)
		}
		return e
	}
	parse := func(s string) inspectrules.Rule {
		var doc map[string]any
		if err := jsonUnmarshal(s, &doc); err != nil {
			t.Fatal(err)
		}
		r, err := inspectrules.Parse(doc, false)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	e := open()
	keep, err := e.InspectionRules().Create(parse(`{"priority": 7, "actions": [{"op": "add-trait", "args": {"name": "CUSTOM_KEPT"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	gone, err := e.InspectionRules().Create(parse(`{"actions": [{"op": "add-trait", "args": {"name": "CUSTOM_GONE"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.InspectionRules().Delete(gone.UUID); err != nil {
		t.Fatal(err)
	}
	n := 0
	if err := e.st.Scan(store.InspectionRulePrefix, func(string, []byte) error { n++; return nil }); err != nil || n != 1 {
		t.Fatalf("%d records under %s (%v), want 1", n, store.InspectionRulePrefix, err)
	}
	e.Close()

	e = open()
	t.Cleanup(e.Close)
	l := e.InspectionRules().List()
	if len(l) != 2 || l[0].UUID != keep.UUID || l[0].Priority != 7 || !l[0].CreatedAt.Equal(keep.CreatedAt) || !l[1].BuiltIn {
		t.Fatalf("rules after restart: %+v", l)
	}
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }
