package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	jsonpatch "github.com/evanphx/json-patch/v5"

	"github.com/bmedge/bmedge/coordinator/engine"
	"github.com/bmedge/bmedge/coordinator/fsm"
)

// patchOp is one JSON Patch (RFC 6902) operation, as Ironic takes them.
type patchOp struct {
	Op    string          `json:"op"`
	Path  string          `json:"path"`
	Value json.RawMessage `json:"value"`
}

var mapFields = map[string]bool{"driver_info": true, "properties": true, "instance_info": true, "extra": true}
var scalarFields = map[string]bool{"name": true, "driver": true, "conductor_group": true, "retired": true, "retired_reason": true,
	"maintenance": true, "maintenance_reason": true, "description": true, "resource_class": true, "owner": true}

// applyPatch applies ops to n. Errors say which operation was wrong.
func applyPatch(n *fsm.Node, ops []patchOp) error {
	for i, op := range ops {
		parts := strings.SplitN(strings.TrimPrefix(op.Path, "/"), "/", 2)
		if !strings.HasPrefix(op.Path, "/") || parts[0] == "" {
			return &engine.Error{Kind: engine.Invalid, Msg: fmt.Sprintf("patch operation %d: path %q must start with '/'", i+1, op.Path)}
		}
		field := parts[0]
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
		if mapFields[field] {
			m := fieldMap(n, field)
			if len(parts) == 1 {
				switch op.Op {
				case "remove":
					*m = map[string]any{}
				default:
					obj, ok := val.(map[string]any)
					if !ok {
						return &engine.Error{Kind: engine.Invalid, Msg: fmt.Sprintf("patch operation %d: /%s must be an object", i+1, field)}
					}
					*m = obj
				}
				continue
			}
			if *m == nil {
				*m = map[string]any{}
			}
			out, err := patchBelow(*m, field, op.Op, parts[1], op.Value)
			if err != nil {
				return &engine.Error{Kind: engine.Invalid, Msg: fmt.Sprintf("patch operation %d (%s %s): %v", i+1, op.Op, op.Path, err)}
			}
			*m = out
			continue
		}
		if !scalarFields[field] || len(parts) > 1 {
			return &engine.Error{Kind: engine.Invalid, Msg: fmt.Sprintf("patch operation %d: /%s cannot be patched", i+1, op.Path[1:])}
		}
		// A new name follows the same rules as at create; remove (or
		// null) leaves the node without a name.
		if name, ok := val.(string); ok && field == "name" && op.Op != "remove" {
			if p := nodeNameProblem(name); p != "" {
				return &engine.Error{Kind: engine.Invalid, Msg: fmt.Sprintf("patch operation %d: cannot change the name to %s: %s", i+1, shortQuote(name), p)}
			}
		}
		if err := setScalar(n, field, op.Op, val); err != nil {
			return &engine.Error{Kind: engine.Invalid, Msg: fmt.Sprintf("patch operation %d: %v", i+1, err)}
		}
	}
	return nil
}

// patchBelow applies one operation at sub, a JSON Pointer below the map
// field, with the JSON Patch library (RFC 6902 as evanphx/json-patch
// implements it: every container on the way must exist, add sets a
// member or inserts into an array ("-" appends), replace and remove need
// their target). One exception is kept for the clients of this API:
// replace of a missing member directly under the field sets it, as add
// does. m is not changed; the patched map is returned.
func patchBelow(m map[string]any, field, op, sub string, value json.RawMessage) (map[string]any, error) {
	if op == "replace" && !strings.Contains(sub, "/") {
		if _, ok := m[strings.ReplaceAll(strings.ReplaceAll(sub, "~1", "/"), "~0", "~")]; !ok {
			op = "add"
		}
	}
	one := map[string]any{"op": op, "path": "/" + field + "/" + sub}
	if op != "remove" {
		one["value"] = value
	}
	pb, err := json.Marshal([]any{one})
	if err != nil {
		return nil, err
	}
	p, err := jsonpatch.DecodePatch(pb)
	if err != nil {
		return nil, err
	}
	doc, err := json.Marshal(map[string]any{field: m})
	if err != nil {
		return nil, err
	}
	opts := jsonpatch.NewApplyOptions()
	opts.SupportNegativeIndices = false
	opts.EscapeHTML = false
	out, err := p.ApplyWithOptions(doc, opts)
	if err != nil {
		return nil, err
	}
	var res map[string]map[string]any
	if err := json.Unmarshal(out, &res); err != nil {
		return nil, err
	}
	if res[field] == nil {
		return map[string]any{}, nil
	}
	return res[field], nil
}

func fieldMap(n *fsm.Node, f string) *map[string]any {
	switch f {
	case "driver_info":
		return &n.DriverInfo
	case "properties":
		return &n.Properties
	case "instance_info":
		return &n.InstanceInfo
	}
	return &n.Extra
}

func setScalar(n *fsm.Node, field, op string, val any) error {
	str := func() (string, error) {
		if op == "remove" || val == nil {
			return "", nil
		}
		s, ok := val.(string)
		if !ok {
			return "", fmt.Errorf("/%s must be a string", field)
		}
		return s, nil
	}
	boolean := func() (bool, error) {
		if op == "remove" || val == nil {
			return false, nil
		}
		switch b := val.(type) {
		case bool:
			return b, nil
		case string:
			return strings.EqualFold(b, "true"), nil
		}
		return false, fmt.Errorf("/%s must be true or false", field)
	}
	var err error
	switch field {
	case "name":
		n.Name, err = str()
	case "driver":
		n.Driver, err = str()
	case "conductor_group":
		n.Site, err = str()
	case "retired":
		// Removing retired (node unset --retired) leaves it null, as
		// Ironic does: such a node is neither retired nor listed by
		// ?retired=False.
		n.Retired, err = boolean()
		n.RetiredUnset = op == "remove" || val == nil
	case "retired_reason":
		n.RetiredReason, err = str()
	case "maintenance":
		n.Maintenance, err = boolean()
	case "maintenance_reason":
		n.MaintenanceReason, err = str()
	case "resource_class":
		n.ResourceClass, err = str()
	case "description":
		n.Description, err = str()
	case "owner":
		n.Owner, err = str()
	}
	return err
}

func (s *Server) patchNode(w http.ResponseWriter, r *http.Request) {
	var ops []patchOp
	if !decode(w, r, &ops) {
		return
	}
	if len(ops) == 0 {
		writeError(w, 400, "Patch must be a non-empty JSON list of operations")
		return
	}
	var id string
	err := s.e.UpdateNode(r.PathValue("id"), func(n *fsm.Node) error {
		id = n.UUID
		if err := applyPatch(n, ops); err != nil {
			return err
		}
		return checkNodeLimits(n)
	})
	if err != nil {
		writeErr(w, err)
		return
	}
	// Read back by UUID: the patch may have renamed the node.
	var v map[string]any
	if err := s.e.View(id, func(n *fsm.Node, online bool) error { v = s.render(r, n, online); return nil }); err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, 200, v)
}

// Ports.

func (s *Server) renderPort(r *http.Request, p engine.Port) map[string]any {
	return map[string]any{"uuid": p.UUID, "address": p.Address, "node_uuid": p.NodeUUID, "extra": orEmpty(p.Extra),
		"pxe_enabled": p.PXE, "created_at": p.CreatedAt, "updated_at": p.UpdatedAt, "local_link_connection": map[string]any{},
		"internal_info": map[string]any{}, "physical_network": nil, "portgroup_uuid": nil, "is_smartnic": false, "name": nil,
		"links": link(r, "/v1/ports/"+p.UUID)}
}

func (s *Server) portList(w http.ResponseWriter, r *http.Request, node string) {
	ports, err := s.e.Ports(node)
	if err != nil {
		writeErr(w, err)
		return
	}
	detail := strings.HasSuffix(r.URL.Path, "/detail") || r.URL.Query().Get("detail") == "True"
	out := []map[string]any{}
	for _, p := range ports {
		if a := r.URL.Query().Get("address"); a != "" && !strings.EqualFold(a, p.Address) {
			continue
		}
		v := s.renderPort(r, p)
		if !detail {
			v = pick(v, []string{"uuid", "address", "links"})
		}
		if f := r.URL.Query().Get("fields"); f != "" {
			v = pick(s.renderPort(r, p), strings.Split(f, ","))
		}
		out = append(out, v)
	}
	writeJSON(w, 200, map[string]any{"ports": out})
}

func (s *Server) listPorts(w http.ResponseWriter, r *http.Request) {
	node := r.URL.Query().Get("node")
	if node == "" {
		node = r.URL.Query().Get("node_uuid")
	}
	s.portList(w, r, node)
}

func (s *Server) nodePorts(w http.ResponseWriter, r *http.Request) {
	s.portList(w, r, r.PathValue("id"))
}

func (s *Server) createPort(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Address  string         `json:"address"`
		NodeUUID string         `json:"node_uuid"`
		Node     string         `json:"node"`
		Extra    map[string]any `json:"extra"`
		PXE      *bool          `json:"pxe_enabled"`
	}
	if !decode(w, r, &body) {
		return
	}
	node := body.NodeUUID
	if node == "" {
		node = body.Node
	}
	if body.Address == "" || node == "" {
		writeError(w, 400, "Mandatory fields missing: a port needs address and node_uuid")
		return
	}
	if err := checkText("address", body.Address, MaxNameLen); err != nil {
		writeErr(w, err)
		return
	}
	if err := checkMapSize("extra", body.Extra); err != nil {
		writeErr(w, err)
		return
	}
	pxe := body.PXE == nil || *body.PXE
	p, err := s.e.CreatePort(body.Address, node, body.Extra, pxe)
	if err != nil {
		writeErr(w, err)
		return
	}
	w.Header().Set("Location", baseURL(r)+"/v1/ports/"+p.UUID)
	writeJSON(w, 201, s.renderPort(r, *p))
}

func (s *Server) getPort(w http.ResponseWriter, r *http.Request) {
	p, err := s.e.Port(r.PathValue("id"))
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, 200, s.renderPort(r, p))
}

func (s *Server) deletePort(w http.ResponseWriter, r *http.Request) {
	p, err := s.e.Port(r.PathValue("id"))
	if err == nil {
		err = s.e.DeletePort(p.UUID)
	}
	if err != nil {
		writeErr(w, err)
		return
	}
	w.WriteHeader(204)
}

func (s *Server) listDrivers(w http.ResponseWriter, r *http.Request) {
	var out []map[string]any
	for _, n := range s.e.Machine().Config().Drivers.Names() {
		out = append(out, map[string]any{"name": n, "hosts": []string{"coordinator"}, "type": "dynamic", "links": link(r, "/v1/drivers/"+n)})
	}
	writeJSON(w, 200, map[string]any{"drivers": out})
}

// getDriver shows one driver (a hardware type, in Ironic's words) by its
// name or alias, with the interfaces every node of it gets.
func (s *Server) getDriver(w http.ResponseWriter, r *http.Request) {
	d, err := s.e.Machine().Config().Drivers.Get(r.PathValue("name"))
	if err != nil {
		writeError(w, 404, fmt.Sprintf("Could not find the following driver(s) or hardware type(s): %s.", r.PathValue("name")))
		return
	}
	v := map[string]any{"name": d.Name, "hosts": []string{"coordinator"}, "type": "dynamic",
		"links": link(r, "/v1/drivers/"+d.Name), "properties": link(r, "/v1/drivers/"+d.Name+"/properties")}
	ifaces := map[string]string{"bios": "no-bios", "boot": "pxe", "console": "no-console", "deploy": "direct", "firmware": "no-firmware",
		"inspect": "agent", "management": d.Name, "network": "noop", "power": d.Name, "raid": "no-raid", "rescue": "agent",
		"storage": "noop", "vendor": "no-vendor"}
	for _, st := range d.CleanSteps {
		if st.Interface == "bios" {
			ifaces["bios"] = d.Name
		}
	}
	for k, i := range ifaces {
		v["default_"+k+"_interface"] = i
		v["enabled_"+k+"_interfaces"] = []string{i}
	}
	writeJSON(w, 200, v)
}

// driverProperties lists the driver_info a driver takes.
func (s *Server) driverProperties(w http.ResponseWriter, r *http.Request) {
	d, err := s.e.Machine().Config().Drivers.Get(r.PathValue("name"))
	if err != nil {
		writeError(w, 404, fmt.Sprintf("Could not find the following driver(s) or hardware type(s): %s.", r.PathValue("name")))
		return
	}
	out := map[string]string{}
	for _, k := range d.RequiredInfo {
		out[k] = "The BMC's " + k + ". Required."
	}
	for _, k := range d.SecretInfo {
		out[k] = "The BMC's " + k + " (never shown). Optional."
	}
	writeJSON(w, 200, out)
}

// Sites (not part of Ironic: this system's edge sites).

func (s *Server) createSite(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Name string `json:"name"`
	}
	if !decode(w, r, &body) {
		return
	}
	user, pass, err := s.e.AddSite(body.Name)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, 201, map[string]any{"site": body.Name, "username": user, "password": pass, "broker_url": s.BrokerURL})
}

// rotateSite is POST /v1/sites/{name}/credentials: a new credential for
// the site's edge agent, answered as createSite answers (shown once); the
// old one stops working at once.
func (s *Server) rotateSite(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	user, pass, err := s.e.RotateSite(name)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, 200, map[string]any{"site": name, "username": user, "password": pass, "broker_url": s.BrokerURL})
}

// deleteSite is DELETE /v1/sites/{name}: only a site without nodes.
func (s *Server) deleteSite(w http.ResponseWriter, r *http.Request) {
	if err := s.e.DeleteSite(r.PathValue("name")); err != nil {
		writeErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) listSites(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, 200, map[string]any{"sites": s.e.Sites()})
}
