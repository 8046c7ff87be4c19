package inspectrules

import (
	"encoding/json"
	"errors"
	"testing"
	"time"
)

// memRecords is a database of one map.
type memRecords map[string][]byte

func (m memRecords) Load(fn func(id string, v []byte) error) error {
	for k, v := range m {
		if err := fn(k, v); err != nil {
			return err
		}
	}
	return nil
}

func (m memRecords) Save(id string, v any) error {
	if v == nil {
		delete(m, id)
		return nil
	}
	b, err := json.Marshal(v)
	m[id] = b
	return err
}

// TestSet: rules are stored and found again after a restart, oldest
// first then the built-in ones; built-in rules cannot be changed or
// deleted; UUIDs are unique.
func TestSet(t *testing.T) {
	db := memRecords{}
	clock := time.Unix(1000, 0)
	now := func() time.Time { clock = clock.Add(time.Second); return clock }
	builtIn, err := ParseBuiltIn([]byte(`[{"actions": [{"op": "log", "args": {"msg": "built in"}}]}]`))
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSet(db, now, builtIn)
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.Create(rule(t, `{"uuid": "eeeeeeee-0000-4000-8000-000000000002", "actions": [{"op": "log", "args": {"msg": "a"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(rule(t, `{"uuid": "eeeeeeee-0000-4000-8000-000000000001", "priority": 5, "actions": [{"op": "log", "args": {"msg": "b"}}]}`)); err != nil {
		t.Fatal(err)
	}
	var ce *ConflictError
	if _, err := s.Create(rule(t, `{"uuid": "eeeeeeee-0000-4000-8000-000000000002", "actions": [{"op": "log", "args": {"msg": "a"}}]}`)); !errors.As(err, &ce) {
		t.Fatalf("duplicate UUID: %v", err)
	}
	if _, err := s.Update(a.UUID, func(cur Rule) (Rule, error) { cur.Description = "changed"; return cur, nil }); err != nil {
		t.Fatal(err)
	}
	var ie *Error
	if _, err := s.Update(builtIn[0].UUID, func(cur Rule) (Rule, error) { return cur, nil }); !errors.As(err, &ie) {
		t.Fatalf("update of a built-in rule: %v", err)
	}
	if err := s.Delete(builtIn[0].UUID); !errors.As(err, &ie) {
		t.Fatalf("delete of a built-in rule: %v", err)
	}
	var nf *NotFoundError
	if _, err := s.Get("eeeeeeee-0000-4000-8000-00000000000f"); !errors.As(err, &nf) {
		t.Fatalf("get of no rule: %v", err)
	}
	s2, err := NewSet(db, now, builtIn)
	if err != nil {
		t.Fatal(err)
	}
	l := s2.List()
	if len(l) != 3 || l[0].UUID != a.UUID || l[0].Description != "changed" || l[0].UpdatedAt == nil || l[1].Priority != 5 || !l[2].BuiltIn {
		t.Fatalf("after restart: %+v", l)
	}
	if err := s2.Delete(a.UUID); err != nil {
		t.Fatal(err)
	}
	if len(db) != 1 || len(s2.Rules()) != 2 {
		t.Fatalf("after delete: %d records, %d rules", len(db), len(s2.Rules()))
	}
}
