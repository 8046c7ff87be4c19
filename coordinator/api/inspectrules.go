package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"github.com/bmedge/bmedge/coordinator/inspectrules"
)

// Inspection rules (API 1.96; below it the resource is 404 to GET and
// 405 to the other methods, as Ironic's controller answers), in the shape
// of Ironic's InspectionRuleController: list (uuid, priority, phase,
// description and links; ?detail=True or ?fields=; ?phase=), show,
// create (201), PATCH (add, replace, remove; a sensitive rule stays
// sensitive), delete (204). A sensitive rule shows its conditions and
// actions as null. The rules themselves are coordinator/inspectrules;
// the coordinator's built-in rules are listed too and cannot be changed.

// minorInspectionRules is the version of inspection rules.
const minorInspectionRules = 96

var ruleFields = []string{"uuid", "description", "priority", "phase", "sensitive", "conditions", "actions", "created_at", "updated_at"}

func (s *Server) registerInspectionRules(m routeList) {
	m.HandleFunc("GET /v1/inspection_rules", s.listInspectionRules)
	m.HandleFunc("POST /v1/inspection_rules", s.createInspectionRule)
	m.HandleFunc("GET /v1/inspection_rules/{id}", s.getInspectionRule)
	m.HandleFunc("PATCH /v1/inspection_rules/{id}", s.patchInspectionRule)
	m.HandleFunc("DELETE /v1/inspection_rules/{id}", s.deleteInspectionRule)
}

// opsView is conditions or actions as Ironic's convert_conditions and
// convert_actions show them: op and args, loop (and multiple) when the
// operation loops.
func opsView(ops []inspectrules.Op, cond bool) []map[string]any {
	out := make([]map[string]any, 0, len(ops))
	for _, o := range ops {
		v := map[string]any{"op": o.Op, "args": o.Args}
		if o.Loop != nil {
			v["loop"] = o.Loop
			if cond {
				m := o.Multiple
				if m == "" {
					m = "any"
				}
				v["multiple"] = m
			}
		}
		out = append(out, v)
	}
	return out
}

func ruleView(r *http.Request, rule inspectrules.Rule) map[string]any {
	var upd any
	if rule.UpdatedAt != nil {
		upd = *rule.UpdatedAt
	}
	var created any = rule.CreatedAt
	if rule.BuiltIn {
		created = nil
	}
	v := map[string]any{"uuid": rule.UUID, "description": nullable(rule.Description), "priority": rule.Priority,
		"phase": rule.Phase, "sensitive": rule.Sensitive, "created_at": created, "updated_at": upd,
		"links": link(r, "/v1/inspection_rules/"+rule.UUID)}
	if rule.Sensitive {
		v["conditions"], v["actions"] = nil, nil
	} else {
		v["conditions"], v["actions"] = opsView(rule.Conditions, true), opsView(rule.Actions, false)
	}
	return v
}

// ruleDoc is rule as the document a PATCH applies to (unmasked).
func ruleDoc(rule inspectrules.Rule) map[string]any {
	b, _ := json.Marshal(map[string]any{"uuid": rule.UUID, "description": nullable(rule.Description), "priority": rule.Priority,
		"phase": rule.Phase, "sensitive": rule.Sensitive, "conditions": opsView(rule.Conditions, true), "actions": opsView(rule.Actions, false)})
	var doc map[string]any
	_ = json.Unmarshal(b, &doc)
	return doc
}

// writeRuleErr answers an error of the rule set.
func writeRuleErr(w http.ResponseWriter, err error) {
	var inv *inspectrules.Error
	var nf *inspectrules.NotFoundError
	var cf *inspectrules.ConflictError
	switch {
	case errors.As(err, &inv):
		writeError(w, http.StatusBadRequest, inv.Msg)
	case errors.As(err, &nf):
		writeError(w, http.StatusNotFound, nf.Error())
	case errors.As(err, &cf):
		writeError(w, http.StatusConflict, cf.Msg)
	default:
		writeErr(w, err)
	}
}

func (s *Server) listInspectionRules(w http.ResponseWriter, r *http.Request) {
	rules := s.e.InspectionRules().List()
	if phase, ok := r.URL.Query()["phase"]; ok {
		rules = slices.DeleteFunc(rules, func(x inspectrules.Rule) bool { return !slices.Contains(phase, x.Phase) })
	}
	byUUID := make(map[string]inspectrules.Rule, len(rules))
	items := make([]catalogItem, 0, len(rules))
	for _, x := range rules {
		byUUID[x.UUID] = x
		items = append(items, catalogItem{uuid: x.UUID, created: x.CreatedAt, updated: x.UpdatedAt, view: ruleView(r, x)})
	}
	rule := func(c catalogItem) inspectrules.Rule { return byUUID[c.uuid] }
	// A rule has no name; conditions and actions are no sort keys.
	listCatalog(w, r, catalogList{collection: "inspection_rules", what: "Inspection rule", fields: ruleFields,
		defaults: []string{"uuid", "priority", "phase", "description"}, params: []string{"phase"},
		sortKeys: map[string]func(catalogItem) string{
			"description": func(c catalogItem) string { return rule(c).Description },
			"phase":       func(c catalogItem) string { return rule(c).Phase },
			"priority":    func(c catalogItem) string { return fmt.Sprintf("%020d", int64(rule(c).Priority)+1<<40) },
			"sensitive":   func(c catalogItem) string { return strconv.FormatBool(rule(c).Sensitive) },
		}}, items)
}

func (s *Server) getInspectionRule(w http.ResponseWriter, r *http.Request) {
	fields, err := catalogFields(r.URL.Query(), ruleFields)
	if err != nil {
		writeError(w, 400, err.Error())
		return
	}
	for k := range r.URL.Query() {
		if k != "fields" {
			writeError(w, 400, fmt.Sprintf("Unknown query parameter %s for an inspection rule; it takes fields", shortQuote(k)))
			return
		}
	}
	rule, err := s.e.InspectionRules().Get(r.PathValue("id"))
	if err != nil {
		writeRuleErr(w, err)
		return
	}
	writeJSON(w, 200, pickCatalog(ruleView(r, rule), fields))
}

func (s *Server) createInspectionRule(w http.ResponseWriter, r *http.Request) {
	var doc map[string]any
	if !decode(w, r, &doc) {
		return
	}
	if doc == nil {
		writeError(w, 400, "The request body must be an inspection rule: a JSON object with at least actions")
		return
	}
	rule, err := inspectrules.Parse(doc, false)
	if err != nil {
		writeRuleErr(w, err)
		return
	}
	rule, err = s.e.InspectionRules().Create(rule)
	if err != nil {
		writeRuleErr(w, err)
		return
	}
	w.Header().Set("Location", baseURL(r)+"/v1/inspection_rules/"+rule.UUID)
	writeJSON(w, 201, ruleView(r, rule))
}

func (s *Server) patchInspectionRule(w http.ResponseWriter, r *http.Request) {
	ops, ok := decodePatch(w, r)
	if !ok {
		return
	}
	rule, err := s.e.InspectionRules().Update(r.PathValue("id"), func(cur inspectrules.Rule) (inspectrules.Rule, error) {
		for _, op := range ops {
			if op.Path != "/sensitive" {
				continue
			}
			var v any
			_ = json.Unmarshal(op.Value, &v)
			if cur.Sensitive && (op.Op == "remove" || v == false) {
				return cur, &inspectrules.Error{Msg: "Inspection rules cannot have the sensitive flag unset."}
			}
		}
		doc := ruleDoc(cur)
		if err := patchCatalog(doc, ops, []string{"description", "priority", "phase", "sensitive", "conditions", "actions"}); err != nil {
			return cur, &inspectrules.Error{Msg: err.Error()}
		}
		for k, v := range doc {
			if v == nil {
				delete(doc, k)
			}
		}
		next, err := inspectrules.Parse(doc, false)
		if err != nil {
			return cur, err
		}
		next.UUID = cur.UUID
		return next, nil
	})
	if err != nil {
		writeRuleErr(w, err)
		return
	}
	writeJSON(w, 200, ruleView(r, rule))
}

func (s *Server) deleteInspectionRule(w http.ResponseWriter, r *http.Request) {
	if err := s.e.InspectionRules().Delete(r.PathValue("id")); err != nil {
		writeRuleErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
