package engine

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/bmedge/bmedge/coordinator/fsm"
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
	set, err := inspectrules.NewSet(ruleRecords{e}, func() time.Time { return e.cfg.Clock.Now() }, cfg.BuiltInInspectionRules)
	if err != nil {
		return err
	}
	e.rules = set
	hook := inspectrules.Hook(set.Rules, cfg.Machine.Drivers, e.rulePorts)
	cfg.Machine.InspectionRules, e.cfg.Machine.InspectionRules = hook, hook
	return nil
}

// InspectionRules is the rule set the API reads and changes.
func (e *Engine) InspectionRules() *inspectrules.Set { return e.rules }

// linkPorts fills the local_link_connection of the node's ports from the
// LLDP frames its inventory's NICs heard (inspectrules.LinkConnections),
// as Ironic's local_link_connection hook: only the keys a port does not
// have; a value the operator set, or an earlier inspection found, stays.
// The caller holds e.reg.mu (the loop).
func (t *tx) linkPorts(n *fsm.Node, inv map[string]any) {
	e := t.e
	found := inspectrules.LinkConnections(inv)
	macs := make([]string, 0, len(found))
	for mac := range found {
		macs = append(macs, mac)
	}
	sort.Strings(macs)
	for _, mac := range macs {
		p := e.reg.ports[e.reg.macs[mac]]
		if p == nil || p.NodeUUID != n.UUID {
			continue
		}
		next, added := inspectrules.FillLink(p.LocalLinkConnection, found[mac])
		if len(added) == 0 {
			continue
		}
		now := t.now
		p.LocalLinkConnection, p.UpdatedAt = next, &now
		t.putPort(p)
		var kv []string
		for _, k := range added {
			kv = append(kv, fmt.Sprintf("%s=%v", k, next[k]))
		}
		t.addHistory(n, fsm.HistoryEntry{Time: t.now, Severity: "INFO", EventType: "inspection",
			Event: fsm.BoundText(fmt.Sprintf("port %s (%s): local_link_connection %s from LLDP", p.UUID, p.Address, strings.Join(kv, ", ")), 0)})
	}
	t.forget(n.UUID)
}

// rulePorts are node n's ports as the inspection rules see them: the
// ones it has (by MAC address), and one for each MAC of newPorts that
// inspectedPorts will make a port of (no port has it yet). The caller
// holds e.reg.mu (the hook runs in the loop).
func (e *Engine) rulePorts(n *fsm.Node, newPorts []string) []inspectrules.Port {
	var out []inspectrules.Port
	for _, p := range e.reg.ports {
		if p.NodeUUID == n.UUID {
			out = append(out, inspectrules.Port{UUID: p.UUID, Address: p.Address, PhysicalNetwork: p.PhysicalNetwork, PXEEnabled: p.PXE,
				Description: p.Description, Extra: cloneMap(p.Extra), LocalLinkConnection: cloneMap(p.LocalLinkConnection)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Address < out[j].Address })
	seen := map[string]bool{}
	for _, mac := range newPorts {
		if _, taken := e.reg.macs[mac]; taken || seen[mac] {
			continue
		}
		seen[mac] = true
		out = append(out, inspectrules.Port{Address: mac, PXEEnabled: true})
	}
	return out
}

// changePorts writes the inspection rules' changes of node n's ports
// (fsm Output.PortChanges), after inspectedPorts made the new ones and
// linkPorts filled their local_link_connection: the rules saw it as
// linkPorts leaves it, so their value keeps its LLDP keys. The history
// of the changes is the hook's. The caller holds e.reg.mu (the loop).
func (t *tx) changePorts(n *fsm.Node, changes []fsm.PortChange) {
	e := t.e
	for _, c := range changes {
		id := c.UUID
		if id == "" {
			id = e.reg.macs[c.Address]
		}
		p := e.reg.ports[id]
		if p == nil || p.NodeUUID != n.UUID {
			t.addHistory(n, fsm.HistoryEntry{Time: t.now, Severity: "WARNING", EventType: "inspection",
				Event: fmt.Sprintf("the inspection rules changed port %s, which is not a port of node %s; not kept", c.Address, n.Ident())})
			continue
		}
		cp := *p
		for _, f := range c.Fields {
			switch f {
			case "physical_network":
				cp.PhysicalNetwork = c.PhysicalNetwork
			case "pxe_enabled":
				cp.PXE = c.PXEEnabled
			case "description":
				cp.Description = c.Description
			case "extra":
				cp.Extra = cloneMap(c.Extra)
			case "local_link_connection":
				cp.LocalLinkConnection = cloneMap(c.LocalLinkConnection)
			}
		}
		now := t.now
		cp.UpdatedAt = &now
		e.notePort(p, false)
		*p = cp
		e.notePort(p, true)
		t.putPort(p)
	}
	t.forget(n.UUID)
}
