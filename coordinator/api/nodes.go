package api

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/bmedge/bmedge/coordinator/engine"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/lib/shacrypt"
	"github.com/bmedge/bmedge/protocol"
)

// Mask replaces secret values of driver_info with Ironic's "******".
func Mask(info map[string]any, decl drivers.Declaration) map[string]any {
	out := make(map[string]any, len(info))
	for k, v := range info {
		secret := strings.Contains(k, "password") || strings.Contains(k, "secret") || strings.Contains(k, "token")
		for _, s := range decl.SecretInfo {
			secret = secret || s == k
		}
		if secret {
			out[k] = "******"
		} else {
			out[k] = v
		}
	}
	return out
}

func nullable[T comparable](v T) any {
	var zero T
	if v == zero {
		return nil
	}
	return v
}

// shortQuote quotes a client's string for a message, cut to a length
// that fits on a terminal line.
func shortQuote(s string) string {
	if len(s) > 64 {
		return fmt.Sprintf("%q...", s[:64])
	}
	return fmt.Sprintf("%q", s)
}

func orEmpty(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}

var listFields = []string{"uuid", "name", "instance_uuid", "power_state", "provision_state", "maintenance", "links"}

// nodeFields are the fields a client may ask for with ?fields=: Ironic's
// (its _get_fields_for_node_query, plus uuid, traits and the fields its
// API fills in) and the few of this API's own.
var nodeFields = map[string]bool{}

func init() {
	for _, f := range strings.Fields(`automated_clean bios_interface boot_interface boot_mode clean_step conductor_group
		console_enabled console_interface deploy_interface deploy_step description driver driver_info
		driver_internal_info extra fault inspection_finished_at inspection_started_at inspect_interface
		instance_info instance_uuid last_error lessee maintenance maintenance_reason management_interface name
		network_data network_interface owner power_interface power_state properties protected protected_reason
		provision_state provision_updated_at raid_config raid_interface rescue_interface reservation
		resource_class retired retired_reason secure_boot shard storage_interface target_power_state
		target_provision_state target_raid_config traits vendor_interface uuid allocation_uuid chassis_uuid
		conductor created_at updated_at links ports states site_online health`) {
		nodeFields[f] = true
	}
}

// checkFields parses ?fields=: every field must be a node field, as
// Ironic checks (400 otherwise).
func checkFields(f string) ([]string, error) {
	if f == "" {
		return nil, nil
	}
	fields := strings.Split(f, ",")
	for _, x := range fields {
		if !nodeFields[x] {
			return nil, &engine.Error{Kind: engine.Invalid, Msg: fmt.Sprintf("Field %s is not a valid field.", x)}
		}
	}
	return fields, nil
}

// checkFieldsAt is checkFields at the request's version: ?fields= is
// taken from 1.8, and a field of a later version than the request's is
// 406, as in Ironic (check_allow_specify_fields, check_allowed_fields).
func checkFieldsAt(r *http.Request, f string) ([]string, error) {
	fields, err := checkFields(f)
	if err != nil || fields == nil {
		return fields, err
	}
	minor := apiMinor(r)
	if minor < 8 {
		return nil, tooNew("?fields=", 8, minor)
	}
	for _, x := range fields {
		if !fieldAt(x, minor) {
			return nil, tooNew("field "+x, fieldSince[x], minor)
		}
	}
	return fields, nil
}

// pick keeps fields of v, and links, which Ironic always keeps.
func pick(v map[string]any, fields []string) map[string]any {
	out := make(map[string]any, len(fields)+1)
	for _, f := range fields {
		if x, ok := v[f]; ok {
			out[f] = x
		}
	}
	if l, ok := v["links"]; ok {
		out["links"] = l
	}
	return out
}

// sortKeys are the sort_key values of node lists: what Ironic sorts
// nodes by (its table's columns; id is the creation order, the default),
// without the JSON fields it refuses.
var sortKeys = map[string]func(n *fsm.Node) string{
	"id":                     func(n *fsm.Node) string { return "" },
	"created_at":             func(n *fsm.Node) string { return "" },
	"uuid":                   func(n *fsm.Node) string { return n.UUID },
	"name":                   func(n *fsm.Node) string { return n.Name },
	"driver":                 func(n *fsm.Node) string { return n.Driver },
	"conductor_group":        func(n *fsm.Node) string { return n.Site },
	"provision_state":        func(n *fsm.Node) string { return string(n.ProvisionState) },
	"target_provision_state": func(n *fsm.Node) string { return string(n.TargetProvisionState) },
	"power_state":            func(n *fsm.Node) string { return n.PowerState },
	"target_power_state":     func(n *fsm.Node) string { return n.TargetPowerState },
	"maintenance":            func(n *fsm.Node) string { return strconv.FormatBool(n.Maintenance) },
	"retired":                func(n *fsm.Node) string { return strconv.FormatBool(n.Retired) },
	"updated_at":             func(n *fsm.Node) string { return n.UpdatedAt.UTC().Format(time.RFC3339Nano) },
	"provision_updated_at":   func(n *fsm.Node) string { return n.ProvisionUpdatedAt.UTC().Format(time.RFC3339Nano) },
	"last_error":             func(n *fsm.Node) string { return n.LastError },
	"reservation":            func(n *fsm.Node) string { return n.Reservation },
}

func boolParam(q url.Values, name string) (val *bool, err error) {
	s := q.Get(name)
	if s == "" {
		return nil, nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return nil, fmt.Errorf("Invalid value %q for %s: use True or False", s, name)
	}
	return &b, nil
}

func (s *Server) listNodes(w http.ResponseWriter, r *http.Request)       { s.list(w, r, false) }
func (s *Server) listNodesDetail(w http.ResponseWriter, r *http.Request) { s.list(w, r, true) }

func (s *Server) list(w http.ResponseWriter, r *http.Request, detail bool) {
	q := r.URL.Query()
	if q.Get("detail") == "True" || q.Get("detail") == "true" {
		detail = true
	}
	// A detail list's page is the same for the same request as long as
	// the nodes' views are (pagecache.go): the answer depends on the
	// path, the query, the base URL (links) and the API version only.
	var pageKey string
	var pageGen uint64
	if detail {
		pageKey = r.URL.Path + "?" + r.URL.RawQuery + "\x00" + baseURL(r) + "\x00" + strconv.Itoa(apiMinor(r))
		pageGen = s.e.ViewsGen()
		if b := s.pages.get(pageKey, pageGen); b != nil {
			writeNodeListBytes(w, b)
			return
		}
	}
	maint, err := boolParam(q, "maintenance")
	if err != nil {
		writeError(w, 400, err.Error())
		return
	}
	retired, err := boolParam(q, "retired")
	if err != nil {
		writeError(w, 400, err.Error())
		return
	}
	limit := maxLimit
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 0 {
			writeError(w, 400, fmt.Sprintf("Invalid limit %q: use a positive integer", l))
			return
		}
		if n > 0 {
			limit = min(n, maxLimit)
		}
	}
	fields, err := checkFieldsAt(r, q.Get("fields"))
	if err != nil {
		writeErr(w, err)
		return
	}
	if fields != nil && detail {
		writeError(w, 400, "Can not specify ?detail=True and fields in the same request.")
		return
	}
	sortKey, sortDir := q.Get("sort_key"), q.Get("sort_dir")
	if sortKey == "" {
		sortKey = "id"
	}
	if sortDir == "" {
		sortDir = "asc"
	}
	if sortDir != "asc" && sortDir != "desc" {
		writeError(w, 400, fmt.Sprintf("Invalid sort direction: %s. Acceptable values are 'asc' or 'desc'", sortDir))
		return
	}
	keyOf, ok := sortKeys[sortKey]
	if !ok {
		writeError(w, 400, fmt.Sprintf("The sort_key value %s is an invalid field for sorting", sortKey))
		return
	}
	state, driver, group, marker := q.Get("provision_state"), q.Get("driver"), q.Get("conductor_group"), q.Get("marker")
	if state != "" {
		ok := false
		for _, st := range fsm.AllStates() {
			ok = ok || string(st) == state
		}
		if !ok {
			writeError(w, 400, fmt.Sprintf("Invalid provision_state %q", state))
			return
		}
	}
	// The nodes in creation order (Each's), stably sorted by sort_key; a
	// page starts after the marker (wherever the marker sorts, whether or
	// not it passes the filters) and is at most limit long.
	type entry struct {
		uuid, key string
		pos       int
	}
	var all []entry
	markerAt := -1
	var markerKey string
	pos := 0
	// In creation order (sort_key id or created_at, ascending: every
	// key is the same), the page is the first limit nodes that pass
	// the filters after the marker, in Each's order: Each stops there.
	inOrder := (sortKey == "id" || sortKey == "created_at") && sortDir == "asc"
	s.e.Each(func(n *fsm.Node) bool {
		pos++
		if n.UUID == marker {
			markerAt, markerKey = pos, keyOf(n)
		}
		if inOrder && marker != "" && (markerAt < 0 || pos == markerAt) {
			return true
		}
		if (state != "" && string(n.ProvisionState) != state) || (maint != nil && n.Maintenance != *maint) ||
			(retired != nil && (n.RetiredUnset || n.Retired != *retired)) || (driver != "" && n.Driver != driver) || (group != "" && n.Site != group) {
			return true
		}
		all = append(all, entry{uuid: n.UUID, key: keyOf(n), pos: pos})
		return !inOrder || len(all) < limit
	})
	less := func(a, b entry) bool {
		if a.key != b.key {
			return (a.key < b.key) == (sortDir == "asc")
		}
		return (a.pos < b.pos) == (sortDir == "asc")
	}
	if !inOrder {
		sort.SliceStable(all, func(i, j int) bool { return less(all[i], all[j]) })
	}
	if marker != "" && markerAt > 0 {
		m := entry{key: markerKey, pos: markerAt}
		i := sort.Search(len(all), func(i int) bool { return less(m, all[i]) })
		all = all[i:]
	} else if marker != "" {
		writeError(w, 404, fmt.Sprintf("Node %s could not be found.", marker))
		return
	}
	if len(all) > limit {
		all = all[:limit]
	}
	// As Ironic: a full page has a next link, even when it is the last.
	next := ""
	if len(all) > 0 && len(all) == limit {
		nq := r.URL.Query()
		nq.Set("marker", all[len(all)-1].uuid)
		nq.Set("limit", strconv.Itoa(limit))
		next = baseURL(r) + r.URL.Path + "?" + nq.Encode()
	}
	ids := make([]string, len(all))
	for i, e := range all {
		ids[i] = e.uuid
	}
	base, minor := baseURL(r), apiMinor(r)
	if detail {
		// Whole nodes: their JSON, kept by the engine until they change.
		key, finish := s.viewKey(r)
		var failed error
		// The page is built from views read after pageGen was: it is
		// current for pageGen.
		b := s.pages.page(pageKey, pageGen, func() (uint64, []byte, bool) {
			views := s.e.Views(ids, key, true, func(n *fsm.Node, online bool) any { return s.view(base, n, online) }, finish)
			b, err := nodeListBytes(next, views)
			failed = err
			return pageGen, b, err == nil
		})
		if failed != nil {
			writeError(w, 500, "cannot encode a node: "+failed.Error())
			return
		}
		writeNodeListBytes(w, b)
		return
	}
	pickFields := fields
	if pickFields == nil {
		pickFields = listFields
	}
	views := s.e.Views(ids, base, false, func(n *fsm.Node, online bool) any { return s.view(base, n, online).pickAt(minor, pickFields) }, nil)
	out := make([]any, 0, len(views))
	for _, v := range views {
		if v != nil {
			out = append(out, v)
		}
	}
	resp := map[string]any{"nodes": out}
	if next != "" {
		resp["next"] = next
	}
	writeJSON(w, 200, resp)
}

func (s *Server) getNode(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	fields, ferr := checkFieldsAt(r, r.URL.Query().Get("fields"))
	base := baseURL(r)
	if ferr == nil && fields == nil {
		key, finish := s.viewKey(r)
		v := s.e.Views([]string{id}, key, true, func(n *fsm.Node, online bool) any { return s.view(base, n, online) }, finish)[0]
		if b, ok := v.([]byte); ok {
			writeJSONBytes(w, 200, b)
			return
		}
	}
	var v map[string]any
	err := s.e.View(id, func(n *fsm.Node, online bool) error {
		v = s.view(base, n, online).pickAt(apiMinor(r), fields)
		return nil
	})
	if err != nil {
		writeErr(w, err)
		return
	}
	if ferr != nil {
		writeErr(w, ferr)
		return
	}
	writeJSON(w, 200, v)
}

func (s *Server) createNode(w http.ResponseWriter, r *http.Request) {
	var raw map[string]json.RawMessage
	if !decode(w, r, &raw) {
		return
	}
	allowed := map[string]bool{"uuid": true, "name": true, "driver": true, "conductor_group": true, "driver_info": true,
		"properties": true, "instance_info": true, "extra": true, "resource_class": true, "description": true,
		"network_interface": true, "boot_interface": true, "deploy_interface": true, "power_interface": true,
		"management_interface": true, "inspect_interface": true, "chassis_uuid": true, "owner": true,
		"bios_interface": true, "console_interface": true, "firmware_interface": true, "raid_interface": true,
		"rescue_interface": true, "storage_interface": true, "vendor_interface": true,
		"automated_clean": true, "disable_power_off": true, "instance_uuid": true, "instance_name": true}
	for k := range raw {
		if !allowed[k] {
			writeError(w, 400, fmt.Sprintf("Unknown attribute for node: %s", k))
			return
		}
	}
	// A field of a later version than the request's, given a value, is
	// 406 (Ironic's reject_fields_in_newer_versions; null passes). Not
	// conductor_group: it names the node's site, which every node needs.
	for k, v := range raw {
		if minor := apiMinor(r); !fieldAt(k, minor) && string(v) != "null" && k != "conductor_group" {
			writeErr(w, tooNew("field "+k, fieldSince[k], minor))
			return
		}
	}
	body, _ := json.Marshal(raw)
	var spec engine.NodeSpec
	if err := json.Unmarshal(body, &spec); err != nil {
		writeError(w, 400, "Invalid node: "+err.Error())
		return
	}
	if spec.Driver == "" {
		writeError(w, 400, "Mandatory field missing: driver")
		return
	}
	if err := s.checkCreateInterfaces(raw, &spec); err != nil {
		writeErr(w, err)
		return
	}
	if err := createExtras(raw, &spec); err != nil {
		writeErr(w, err)
		return
	}
	// A name of "" is refused, as Ironic does; null or no name at all
	// makes a node without a name.
	if v, ok := raw["name"]; ok && string(v) != "null" {
		if p := nodeNameProblem(spec.Name); p != "" {
			writeError(w, 400, fmt.Sprintf("Cannot create node with invalid name %s: %s", shortQuote(spec.Name), p))
			return
		}
	}
	if err := checkNodeLimits(&fsm.Node{Site: spec.Site, Driver: spec.Driver, DriverInfo: spec.DriverInfo,
		Properties: spec.Properties, InstanceInfo: spec.InstanceInfo, Extra: spec.Extra,
		ResourceClass: spec.ResourceClass, Description: spec.Description, Owner: spec.Owner, InstanceName: spec.InstanceName}); err != nil {
		writeErr(w, err)
		return
	}
	n, err := s.e.CreateNode(spec)
	if err != nil {
		writeErr(w, err)
		return
	}
	var v map[string]any
	_ = s.e.View(n.UUID, func(n *fsm.Node, online bool) error { v = s.render(r, n, online); return nil })
	w.Header().Set("Location", baseURL(r)+"/v1/nodes/"+n.UUID)
	writeJSON(w, 201, v)
}

func (s *Server) deleteNode(w http.ResponseWriter, r *http.Request) {
	if err := s.e.DeleteNode(r.PathValue("id")); err != nil {
		writeErr(w, err)
		return
	}
	w.WriteHeader(204)
}

func (s *Server) getStates(w http.ResponseWriter, r *http.Request) {
	var v map[string]any
	err := s.e.View(r.PathValue("id"), func(n *fsm.Node, online bool) error {
		// Ironic's node_states_convert: raid_config and
		// target_raid_config from 1.12, boot_mode and secure_boot from
		// 1.75 (render leaves out what the request's version has not).
		v = pick(s.render(r, n, online), []string{"provision_state", "target_provision_state", "power_state", "target_power_state",
			"last_error", "console_enabled", "provision_updated_at", "raid_config", "target_raid_config", "boot_mode", "secure_boot"})
		delete(v, "links")
		return nil
	})
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, 200, v)
}

// MaxStepsPerRequest bounds the steps of one provision request
// (clean_steps of a manual clean, deploy_steps of a deploy or rebuild,
// service_steps of a service). Ironic has no bound; a real manual
// clean or deploy template has a handful of steps, so 100 is far above
// any, while each step is a command, a result and history entries, and
// the node's whole plan is rewritten with every change of the node.
const MaxStepsPerRequest = 100

// ironicOnlySince are the provision targets Ironic has and this
// coordinator does not (a verb's own version is its row's Since), with
// the version below which Ironic refuses them (406), as its
// MIN_VERB_VERSIONS: from it on they are refused as unknown targets.
var ironicOnlySince = map[string]int{"adopt": 17, "deploy": 73, "undeploy": 73}

// verbSince is the version from which Ironic takes target v.
func verbSince(v string) int {
	if row, ok := fsm.VerbInfo(fsm.Event(v)); ok {
		return row.Since
	}
	return ironicOnlySince[v]
}

func (s *Server) provision(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Target         string          `json:"target"`
		CleanSteps     json.RawMessage `json:"clean_steps"`
		DeploySteps    json.RawMessage `json:"deploy_steps"`
		ServiceSteps   json.RawMessage `json:"service_steps"`
		RescuePassword string          `json:"rescue_password"`
		ConfigDrive    json.RawMessage `json:"configdrive"`
		DisableRamdisk *bool           `json:"disable_ramdisk"`
		Runbook        json.RawMessage `json:"runbook"`
	}
	if !decode(w, r, &body) {
		return
	}
	if body.Target == "" {
		writeError(w, 400, "Mandatory field missing: target")
		return
	}
	if since := verbSince(body.Target); apiMinor(r) < since {
		writeErr(w, tooNew("the provision verb "+shortQuote(body.Target), since, apiMinor(r)))
		return
	}
	req := fsm.VerbRequest{Verb: fsm.Event(body.Target)}
	row, isVerb := fsm.VerbInfo(req.Verb)
	if !isVerb {
		// Ironic's answers, in its order (a locked node is 409 first),
		// with this API's hint after.
		var uuid, state, holder string
		if !s.nodeDo(w, r, func(n *fsm.Node, _ bool) error {
			uuid, state, holder = n.UUID, string(n.ProvisionState), n.Reservation
			return nil
		}) {
			return
		}
		if holder != "" {
			writeError(w, 409, fmt.Sprintf("Node %s is locked by host %s, please retry after the current operation is completed.", uuid, holder))
			return
		}
		writeError(w, 400, fmt.Sprintf("The requested action %q can not be performed on node %q while it is in state %q. %s is not a valid provision target; valid targets: %s", body.Target, uuid, state, shortQuote(body.Target), fsm.VerbTargets()))
		return
	}
	for _, x := range []struct {
		name string
		raw  json.RawMessage
		dst  *[]map[string]any
	}{{"clean_steps", body.CleanSteps, &req.CleanSteps}, {"deploy_steps", body.DeploySteps, &req.DeploySteps},
		{"service_steps", body.ServiceSteps, &req.ServiceSteps}} {
		if len(x.raw) == 0 || string(x.raw) == "null" {
			continue
		}
		var list []any
		if err := json.Unmarshal(x.raw, &list); err != nil {
			writeError(w, 400, fmt.Sprintf("Invalid %s: it must be a JSON list of objects like {\"interface\": \"deploy\", \"step\": \"erase_devices\", \"args\": {}}", x.name))
			return
		}
		if len(list) > MaxStepsPerRequest {
			writeError(w, 400, fmt.Sprintf("Invalid %s: %d steps given, at most %d are accepted in one request: split the work into several requests", x.name, len(list), MaxStepsPerRequest))
			return
		}
		*x.dst = fsm.AsObjects(list)
	}
	if !s.runbookRequest(w, r, &req, body.Runbook) {
		return
	}
	if len(req.CleanSteps) > 0 && row.Steps != fsm.StepsClean {
		writeError(w, 400, fmt.Sprintf("clean_steps is only valid with target \"clean\", not %q", body.Target))
		return
	}
	if len(req.DeploySteps) > 0 && row.Steps != fsm.StepsDeploy {
		// Ironic's words.
		writeError(w, 400, fmt.Sprintf("\"deploy_steps\" is only valid when setting target provision state to active or rebuild, not %q", body.Target))
		return
	}
	if len(req.ServiceSteps) > 0 && row.Steps != fsm.StepsService {
		// Ironic's words.
		writeError(w, 400, fmt.Sprintf("\"service_steps\" is only valid when setting target provision state to service, not %q", body.Target))
		return
	}
	if body.RescuePassword != "" && req.Verb != fsm.RescueV {
		// Ironic's words.
		writeError(w, 400, "\"rescue_password\" is only valid when setting target provision state to rescue")
		return
	}
	if req.Verb == fsm.RescueV && strings.TrimSpace(body.RescuePassword) != "" {
		// Only the hash goes on: the coordinator keeps it and the rescue
		// ramdisk checks logins against it; the password itself ends here.
		h, err := shacrypt.Hash(body.RescuePassword)
		if err != nil {
			writeError(w, 400, "rescue_password: "+err.Error()+"; choose a shorter one")
			return
		}
		req.HashedRescuePassword = h
	}
	if err := s.provisionExtras(r, &req, body.ConfigDrive, body.DisableRamdisk); err != nil {
		writeErr(w, err)
		return
	}
	if err := s.e.Verb(r.PathValue("id"), req); err != nil {
		writeErr(w, err)
		return
	}
	w.Header().Set("Location", baseURL(r)+"/v1/nodes/"+r.PathValue("id")+"/states")
	w.WriteHeader(202)
}

func (s *Server) power(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Target  string          `json:"target"`
		Timeout json.RawMessage `json:"timeout"`
	}
	if !decode(w, r, &body) {
		return
	}
	// Ironic takes a timeout in seconds (a positive integer) with any
	// target; the edge agent's drivers have their own, so it is checked
	// and not used.
	if t := string(body.Timeout); t != "" && t != "null" {
		if n, err := strconv.Atoi(t); err != nil || n < 1 {
			writeError(w, 400, fmt.Sprintf("Invalid timeout %s: it must be a positive integer (seconds)", t))
			return
		}
	}
	if err := s.e.Power(r.PathValue("id"), body.Target); err != nil {
		writeErr(w, err)
		return
	}
	w.Header().Set("Location", baseURL(r)+"/v1/nodes/"+r.PathValue("id")+"/states")
	w.WriteHeader(202)
}

// getBootDevice shows the boot device the BMC was last told to use (the
// coordinator does not ask the BMC: null until one was set). Persistent
// is what the drivers do: disk and a live ISO's cdrom are kept, pxe is
// for the next boot.
func (s *Server) getBootDevice(w http.ResponseWriter, r *http.Request) {
	var v map[string]any
	err := s.e.View(r.PathValue("id"), func(n *fsm.Node, _ bool) error {
		v = map[string]any{"boot_device": nullable(n.BootDevice), "persistent": nil}
		if n.BootDevice != "" {
			v["persistent"] = n.BootDevice == protocol.BootDisk
		}
		if n.BootDevice == protocol.BootISO {
			// A ramdisk deploy's live ISO: the virtual CD, kept (Ironic's
			// cdrom, persistent).
			v["boot_device"], v["persistent"] = "cdrom", true
		}
		return nil
	})
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, 200, v)
}

func (s *Server) setBootDevice(w http.ResponseWriter, r *http.Request) {
	var body struct {
		BootDevice string `json:"boot_device"`
		Persistent any    `json:"persistent"`
	}
	if !decode(w, r, &body) {
		return
	}
	if body.BootDevice == "" {
		writeError(w, 400, "Mandatory field missing: boot_device")
		return
	}
	if err := s.e.BootDevice(r.PathValue("id"), body.BootDevice); err != nil {
		writeErr(w, err)
		return
	}
	w.WriteHeader(204)
}

func (s *Server) supportedBootDevices(w http.ResponseWriter, r *http.Request) {
	if err := s.e.View(r.PathValue("id"), func(*fsm.Node, bool) error { return nil }); err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, 200, map[string]any{"supported_boot_devices": fsm.BootDevices()})
}

func (s *Server) setMaintenance(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Reason string `json:"reason"`
	}
	if r.ContentLength != 0 && !decode(w, r, &body) {
		return
	}
	if err := checkText("reason", body.Reason, MaxTextLen); err != nil {
		writeErr(w, err)
		return
	}
	if err := s.e.SetMaintenance(r.PathValue("id"), true, body.Reason); err != nil {
		writeErr(w, err)
		return
	}
	w.WriteHeader(202)
}

func (s *Server) unsetMaintenance(w http.ResponseWriter, r *http.Request) {
	if err := s.e.SetMaintenance(r.PathValue("id"), false, ""); err != nil {
		writeErr(w, err)
		return
	}
	w.WriteHeader(202)
}

func (s *Server) cleanSteps(w http.ResponseWriter, r *http.Request) {
	min := 0
	if v := r.URL.Query().Get("min_priority"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			writeError(w, 400, fmt.Sprintf("Invalid min_priority %q: use an integer", v))
			return
		}
		min = n
	}
	steps, known, err := s.e.CleanSteps(r.PathValue("id"), min)
	if err != nil {
		writeErr(w, err)
		return
	}
	if !known {
		w.Header().Set("Retry-Request-After", "-1")
		writeJSON(w, 202, map[string]any{"message": "The in-band clean steps of this node are not known yet: they are reported by the ramdisk when it boots (inspect, provide or clean the node). Retry later.",
			"steps": steps})
		return
	}
	if steps == nil {
		steps = []drivers.Step{}
	}
	writeJSON(w, 200, map[string]any{"steps": steps})
}

func (s *Server) history(w http.ResponseWriter, r *http.Request) {
	var id string
	err := s.e.View(r.PathValue("id"), func(n *fsm.Node, _ bool) error { id = n.UUID; return nil })
	if err != nil {
		writeErr(w, err)
		return
	}
	h, err := s.e.History(id)
	if err != nil {
		writeErr(w, err)
		return
	}
	out := make([]map[string]any, 0, len(h))
	for i, e := range h {
		out = append(out, map[string]any{"uuid": fmt.Sprintf("%s-%d", id, i), "created_at": e.Time, "severity": e.Severity,
			"event": e.Event, "event_type": e.EventType, "conductor": "coordinator", "user": nil})
	}
	writeJSON(w, 200, map[string]any{"history": out})
}

func (s *Server) inventory(w http.ResponseWriter, r *http.Request) {
	inv, err := s.e.Inventory(r.PathValue("id"))
	if err != nil {
		writeErr(w, err)
		return
	}
	pd := map[string]any{}
	if p, ok := inv[engine.PluginDataKey].(map[string]any); ok {
		pd, inv = p, maps.Clone(inv)
		delete(inv, engine.PluginDataKey)
	}
	writeJSON(w, 200, map[string]any{"inventory": inv, "plugin_data": pd})
}

// validatedInterfaces are the interfaces GET /v1/nodes/{node}/validate
// answers for: Ironic 21.4's non-vendor interfaces.
var validatedInterfaces = []string{"bios", "boot", "console", "deploy", "inspect", "management", "network", "power", "raid", "rescue", "storage"}

// validate answers as Ironic's validate_driver_interfaces does: every
// non-vendor interface with {"result": true} or {"result": false,
// "reason": ...}. An interface this API has no implementation of is
// Ironic's no-* interface, whose validation fails with Ironic's
// UnsupportedDriverExtension message; storage is noop, which passes.
func (s *Server) validate(w http.ResponseWriter, r *http.Request) {
	var res map[string]fsm.InterfaceCheck
	err := s.e.View(r.PathValue("id"), func(n *fsm.Node, online bool) error {
		res = s.e.Machine().Validate(n)
		no := false
		for _, iface := range validatedInterfaces {
			c, ok := res[iface]
			switch {
			case iface == "storage" && !ok:
				yes := true
				res[iface] = fsm.InterfaceCheck{Result: &yes}
			case !ok || c.Result == nil:
				res[iface] = fsm.InterfaceCheck{Result: &no, Reason: fmt.Sprintf("Driver %s does not support %s (disabled or not implemented).", n.Driver, iface)}
			}
		}
		return nil
	})
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, 200, res)
}

// checkCreateInterfaces answers the *_interface fields of a node create
// as Ironic does: raid_interface, boot_interface and deploy_interface
// take any implementation the hardware type has (drivers/interfaces.go,
// kept on the node); every other interface has one implementation per
// driver here, so naming it is fine and naming another is a 400 (never
// accepted and ignored). null takes the default.
func (s *Server) checkCreateInterfaces(raw map[string]json.RawMessage, spec *engine.NodeSpec) error {
	d, err := s.e.Machine().Config().Drivers.Get(spec.Driver)
	if err != nil {
		return nil // CreateNode refuses an unknown driver with the list
	}
	have := interfacesOf(spec.Driver, d)
	for k, v := range raw {
		iface, ok := strings.CutSuffix(k, "_interface")
		if !ok || string(v) == "null" {
			continue
		}
		var impl string
		if err := json.Unmarshal(v, &impl); err != nil {
			return &engine.Error{Kind: engine.Invalid, Msg: fmt.Sprintf("Invalid input for field/attribute %s: it must be a string, the name of an interface implementation", k)}
		}
		switch iface {
		case "raid":
			n := &fsm.Node{Driver: d.Name, RaidInterface: drivers.KeptImpl(spec.Driver, "raid", impl)}
			if err := s.checkRAIDInterface(n); err != nil {
				return err
			}
			spec.RaidInterface = n.RaidInterface
			continue
		case "boot", "deploy", "console":
			if err := d.CheckImpl(spec.Driver, iface, impl); err != nil {
				return &engine.Error{Kind: engine.Invalid, Msg: err.Error() + fmt.Sprintf(" (leave %s out for the default, %s)", k, d.InterfacesFor(spec.Driver).Default(iface))}
			}
			switch iface {
			case "boot":
				spec.BootInterface = impl
			case "deploy":
				spec.DeployInterface = impl
			default:
				if impl != engine.ConsoleNone {
					spec.ConsoleInterface = impl
				}
			}
			continue
		}
		if iface == "inspect" {
			if err := checkInspectInterface(d, impl); err != nil {
				return err
			}
			if impl != drivers.InspectDefault {
				spec.InspectInterface = impl
			}
			continue
		}
		cur, known := have.byName(iface)
		if !known || impl == cur {
			continue
		}
		return &engine.Error{Kind: engine.Invalid, Msg: unsupportedInterface(iface, impl, spec.Driver, cur) + fmt.Sprintf(" (leave %s out, or name %q)", k, cur)}
	}
	return nil
}

// createExtras takes automated_clean, disable_power_off and instance_uuid
// of a node create as Ironic does: automated_clean true, false or null
// (the coordinator's setting); instance_uuid a UUID; disable_power_off
// true or false (true: the node is never powered off, fsm's
// nopoweroff.go).
func createExtras(raw map[string]json.RawMessage, spec *engine.NodeSpec) error {
	if v, ok := raw["automated_clean"]; ok && string(v) != "null" {
		b, err := boolValue(v)
		if err != nil {
			return &engine.Error{Kind: engine.Invalid, Msg: "Invalid input for field/attribute automated_clean: " + err.Error()}
		}
		spec.AutomatedClean = &b
	}
	if v, ok := raw["disable_power_off"]; ok && string(v) != "null" {
		b, err := boolValue(v)
		if err != nil {
			return &engine.Error{Kind: engine.Invalid, Msg: "Invalid input for field/attribute disable_power_off: " + err.Error()}
		}
		spec.DisablePowerOff = b
	}
	if v, ok := raw["instance_uuid"]; ok && string(v) != "null" {
		var id string
		if err := json.Unmarshal(v, &id); err != nil || !uuidLike(id) {
			return &engine.Error{Kind: engine.Invalid, Msg: fmt.Sprintf("Invalid input for field/attribute instance_uuid. Value: %s. Expected a UUID", shortQuote(string(v)))}
		}
		spec.InstanceUUID = id
	}
	if v, ok := raw["instance_name"]; ok && string(v) != "null" {
		if err := json.Unmarshal(v, &spec.InstanceName); err != nil {
			return &engine.Error{Kind: engine.Invalid, Msg: "Invalid input for field/attribute instance_name: it must be a string"}
		}
	}
	return nil
}

// boolValue decodes a boolean as Ironic's args.boolean takes it: true,
// false, or a string such as "true", "False", "1", "no".
func boolValue(v json.RawMessage) (bool, error) {
	var x any
	if err := json.Unmarshal(v, &x); err != nil {
		return false, err
	}
	switch b := x.(type) {
	case bool:
		return b, nil
	case string:
		switch strings.ToLower(b) {
		case "1", "t", "true", "on", "y", "yes":
			return true, nil
		case "0", "f", "false", "off", "n", "no":
			return false, nil
		}
	}
	return false, fmt.Errorf("%s is not a boolean (true or false)", shortQuote(string(v)))
}
