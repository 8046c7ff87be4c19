package engine

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

// This file keeps the deploy templates (API 1.55) and runbooks (API 1.92):
// few, small records that change rarely, kept in memory and written
// through to the store. They are not the loop's: a deploy or a clean
// takes a copy of what it uses when it starts (fsm.VerbRequest).

// Bounds of the catalog (Ironic has none): a site's operators have a
// handful of deploy templates and runbooks; each one is at most
// fsm.MaxCatalogSteps steps and a request body's size.
const (
	MaxDeployTemplates = 1000
	MaxRunbooks        = 1000
)

// catalog holds the deploy templates and runbooks by UUID.
type catalog struct {
	mu        sync.RWMutex
	templates map[string]*fsm.DeployTemplate
	runbooks  map[string]*fsm.Runbook
}

// loadCatalog reads the deploy templates and runbooks at start.
func (e *Engine) loadCatalog() error {
	e.cat.templates = map[string]*fsm.DeployTemplate{}
	e.cat.runbooks = map[string]*fsm.Runbook{}
	err := e.st.Scan(store.DeployTemplatePrefix, func(k string, v []byte) error {
		var t fsm.DeployTemplate
		if err := json.Unmarshal(v, &t); err != nil {
			return fmt.Errorf("corrupt deploy template record %s: %w", k, err)
		}
		e.cat.templates[t.UUID] = &t
		return nil
	})
	if err != nil {
		return err
	}
	return e.st.Scan(store.RunbookPrefix, func(k string, v []byte) error {
		var rb fsm.Runbook
		if err := json.Unmarshal(v, &rb); err != nil {
			return fmt.Errorf("corrupt runbook record %s: %w", k, err)
		}
		e.cat.runbooks[rb.UUID] = &rb
		return nil
	})
}

// save writes one record (nil: deletes it); a failed write stops the
// engine as any failed commit does.
func (e *Engine) saveRecord(key string, v any) error {
	if err := e.Stopped(); err != nil {
		return err
	}
	var b store.Batch
	if v == nil {
		b.Delete(key)
	} else {
		data, err := json.Marshal(v)
		if err != nil {
			return err
		}
		b.Set(key, data)
	}
	if err := e.write(&b); err != nil {
		e.fail(err)
		return e.stoppedError()
	}
	return nil
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
func (e *Engine) DeployTemplates() []fsm.DeployTemplate {
	e.cat.mu.RLock()
	defer e.cat.mu.RUnlock()
	var out []fsm.DeployTemplate
	for _, t := range sortedEntries(e.cat.templates, tCreated, tUUID) {
		out = append(out, copyTemplate(t))
	}
	return out
}

// DeployTemplate finds a deploy template by UUID or name.
func (e *Engine) DeployTemplate(ident string) (fsm.DeployTemplate, error) {
	e.cat.mu.RLock()
	defer e.cat.mu.RUnlock()
	t, ok := findEntry(e.cat.templates, ident, tName)
	if !ok {
		return fsm.DeployTemplate{}, errorf(NotFound, "Deploy template %s could not be found.", ident)
	}
	return copyTemplate(t), nil
}

// templatesNamed are copies of the deploy templates of the given names
// (those a deploy's instance_info traits name).
func (e *Engine) templatesNamed(names []string) []fsm.DeployTemplate {
	if len(names) == 0 {
		return nil
	}
	e.cat.mu.RLock()
	defer e.cat.mu.RUnlock()
	var out []fsm.DeployTemplate
	for _, name := range names {
		if t, ok := findEntry(e.cat.templates, name, tName); ok && t.Name == name {
			out = append(out, copyTemplate(t))
		}
	}
	return out
}

// CreateDeployTemplate stores a new deploy template (checked by
// fsm.ParseDeployTemplate); its UUID is made when it has none.
func (e *Engine) CreateDeployTemplate(t fsm.DeployTemplate) (fsm.DeployTemplate, error) {
	e.cat.mu.Lock()
	defer e.cat.mu.Unlock()
	if t.UUID == "" {
		t.UUID = uuid.NewString()
	}
	if _, ok := e.cat.templates[t.UUID]; ok {
		return t, errorf(Conflict, "A deploy template with UUID %s already exists.", t.UUID)
	}
	if _, ok := findEntry(e.cat.templates, t.Name, tName); ok {
		return t, errorf(Conflict, "A deploy template with name %s already exists.", t.Name)
	}
	if len(e.cat.templates) >= MaxDeployTemplates {
		return t, errorf(Invalid, "There are already %d deploy templates, the most this coordinator keeps; delete one that is no longer used first", MaxDeployTemplates)
	}
	t.CreatedAt, t.UpdatedAt = e.cfg.Clock.Now().UTC(), nil
	if err := e.saveRecord(store.DeployTemplatePrefix+t.UUID, &t); err != nil {
		return t, err
	}
	e.cat.templates[t.UUID] = &t
	return copyTemplate(&t), nil
}

// UpdateDeployTemplate replaces a deploy template by what fn makes of a
// copy of it (a PATCH); the UUID cannot change, the name must stay
// unique.
func (e *Engine) UpdateDeployTemplate(ident string, fn func(cur fsm.DeployTemplate) (fsm.DeployTemplate, error)) (fsm.DeployTemplate, error) {
	e.cat.mu.Lock()
	defer e.cat.mu.Unlock()
	old, ok := findEntry(e.cat.templates, ident, tName)
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
	if o, ok := findEntry(e.cat.templates, t.Name, tName); ok && o.UUID != old.UUID {
		return t, errorf(Conflict, "A deploy template with name %s already exists.", t.Name)
	}
	now := e.cfg.Clock.Now().UTC()
	t.CreatedAt, t.UpdatedAt = old.CreatedAt, &now
	if err := e.saveRecord(store.DeployTemplatePrefix+t.UUID, &t); err != nil {
		return t, err
	}
	e.cat.templates[t.UUID] = &t
	return copyTemplate(&t), nil
}

// DeleteDeployTemplate removes a deploy template. Deploys that started
// with it keep their copy of its steps.
func (e *Engine) DeleteDeployTemplate(ident string) error {
	e.cat.mu.Lock()
	defer e.cat.mu.Unlock()
	t, ok := findEntry(e.cat.templates, ident, tName)
	if !ok {
		return errorf(NotFound, "Deploy template %s could not be found.", ident)
	}
	if err := e.saveRecord(store.DeployTemplatePrefix+t.UUID, nil); err != nil {
		return err
	}
	delete(e.cat.templates, t.UUID)
	return nil
}

// Runbooks lists the runbooks, oldest first.
func (e *Engine) Runbooks() []fsm.Runbook {
	e.cat.mu.RLock()
	defer e.cat.mu.RUnlock()
	var out []fsm.Runbook
	for _, r := range sortedEntries(e.cat.runbooks, rCreated, rUUID) {
		out = append(out, copyRunbook(r))
	}
	return out
}

// Runbook finds a runbook by UUID or name.
func (e *Engine) Runbook(ident string) (fsm.Runbook, error) {
	e.cat.mu.RLock()
	defer e.cat.mu.RUnlock()
	r, ok := findEntry(e.cat.runbooks, ident, rName)
	if !ok {
		return fsm.Runbook{}, errorf(NotFound, "Runbook %s could not be found.", ident)
	}
	return copyRunbook(r), nil
}

// CreateRunbook stores a new runbook (checked by fsm.ParseRunbook); its
// UUID is made when it has none.
func (e *Engine) CreateRunbook(r fsm.Runbook) (fsm.Runbook, error) {
	e.cat.mu.Lock()
	defer e.cat.mu.Unlock()
	if r.UUID == "" {
		r.UUID = uuid.NewString()
	}
	if _, ok := e.cat.runbooks[r.UUID]; ok {
		return r, errorf(Conflict, "A runbook with UUID %s already exists.", r.UUID)
	}
	if _, ok := findEntry(e.cat.runbooks, r.Name, rName); ok {
		return r, errorf(Conflict, "A runbook with name %s already exists.", r.Name)
	}
	if len(e.cat.runbooks) >= MaxRunbooks {
		return r, errorf(Invalid, "There are already %d runbooks, the most this coordinator keeps; delete one that is no longer used first", MaxRunbooks)
	}
	r.CreatedAt, r.UpdatedAt = e.cfg.Clock.Now().UTC(), nil
	if err := e.saveRecord(store.RunbookPrefix+r.UUID, &r); err != nil {
		return r, err
	}
	e.cat.runbooks[r.UUID] = &r
	return copyRunbook(&r), nil
}

// UpdateRunbook replaces a runbook by what fn makes of a copy of it (a
// PATCH); the UUID cannot change, the name must stay unique.
func (e *Engine) UpdateRunbook(ident string, fn func(cur fsm.Runbook) (fsm.Runbook, error)) (fsm.Runbook, error) {
	e.cat.mu.Lock()
	defer e.cat.mu.Unlock()
	old, ok := findEntry(e.cat.runbooks, ident, rName)
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
	if o, ok := findEntry(e.cat.runbooks, r.Name, rName); ok && o.UUID != old.UUID {
		return r, errorf(Conflict, "A runbook with name %s already exists.", r.Name)
	}
	now := e.cfg.Clock.Now().UTC()
	r.CreatedAt, r.UpdatedAt = old.CreatedAt, &now
	if err := e.saveRecord(store.RunbookPrefix+r.UUID, &r); err != nil {
		return r, err
	}
	e.cat.runbooks[r.UUID] = &r
	return copyRunbook(&r), nil
}

// DeleteRunbook removes a runbook. Cleanings and services that started
// with it keep their copy of its steps.
func (e *Engine) DeleteRunbook(ident string) error {
	e.cat.mu.Lock()
	defer e.cat.mu.Unlock()
	r, ok := findEntry(e.cat.runbooks, ident, rName)
	if !ok {
		return errorf(NotFound, "Runbook %s could not be found.", ident)
	}
	if err := e.saveRecord(store.RunbookPrefix+r.UUID, nil); err != nil {
		return err
	}
	delete(e.cat.runbooks, r.UUID)
	return nil
}
