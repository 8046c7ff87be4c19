package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"

	"github.com/bmedge/bmedge/coordinator/engine"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/coordinator/inspectrules"
)

// This file serves Ironic's port groups (API 1.23; mode and properties
// 1.26), PATCH of ports and port groups, and allocations (1.52; PATCH
// 1.57): the coordinator keeps them (coordinator/engine/resources.go).

func (s *Server) registerResources(m routeList) {
	m.HandleFunc("PATCH /v1/ports/{id}", s.patchPort)
	m.HandleFunc("GET /v1/portgroups", s.listPortGroups)
	m.HandleFunc("GET /v1/portgroups/detail", s.listPortGroups)
	m.HandleFunc("POST /v1/portgroups", s.createPortGroup)
	m.HandleFunc("GET /v1/portgroups/{id}", s.getPortGroup)
	m.HandleFunc("PATCH /v1/portgroups/{id}", s.patchPortGroup)
	m.HandleFunc("DELETE /v1/portgroups/{id}", s.deletePortGroup)
	m.HandleFunc("GET /v1/portgroups/{id}/ports", s.portGroupPorts)
	m.HandleFunc("GET /v1/portgroups/{id}/ports/detail", s.portGroupPorts)
	m.HandleFunc("GET /v1/nodes/{id}/portgroups", s.nodePortGroups)
	m.HandleFunc("GET /v1/nodes/{id}/portgroups/detail", s.nodePortGroups)
	m.HandleFunc("GET /v1/allocations", s.listAllocations)
	m.HandleFunc("POST /v1/allocations", s.createAllocation)
	m.HandleFunc("GET /v1/allocations/{id}", s.getAllocation)
	m.HandleFunc("PATCH /v1/allocations/{id}", s.patchAllocation)
	m.HandleFunc("DELETE /v1/allocations/{id}", s.deleteAllocation)
	m.HandleFunc("GET /v1/nodes/{id}/allocation", s.nodeAllocation)
	m.HandleFunc("DELETE /v1/nodes/{id}/allocation", s.deleteNodeAllocation)
}

// resourcePatch applies a JSON Patch to obj, a resource as a map of its
// patchable fields: top-level fields in scalars are set or removed
// (remove sets null), and paths below a field of maps are patched as a
// node's maps are (patchIn). Other paths are 400, naming the path.
func resourcePatch(w http.ResponseWriter, r *http.Request, obj map[string]any, scalars, maps map[string]bool, what string) bool {
	var ops []patchOp
	if !decode(w, r, &ops) {
		return false
	}
	if len(ops) == 0 {
		writeError(w, 400, "Patch must be a non-empty JSON list of operations")
		return false
	}
	if len(ops) > MaxPatchOps {
		writeError(w, 400, fmt.Sprintf("Patch has %d operations; at most %d are accepted in one request", len(ops), MaxPatchOps))
		return false
	}
	for i, op := range ops {
		if op.Op != "add" && op.Op != "replace" && op.Op != "remove" {
			writeError(w, 400, fmt.Sprintf("patch operation %d: op %q is not supported; use add, replace or remove", i+1, op.Op))
			return false
		}
		parts := strings.SplitN(strings.TrimPrefix(op.Path, "/"), "/", 2)
		if !strings.HasPrefix(op.Path, "/") || parts[0] == "" {
			writeError(w, 400, fmt.Sprintf("patch operation %d: path %q must start with '/'", i+1, op.Path))
			return false
		}
		var val any
		if op.Op != "remove" {
			if len(op.Value) == 0 {
				writeError(w, 400, fmt.Sprintf("patch operation %d (%s %s) needs a value", i+1, op.Op, op.Path))
				return false
			}
			if err := json.Unmarshal(op.Value, &val); err != nil {
				writeError(w, 400, fmt.Sprintf("patch operation %d: value is not JSON: %v", i+1, err))
				return false
			}
		}
		f := parts[0]
		switch {
		case maps[f] && len(parts) == 2:
			m, _ := obj[f].(map[string]any)
			if m == nil {
				m = map[string]any{}
			}
			if err := patchIn(m, op.Op, parts[1], val); err != nil {
				writeError(w, 400, fmt.Sprintf("patch operation %d (%s %s): %v", i+1, op.Op, op.Path, err))
				return false
			}
			obj[f] = m
		case maps[f]:
			if op.Op == "remove" {
				obj[f] = map[string]any{}
				continue
			}
			m, ok := val.(map[string]any)
			if !ok {
				writeError(w, 400, fmt.Sprintf("patch operation %d: /%s must be an object", i+1, f))
				return false
			}
			obj[f] = m
		case scalars[f] && len(parts) == 1:
			if op.Op == "remove" {
				obj[f] = nil
			} else {
				obj[f] = val
			}
		default:
			if since, ok := patchSince[what][f]; ok && apiMinor(r) < since {
				writeErr(w, tooNew("field "+f, since, apiMinor(r)))
				return false
			}
			writeError(w, 400, fmt.Sprintf("patch operation %d: /%s cannot be patched on a %s here; the fields that can: %s", i+1, strings.TrimPrefix(op.Path, "/"), what, fieldNames(scalars, maps)))
			return false
		}
	}
	return true
}

// patchSince are the fields of a resource that a PATCH of an earlier
// version than theirs is refused with Ironic's 406 (not the 400 of a
// field the resource does not have).
var patchSince = map[string]map[string]int{"port": {"physical_network": minorPortPhysNet}}

func fieldNames(a, b map[string]bool) string {
	var out []string
	for k := range a {
		out = append(out, k)
	}
	for k := range b {
		out = append(out, k)
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// patchedString and patchedBool read a patched field back.
func patchedString(obj map[string]any, f string) (string, error) {
	switch v := obj[f].(type) {
	case nil:
		return "", nil
	case string:
		return v, nil
	}
	return "", &engine.Error{Kind: engine.Invalid, Msg: fmt.Sprintf("/%s must be a string", f)}
}

// patchedText is a text field of a resource that a patch may set.
type patchedText struct {
	name string
	to   *string
}

// patchedTexts reads the patched text fields back, those obj has (the
// request's API version shows them), each at most 255 characters.
func patchedTexts(obj map[string]any, fields []patchedText) error {
	for _, f := range fields {
		if _, ok := obj[f.name]; !ok {
			continue
		}
		var err error
		if *f.to, err = patchedString(obj, f.name); err != nil {
			return err
		}
		if err := checkText(f.name, *f.to, 255); err != nil {
			return err
		}
	}
	return nil
}

func patchedBool(obj map[string]any, f string) (bool, error) {
	raw, _ := json.Marshal(obj[f])
	b, err := boolValue(raw)
	if err != nil {
		return false, &engine.Error{Kind: engine.Invalid, Msg: fmt.Sprintf("/%s: %v", f, err)}
	}
	return b, nil
}

// minorPortPhysNet is the version of a port's physical_network, and
// MaxPhysicalNetwork its longest value (Ironic's column; the inspection
// rules' bound too).
const (
	minorPortPhysNet   = 34
	MaxPhysicalNetwork = inspectrules.MaxPhysicalNetwork
)

// portTextMax is the longest value of a port's text field f.
func portTextMax(f string) int {
	if f == "physical_network" {
		return MaxPhysicalNetwork
	}
	return 255
}

// patchPort is PATCH /v1/ports/{id}: address, node_uuid, portgroup_uuid
// (1.24), pxe_enabled (1.19), physical_network (1.34), extra and the
// texts of later versions. The port fields this coordinator does not
// keep (name, ...) are refused as at create; a field of a later version
// than the request's is a 406, as in Ironic.
func (s *Server) patchPort(w http.ResponseWriter, r *http.Request) {
	cur, err := s.e.Port(r.PathValue("id"))
	if err != nil {
		writeErr(w, err)
		return
	}
	obj := map[string]any{"address": cur.Address, "node_uuid": cur.NodeUUID, "pxe_enabled": cur.PXE,
		"portgroup_uuid": nullable(cur.PortGroupUUID), "extra": cloneAny(cur.Extra)}
	scalars := map[string]bool{"address": true, "node_uuid": true, "pxe_enabled": true, "portgroup_uuid": true}
	texts := []struct {
		name  string
		since int
		v     string
	}{{"physical_network", minorPortPhysNet, cur.PhysicalNetwork}, {"description", 97, cur.Description}, {"vendor", 100, cur.Vendor}, {"category", 101, cur.Category}}
	for _, f := range texts {
		if apiMinor(r) >= f.since {
			obj[f.name], scalars[f.name] = nullable(f.v), true
		}
	}
	patchMaps := map[string]bool{"extra": true}
	if apiMinor(r) >= minorLocalLink {
		obj["local_link_connection"], patchMaps["local_link_connection"] = cloneAny(cur.LocalLinkConnection), true
	}
	if !resourcePatch(w, r, obj, scalars, patchMaps, "port") {
		return
	}
	p, err := s.e.UpdatePort(cur.UUID, func(p *engine.Port) error {
		var err error
		if p.Address, err = patchedString(obj, "address"); err != nil {
			return err
		}
		if p.Address == "" {
			return &engine.Error{Kind: engine.Invalid, Msg: "a port's address cannot be removed: it is the port's MAC address"}
		}
		if p.NodeUUID, err = patchedString(obj, "node_uuid"); err != nil {
			return err
		}
		if p.NodeUUID == "" {
			return &engine.Error{Kind: engine.Invalid, Msg: "a port's node_uuid cannot be removed: every port belongs to a node"}
		}
		if p.PortGroupUUID, err = patchedString(obj, "portgroup_uuid"); err != nil {
			return err
		}
		if obj["pxe_enabled"] == nil {
			p.PXE = true // Ironic's default
		} else if p.PXE, err = patchedBool(obj, "pxe_enabled"); err != nil {
			return err
		}
		if err := patchedTexts(obj, []patchedText{{"description", &p.Description}, {"vendor", &p.Vendor}, {"category", &p.Category}}); err != nil {
			return err
		}
		if _, ok := obj["physical_network"]; ok {
			if p.PhysicalNetwork, err = patchedString(obj, "physical_network"); err != nil {
				return err
			}
			if err := checkText("physical_network", p.PhysicalNetwork, MaxPhysicalNetwork); err != nil {
				return err
			}
		}
		if _, ok := patchMaps["local_link_connection"]; ok {
			if p.LocalLinkConnection, err = removedLocalLink(cur.LocalLinkConnection, obj["local_link_connection"]); err != nil {
				return err
			}
		}
		p.Extra, _ = obj["extra"].(map[string]any)
		return checkMapSize("extra", p.Extra)
	})
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, 200, s.renderPort(r, *p))
}

func cloneAny(m map[string]any) map[string]any {
	b, _ := json.Marshal(orEmpty(m))
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return out
}

// siteFilter is the conductor_group filter of a port or portgroup list
// (API 1.99): whether a node is in the site asked for (every node when
// none is).
func (s *Server) siteFilter(r *http.Request) (func(node string) bool, error) {
	group := r.URL.Query().Get("conductor_group")
	if group == "" {
		return func(string) bool { return true }, nil
	}
	if apiMinor(r) < 99 {
		return nil, tooNew("the conductor_group filter", 99, apiMinor(r))
	}
	return func(node string) bool {
		var site string
		_ = s.e.View(node, func(n *fsm.Node, _ bool) error { site = n.Site; return nil })
		return strings.EqualFold(site, group)
	}, nil
}

// getResource answers a GET of one resource: get finds it by the path's
// id and render shows it, cut to the fields asked for.
func getResource[T any](w http.ResponseWriter, r *http.Request, get func(string) (T, error), render func(*http.Request, T) map[string]any) {
	x, err := get(r.PathValue("id"))
	if err != nil {
		writeErr(w, err)
		return
	}
	v := render(r, x)
	if f := r.URL.Query().Get("fields"); f != "" {
		v = pick(v, strings.Split(f, ","))
	}
	writeJSON(w, 200, v)
}

// writeCreated answers a create: 201 with v, the new resource at path.
func writeCreated(w http.ResponseWriter, r *http.Request, path string, v map[string]any) {
	w.Header().Set("Location", baseURL(r)+path)
	writeJSON(w, 201, v)
}

// writeDeleted answers a delete: err, or 204.
func writeDeleted(w http.ResponseWriter, err error) {
	if err != nil {
		writeErr(w, err)
		return
	}
	w.WriteHeader(204)
}

// Port groups.

func (s *Server) renderPortGroup(r *http.Request, g engine.PortGroup) map[string]any {
	mode := g.Mode
	if mode == "" {
		mode = engine.DefaultBondMode
	}
	v := map[string]any{"uuid": g.UUID, "name": nullable(g.Name), "address": nullable(g.Address), "node_uuid": g.NodeUUID,
		"standalone_ports_supported": g.StandalonePortsSupported, "internal_info": map[string]any{}, "extra": orEmpty(g.Extra),
		"created_at": g.CreatedAt, "updated_at": g.UpdatedAt, "links": link(r, "/v1/portgroups/"+g.UUID),
		"ports": link(r, "/v1/portgroups/"+g.UUID+"/ports")}
	if apiMinor(r) >= 26 {
		v["mode"], v["properties"] = mode, orEmpty(g.Properties)
	}
	if apiMinor(r) >= 102 {
		v["physical_network"] = nullable(g.PhysicalNetwork)
	}
	if apiMinor(r) >= 103 {
		v["category"] = nullable(g.Category)
	}
	return v
}

func (s *Server) portGroupList(w http.ResponseWriter, r *http.Request, node string) {
	groups, err := s.e.PortGroups(node)
	if err != nil {
		writeErr(w, err)
		return
	}
	q := r.URL.Query()
	detail := strings.HasSuffix(r.URL.Path, "/detail") || q.Get("detail") == "True" || q.Get("detail") == "true"
	var fields []string
	if f := q.Get("fields"); f != "" {
		fields = strings.Split(f, ",")
	}
	inSite, err := s.siteFilter(r)
	if err != nil {
		writeErr(w, err)
		return
	}
	if q.Has("shard") && apiMinor(r) < 106 {
		writeErr(w, tooNew("the shard filter", 106, apiMinor(r)))
		return
	}
	out := []map[string]any{}
	for _, g := range groups {
		if a := q.Get("address"); a != "" && !strings.EqualFold(a, g.Address) {
			continue
		}
		if q.Has("shard") || !inSite(g.NodeUUID) {
			continue // no node has a shard here
		}
		v := s.renderPortGroup(r, g)
		switch {
		case fields != nil:
			v = pick(v, fields)
		case !detail:
			v = pick(v, []string{"uuid", "address", "name", "links"})
		}
		out = append(out, v)
	}
	writeJSON(w, 200, map[string]any{"portgroups": out})
}

// nodeFilter is the node of a port or port group list: the node
// filter, or node_uuid.
func nodeFilter(r *http.Request) string {
	if node := r.URL.Query().Get("node"); node != "" {
		return node
	}
	return r.URL.Query().Get("node_uuid")
}

func (s *Server) listPortGroups(w http.ResponseWriter, r *http.Request) {
	s.portGroupList(w, r, nodeFilter(r))
}

func (s *Server) nodePortGroups(w http.ResponseWriter, r *http.Request) {
	s.portGroupList(w, r, r.PathValue("id"))
}

// portGroupBody is a port group as a client sends it.
type portGroupBody struct {
	UUID       string         `json:"uuid"`
	Name       string         `json:"name"`
	Address    string         `json:"address"`
	NodeUUID   string         `json:"node_uuid"`
	Mode       string         `json:"mode"`
	Properties map[string]any `json:"properties"`
	Standalone *bool          `json:"standalone_ports_supported"`
	Extra      map[string]any `json:"extra"`
	PhysNet    string         `json:"physical_network"`
	Category   string         `json:"category"`
}

func (s *Server) createPortGroup(w http.ResponseWriter, r *http.Request) {
	var raw map[string]json.RawMessage
	if !decode(w, r, &raw) {
		return
	}
	allowed := map[string]bool{"uuid": true, "name": true, "address": true, "node_uuid": true, "extra": true,
		"standalone_ports_supported": true, "mode": true, "properties": true, "physical_network": true, "category": true}
	since := map[string]int{"mode": 26, "properties": 26, "physical_network": 102, "category": 103}
	for k, v := range raw {
		if !allowed[k] {
			writeError(w, 400, fmt.Sprintf("Unknown attribute for portgroup: %s (this coordinator keeps %s)", k, fieldNames(allowed, nil)))
			return
		}
		if v0 := since[k]; apiMinor(r) < v0 && string(v) != "null" {
			writeErr(w, tooNew("field "+k, v0, apiMinor(r)))
			return
		}
	}
	b, _ := json.Marshal(raw)
	var body portGroupBody
	if err := json.Unmarshal(b, &body); err != nil {
		writeError(w, 400, "Invalid portgroup: "+err.Error())
		return
	}
	if body.NodeUUID == "" {
		writeError(w, 400, "Mandatory field missing: node_uuid")
		return
	}
	if err := checkMapSize("extra", body.Extra); err != nil {
		writeErr(w, err)
		return
	}
	if err := checkMapSize("properties", body.Properties); err != nil {
		writeErr(w, err)
		return
	}
	for _, f := range []struct{ name, v string }{{"physical_network", body.PhysNet}, {"category", body.Category}} {
		if err := checkText(f.name, f.v, 255); err != nil {
			writeErr(w, err)
			return
		}
	}
	g := engine.PortGroup{UUID: body.UUID, Name: body.Name, Address: body.Address, Mode: body.Mode, PhysicalNetwork: body.PhysNet, Category: body.Category,
		Properties: body.Properties, Extra: body.Extra, StandalonePortsSupported: body.Standalone == nil || *body.Standalone}
	out, err := s.e.CreatePortGroup(g, body.NodeUUID)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeCreated(w, r, "/v1/portgroups/"+out.UUID, s.renderPortGroup(r, *out))
}

func (s *Server) getPortGroup(w http.ResponseWriter, r *http.Request) {
	getResource(w, r, s.e.PortGroup, s.renderPortGroup)
}

func (s *Server) patchPortGroup(w http.ResponseWriter, r *http.Request) {
	cur, err := s.e.PortGroup(r.PathValue("id"))
	if err != nil {
		writeErr(w, err)
		return
	}
	obj := map[string]any{"name": nullable(cur.Name), "address": nullable(cur.Address), "node_uuid": cur.NodeUUID,
		"standalone_ports_supported": cur.StandalonePortsSupported, "extra": cloneAny(cur.Extra)}
	scalars := map[string]bool{"name": true, "address": true, "node_uuid": true, "standalone_ports_supported": true}
	maps := map[string]bool{"extra": true}
	if apiMinor(r) >= 26 {
		obj["mode"], obj["properties"] = nullable(cur.Mode), cloneAny(cur.Properties)
		scalars["mode"], maps["properties"] = true, true
	}
	if apiMinor(r) >= 102 {
		obj["physical_network"], scalars["physical_network"] = nullable(cur.PhysicalNetwork), true
	}
	if apiMinor(r) >= 103 {
		obj["category"], scalars["category"] = nullable(cur.Category), true
	}
	if !resourcePatch(w, r, obj, scalars, maps, "portgroup") {
		return
	}
	g, err := s.e.UpdatePortGroup(cur.UUID, func(g *engine.PortGroup) error {
		var err error
		if g.Name, err = patchedString(obj, "name"); err != nil {
			return err
		}
		if g.Address, err = patchedString(obj, "address"); err != nil {
			return err
		}
		if g.NodeUUID, err = patchedString(obj, "node_uuid"); err != nil {
			return err
		}
		if g.NodeUUID == "" {
			return &engine.Error{Kind: engine.Invalid, Msg: "a portgroup's node_uuid cannot be removed: every portgroup belongs to a node"}
		}
		if obj["standalone_ports_supported"] == nil {
			g.StandalonePortsSupported = true
		} else if g.StandalonePortsSupported, err = patchedBool(obj, "standalone_ports_supported"); err != nil {
			return err
		}
		if _, ok := obj["mode"]; ok {
			if g.Mode, err = patchedString(obj, "mode"); err != nil {
				return err
			}
			g.Properties, _ = obj["properties"].(map[string]any)
		}
		if err := patchedTexts(obj, []patchedText{{"physical_network", &g.PhysicalNetwork}, {"category", &g.Category}}); err != nil {
			return err
		}
		g.Extra, _ = obj["extra"].(map[string]any)
		if err := checkMapSize("extra", g.Extra); err != nil {
			return err
		}
		return checkMapSize("properties", g.Properties)
	})
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, 200, s.renderPortGroup(r, *g))
}

func (s *Server) deletePortGroup(w http.ResponseWriter, r *http.Request) {
	writeDeleted(w, s.e.DeletePortGroup(r.PathValue("id")))
}

// portGroupPorts is GET /v1/portgroups/{id}/ports (API 1.24).
func (s *Server) portGroupPorts(w http.ResponseWriter, r *http.Request) {
	g, err := s.e.PortGroup(r.PathValue("id"))
	if err != nil {
		writeErr(w, err)
		return
	}
	ports, err := s.e.Ports(g.NodeUUID)
	if err != nil {
		writeErr(w, err)
		return
	}
	detail := strings.HasSuffix(r.URL.Path, "/detail")
	out := []map[string]any{}
	for _, p := range ports {
		if p.PortGroupUUID != g.UUID {
			continue
		}
		v := s.renderPort(r, p)
		if !detail {
			v = pick(v, []string{"uuid", "address", "links"})
		}
		out = append(out, v)
	}
	writeJSON(w, 200, map[string]any{"ports": out})
}

// Allocations.

func (s *Server) renderAllocation(r *http.Request, a engine.Allocation) map[string]any {
	v := map[string]any{"uuid": a.UUID, "name": nullable(a.Name), "resource_class": a.ResourceClass,
		"traits": orList(a.Traits), "candidate_nodes": orList(a.CandidateNodes), "node_uuid": nullable(a.NodeUUID),
		"state": a.State, "last_error": nullable(a.LastError), "extra": orEmpty(a.Extra),
		"created_at": a.CreatedAt, "updated_at": a.UpdatedAt, "links": link(r, "/v1/allocations/"+a.UUID)}
	if apiMinor(r) >= 60 {
		v["owner"] = nullable(a.Owner)
	}
	return v
}

func orList(l []string) []string {
	if l == nil {
		return []string{}
	}
	return l
}

// listAllocations is GET /v1/allocations, with Ironic's node,
// resource_class and state filters.
func (s *Server) listAllocations(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	list, err := s.e.Allocations(q.Get("node"))
	if err != nil {
		writeErr(w, err)
		return
	}
	var fields []string
	if f := q.Get("fields"); f != "" {
		fields = strings.Split(f, ",")
	}
	out := []map[string]any{}
	for _, a := range list {
		if rc := q.Get("resource_class"); rc != "" && a.ResourceClass != rc {
			continue
		}
		if st := q.Get("state"); st != "" && a.State != st {
			continue
		}
		if o := q.Get("owner"); o != "" && a.Owner != o {
			continue
		}
		v := s.renderAllocation(r, a)
		if fields != nil {
			v = pick(v, fields)
		}
		out = append(out, v)
	}
	writeJSON(w, 200, map[string]any{"allocations": out})
}

// createAllocation is POST /v1/allocations. The allocation is processed
// before the answer (engine.CreateAllocation): it is active with its
// node, or in error with Ironic's last_error. A backfill (node, API
// 1.58) is refused: this coordinator's active nodes were deployed without
// one.
func (s *Server) createAllocation(w http.ResponseWriter, r *http.Request) {
	var raw map[string]json.RawMessage
	if !decode(w, r, &raw) {
		return
	}
	allowed := map[string]bool{"uuid": true, "name": true, "resource_class": true, "traits": true,
		"candidate_nodes": true, "extra": true, "owner": true, "node": true}
	for k, v := range raw {
		if !allowed[k] {
			writeError(w, 400, fmt.Sprintf("Unknown attribute for allocation: %s", k))
			return
		}
		if k == "owner" && apiMinor(r) < 60 && string(v) != "null" {
			writeErr(w, tooNew("field owner", 60, apiMinor(r)))
			return
		}
		if k == "node" && string(v) != "null" {
			if apiMinor(r) < 58 {
				writeErr(w, tooNew("field node", 58, apiMinor(r)))
				return
			}
			writeError(w, 400, "Backfilling an allocation for a deployed node (node, API 1.58) is not supported by this coordinator: create the allocation before the deploy, with resource_class and candidate_nodes naming the node")
			return
		}
	}
	var body struct {
		UUID           string         `json:"uuid"`
		Name           string         `json:"name"`
		ResourceClass  string         `json:"resource_class"`
		Traits         []string       `json:"traits"`
		CandidateNodes []string       `json:"candidate_nodes"`
		Extra          map[string]any `json:"extra"`
		Owner          string         `json:"owner"`
	}
	b, _ := json.Marshal(raw)
	if err := json.Unmarshal(b, &body); err != nil {
		writeError(w, 400, "Invalid allocation: "+err.Error())
		return
	}
	if body.ResourceClass == "" {
		writeError(w, 400, "The resource_class field is mandatory when not backfilling")
		return
	}
	if len(body.ResourceClass) > 80 {
		writeError(w, 400, "resource_class is longer than 80 characters")
		return
	}
	for _, t := range body.Traits {
		if err := fsm.CheckTrait(t); err != nil {
			writeError(w, 400, err.Error())
			return
		}
	}
	if err := checkMapSize("extra", body.Extra); err != nil {
		writeErr(w, err)
		return
	}
	a, err := s.e.CreateAllocation(engine.AllocationSpec{UUID: body.UUID, Name: body.Name, ResourceClass: body.ResourceClass,
		Owner: body.Owner, Traits: slices.Clone(body.Traits), CandidateNodes: body.CandidateNodes, Extra: body.Extra})
	if err != nil {
		writeErr(w, err)
		return
	}
	writeCreated(w, r, "/v1/allocations/"+a.UUID, s.renderAllocation(r, *a))
}

func (s *Server) getAllocation(w http.ResponseWriter, r *http.Request) {
	getResource(w, r, s.e.Allocation, s.renderAllocation)
}

// patchAllocation is PATCH /v1/allocations/{id} (API 1.57): name and
// extra, as Ironic's (owner from 1.60).
func (s *Server) patchAllocation(w http.ResponseWriter, r *http.Request) {
	if apiMinor(r) < 57 {
		writeError(w, 405, "PATCH of an allocation is in API version 1.57 and later")
		return
	}
	cur, err := s.e.Allocation(r.PathValue("id"))
	if err != nil {
		writeErr(w, err)
		return
	}
	obj := map[string]any{"name": nullable(cur.Name), "extra": cloneAny(cur.Extra)}
	scalars := map[string]bool{"name": true}
	if apiMinor(r) >= 60 {
		obj["owner"], scalars["owner"] = nullable(cur.Owner), true
	}
	if !resourcePatch(w, r, obj, scalars, map[string]bool{"extra": true}, "allocation") {
		return
	}
	a, err := s.e.UpdateAllocation(cur.UUID, func(a *engine.Allocation) error {
		var err error
		if a.Name, err = patchedString(obj, "name"); err != nil {
			return err
		}
		if _, ok := obj["owner"]; ok {
			if a.Owner, err = patchedString(obj, "owner"); err != nil {
				return err
			}
		}
		a.Extra, _ = obj["extra"].(map[string]any)
		return checkMapSize("extra", a.Extra)
	})
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, 200, s.renderAllocation(r, *a))
}

func (s *Server) deleteAllocation(w http.ResponseWriter, r *http.Request) {
	writeDeleted(w, s.e.DeleteAllocation(r.PathValue("id")))
}

// nodeAllocation is GET /v1/nodes/{id}/allocation.
func (s *Server) nodeAllocation(w http.ResponseWriter, r *http.Request) {
	var uuid, alloc string
	if !s.nodeDo(w, r, func(n *fsm.Node, _ bool) error { uuid, alloc = n.UUID, n.AllocationUUID; return nil }) {
		return
	}
	a, err := s.e.Allocation(alloc)
	if alloc == "" || err != nil {
		writeError(w, 404, fmt.Sprintf("Allocation for node %s could not be found.", uuid))
		return
	}
	writeJSON(w, 200, s.renderAllocation(r, a))
}

// deleteNodeAllocation is DELETE /v1/nodes/{id}/allocation.
func (s *Server) deleteNodeAllocation(w http.ResponseWriter, r *http.Request) {
	var uuid, alloc string
	if !s.nodeDo(w, r, func(n *fsm.Node, _ bool) error { uuid, alloc = n.UUID, n.AllocationUUID; return nil }) {
		return
	}
	if alloc == "" {
		writeError(w, 404, fmt.Sprintf("Allocation for node %s could not be found.", uuid))
		return
	}
	writeDeleted(w, s.e.DeleteAllocation(alloc))
}
