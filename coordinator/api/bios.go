package api

import (
	"fmt"
	"net/http"
	"net/url"

	"github.com/bmedge/bmedge/coordinator/engine"
)

// A node's BIOS settings (API 1.40; ?detail, ?fields and the registry
// fields from 1.74), as Ironic's bios controller answers them, from what
// the node's BMC reported (firmware.go says when).

var (
	biosFields   = []string{"name", "value"}
	biosRegistry = []string{"name", "value", "attribute_type", "allowable_values", "lower_bound", "max_length", "min_length",
		"read_only", "reset_required", "unique", "upper_bound"}
	biosQueryFields = []string{"allowable_values", "attribute_type", "created_at", "lower_bound", "links", "max_length", "min_length",
		"name", "node_uuid", "read_only", "reset_required", "unique", "updated_at", "upper_bound", "value"}
)

// biosView is one setting in Ironic's shape with the given fields
// (created_at, updated_at and links always).
func biosView(r *http.Request, nodeRef, nodeUUID string, b engine.BIOSSetting, fields []string) map[string]any {
	all := map[string]any{"name": b.Name, "value": b.Value, "attribute_type": b.AttributeType, "allowable_values": b.AllowableValues,
		"lower_bound": b.LowerBound, "upper_bound": b.UpperBound, "min_length": b.MinLength, "max_length": b.MaxLength,
		"read_only": b.ReadOnly, "reset_required": b.ResetRequired, "unique": b.Unique, "node_uuid": nodeUUID}
	if b.AllowableValues == nil {
		all["allowable_values"] = []string{}
	}
	m := map[string]any{"created_at": b.CreatedAt, "updated_at": b.UpdatedAt,
		"links": link(r, "/v1/nodes/"+url.PathEscape(nodeRef)+"/bios/"+url.PathEscape(b.Name))}
	for _, f := range fields {
		if v, ok := all[f]; ok {
			m[f] = v
		}
	}
	return m
}

func (s *Server) nodeBIOS(w http.ResponseWriter, r *http.Request) {
	registry := apiMinor(r) >= 74
	fields, detail, err := listQuery(r.URL.Query(), registry, biosQueryFields)
	if err != nil {
		writeError(w, 400, err.Error())
		return
	}
	switch {
	case detail:
		fields = biosRegistry
	case fields == nil:
		fields = biosFields
	}
	settings, id, err := s.e.BIOS(r.PathValue("id"))
	if err != nil {
		writeErr(w, err)
		return
	}
	out := make([]map[string]any, 0, len(settings))
	for _, b := range settings {
		out = append(out, biosView(r, r.PathValue("id"), id, b, fields))
	}
	writeJSON(w, 200, map[string]any{"bios": out})
}

func (s *Server) nodeBIOSSetting(w http.ResponseWriter, r *http.Request) {
	if len(r.URL.Query()) > 0 {
		for k := range r.URL.Query() {
			writeError(w, 400, fmt.Sprintf("Invalid query parameter ?%s=%s received.", k, r.URL.Query().Get(k)))
			return
		}
	}
	settings, id, err := s.e.BIOS(r.PathValue("id"))
	if err != nil {
		writeErr(w, err)
		return
	}
	name := r.PathValue("name")
	fields := biosFields
	if apiMinor(r) >= 74 {
		fields = biosRegistry
	}
	for _, b := range settings {
		if b.Name == name {
			writeJSON(w, 200, map[string]any{name: biosView(r, id, id, b, fields)})
			return
		}
	}
	writeError(w, 404, fmt.Sprintf("Node %s doesn't have a BIOS setting '%s'", id, name))
}
