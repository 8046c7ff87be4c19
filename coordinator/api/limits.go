package api

import (
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"regexp"
	"strings"

	"github.com/bmedge/bmedge/coordinator/engine"
	"github.com/bmedge/bmedge/coordinator/fsm"
)

// Bounds on what a request may carry. Everything is read into memory and
// stored in Badger, and every node is rendered into every detailed list,
// so nothing a client sends may be unbounded.
const (
	// MaxBodyBytes bounds a request body. The largest real body (a node
	// with a full instance_info, or a long clean_steps list) is a few KiB.
	MaxBodyBytes = 1 << 20
	// MaxJSONDepth bounds the nesting of a request body: a deep document
	// is cheap to send and expensive to decode, and nothing real nests
	// deeper than a handful of levels.
	MaxJSONDepth = 32
	// MaxFieldBytes bounds each of extra, properties, driver_info and
	// instance_info (JSON-encoded).
	MaxFieldBytes = 64 << 10
	// MaxNameLen bounds node names (Ironic's column is 255 wide) and
	// other short strings (conductor_group).
	MaxNameLen = 255
	// MaxTextLen bounds free text: maintenance and retirement reasons.
	MaxTextLen = 4096
)

// checkContentType refuses with 415 a POST, PUT or PATCH that does not say
// Content-Type: application/json, with a body or without. A browser can
// send text/plain, form or multipart requests to any origin without
// asking it first (and with basic credentials it has cached), but not
// application/json; refusing everything else closes that door. A body is
// not needed to do harm: an empty form posted to
// /v1/sites/NAME/credentials would rotate the site's credential, so an
// empty body needs the type too (Ironic's clients always send it).
// Bodies are JSON everywhere in this API; PATCH also takes JSON Patch's
// own type, which some clients send.
func checkContentType(w http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodPost && r.Method != http.MethodPut && r.Method != http.MethodPatch {
		return true
	}
	ct := r.Header.Get("Content-Type")
	mt, params, err := mime.ParseMediaType(ct)
	if err == nil {
		cs, hasCS := params["charset"]
		okType := mt == "application/json" || (r.Method == http.MethodPatch && mt == "application/json-patch+json")
		if okType && (!hasCS || strings.EqualFold(cs, "utf-8")) {
			return true
		}
	}
	if ct == "" {
		ct = "none"
	}
	want := "Content-Type: application/json"
	if r.Method == http.MethodPatch {
		want += " (or application/json-patch+json)"
	}
	writeError(w, http.StatusUnsupportedMediaType, fmt.Sprintf("Content-Type %s is not accepted: %s requests must be sent with %s, even without a body (this keeps web pages from posting forms to the API)",
		ct, r.Method, want))
	return false
}

// jsonDepth returns how deeply objects and arrays nest in b (0 for a
// scalar), stopping as soon as it passes limit. It only counts brackets
// outside strings; the JSON decoder checks everything else.
func jsonDepth(b []byte, limit int) int {
	depth, max := 0, 0
	inString, escaped := false, false
	for _, c := range b {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
			if depth > max {
				max = depth
				if max > limit {
					return max
				}
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return max
}

// Ironic's rule for node names since API 1.10: RFC 3986 unreserved
// characters only, at most 255, and not something that looks like a UUID
// (a node is found by name or by UUID, so they must never be confused).
var nodeNameRE = regexp.MustCompile(`^[A-Za-z0-9._~-]+$`)

// reservedNames are path words under /v1/nodes that a node name would
// shadow (GET /v1/nodes/detail must stay the detailed list); Ironic
// refuses them as names too.
var reservedNames = map[string]bool{"maintenance": true, "management": true, "ports": true, "states": true,
	"vendor_passthru": true, "validate": true, "detail": true}

// uuidLike is oslo's is_uuid_like for names that already passed the
// character rule: 32 hex digits once the dashes are gone.
func uuidLike(s string) bool {
	h := strings.ReplaceAll(s, "-", "")
	if len(h) != 32 {
		return false
	}
	for _, c := range h {
		if !strings.ContainsRune("0123456789abcdefABCDEF", c) {
			return false
		}
	}
	return true
}

// nodeNameProblem returns what is wrong with a node name, or "".
func nodeNameProblem(name string) string {
	switch {
	case name == "":
		return "a name cannot be empty (leave it out, or remove it, for a node without a name)"
	case len(name) > MaxNameLen:
		return fmt.Sprintf("a name is at most %d characters, this one has %d", MaxNameLen, len(name))
	case !nodeNameRE.MatchString(name):
		return "a name may only contain letters, digits and '-', '.', '_', '~'"
	case reservedNames[strings.ToLower(name)]:
		return "it is a reserved word of the API (maintenance, management, ports, states, vendor_passthru, validate, detail)"
	case uuidLike(name):
		return "a name must not look like a UUID"
	}
	return ""
}

// limitError is a 400 naming the field that was too big.
func limitError(field string, size, max int, unit string) error {
	return &engine.Error{Kind: engine.Invalid, Msg: fmt.Sprintf("%s is too large: %d %s, at most %d are accepted", field, size, unit, max)}
}

// checkMapSize bounds one of the free-form objects of a node or port.
func checkMapSize(field string, m map[string]any) error {
	if len(m) == 0 {
		return nil
	}
	if n, ok := jsonSize(m); ok {
		if n > MaxFieldBytes {
			return limitError(field, n, MaxFieldBytes, "bytes of JSON")
		}
		return nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return &engine.Error{Kind: engine.Invalid, Msg: fmt.Sprintf("%s cannot be stored: %v", field, err)}
	}
	if len(b) > MaxFieldBytes {
		return limitError(field, len(b), MaxFieldBytes, "bytes of JSON")
	}
	return nil
}

// checkText bounds a string field.
func checkText(field, s string, max int) error {
	if len(s) > max {
		return limitError(field, len(s), max, "bytes")
	}
	return nil
}

// checkNodeLimits bounds every field of a node that a client can set; it
// runs after a create or a patch, on what would be stored.
func checkNodeLimits(n *fsm.Node) error {
	for _, f := range []struct {
		name string
		m    map[string]any
	}{{"driver_info", n.DriverInfo}, {"properties", n.Properties}, {"instance_info", n.InstanceInfo}, {"extra", n.Extra},
		{"network_data", n.NetworkData}} {
		if err := checkMapSize(f.name, f.m); err != nil {
			return err
		}
	}
	for _, f := range []struct {
		name, s string
		max     int
	}{{"conductor_group", n.Site, MaxNameLen}, {"driver", n.Driver, MaxNameLen},
		{"maintenance_reason", n.MaintenanceReason, MaxTextLen}, {"retired_reason", n.RetiredReason, MaxTextLen},
		// Ironic's column sizes.
		{"resource_class", n.ResourceClass, 80}, {"description", n.Description, 4096}, {"owner", n.Owner, 255},
		{"instance_uuid", n.InstanceUUID, 36}, {"instance_name", n.InstanceName, 255}} {
		if err := checkText(f.name, f.s, f.max); err != nil {
			return err
		}
	}
	return nil
}
