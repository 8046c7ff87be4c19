package api

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
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
