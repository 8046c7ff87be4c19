package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/bmedge/bmedge/coordinator/engine"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/drivers"
)

// MaxPatchOps bounds the operations of one JSON Patch (PATCH
// /v1/nodes/{node}). Ironic has no bound; real clients send a handful
// (baremetal node set sends one per option given), so 1000 is far above
// any of them, and what one request can make the coordinator do stays
// small. A patch with more is refused with 400 before any is applied.
const MaxPatchOps = 1000

// patchOp is one JSON Patch (RFC 6902) operation, as Ironic takes them.
type patchOp struct {
	Op    string          `json:"op"`
	Path  string          `json:"path"`
	Value json.RawMessage `json:"value"`
}

var mapFields = map[string]bool{"driver_info": true, "properties": true, "instance_info": true, "extra": true, "network_data": true}
var scalarFields = map[string]bool{"name": true, "driver": true, "conductor_group": true, "retired": true, "retired_reason": true,
	"maintenance": true, "description": true, "resource_class": true, "owner": true,
	"automated_clean": true, "instance_uuid": true, "disable_power_off": true, "instance_name": true,
	// The hardware interfaces: checkInterfacePatch has refused an
	// implementation the node's hardware type lacks; setScalar keeps boot
	// and deploy (their choice is the node's) and raid.
	"bios_interface": true, "boot_interface": true, "console_interface": true, "deploy_interface": true,
	"inspect_interface": true, "management_interface": true, "network_interface": true, "power_interface": true,
	"raid_interface": true, "rescue_interface": true, "storage_interface": true, "vendor_interface": true}

// ironicPatchable are the node fields Ironic 21.4's PATCH takes (its
// PATCH_ALLOWED_FIELDS), disable_power_off (1.95) and instance_name
// (1.104); another
// field is 400 before any version check.
var ironicPatchable = map[string]bool{}

func init() {
	for _, f := range strings.Fields(`automated_clean bios_interface boot_interface chassis_uuid conductor_group
		console_interface deploy_interface description driver driver_info extra inspect_interface instance_info
		instance_uuid lessee maintenance management_interface name network_data network_interface owner
		power_interface properties protected protected_reason raid_interface rescue_interface resource_class
		retired retired_reason shard storage_interface vendor_interface disable_power_off instance_name`) {
		ironicPatchable[f] = true
	}
}

// patchField is the node field an operation's path names.
func patchField(path string) string {
	f, _, _ := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	return f
}

// checkPatchVersion refuses, as Ironic does and in its order, a patch of
// maintenance_reason (400: not a field PATCH takes) and then setting a
// field of a later API version than the request's (406, Ironic's
// reject_patch_in_newer_versions: add or replace of the field itself).
// A patch naming another field that Ironic does not take is left to
// applyPatch, which refuses it with 400.
func checkPatchVersion(ops []patchOp, minor int) error {
	for i, op := range ops {
		switch f := patchField(op.Path); {
		case f == "maintenance_reason":
			return &engine.Error{Kind: engine.Invalid, Msg: fmt.Sprintf("patch operation %d: Cannot patch /maintenance_reason: the reason is set with maintenance, by PUT /v1/nodes/{node}/maintenance with {\"reason\": \"...\"} (baremetal node maintenance set --reason TEXT NODE)", i+1)}
		case !ironicPatchable[f]:
			return nil
		}
	}
	for _, op := range ops {
		f := patchField(op.Path)
		if op.Op != "remove" && op.Path == "/"+f && !fieldAt(f, minor) {
			return tooNew("/"+f, fieldSince[f], minor)
		}
	}
	return nil
}

// checkInterfacePatch answers a patch of a hardware interface as Ironic
// does for the one implementation this API has of each: setting it (or
// removing it, which resets it to the default) changes nothing and is
// taken; another implementation is refused, with 409 outside the states
// where Ironic's conductor lets interfaces change (enroll, inspecting,
// inspect wait, manageable, available, or any in maintenance), and with
// 400 within them, naming the one there is.
func checkInterfacePatch(n *fsm.Node, ops []patchOp, have ifaceSet) error {
	for i, op := range ops {
		f := patchField(op.Path)
		iface, ok := strings.CutSuffix(f, "_interface")
		cur, known := have.byName(iface)
		if !ok || !known || op.Path != "/"+f || op.Op == "remove" || f == "raid_interface" || f == "inspect_interface" {
			continue // raid_interface: checkRAIDInterfacePatch (raid.go); inspect_interface: checkInspectInterface
		}
		if iface == "boot" || iface == "deploy" || iface == "console" {
			// The hardware type's implementations (drivers/interfaces.go);
			// a change is Ironic's conductor rule below.
			var want any
			if json.Unmarshal(op.Value, &want) != nil || want == nil || want == cur {
				continue
			}
			impl, isStr := want.(string)
			if !isStr {
				return &engine.Error{Kind: engine.Invalid, Msg: fmt.Sprintf("patch operation %d: /%s must be a string", i+1, f)}
			}
			if iface == "console" && n.ConsoleEnabled {
				return &engine.Error{Kind: engine.Conflict, Msg: fmt.Sprintf("Node %s can not have console_interface updated while its console is enabled; disable it first (PUT states/console {\"enabled\": false}).", n.Ident())}
			}
			if !fsm.UpdateAllowed(n.ProvisionState) {
				return nil
			}
			if !ifaceChangeState(n) {
				return &engine.Error{Kind: engine.Conflict, Msg: fmt.Sprintf("Node %s can not have %s updated unless it is in one of allowed (enroll, inspecting, inspect wait, manageable, available) states or in maintenance mode. Current state is '%s'.", n.Ident(), f, n.ProvisionState)}
			}
			if err := have.decl.CheckImpl(n.Driver, iface, impl); err != nil {
				return &engine.Error{Kind: engine.Invalid, Msg: fmt.Sprintf("patch operation %d: %v", i+1, err)}
			}
			continue
		}
		var want any
		if err := json.Unmarshal(op.Value, &want); err != nil || want == nil || want == cur {
			continue // not JSON is applyPatch's to refuse; null resets
		}
		impl, isStr := want.(string)
		if !isStr {
			return &engine.Error{Kind: engine.Invalid, Msg: fmt.Sprintf("patch operation %d: /%s must be a string", i+1, f)}
		}
		if !fsm.UpdateAllowed(n.ProvisionState) {
			return nil // CheckUpdate refuses the whole patch with 409
		}
		if !ifaceChangeState(n) {
			return &engine.Error{Kind: engine.Conflict, Msg: fmt.Sprintf("Node %s can not have %s updated unless it is in one of allowed (enroll, inspecting, inspect wait, manageable, available) states or in maintenance mode. Current state is '%s'.", n.Ident(), f, n.ProvisionState)}
		}
		return &engine.Error{Kind: engine.Invalid, Msg: fmt.Sprintf("patch operation %d: %s", i+1, unsupportedInterface(iface, impl, n.Driver, cur))}
	}
	return nil
}

// ifaceSet is a node's interfaces and its driver's declaration.
type ifaceSet struct {
	nodeIfaces
	decl drivers.Declaration
}

// checkNodeInterfaces checks, after a PATCH, that the node's boot and
// deploy interfaces are its (maybe new) driver's: a PATCH of driver to
// one that lacks them is 400, naming what to set.
func (s *Server) checkNodeInterfaces(n *fsm.Node) error {
	d, err := s.e.Machine().Config().Drivers.Get(n.Driver)
	if err != nil {
		return nil // the engine refuses an unknown driver
	}
	for iface, impl := range map[string]string{"boot": n.BootInterface, "deploy": n.DeployInterface, "console": n.ConsoleInterface} {
		if impl == "" {
			continue
		}
		if err := d.CheckImpl(n.Driver, iface, impl); err != nil {
			return &engine.Error{Kind: engine.Invalid, Msg: fmt.Sprintf("%v; set %s_interface to one of these, or remove it for the default, in the same PATCH", err, iface)}
		}
	}
	return nil
}

// ifaceChangeState tells whether node n's interfaces may change, as
// Ironic's conductor allows: in enroll, inspecting, inspect wait,
// manageable and available, or in maintenance.
func ifaceChangeState(n *fsm.Node) bool {
	switch n.ProvisionState {
	case fsm.Enroll, fsm.Inspecting, fsm.InspectWait, fsm.Manageable, fsm.Available:
		return true
	}
	return n.Maintenance
}

// checkKeptInterfacePatch answers a patch of an interface kept on the
// node (raid_interface, inspect_interface: field) before it is applied,
// as Ironic's conductor does: the value must be a string (one of
// choices; remove or null resets it to def); a change from cur, the
// node's implementation, is 409 outside enroll, inspecting, inspect
// wait, manageable and available unless the node is in maintenance.
// Whether the driver supports the value is checked once the patch
// (which may change the driver too) is applied.
func checkKeptInterfacePatch(n *fsm.Node, ops []patchOp, field, def, cur, choices string) error {
	for i, op := range ops {
		if op.Path != "/"+field {
			continue
		}
		want := def
		if op.Op != "remove" {
			var v any
			if err := json.Unmarshal(op.Value, &v); err != nil {
				continue // not JSON: applyPatch refuses it
			}
			if v != nil {
				s, ok := v.(string)
				if !ok {
					return &engine.Error{Kind: engine.Invalid, Msg: fmt.Sprintf("patch operation %d: /%s must be a string: %s", i+1, field, choices)}
				}
				want = s
			}
		}
		if want == cur || !fsm.UpdateAllowed(n.ProvisionState) {
			continue // no change, or CheckUpdate refuses the whole patch with 409
		}
		if !ifaceChangeState(n) {
			return &engine.Error{Kind: engine.Conflict, Msg: fmt.Sprintf("Node %s can not have %s updated unless it is in one of allowed (enroll, inspecting, inspect wait, manageable, available) states or in maintenance mode. Current state is '%s'.", n.Ident(), field, n.ProvisionState)}
		}
	}
	return nil
}

// checkKeptInterface refuses, with supported's 400, a patched node whose
// kept interface (*impl: raid_interface, inspect_interface) its
// (possibly new) driver does not support, and stores def as "". An unset
// interface, or an unknown driver (the engine refuses it), is not
// checked.
func (s *Server) checkKeptInterface(n *fsm.Node, impl *string, def string, supported func(d drivers.Declaration, impl string) error) error {
	if *impl == "" {
		return nil
	}
	d, err := s.e.Machine().Config().Drivers.Get(n.Driver)
	if err != nil {
		return nil
	}
	if *impl == def {
		*impl = "" // stored as the default, which it is
		return nil
	}
	return supported(d, *impl)
}

// implQuote shows an interface implementation as Ironic does: in single
// quotes, or quoted and cut short when it is not a plain name.
func implQuote(impl string) string {
	if !ifaceName.MatchString(impl) {
		return shortQuote(impl)
	}
	return "'" + impl + "'"
}

// unsupportedInterface refuses an interface implementation the driver
// does not have (every interface but raid has one per driver here), for
// a PATCH and a create alike.
func unsupportedInterface(iface, impl, driver, cur string) string {
	return fmt.Sprintf("%s interface implementation %s is not supported by hardware type %s; this coordinator has %q for it", iface, shortQuote(impl), driver, cur)
}

// applyPatch applies ops to n, in place: n must be the caller's own copy
// (PatchNode's snapshot). Its cost is linear in the size of the patch:
// each operation's value is decoded once and every operation works on
// the decoded fields (patchIn), which are encoded once, when the node is
// checked and stored. Errors say which operation was wrong.
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
			if err := patchValue(op.Value, &val); err != nil {
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
			if err := patchIn(*m, op.Op, parts[1], val); err != nil {
				return &engine.Error{Kind: engine.Invalid, Msg: fmt.Sprintf("patch operation %d (%s %s): %v", i+1, op.Op, op.Path, err)}
			}
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

// pointerDecoder unescapes a JSON Pointer token (RFC 6901): ~1 is '/', ~0
// is '~', in one pass.
var pointerDecoder = strings.NewReplacer("~1", "/", "~0", "~")

// patchIn applies one operation at sub, a JSON Pointer below a map
// field, to the decoded field m, in place; val is the decoded value (nil
// for remove) and becomes part of m. The rules are RFC 6902's as the
// JSON Patch library (evanphx/json-patch, which this API used before,
// per operation on the re-encoded field) applies them, kept exactly
// (TestPatchInMatchesLibrary compares): every container on the way must
// exist (an empty token does not name one), add sets a member or inserts
// into a list ("-" appends), replace and remove need their target, list
// indexes are decimal (as strconv.Atoi reads them) and never negative.
// One exception is kept for the clients of this API: replace of a
// missing member directly under the field sets it, as add does. On an
// error m is unchanged.
func patchIn(m map[string]any, op, sub string, val any) error {
	toks := strings.Split(sub, "/")
	for i, t := range toks {
		toks[i] = pointerDecoder.Replace(t)
	}
	if op == "replace" && len(toks) == 1 {
		if _, ok := m[toks[0]]; !ok {
			op = "add"
		}
	}
	_, err := patchAt(m, toks, op, val)
	return err
}

// patchAt applies the operation at toks below cur and returns what cur
// becomes: the same map, or a new list when a list changed length.
func patchAt(cur any, toks []string, op string, val any) (any, error) {
	key := toks[0]
	if len(toks) > 1 {
		var next any
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[key]
			if !ok || key == "" {
				return nil, fmt.Errorf("the path goes through %s, which does not exist", shortQuote(key))
			}
			next = v
			nv, err := patchAt(next, toks[1:], op, val)
			if err != nil {
				return nil, err
			}
			c[key] = nv
			return c, nil
		case []any:
			i, err := listIndex(key, len(c), false)
			if err != nil {
				return nil, err
			}
			nv, err := patchAt(c[i], toks[1:], op, val)
			if err != nil {
				return nil, err
			}
			c[i] = nv
			return c, nil
		}
		return nil, fmt.Errorf("the path goes through %s, which is not an object or a list", shortQuote(key))
	}
	switch c := cur.(type) {
	case map[string]any:
		_, ok := c[key]
		switch {
		case op == "add", op == "replace" && (ok || key == ""):
			// The library takes "" in a replace as naming the object
			// itself, which always exists, and then sets member "".
			c[key] = val
		case op == "replace":
			return nil, fmt.Errorf("there is no member %s to replace", shortQuote(key))
		case !ok:
			return nil, fmt.Errorf("there is no member %s to remove", shortQuote(key))
		default:
			delete(c, key)
		}
		return c, nil
	case []any:
		switch op {
		case "add":
			if key == "-" {
				return append(c, val), nil
			}
			i, err := listIndex(key, len(c)+1, true)
			if err != nil {
				return nil, err
			}
			out := make([]any, 0, len(c)+1)
			out = append(append(append(out, c[:i]...), val), c[i:]...)
			return out, nil
		case "replace":
			i, err := listIndex(key, len(c), false)
			if err != nil {
				return nil, err
			}
			c[i] = val
			return c, nil
		default:
			i, err := listIndex(key, len(c), false)
			if err != nil {
				return nil, err
			}
			out := make([]any, 0, len(c)-1)
			return append(append(out, c[:i]...), c[i+1:]...), nil
		}
	}
	return nil, fmt.Errorf("the target's container is not an object or a list")
}

// listIndex reads a list index token; it must be below n.
func listIndex(key string, n int, insert bool) (int, error) {
	i, err := strconv.Atoi(key)
	if err != nil {
		hint := "a number from 0"
		if insert {
			hint += ", or - to append"
		}
		return 0, fmt.Errorf("%s is not a list index (%s)", shortQuote(key), hint)
	}
	if i < 0 || i >= n {
		what := fmt.Sprintf("the list has %d items", n)
		if insert {
			what = fmt.Sprintf("the list has %d items, so an insertion is at most at %d", n-1, n-1)
		}
		return 0, fmt.Errorf("index %d is out of range: %s", i, what)
	}
	return i, nil
}

// patchBelow applies one operation at sub below the map field to a copy
// of m and returns the copy (m is not changed): patchIn for one
// operation, with its value still encoded.
func patchBelow(m map[string]any, field, op, sub string, value json.RawMessage) (map[string]any, error) {
	var val any
	if op != "remove" {
		if err := json.Unmarshal(value, &val); err != nil {
			return nil, err
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	var c map[string]any
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, err
	}
	if c == nil {
		c = map[string]any{}
	}
	if err := patchIn(c, op, sub, val); err != nil {
		return nil, err
	}
	return c, nil
}

func fieldMap(n *fsm.Node, f string) *map[string]any {
	switch f {
	case "driver_info":
		return &n.DriverInfo
	case "properties":
		return &n.Properties
	case "instance_info":
		return &n.InstanceInfo
	case "network_data":
		return &n.NetworkData
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
	case "resource_class":
		n.ResourceClass, err = str()
	case "description":
		n.Description, err = str()
	case "owner":
		n.Owner, err = str()
	case "raid_interface":
		n.RaidInterface, err = str()
		n.RaidInterface = drivers.KeptImpl(n.Driver, "raid", n.RaidInterface) // idrac's idrac-redfish
	case "inspect_interface":
		n.InspectInterface, err = str()
	case "boot_interface":
		n.BootInterface, err = str()
	case "deploy_interface":
		n.DeployInterface, err = str()
	case "console_interface":
		n.ConsoleInterface, err = str()
		if n.ConsoleInterface == "no-console" {
			n.ConsoleInterface = ""
		}
	case "automated_clean":
		// true, false, or null (removed): the coordinator's setting.
		if op == "remove" || val == nil {
			n.AutomatedClean = nil
			return nil
		}
		var b bool
		if b, err = boolean(); err == nil {
			n.AutomatedClean = &b
		}
	case "instance_uuid":
		n.InstanceUUID, err = str()
	case "instance_name":
		n.InstanceName, err = str()
	case "disable_power_off":
		// Removing it is false, the field's default, as Ironic's.
		if op == "remove" || val == nil {
			n.DisablePowerOff = false
			return nil
		}
		n.DisablePowerOff, err = boolean()
	default:
		// A hardware interface, which checkInterfacePatch has checked.
		_, err = str()
	}
	return err
}

// patchHook, if set (tests only), is called with the node's UUID once a
// PATCH was applied to its copy, outside the engine loop, before the
// change is committed.
var patchHook atomic.Pointer[func(nodeUUID string)]

// patchNode is PATCH /v1/nodes/{node}: the operations are applied outside
// the engine loop to a copy of the node and committed only if the node
// did not change meanwhile (engine.PatchNode), so a large patch never
// holds up other requests or agent messages.
func (s *Server) patchNode(w http.ResponseWriter, r *http.Request) {
	var ops []patchOp
	if !decodeNodePatch(w, r, &ops) {
		return
	}
	if len(ops) == 0 {
		writeError(w, 400, "Patch must be a non-empty JSON list of operations")
		return
	}
	if len(ops) > MaxPatchOps {
		writeError(w, 400, fmt.Sprintf("Patch has %d operations; at most %d are accepted in one request: send them in several PATCH requests of up to %d", len(ops), MaxPatchOps, MaxPatchOps))
		return
	}
	if err := checkPatchVersion(ops, apiMinor(r)); err != nil {
		writeErr(w, err)
		return
	}
	id, err := s.e.PatchNode(r.PathValue("id"), func(n *fsm.Node) error {
		decl, _ := s.e.Machine().Config().Drivers.Get(n.Driver)
		if err := checkRAIDInterfacePatch(n, ops); err != nil {
			return err
		}
		if err := checkInspectInterfacePatch(n, ops); err != nil {
			return err
		}
		if err := checkInterfacePatch(n, ops, ifaceSet{nodeInterfaces(n, decl), decl}); err != nil {
			return err
		}
		if err := applyPatch(n, ops); err != nil {
			return err
		}
		if err := s.checkRAIDInterface(n); err != nil {
			return err
		}
		if err := s.checkPatchedInspectInterface(n); err != nil {
			return err
		}
		if err := s.checkNodeInterfaces(n); err != nil {
			return err
		}
		if err := checkNodeLimits(n); err != nil {
			return err
		}
		if h := patchHook.Load(); h != nil {
			(*h)(n.UUID)
		}
		return nil
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
	v := map[string]any{"uuid": p.UUID, "address": p.Address, "node_uuid": p.NodeUUID, "extra": orEmpty(p.Extra),
		"pxe_enabled": p.PXE, "created_at": p.CreatedAt, "updated_at": p.UpdatedAt, "local_link_connection": orEmpty(p.LocalLinkConnection),
		"internal_info": map[string]any{}, "portgroup_uuid": nullable(p.PortGroupUUID), "is_smartnic": false, "name": nil,
		"links": link(r, "/v1/ports/"+p.UUID)}
	minor := apiMinor(r)
	for _, f := range []struct {
		name  string
		since int
		v     string
	}{{"physical_network", minorPortPhysNet, p.PhysicalNetwork}, {"description", 97, p.Description}, {"vendor", 100, p.Vendor}, {"category", 101, p.Category}} {
		if minor >= f.since {
			v[f.name] = nullable(f.v)
		}
	}
	return v
}

func (s *Server) portList(w http.ResponseWriter, r *http.Request, node string) {
	ports, err := s.e.Ports(node)
	if err != nil {
		writeErr(w, err)
		return
	}
	detail := strings.HasSuffix(r.URL.Path, "/detail") || r.URL.Query().Get("detail") == "True"
	inSite, err := s.siteFilter(r)
	if err != nil {
		writeErr(w, err)
		return
	}
	out := []map[string]any{}
	for _, p := range ports {
		if a := r.URL.Query().Get("address"); a != "" && !strings.EqualFold(a, p.Address) {
			continue
		}
		if !inSite(p.NodeUUID) {
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
	s.portList(w, r, nodeFilter(r))
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
		Group    string         `json:"portgroup_uuid"`
		// Kept from their versions on: physical_network 1.34,
		// description 1.97, vendor 1.100, category 1.101.
		PhysNet     *string `json:"physical_network"`
		Description *string `json:"description"`
		Vendor      *string `json:"vendor"`
		Category    *string `json:"category"`
		// Not kept here: refused rather than ignored (templates.go).
		Name      any `json:"name"`
		LocalLink any `json:"local_link_connection"`
	}
	if !decode(w, r, &body) {
		return
	}
	if msg := portFieldsRefused(body.Name, body.LocalLink); msg != "" {
		writeError(w, 400, msg)
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
	for _, f := range []struct {
		name  string
		since int
		v     *string
	}{{"physical_network", minorPortPhysNet, body.PhysNet}, {"description", 97, body.Description}, {"vendor", 100, body.Vendor}, {"category", 101, body.Category}} {
		if f.v == nil {
			continue
		}
		if apiMinor(r) < f.since {
			writeErr(w, tooNew("field "+f.name, f.since, apiMinor(r)))
			return
		}
		if err := checkText(f.name, *f.v, portTextMax(f.name)); err != nil {
			writeErr(w, err)
			return
		}
	}
	pxe := body.PXE == nil || *body.PXE
	p, err := s.e.CreatePort(body.Address, node, body.Extra, pxe)
	if err != nil {
		writeErr(w, err)
		return
	}
	if body.Group != "" || body.PhysNet != nil || body.Description != nil || body.Vendor != nil || body.Category != nil {
		// Into its group: checked as a PATCH is (the group must be the
		// node's); a refused group leaves no port behind.
		g, id := body.Group, p.UUID
		str := func(v *string) string {
			if v == nil {
				return ""
			}
			return *v
		}
		p, err = s.e.UpdatePort(id, func(p *engine.Port) error {
			p.PortGroupUUID, p.Description, p.Vendor, p.Category = g, str(body.Description), str(body.Vendor), str(body.Category)
			p.PhysicalNetwork = str(body.PhysNet)
			return nil
		})
		if err != nil {
			_ = s.e.DeletePort(id)
			writeErr(w, err)
			return
		}
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
	// An alias (fake-hardware) is shown under its own name, with its
	// own interfaces, as Ironic shows a hardware type.
	name := r.PathValue("name")
	v := map[string]any{"name": name, "hosts": []string{"coordinator"}, "type": "dynamic",
		"links": link(r, "/v1/drivers/"+name), "properties": link(r, "/v1/drivers/"+name+"/properties")}
	for k, l := range d.InterfacesFor(name) {
		if k == "inspect" {
			l = []string{"agent"}
		}
		v["default_"+k+"_interface"] = l[0]
		v["enabled_"+k+"_interfaces"] = l
	}
	v["enabled_raid_interfaces"] = d.RAIDInterfaces()
	v["enabled_inspect_interfaces"] = d.InspectInterfaces()
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
