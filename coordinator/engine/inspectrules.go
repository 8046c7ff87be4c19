package engine

import (
	"strings"
	"time"

	"github.com/bmedge/bmedge/coordinator/inspectrules"
	"github.com/bmedge/bmedge/coordinator/store"
)

// The inspection rules (API 1.96) are their own part
// (coordinator/inspectrules): the engine gives them a key prefix of its
// database and runs them, as the state machine's inspection hook, on
// every inspection.

// ruleRecords are the inspection rules' records in the database.
type ruleRecords struct{ e *Engine }

func (r ruleRecords) Load(fn func(id string, value []byte) error) error {
	return r.e.st.Scan(store.InspectionRulePrefix, func(k string, v []byte) error {
		return fn(strings.TrimPrefix(k, store.InspectionRulePrefix), v)
	})
}

func (r ruleRecords) Save(id string, v any) error {
	return r.e.saveRecord(store.InspectionRulePrefix+id, v)
}

// openInspectionRules loads the rules and hooks them into cfg's state
// machine.
func (e *Engine) openInspectionRules(cfg *Config) error {
	set, err := inspectrules.NewSet(ruleRecords{e}, func() time.Time { return e.cfg.Now() }, cfg.BuiltInInspectionRules)
	if err != nil {
		return err
	}
	e.rules = set
	hook := inspectrules.Hook(set.Rules, cfg.Machine.Drivers)
	cfg.Machine.InspectionRules, e.cfg.Machine.InspectionRules = hook, hook
	return nil
}

// InspectionRules is the rule set the API reads and changes.
func (e *Engine) InspectionRules() *inspectrules.Set { return e.rules }
