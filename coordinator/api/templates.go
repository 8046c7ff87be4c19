package api

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/bmedge/bmedge/coordinator/engine"
	"github.com/bmedge/bmedge/coordinator/fsm"
)

// Deploy templates (API 1.55; below it the resource is 404 to GET and
// 405 to the other methods, as Ironic's controller answers), in the shape
// of Ironic's DeployTemplatesController: list (uuid and name, or
// ?detail=True or ?fields=), show, create (201), PATCH of name, steps
// and extra, delete (204). This file also holds what runbooks.go shares.

// registerCatalog registers the routes of node traits, deploy templates
// and runbooks.
func (s *Server) registerCatalog(m routeList) {
	m.HandleFunc("GET /v1/nodes/{id}/traits", s.getTraits)
	m.HandleFunc("PUT /v1/nodes/{id}/traits", s.setTraits)
	m.HandleFunc("DELETE /v1/nodes/{id}/traits", s.deleteTraits)
	m.HandleFunc("PUT /v1/nodes/{id}/traits/{trait}", s.addTrait)
	m.HandleFunc("DELETE /v1/nodes/{id}/traits/{trait}", s.deleteTrait)
	m.HandleFunc("GET /v1/deploy_templates", s.listTemplates)
	m.HandleFunc("POST /v1/deploy_templates", s.createTemplate)
	m.HandleFunc("GET /v1/deploy_templates/{id}", s.getTemplate)
	m.HandleFunc("PATCH /v1/deploy_templates/{id}", s.patchTemplate)
	m.HandleFunc("DELETE /v1/deploy_templates/{id}", s.deleteTemplate)
	m.HandleFunc("GET /v1/runbooks", s.listRunbooks)
	m.HandleFunc("POST /v1/runbooks", s.createRunbook)
	m.HandleFunc("GET /v1/runbooks/{id}", s.getRunbook)
	m.HandleFunc("PATCH /v1/runbooks/{id}", s.patchRunbook)
	m.HandleFunc("DELETE /v1/runbooks/{id}", s.deleteRunbook)
}

// catalogSinceMethod says how a request for a deploy template or runbook
// path older than its version is answered: 404 to GET, 405 to the other
// methods (Ironic's controllers' _route).
func catalogSinceMethod(res, method string) int {
	if (res == "/v1/deploy_templates" || res == "/v1/runbooks" || res == "/v1/inspection_rules") && method != http.MethodGet {
		return http.StatusMethodNotAllowed
	}
	return http.StatusNotFound
}

// maskArgs replaces secret values in step args with Ironic's "******",
// at any depth (its strutils.mask_dict_password on show).
func maskArgs(args map[string]any) map[string]any {
	if args == nil {
		return map[string]any{}
	}
	out := make(map[string]any, len(args))
	for k, v := range args {
		l := strings.ToLower(k)
		switch {
		case strings.Contains(l, "password") || strings.Contains(l, "secret") || strings.Contains(l, "token") ||
			strings.Contains(l, "private_key") || l == "configdrive":
			out[k] = "******"
		default:
			if m, ok := v.(map[string]any); ok {
				v = maskArgs(m)
			}
			out[k] = v
		}
	}
	return out
}

// catalogItem is a deploy template or runbook as a list shows it.
type catalogItem struct {
	uuid, name string
	created    time.Time
	updated    *time.Time
	// owner is a runbook's (the ?project= filter).
	owner string
	view  map[string]any
}

// catalogView is the fields both kinds show, with their links.
func catalogView(r *http.Request, collection, id, name string, extra map[string]any, created time.Time, updated *time.Time) map[string]any {
	if extra == nil {
		extra = map[string]any{}
	}
	var upd any
	if updated != nil {
		upd = *updated
	}
	return map[string]any{"uuid": id, "name": name, "extra": extra, "created_at": created, "updated_at": upd,
		"links": link(r, "/v1/"+collection+"/"+id)}
}

// pickCatalog keeps fields (and links) of v; nil keeps everything.
func pickCatalog(v map[string]any, fields []string) map[string]any {
	if fields == nil {
		return v
	}
	out := map[string]any{"links": v["links"]}
	for _, f := range fields {
		if x, ok := v[f]; ok {
			out[f] = x
		}
	}
	return out
}

// catalogFields reads ?fields= against the fields a kind has (400 for
// another, as Ironic's check_for_invalid_fields); nil when not given.
func catalogFields(q url.Values, all []string) ([]string, error) {
	f := q.Get("fields")
	if f == "" {
		return nil, nil
	}
	var out, bad []string
	for _, x := range strings.Split(f, ",") {
		x = strings.TrimSpace(x)
		if !slices.Contains(all, x) {
			bad = append(bad, x)
			continue
		}
		out = append(out, x)
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("Field(s) \"%s\" are not valid; valid fields: %s", strings.Join(bad, ", "), strings.Join(all, ", "))
	}
	return out, nil
}

// catalogList is what differs between the catalog lists (deploy
// templates, runbooks, inspection rules): the collection's name (the
// answer's key), what the ?marker= not-found text calls an item, its
// fields and those shown without ?detail= or ?fields=, the query
// parameters it takes beyond the common ones (its handler filters by
// them), and the sort keys beyond id, uuid, created_at and updated_at.
type catalogList struct {
	collection, what string
	fields, defaults []string
	params           []string
	sortKeys         map[string]func(catalogItem) string
}

// byName is the name sort key of deploy templates and runbooks.
var byName = map[string]func(catalogItem) string{"name": func(c catalogItem) string { return c.name }}

// listCatalog answers a catalog list as Ironic's get_all: l.defaults
// and links by default, everything with ?detail=True, the given
// ?fields=; sort_key (id, uuid, created_at, updated_at and l.sortKeys)
// and sort_dir; pages of ?limit= after ?marker= (a UUID), with a next
// link when a page is full. items come in creation order (id's order).
func listCatalog(w http.ResponseWriter, r *http.Request, l catalogList, items []catalogItem) {
	q := r.URL.Query()
	known := append([]string{"detail", "fields", "limit", "marker", "sort_key", "sort_dir"}, l.params...)
	for k := range q {
		if !slices.Contains(known, k) {
			writeError(w, 400, fmt.Sprintf("Unknown query parameter %s for %s; this list takes %s", shortQuote(k), l.collection, strings.Join(known, ", ")))
			return
		}
	}
	detail, err := boolParam(q, "detail")
	if err != nil {
		writeError(w, 400, err.Error())
		return
	}
	fields, err := catalogFields(q, l.fields)
	if err != nil {
		writeError(w, 400, err.Error())
		return
	}
	if fields != nil && detail != nil && *detail {
		writeError(w, 400, "Can not specify ?detail=True and fields in the same request.")
		return
	}
	if fields == nil && (detail == nil || !*detail) {
		fields = l.defaults
	}
	limit := maxLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeError(w, 400, fmt.Sprintf("Invalid limit %s: use a positive integer", shortQuote(v)))
			return
		}
		if n > 0 {
			limit = min(n, maxLimit)
		}
	}
	sortKey, sortDir := q.Get("sort_key"), q.Get("sort_dir")
	if sortKey == "" {
		sortKey = "id"
	}
	if sortDir == "" {
		sortDir = "asc"
	}
	if sortDir != "asc" && sortDir != "desc" {
		writeError(w, 400, fmt.Sprintf("Invalid sort direction: %s. Acceptable values are 'asc' or 'desc'", shortQuote(sortDir)))
		return
	}
	keys := map[string]func(catalogItem) string{
		"id":         func(catalogItem) string { return "" },
		"uuid":       func(c catalogItem) string { return c.uuid },
		"created_at": func(c catalogItem) string { return c.created.UTC().Format(time.RFC3339Nano) },
		"updated_at": func(c catalogItem) string {
			if c.updated == nil {
				return ""
			}
			return c.updated.UTC().Format(time.RFC3339Nano)
		},
	}
	maps.Copy(keys, l.sortKeys)
	key := keys[sortKey]
	if key == nil {
		writeError(w, 400, fmt.Sprintf("The sort_key value %s is an invalid field for sorting; use one of %s", shortQuote(sortKey), strings.Join(slices.Sorted(maps.Keys(keys)), ", ")))
		return
	}
	pos := map[string]int{}
	for i, c := range items {
		pos[c.uuid] = i
	}
	less := func(a, b catalogItem) bool {
		if ka, kb := key(a), key(b); ka != kb {
			return (ka < kb) == (sortDir == "asc")
		}
		return (pos[a.uuid] < pos[b.uuid]) == (sortDir == "asc")
	}
	sort.SliceStable(items, func(i, j int) bool { return less(items[i], items[j]) })
	if marker := q.Get("marker"); marker != "" {
		i := slices.IndexFunc(items, func(c catalogItem) bool { return c.uuid == strings.ToLower(marker) })
		if i < 0 {
			writeError(w, 404, fmt.Sprintf("%s %s could not be found.", l.what, shortQuote(marker)))
			return
		}
		items = items[i+1:]
	}
	if len(items) > limit {
		items = items[:limit]
	}
	out := make([]any, 0, len(items))
	for _, c := range items {
		out = append(out, pickCatalog(c.view, fields))
	}
	resp := map[string]any{l.collection: out}
	if len(items) > 0 && len(items) == limit {
		nq := r.URL.Query()
		nq.Set("marker", items[len(items)-1].uuid)
		nq.Set("limit", strconv.Itoa(limit))
		resp["next"] = baseURL(r) + r.URL.Path + "?" + nq.Encode()
	}
	writeJSON(w, 200, resp)
}

// patchCatalog applies a JSON Patch to doc (a deploy template or runbook
// as a document), allowing only the top-level fields in allowed (Ironic's
// PATCH_ALLOWED_FIELDS).
func patchCatalog(doc map[string]any, ops []patchOp, allowed []string) error {
	for i, op := range ops {
		sub, ok := strings.CutPrefix(op.Path, "/")
		field, _, _ := strings.Cut(sub, "/")
		if !ok || field == "" {
			return &engine.Error{Kind: engine.Invalid, Msg: fmt.Sprintf("patch operation %d: path %q must start with '/'", i+1, op.Path)}
		}
		if !slices.Contains(allowed, pointerDecoder.Replace(field)) {
			return &engine.Error{Kind: engine.Invalid, Msg: fmt.Sprintf("patch operation %d: cannot patch %s; only %s can be changed", i+1, shortQuote(op.Path), strings.Join(allowed, ", "))}
		}
		if op.Op != "add" && op.Op != "replace" && op.Op != "remove" {
			return &engine.Error{Kind: engine.Invalid, Msg: fmt.Sprintf("patch operation %d: op %q is not supported; use add, replace or remove", i+1, op.Op)}
		}
		var val any
		if op.Op != "remove" {
			if len(op.Value) == 0 {
				return &engine.Error{Kind: engine.Invalid, Msg: fmt.Sprintf("patch operation %d (%s %s) needs a value", i+1, op.Op, op.Path)}
			}
			if err := json.Unmarshal(op.Value, &val); err != nil {
				return &engine.Error{Kind: engine.Invalid, Msg: fmt.Sprintf("patch operation %d: value is not JSON: %v", i+1, err)}
			}
		}
		if err := patchIn(doc, op.Op, sub, val); err != nil {
			return &engine.Error{Kind: engine.Invalid, Msg: fmt.Sprintf("patch operation %d (%s %s): %v", i+1, op.Op, op.Path, err)}
		}
	}
	return nil
}

// decodePatch reads a JSON Patch body: a non-empty list of operations.
func decodePatch(w http.ResponseWriter, r *http.Request) ([]patchOp, bool) {
	var ops []patchOp
	if !decode(w, r, &ops) {
		return nil, false
	}
	if len(ops) == 0 {
		writeError(w, 400, "The JSON Patch is empty: send a list of operations like [{\"op\": \"replace\", \"path\": \"/name\", \"value\": \"CUSTOM_X\"}]")
		return nil, false
	}
	return ops, true
}

var templateFields = []string{"uuid", "name", "steps", "extra", "created_at", "updated_at"}

func templateView(r *http.Request, t fsm.DeployTemplate) map[string]any {
	v := catalogView(r, "deploy_templates", t.UUID, t.Name, t.Extra, t.CreatedAt, t.UpdatedAt)
	steps := make([]map[string]any, 0, len(t.Steps))
	for _, s := range t.Steps {
		steps = append(steps, map[string]any{"interface": s.Interface, "step": s.Step, "args": maskArgs(s.Args), "priority": s.Priority})
	}
	v["steps"] = steps
	return v
}

// templateDoc is t as the document a PATCH applies to (unmasked).
func templateDoc(t fsm.DeployTemplate) map[string]any {
	steps := make([]any, 0, len(t.Steps))
	for _, s := range t.Steps {
		args := map[string]any{}
		for k, v := range s.Args {
			args[k] = v
		}
		steps = append(steps, map[string]any{"interface": s.Interface, "step": s.Step, "args": args, "priority": float64(s.Priority)})
	}
	doc := map[string]any{"uuid": t.UUID, "name": t.Name, "steps": steps}
	doc["extra"] = map[string]any{}
	if t.Extra != nil {
		doc["extra"] = t.Extra
	}
	return doc
}

func (s *Server) listTemplates(w http.ResponseWriter, r *http.Request) {
	var items []catalogItem
	for _, t := range s.e.DeployTemplates() {
		items = append(items, catalogItem{uuid: t.UUID, name: t.Name, created: t.CreatedAt, updated: t.UpdatedAt, view: templateView(r, t)})
	}
	listCatalog(w, r, catalogList{collection: "deploy_templates", what: "Deploy template", fields: templateFields, defaults: []string{"uuid", "name"},
		sortKeys: byName}, items)
}

func (s *Server) getTemplate(w http.ResponseWriter, r *http.Request) {
	fields, err := catalogFields(r.URL.Query(), templateFields)
	if err != nil {
		writeError(w, 400, err.Error())
		return
	}
	t, err := s.e.DeployTemplate(r.PathValue("id"))
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, 200, pickCatalog(templateView(r, t), fields))
}

func (s *Server) createTemplate(w http.ResponseWriter, r *http.Request) {
	var doc map[string]any
	if !decode(w, r, &doc) {
		return
	}
	t, err := fsm.ParseDeployTemplate(doc)
	if err != nil {
		writeError(w, 400, err.Error())
		return
	}
	t, err = s.e.CreateDeployTemplate(t)
	if err != nil {
		writeErr(w, err)
		return
	}
	w.Header().Set("Location", baseURL(r)+"/v1/deploy_templates/"+t.UUID)
	writeJSON(w, 201, templateView(r, t))
}

func (s *Server) patchTemplate(w http.ResponseWriter, r *http.Request) {
	ops, ok := decodePatch(w, r)
	if !ok {
		return
	}
	t, err := s.e.UpdateDeployTemplate(r.PathValue("id"), func(cur fsm.DeployTemplate) (fsm.DeployTemplate, error) {
		doc := templateDoc(cur)
		if err := patchCatalog(doc, ops, []string{"extra", "name", "steps"}); err != nil {
			return cur, err
		}
		t, err := fsm.ParseDeployTemplate(doc)
		if err != nil {
			return cur, &engine.Error{Kind: engine.Invalid, Msg: err.Error()}
		}
		return t, nil
	})
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, 200, templateView(r, t))
}

func (s *Server) deleteTemplate(w http.ResponseWriter, r *http.Request) {
	if err := s.e.DeleteDeployTemplate(r.PathValue("id")); err != nil {
		writeErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// portFieldsRefused says why a port's name (API 1.88) or
// local_link_connection (1.19; OVN VTEP switch keys 1.90) is refused:
// no port names are kept, and local_link_connection is inspection's,
// from LLDP (locallink.go; its network interface is noop, so no switch
// is ever configured from a port).
func portFieldsRefused(name, llc any) string {
	switch {
	case name != nil:
		return "Port names (API 1.88) are not kept by this coordinator: leave out \"name\"; ports are named by their MAC address and UUID"
	case llc != nil:
		return "local_link_connection cannot be set here: inspection fills it from the LLDP frames each NIC hears (its network interface is noop, so no switch port is configured from it); leave it out"
	}
	return ""
}
