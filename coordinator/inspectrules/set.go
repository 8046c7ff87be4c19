package inspectrules

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"gopkg.in/yaml.v3"
)

// MaxRules is the most rules the coordinator keeps (every rule runs on
// every inspection).
const MaxRules = 1000

// Records is what the Set needs of the database, where each rule is a
// record of its own (a key prefix of the coordinator's store): read
// every rule's record at start, write one (nil value: delete it).
type Records interface {
	Load(fn func(id string, value []byte) error) error
	Save(id string, value any) error
}

// NotFoundError is a rule that does not exist (the API's 404).
type NotFoundError struct{ ID string }

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("Inspection rule %s could not be found.", e.ID)
}

// ConflictError is a rule whose UUID another has (the API's 409).
type ConflictError struct{ Msg string }

func (e *ConflictError) Error() string { return e.Msg }

// Set holds the stored rules in memory, written through to the
// database, and the built-in ones.
type Set struct {
	rec     Records
	now     func() time.Time
	mu      sync.RWMutex
	rules   map[string]*Rule
	builtIn []Rule
}

// NewSet loads the stored rules; builtIn are the coordinator's built-in
// rules (ParseBuiltIn), which the API lists but cannot change.
func NewSet(rec Records, now func() time.Time, builtIn []Rule) (*Set, error) {
	s := &Set{rec: rec, now: now, rules: map[string]*Rule{}, builtIn: builtIn}
	err := rec.Load(func(k string, v []byte) error {
		var r Rule
		if err := json.Unmarshal(v, &r); err != nil {
			return fmt.Errorf("corrupt inspection rule record %s: %w", k, err)
		}
		s.rules[r.UUID] = &r
		return nil
	})
	return s, err
}

// ParseBuiltIn reads the built-in rules (a YAML or JSON list of rules in
// the API's shape, Ironic's [inspection_rules]built_in_rules file): each
// is checked as the API checks a rule, any priority allowed; a rule
// without a UUID gets Ironic's synthetic one,
// 00000000-0000-0000-0000-00000000000N.
func ParseBuiltIn(data []byte) ([]Rule, error) {
	var y any
	if err := yaml.Unmarshal(data, &y); err != nil {
		return nil, fmt.Errorf("built-in inspection rules: not YAML (or JSON): %v", err)
	}
	// As the API's JSON: numbers float64, objects map[string]any.
	j, err := json.Marshal(y)
	if err != nil {
		return nil, fmt.Errorf("built-in inspection rules: %v", err)
	}
	var docs []map[string]any
	if err := json.Unmarshal(j, &docs); err != nil {
		return nil, fmt.Errorf("built-in inspection rules: a list of rules is expected: %v", err)
	}
	var out []Rule
	synthetic := 0
	seen := map[string]bool{}
	for i, doc := range docs {
		r, err := Parse(doc, true)
		if err != nil {
			return nil, fmt.Errorf("built-in inspection rule %d: %v", i+1, err)
		}
		if r.UUID == "" {
			r.UUID = fmt.Sprintf("00000000-0000-0000-0000-%012x", synthetic)
			synthetic++
		}
		if seen[r.UUID] {
			return nil, fmt.Errorf("built-in inspection rule %d: UUID %s is another built-in rule's", i+1, r.UUID)
		}
		seen[r.UUID] = true
		r.BuiltIn = true
		out = append(out, r)
	}
	return out, nil
}

func copyRule(r *Rule) Rule {
	var c Rule
	b, _ := json.Marshal(r)
	_ = json.Unmarshal(b, &c)
	c.BuiltIn = r.BuiltIn
	return c
}

// List is the stored rules, oldest first, then the built-in ones.
func (s *Set) List() []Rule {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]Rule, 0, len(s.rules)+len(s.builtIn))
	for _, r := range s.rules {
		out = append(out, copyRule(r))
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].UUID < out[j].UUID
	})
	for i := range s.builtIn {
		out = append(out, copyRule(&s.builtIn[i]))
	}
	return out
}

// Get finds a rule by UUID.
func (s *Set) Get(id string) (Rule, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if r, ok := s.find(id); ok {
		return copyRule(r), nil
	}
	return Rule{}, &NotFoundError{ID: id}
}

func (s *Set) find(id string) (*Rule, bool) {
	id = strings.ToLower(id)
	if r, ok := s.rules[id]; ok {
		return r, true
	}
	for i := range s.builtIn {
		if s.builtIn[i].UUID == id {
			return &s.builtIn[i], true
		}
	}
	return nil, false
}

// Create stores a new rule (checked by Parse); its UUID is made when it
// has none.
func (s *Set) Create(r Rule) (Rule, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.UUID == "" {
		r.UUID = uuid.NewString()
	}
	if _, ok := s.find(r.UUID); ok {
		return r, &ConflictError{Msg: fmt.Sprintf("An inspection rule with UUID %s already exists.", r.UUID)}
	}
	if len(s.rules) >= MaxRules {
		return r, &Error{Msg: fmt.Sprintf("There are already %d inspection rules, the most this coordinator keeps; delete one that is no longer used first", MaxRules)}
	}
	r.CreatedAt, r.UpdatedAt, r.BuiltIn = s.now().UTC(), nil, false
	if err := s.rec.Save(r.UUID, &r); err != nil {
		return r, err
	}
	s.rules[r.UUID] = &r
	return copyRule(&r), nil
}

// Update replaces a stored rule by what fn makes of a copy of it (a
// PATCH); the UUID cannot change, a built-in rule cannot be changed.
func (s *Set) Update(id string, fn func(cur Rule) (Rule, error)) (Rule, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.find(id)
	if !ok {
		return Rule{}, &NotFoundError{ID: id}
	}
	if old.BuiltIn {
		return Rule{}, &Error{Msg: fmt.Sprintf("Inspection rule %s is a built-in rule (the coordinator's built-in rules file); change it there", old.UUID)}
	}
	r, err := fn(copyRule(old))
	if err != nil {
		return r, err
	}
	if r.UUID != old.UUID {
		return r, &Error{Msg: fmt.Sprintf("The uuid of inspection rule %s cannot be changed", old.UUID)}
	}
	now := s.now().UTC()
	r.CreatedAt, r.UpdatedAt = old.CreatedAt, &now
	if err := s.rec.Save(r.UUID, &r); err != nil {
		return r, err
	}
	s.rules[r.UUID] = &r
	return copyRule(&r), nil
}

// Delete removes a stored rule.
func (s *Set) Delete(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.find(id)
	if !ok {
		return &NotFoundError{ID: id}
	}
	if r.BuiltIn {
		return &Error{Msg: fmt.Sprintf("Inspection rule %s is a built-in rule (the coordinator's built-in rules file); remove it there", r.UUID)}
	}
	if err := s.rec.Save(r.UUID, nil); err != nil {
		return err
	}
	delete(s.rules, r.UUID)
	return nil
}

// Rules is what an inspection runs: every rule of phase main.
func (s *Set) Rules() []Rule {
	return slices.DeleteFunc(s.List(), func(r Rule) bool { return r.Phase != PhaseMain })
}
