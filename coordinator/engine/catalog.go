package engine

import (
	"encoding/json"
	"errors"

	"github.com/bmedge/bmedge/coordinator/engine/catalog"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/coordinator/store"
)

// The deploy templates and runbooks are package catalog's; these are its
// doors for the API, with its errors told in the engine's kinds.

// Bounds of the catalog (catalog.MaxDeployTemplates, catalog.MaxRunbooks).
const (
	MaxDeployTemplates = catalog.MaxDeployTemplates
	MaxRunbooks        = catalog.MaxRunbooks
)

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

// catErr tells a catalog error in the engine's kinds.
func catErr(err error) error {
	var ce *catalog.Error
	if !errors.As(err, &ce) {
		return err
	}
	k := Invalid
	switch ce.Kind {
	case catalog.NotFound:
		k = NotFound
	case catalog.Conflict:
		k = Conflict
	}
	return &Error{Kind: k, Msg: ce.Msg}
}

// DeployTemplates lists the deploy templates, oldest first.
func (e *Engine) DeployTemplates() []fsm.DeployTemplate { return e.cat.DeployTemplates() }

// DeployTemplate finds a deploy template by UUID or name.
func (e *Engine) DeployTemplate(ident string) (fsm.DeployTemplate, error) {
	x, err := e.cat.DeployTemplate(ident)
	return x, catErr(err)
}

// templatesNamed are copies of the deploy templates of the given names
// (those a deploy's instance_info traits name).
func (e *Engine) templatesNamed(names []string) []fsm.DeployTemplate {
	return e.cat.TemplatesNamed(names)
}

// CreateDeployTemplate stores a new deploy template (checked by
// fsm.ParseDeployTemplate); its UUID is made when it has none.
func (e *Engine) CreateDeployTemplate(t fsm.DeployTemplate) (fsm.DeployTemplate, error) {
	x, err := e.cat.CreateDeployTemplate(t)
	return x, catErr(err)
}

// UpdateDeployTemplate replaces a deploy template by what fn makes of a
// copy of it (a PATCH); the UUID cannot change, the name must stay
// unique.
func (e *Engine) UpdateDeployTemplate(ident string, fn func(cur fsm.DeployTemplate) (fsm.DeployTemplate, error)) (fsm.DeployTemplate, error) {
	x, err := e.cat.UpdateDeployTemplate(ident, fn)
	return x, catErr(err)
}

// DeleteDeployTemplate removes a deploy template. Deploys that started
// with it keep their copy of its steps.
func (e *Engine) DeleteDeployTemplate(ident string) error {
	return catErr(e.cat.DeleteDeployTemplate(ident))
}

// Runbooks lists the runbooks, oldest first.
func (e *Engine) Runbooks() []fsm.Runbook { return e.cat.Runbooks() }

// Runbook finds a runbook by UUID or name.
func (e *Engine) Runbook(ident string) (fsm.Runbook, error) {
	x, err := e.cat.Runbook(ident)
	return x, catErr(err)
}

// CreateRunbook stores a new runbook (checked by fsm.ParseRunbook); its
// UUID is made when it has none.
func (e *Engine) CreateRunbook(r fsm.Runbook) (fsm.Runbook, error) {
	x, err := e.cat.CreateRunbook(r)
	return x, catErr(err)
}

// UpdateRunbook replaces a runbook by what fn makes of a copy of it (a
// PATCH); the UUID cannot change, the name must stay unique.
func (e *Engine) UpdateRunbook(ident string, fn func(cur fsm.Runbook) (fsm.Runbook, error)) (fsm.Runbook, error) {
	x, err := e.cat.UpdateRunbook(ident, fn)
	return x, catErr(err)
}

// DeleteRunbook removes a runbook. Cleanings and services that started
// with it keep their copy of its steps.
func (e *Engine) DeleteRunbook(ident string) error { return catErr(e.cat.DeleteRunbook(ident)) }
