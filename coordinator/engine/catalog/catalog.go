// Package catalog keeps the deploy templates (API 1.55) and runbooks
// (API 1.92): few, small records that change rarely, kept in memory under
// the book's own lock and written through to the store by the engine's
// committer (Save). They are not the loop's: a deploy or a clean takes a
// copy of what it uses when it starts (fsm.VerbRequest).
package catalog

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/coordinator/store"
)

// Bounds of the catalog (Ironic has none): a site's operators have a
// handful of deploy templates and runbooks; each one is at most
// fsm.MaxCatalogSteps steps and a request body's size.
const (
	MaxDeployTemplates = 1000
	MaxRunbooks        = 1000
)

// Kind is what went wrong with a request (the engine maps it to its
// own kinds).
type Kind int

const (
	Invalid Kind = iota + 1
	NotFound
	Conflict
)

// Error is a request's failure: its kind and a message for the caller.
type Error struct {
	Kind Kind
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

func errorf(kind Kind, f string, a ...any) *Error {
	return &Error{Kind: kind, Msg: fmt.Sprintf(f, a...)}
}

// Save writes one record (v nil: deletes it) durably; an error it
// returns is the caller's answer.
type Save func(key string, v any) error

// Book holds the deploy templates and runbooks by UUID.
type Book struct {
	mu        sync.RWMutex
	templates map[string]*fsm.DeployTemplate
	runbooks  map[string]*fsm.Runbook
	save      Save
	now       func() time.Time
}

// New returns an empty book that writes with save and stamps by now.
func New(save Save, now func() time.Time) *Book {
	return &Book{templates: map[string]*fsm.DeployTemplate{}, runbooks: map[string]*fsm.Runbook{}, save: save, now: now}
}

// Load reads the deploy templates and runbooks at start.
func (b *Book) Load(rd store.Reader) error {
	err := rd.Scan(store.DeployTemplatePrefix, func(k string, v []byte) error {
		var t fsm.DeployTemplate
		if err := json.Unmarshal(v, &t); err != nil {
			return fmt.Errorf("corrupt deploy template record %s: %w", k, err)
		}
		b.templates[t.UUID] = &t
		return nil
	})
	if err != nil {
		return err
	}
	return rd.Scan(store.RunbookPrefix, func(k string, v []byte) error {
		var rb fsm.Runbook
		if err := json.Unmarshal(v, &rb); err != nil {
			return fmt.Errorf("corrupt runbook record %s: %w", k, err)
		}
		b.runbooks[rb.UUID] = &rb
		return nil
	})
}

// entry is what the two kinds of record share, for lookups.
type entry interface {
	*fsm.DeployTemplate | *fsm.Runbook
}

func findEntry[T entry](m map[string]T, ident string, nameOf func(T) string) (T, bool) {
	if x, ok := m[strings.ToLower(ident)]; ok {
		return x, true
	}
	for _, x := range m {
		if nameOf(x) == ident {
			return x, true
		}
	}
	var zero T
	return zero, false
}

func sortedEntries[T entry](m map[string]T, created func(T) time.Time, uuidOf func(T) string) []T {
	out := make([]T, 0, len(m))
	for _, x := range m {
		out = append(out, x)
	}
	sort.Slice(out, func(i, j int) bool {
		if a, b := created(out[i]), created(out[j]); !a.Equal(b) {
			return a.Before(b)
		}
		return uuidOf(out[i]) < uuidOf(out[j])
	})
	return out
}

func tUUID(t *fsm.DeployTemplate) string       { return t.UUID }
func tName(t *fsm.DeployTemplate) string       { return t.Name }
func tCreated(t *fsm.DeployTemplate) time.Time { return t.CreatedAt }
func rUUID(r *fsm.Runbook) string              { return r.UUID }
func rName(r *fsm.Runbook) string              { return r.Name }
func rCreated(r *fsm.Runbook) time.Time        { return r.CreatedAt }

// copyTemplate is a deep copy (callers may keep and change it).
func copyTemplate(t *fsm.DeployTemplate) fsm.DeployTemplate {
	var c fsm.DeployTemplate
	b, _ := json.Marshal(t)
	_ = json.Unmarshal(b, &c)
	return c
}

func copyRunbook(r *fsm.Runbook) fsm.Runbook {
	var c fsm.Runbook
	b, _ := json.Marshal(r)
	_ = json.Unmarshal(b, &c)
	return c
}

// DeployTemplates lists the deploy templates, oldest first.
func (b *Book) DeployTemplates() []fsm.DeployTemplate {
	b.mu.RLock()
	defer b.mu.RUnlock()
	var out []fsm.DeployTemplate
	for _, t := range sortedEntries(b.templates, tCreated, tUUID) {
		out = append(out, copyTemplate(t))
	}
	return out
}

// DeployTemplate finds a deploy template by UUID or name.
func (b *Book) DeployTemplate(ident string) (fsm.DeployTemplate, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	t, ok := findEntry(b.templates, ident, tName)
	if !ok {
		return fsm.DeployTemplate{}, errorf(NotFound, "Deploy template %s could not be found.", ident)
	}
	return copyTemplate(t), nil
}

// TemplatesNamed are copies of the deploy templates of the given names
// (those a deploy's instance_info traits name).
func (b *Book) TemplatesNamed(names []string) []fsm.DeployTemplate {
	if len(names) == 0 {
		return nil
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	var out []fsm.DeployTemplate
	for _, name := range names {
		if t, ok := findEntry(b.templates, name, tName); ok && t.Name == name {
			out = append(out, copyTemplate(t))
		}
	}
	return out
}

// CreateDeployTemplate stores a new deploy template (checked by
// fsm.ParseDeployTemplate); its UUID is made when it has none.
func (b *Book) CreateDeployTemplate(t fsm.DeployTemplate) (fsm.DeployTemplate, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if t.UUID == "" {
		t.UUID = uuid.NewString()
	}
	if _, ok := b.templates[t.UUID]; ok {
		return t, errorf(Conflict, "A deploy template with UUID %s already exists.", t.UUID)
	}
	if _, ok := findEntry(b.templates, t.Name, tName); ok {
		return t, errorf(Conflict, "A deploy template with name %s already exists.", t.Name)
	}
	if len(b.templates) >= MaxDeployTemplates {
		return t, errorf(Invalid, "There are already %d deploy templates, the most this coordinator keeps; delete one that is no longer used first", MaxDeployTemplates)
	}
	t.CreatedAt, t.UpdatedAt = b.now().UTC(), nil
	if err := b.save(store.DeployTemplatePrefix+t.UUID, &t); err != nil {
		return t, err
	}
	b.templates[t.UUID] = &t
	return copyTemplate(&t), nil
}

// UpdateDeployTemplate replaces a deploy template by what fn makes of a
// copy of it (a PATCH); the UUID cannot change, the name must stay
// unique.
func (b *Book) UpdateDeployTemplate(ident string, fn func(cur fsm.DeployTemplate) (fsm.DeployTemplate, error)) (fsm.DeployTemplate, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	old, ok := findEntry(b.templates, ident, tName)
	if !ok {
		return fsm.DeployTemplate{}, errorf(NotFound, "Deploy template %s could not be found.", ident)
	}
	t, err := fn(copyTemplate(old))
	if err != nil {
		return t, err
	}
	if t.UUID != old.UUID {
		return t, errorf(Invalid, "The uuid of deploy template %s cannot be changed", old.UUID)
	}
	if o, ok := findEntry(b.templates, t.Name, tName); ok && o.UUID != old.UUID {
		return t, errorf(Conflict, "A deploy template with name %s already exists.", t.Name)
	}
	now := b.now().UTC()
	t.CreatedAt, t.UpdatedAt = old.CreatedAt, &now
	if err := b.save(store.DeployTemplatePrefix+t.UUID, &t); err != nil {
		return t, err
	}
	b.templates[t.UUID] = &t
	return copyTemplate(&t), nil
}

// DeleteDeployTemplate removes a deploy template. Deploys that started
// with it keep their copy of its steps.
func (b *Book) DeleteDeployTemplate(ident string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := findEntry(b.templates, ident, tName)
	if !ok {
		return errorf(NotFound, "Deploy template %s could not be found.", ident)
	}
	if err := b.save(store.DeployTemplatePrefix+t.UUID, nil); err != nil {
		return err
	}
	delete(b.templates, t.UUID)
	return nil
}

// Runbooks lists the runbooks, oldest first.
func (b *Book) Runbooks() []fsm.Runbook {
	b.mu.RLock()
	defer b.mu.RUnlock()
	var out []fsm.Runbook
	for _, r := range sortedEntries(b.runbooks, rCreated, rUUID) {
		out = append(out, copyRunbook(r))
	}
	return out
}

// Runbook finds a runbook by UUID or name.
func (b *Book) Runbook(ident string) (fsm.Runbook, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	r, ok := findEntry(b.runbooks, ident, rName)
	if !ok {
		return fsm.Runbook{}, errorf(NotFound, "Runbook %s could not be found.", ident)
	}
	return copyRunbook(r), nil
}

// CreateRunbook stores a new runbook (checked by fsm.ParseRunbook); its
// UUID is made when it has none.
func (b *Book) CreateRunbook(r fsm.Runbook) (fsm.Runbook, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if r.UUID == "" {
		r.UUID = uuid.NewString()
	}
	if _, ok := b.runbooks[r.UUID]; ok {
		return r, errorf(Conflict, "A runbook with UUID %s already exists.", r.UUID)
	}
	if _, ok := findEntry(b.runbooks, r.Name, rName); ok {
		return r, errorf(Conflict, "A runbook with name %s already exists.", r.Name)
	}
	if len(b.runbooks) >= MaxRunbooks {
		return r, errorf(Invalid, "There are already %d runbooks, the most this coordinator keeps; delete one that is no longer used first", MaxRunbooks)
	}
	r.CreatedAt, r.UpdatedAt = b.now().UTC(), nil
	if err := b.save(store.RunbookPrefix+r.UUID, &r); err != nil {
		return r, err
	}
	b.runbooks[r.UUID] = &r
	return copyRunbook(&r), nil
}

// UpdateRunbook replaces a runbook by what fn makes of a copy of it (a
// PATCH); the UUID cannot change, the name must stay unique.
func (b *Book) UpdateRunbook(ident string, fn func(cur fsm.Runbook) (fsm.Runbook, error)) (fsm.Runbook, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	old, ok := findEntry(b.runbooks, ident, rName)
	if !ok {
		return fsm.Runbook{}, errorf(NotFound, "Runbook %s could not be found.", ident)
	}
	r, err := fn(copyRunbook(old))
	if err != nil {
		return r, err
	}
	if r.UUID != old.UUID {
		return r, errorf(Invalid, "The uuid of runbook %s cannot be changed", old.UUID)
	}
	if o, ok := findEntry(b.runbooks, r.Name, rName); ok && o.UUID != old.UUID {
		return r, errorf(Conflict, "A runbook with name %s already exists.", r.Name)
	}
	now := b.now().UTC()
	r.CreatedAt, r.UpdatedAt = old.CreatedAt, &now
	if err := b.save(store.RunbookPrefix+r.UUID, &r); err != nil {
		return r, err
	}
	b.runbooks[r.UUID] = &r
	return copyRunbook(&r), nil
}

// DeleteRunbook removes a runbook. Cleanings and services that started
// with it keep their copy of its steps.
func (b *Book) DeleteRunbook(ident string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	r, ok := findEntry(b.runbooks, ident, rName)
	if !ok {
		return errorf(NotFound, "Runbook %s could not be found.", ident)
	}
	if err := b.save(store.RunbookPrefix+r.UUID, nil); err != nil {
		return err
	}
	delete(b.runbooks, r.UUID)
	return nil
}
