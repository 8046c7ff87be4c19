package api

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"

	"github.com/bmedge/bmedge/coordinator/engine"
)

// A node's firmware components (API 1.86; below it the path is 404, see
// nodeSubSince) and BIOS settings (1.40, registry fields 1.74), as
// Ironic's firmware and bios controllers answer them, from what the
// node's BMC reported through the edge agent (coordinator/engine
// firmware.go): at manage, after firmware.update, after the BIOS steps.

var (
	firmwareFields = []string{"component", "initial_version", "current_version", "last_version_flashed"}
	// firmwareIdentity are Ironic's fields of 1.114, past this API's
	// maximum.
	firmwareIdentity = []string{"vendor", "model", "serial_number"}
	biosFields       = []string{"name", "value"}
	biosRegistry     = []string{"name", "value", "attribute_type", "allowable_values", "lower_bound", "max_length", "min_length",
		"read_only", "reset_required", "unique", "upper_bound"}
	biosQueryFields = []string{"allowable_values", "attribute_type", "created_at", "lower_bound", "links", "max_length", "min_length",
		"name", "node_uuid", "read_only", "reset_required", "unique", "updated_at", "upper_bound", "value"}
)

// listQuery reads the fields and detail parameters of a firmware or
// BIOS list (no other parameter is taken, as Ironic's schemas), with
// Ironic's get_request_return_fields rules; allowed says whether the
// version takes them at all.
func listQuery(q url.Values, allowed bool, known []string) (fields []string, detail bool, err error) {
	for k := range q {
		if k != "fields" && k != "detail" || !allowed {
			return nil, false, fmt.Errorf("Invalid query parameter ?%s=%s received.", k, q.Get(k))
		}
	}
	if v := q.Get("detail"); v != "" {
		b, err := boolParam(q, "detail")
		if err != nil {
			return nil, false, err
		}
		detail = *b
	}
	if q.Has("fields") {
		for _, f := range strings.Split(q.Get("fields"), ",") {
			f = strings.TrimSpace(f)
			if !slices.Contains(known, f) {
				return nil, false, fmt.Errorf("Invalid query parameter fields: %q is not one of %s", f, strings.Join(known, ", "))
			}
			if !slices.Contains(fields, f) {
				fields = append(fields, f)
			}
		}
		if detail {
			return nil, false, fmt.Errorf("Can not specify ?detail=True and fields in the same request.")
		}
	}
	return fields, detail, nil
}

func (s *Server) nodeFirmware(w http.ResponseWriter, r *http.Request) {
	known := append(append([]string{"created_at", "updated_at"}, firmwareFields...), firmwareIdentity...)
	fields, detail, err := listQuery(r.URL.Query(), true, known)
	if err != nil {
		writeError(w, 400, err.Error())
		return
	}
	var identity []string
	for _, f := range fields {
		if slices.Contains(firmwareIdentity, f) {
			identity = append(identity, f)
		}
	}
	if len(identity) > 0 {
		sort.Strings(identity)
		writeError(w, 400, fmt.Sprintf("Fields %s are not allowed in this API version. They require at least API version 1.114.", strings.Join(identity, ", ")))
		return
	}
	if fields == nil || detail {
		// Ironic's ?detail=True alone returns the timestamps only (its
		// field list comes back empty); here it is the full component.
		fields = firmwareFields
	}
	comps, _, err := s.e.Firmware(r.PathValue("id"))
	if err != nil {
		writeErr(w, err)
		return
	}
	out := make([]map[string]any, 0, len(comps))
	for _, c := range comps {
		all := map[string]any{"component": c.Component, "initial_version": c.InitialVersion, "current_version": c.CurrentVersion,
			"last_version_flashed": c.LastVersionFlashed}
		m := map[string]any{"created_at": c.CreatedAt, "updated_at": c.UpdatedAt}
		for _, f := range fields {
			if v, ok := all[f]; ok {
				m[f] = v
			}
		}
		out = append(out, m)
	}
	writeJSON(w, 200, map[string]any{"firmware": out})
}

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
