// Package inspectrules is Ironic's inspection rules (API 1.96): rules of
// conditions on a node's inventory and the node, and actions on the node,
// run on every inspection after its inventory is applied. It parses and
// checks rules (Parse: the API's 400s), evaluates them (Apply) on a node
// as a document of Ironic's field names, and keeps the stored rules in
// memory over a narrow interface to the coordinator's database (Set). It
// does no I/O of its own: the state machine calls it through its
// inspection hook (Hook) with the rules the Set holds.
package inspectrules

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/bmedge/bmedge/coordinator/fsm"
)

// Bounds of a rule (Ironic has none but its schema's): a rule's lists
// are short, and every rule runs on every inspection.
const (
	// MaxPriority is the highest priority of a rule made by the API
	// (Ironic: 0 to 9999; built-in rules may have any).
	MaxPriority = 9999
	// MaxOps is the most conditions, and the most actions, of one rule.
	MaxOps = 100
	// MaxLoop is the most items of one loop.
	MaxLoop = 1000
	// MaxDescription is the longest description (Ironic's schema).
	MaxDescription = 255
)

// PhaseMain is the one inspection phase (Ironic's InspectionPhase).
const PhaseMain = "main"

// Op is a condition or an action as Ironic keeps it: the operator, its
// args as given (an object, or the deprecated list of positional
// arguments), and a loop over items; Multiple (conditions with a loop)
// says how the items' results combine: any, all, first or last.
type Op struct {
	Op       string `json:"op"`
	Args     any    `json:"args"`
	Loop     any    `json:"loop,omitempty"`
	Multiple string `json:"multiple,omitempty"`
}

// Rule is one inspection rule.
type Rule struct {
	UUID        string     `json:"uuid"`
	Description string     `json:"description,omitempty"`
	Priority    int        `json:"priority"`
	Phase       string     `json:"phase"`
	Sensitive   bool       `json:"sensitive"`
	Conditions  []Op       `json:"conditions"`
	Actions     []Op       `json:"actions"`
	CreatedAt   time.Time  `json:"created_at"`
	UpdatedAt   *time.Time `json:"updated_at,omitempty"`
	// BuiltIn marks a rule of the coordinator's built-in rules file: not
	// stored, not changed by the API, any priority.
	BuiltIn bool `json:"-"`
}

// signature is an operator's or action's arguments: the required ones in
// order (the positional form's order), then the optional ones.
type signature struct {
	required, optional []string
	// formatted are the args interpolated with {inventory[...]} and
	// {node.field} outside a loop (Ironic's FORMATTED_ARGS); in a loop
	// every arg is.
	formatted []string
}

// operators are Ironic's condition operators (operators.OPERATORS).
var operators = map[string]signature{
	"eq":       {required: []string{"values"}, optional: []string{"force_strings"}, formatted: []string{"values"}},
	"lt":       {required: []string{"values"}, optional: []string{"force_strings"}, formatted: []string{"values"}},
	"gt":       {required: []string{"values"}, optional: []string{"force_strings"}, formatted: []string{"values"}},
	"is-empty": {required: []string{"value"}, formatted: []string{"value"}},
	"in-net":   {required: []string{"address", "subnet"}, formatted: []string{"address", "subnet"}},
	"matches":  {required: []string{"value", "regex"}, formatted: []string{"value"}},
	"contains": {required: []string{"value", "regex"}, formatted: []string{"value"}},
	"one-of":   {required: []string{"value"}, optional: []string{"values"}, formatted: []string{"value"}},
	"is-none":  {required: []string{"value"}, formatted: []string{"value"}},
	"is-true":  {required: []string{"value"}, formatted: []string{"value"}},
	"is-false": {required: []string{"value"}, formatted: []string{"value"}},
}

// actions are the actions served (Ironic's actions.ACTIONS less those
// refused below).
var actions = map[string]signature{
	"fail":               {required: []string{"msg"}},
	"log":                {required: []string{"msg"}, optional: []string{"level"}, formatted: []string{"msg"}},
	"set-attribute":      {required: []string{"path", "value"}, formatted: []string{"value"}},
	"extend-attribute":   {required: []string{"path", "value"}, optional: []string{"unique"}, formatted: []string{"value"}},
	"del-attribute":      {required: []string{"path"}},
	"set-capability":     {required: []string{"name", "value"}, formatted: []string{"value"}},
	"unset-capability":   {required: []string{"name"}},
	"add-trait":          {required: []string{"name"}},
	"remove-trait":       {required: []string{"name"}},
	"set-plugin-data":    {required: []string{"path", "value"}, formatted: []string{"value"}},
	"extend-plugin-data": {required: []string{"path", "value"}, optional: []string{"unique"}, formatted: []string{"value"}},
	"unset-plugin-data":  {required: []string{"path"}},
	// The port actions (ports.go): port_id is a port's UUID or MAC
	// address, not formatted (as Ironic).
	"set-port-attribute":    {required: []string{"port_id", "path", "value"}, formatted: []string{"value"}},
	"extend-port-attribute": {required: []string{"port_id", "path", "value"}, optional: []string{"unique"}, formatted: []string{"value"}},
	"del-port-attribute":    {required: []string{"port_id", "path"}},
}

// refusedActions are Ironic's actions this coordinator does not run, and
// why.
var refusedActions = map[string]string{
	"api-call": "the coordinator makes no HTTP calls on a rule's behalf (a site's WAN may be down during inspection); log the event instead and watch the node's history",
}

// logLevels are the log action's levels.
var logLevels = []string{"debug", "info", "warning", "error", "critical"}

// Settable are the node fields a set-attribute, extend-attribute or
// del-attribute may change: the dictionaries (a key path below them)
// and the strings (the field itself).
var (
	settableMaps    = []string{"driver_info", "properties", "extra", "instance_info"}
	settableStrings = []string{"driver", "boot_interface", "deploy_interface", "inspect_interface", "raid_interface",
		"resource_class", "description", "owner"}
)

// Error is a rule that cannot be stored, and why (the API's 400).
type Error struct{ Msg string }

func (e *Error) Error() string { return e.Msg }

func invalid(format string, a ...any) error { return &Error{Msg: fmt.Sprintf(format, a...)} }

// Parse reads a rule from the API's document (a POST body, or a rule
// with a PATCH applied) and checks it as Ironic's validate_rule does:
// actions required and at least one, conditions optional, operators and
// actions known with their arguments (missing or unexpected ones
// refused), priority 0 to 9999 unless builtIn, phase main, description
// at most 255 characters. Unlike Ironic it also refuses what it would
// only find wrong while inspecting: a regular expression, subnet, log
// level, trait name or attribute path that is given literally and is
// wrong.
func Parse(doc map[string]any, builtIn bool) (Rule, error) {
	var r Rule
	var errs []string
	bad := func(format string, a ...any) { errs = append(errs, fmt.Sprintf(format, a...)) }
	for k := range doc {
		switch k {
		case "uuid", "description", "priority", "phase", "sensitive", "conditions", "actions":
		default:
			keys := []string{"actions", "conditions", "description", "phase", "priority", "sensitive", "uuid"}
			return r, invalid("Validation failed for inspection rule: additional property %q is not allowed; a rule has %s", short(k), strings.Join(keys, ", "))
		}
	}
	switch v := doc["uuid"].(type) {
	case nil:
	case string:
		if v != "" {
			id, err := uuid.Parse(v)
			if err != nil || len(v) != 36 {
				return r, invalid("Validation failed for inspection rule: uuid %q is not a UUID (leave it out to have one made)", short(v))
			}
			r.UUID = id.String()
		}
	default:
		return r, invalid("Validation failed for inspection rule: uuid must be a string")
	}
	switch v := doc["description"].(type) {
	case nil:
	case string:
		if len([]rune(v)) > MaxDescription {
			return r, invalid("Validation failed for inspection rule: description is longer than %d characters", MaxDescription)
		}
		r.Description = v
	default:
		return r, invalid("Validation failed for inspection rule: description must be a string or null")
	}
	switch v := doc["sensitive"].(type) {
	case nil:
	case bool:
		r.Sensitive = v
	default:
		return r, invalid("Validation failed for inspection rule: sensitive must be true, false or null")
	}
	r.Phase = PhaseMain
	switch v := doc["phase"].(type) {
	case nil:
	case string:
		if v != PhaseMain {
			bad("Invalid phase: %s. Valid phases are: %s", short(v), PhaseMain)
		}
	default:
		return r, invalid("Validation failed for inspection rule: phase must be a string")
	}
	if p, ok := doc["priority"]; ok && p != nil {
		f, isNum := p.(float64)
		if !isNum || f != float64(int(f)) {
			return r, invalid("Validation failed for inspection rule: priority must be an integer")
		}
		r.Priority = int(f)
		if !builtIn && r.Priority < 0 {
			bad("Priority cannot be negative for user-defined rules.")
		}
		if !builtIn && r.Priority > MaxPriority {
			bad("Priority must be between 0 and %d for user-defined rules.", MaxPriority)
		}
	}
	acts, ok := doc["actions"].([]any)
	if _, given := doc["actions"]; !given {
		return r, invalid("Validation failed for inspection rule: 'actions' is a required property")
	}
	if !ok || len(acts) == 0 {
		return r, invalid("Validation failed for inspection rule: actions must be a list of at least one action")
	}
	conds, ok := doc["conditions"].([]any)
	if c, given := doc["conditions"]; given && c != nil && !ok {
		return r, invalid("Validation failed for inspection rule: conditions must be a list")
	}
	if len(acts) > MaxOps || len(conds) > MaxOps {
		return r, invalid("Validation failed for inspection rule: a rule has at most %d conditions and %d actions", MaxOps, MaxOps)
	}
	r.Conditions = []Op{}
	for i, x := range conds {
		op, err := parseOp(x, true)
		if err != nil {
			return r, invalid("Validation failed for inspection rule: condition %d: %v", i+1, err)
		}
		if msg := checkCondition(op); msg != "" {
			bad("Invalid parameters for condition operator %s: %s", op.Op, msg)
		}
		r.Conditions = append(r.Conditions, op)
	}
	for i, x := range acts {
		op, err := parseOp(x, false)
		if err != nil {
			return r, invalid("Validation failed for inspection rule: action %d: %v", i+1, err)
		}
		if msg := checkAction(op); msg != "" {
			bad("Invalid parameters for action operator %s: %s", op.Op, msg)
		}
		r.Actions = append(r.Actions, op)
	}
	switch len(errs) {
	case 0:
		return r, nil
	case 1:
		return r, invalid("%s", errs[0])
	}
	return r, invalid("Multiple validation errors occurred: %s", strings.Join(errs, "; "))
}

// parseOp reads one condition (cond) or action.
func parseOp(x any, cond bool) (Op, error) {
	m, ok := x.(map[string]any)
	if !ok {
		return Op{}, fmt.Errorf("must be an object with op and args")
	}
	var op Op
	for k, v := range m {
		switch k {
		case "op":
			s, ok := v.(string)
			if !ok {
				return op, fmt.Errorf("op must be a string")
			}
			op.Op = s
		case "args":
			switch v.(type) {
			case map[string]any, []any:
				op.Args = v
			default:
				return op, fmt.Errorf("args must be an object (or a list of positional arguments)")
			}
		case "loop":
			switch l := v.(type) {
			case nil:
			case []any:
				if len(l) > MaxLoop {
					return op, fmt.Errorf("a loop has at most %d items", MaxLoop)
				}
				if len(l) > 0 {
					op.Loop = l
				}
			case map[string]any:
				op.Loop = l
			case string:
				// An extension of Ironic's: a loop over what one
				// replacement field names, e.g. "{inventory[interfaces]}".
				if _, ok := singleField(l); !ok {
					return op, fmt.Errorf("loop must be a list, an object, or one replacement field naming a list such as \"{inventory[interfaces]}\"")
				}
				op.Loop = l
			default:
				return op, fmt.Errorf("loop must be a list or an object")
			}
		case "multiple":
			s, _ := v.(string)
			if !cond || !slices.Contains([]string{"any", "all", "first", "last"}, s) {
				if !cond {
					return op, fmt.Errorf("multiple is for conditions only")
				}
				return op, fmt.Errorf("multiple must be one of any, all, first, last")
			}
			op.Multiple = s
		default:
			return op, fmt.Errorf("unknown key %q (a condition has op, args, loop and multiple; an action op, args and loop)", short(k))
		}
	}
	if op.Op == "" {
		return op, fmt.Errorf("'op' is a required property")
	}
	if op.Args == nil {
		return op, fmt.Errorf("'args' is a required property")
	}
	if cond {
		name, _, err := inverted(op.Op)
		if err != nil {
			return op, err
		}
		if _, ok := operators[name]; !ok {
			return op, fmt.Errorf("Unsupported operator '%s'; the operators are %s, each may be inverted with a leading '!'", short(name), strings.Join(sortedKeys(operators), ", "))
		}
	} else {
		if why, ok := refusedActions[op.Op]; ok {
			return op, fmt.Errorf("action %s is not supported by this coordinator: %s", op.Op, why)
		}
		if _, ok := actions[op.Op]; !ok {
			return op, fmt.Errorf("Unsupported action '%s'; the actions are %s", short(op.Op), strings.Join(sortedKeys(actions), ", "))
		}
	}
	if op.Multiple != "" && op.Loop == nil {
		return op, fmt.Errorf("multiple applies to a loop; give a loop too or leave multiple out")
	}
	return op, nil
}

// inverted splits a leading '!' off a condition's operator (Ironic's
// parse_inverted_operator).
func inverted(op string) (string, bool, error) {
	op = strings.TrimSpace(op)
	if strings.Count(op, "!") > 1 {
		return "", false, fmt.Errorf("Multiple exclamation marks are not allowed. To apply the invert of an operation, simply add an exclamation mark (with an optional space) before the operator, e.g. eq - !eq.")
	}
	inv := strings.HasPrefix(op, "!")
	return strings.TrimSpace(strings.TrimPrefix(op, "!")), inv, nil
}

// namedArgs is args as an object: the positional list form mapped onto
// the signature (Ironic's _normalize_list_args), with what is missing or
// unexpected said.
func namedArgs(sig signature, args any) (map[string]any, string) {
	var out map[string]any
	switch a := args.(type) {
	case map[string]any:
		out = a
	case []any:
		if len(sig.required) == 1 && sig.required[0] == "values" && len(a) > 0 {
			if _, isList := a[0].([]any); !isList {
				// ["{inventory[cpu][count]}", 4]: the values themselves
				// (Ironic would take 4 as force_strings and fail).
				return map[string]any{"values": a}, ""
			}
		}
		if len(a) < len(sig.required) {
			return nil, "Not enough arguments provided. Missing: " + strings.Join(sig.required[len(a):], ", ")
		}
		if len(a) > len(sig.required)+len(sig.optional) {
			return nil, fmt.Sprintf("too many arguments: %d given, at most %d (%s)", len(a), len(sig.required)+len(sig.optional), strings.Join(append(slices.Clone(sig.required), sig.optional...), ", "))
		}
		out = map[string]any{}
		names := append(slices.Clone(sig.required), sig.optional...)
		for i, v := range a {
			out[names[i]] = v
		}
	default:
		return nil, "args must be either a list or dictionary"
	}
	var missing, unexpected []string
	for _, k := range sig.required {
		if _, ok := out[k]; !ok {
			missing = append(missing, k)
		}
	}
	for k := range out {
		if !slices.Contains(sig.required, k) && !slices.Contains(sig.optional, k) {
			unexpected = append(unexpected, short(k))
		}
	}
	slices.Sort(unexpected)
	var msg []string
	if len(missing) > 0 {
		msg = append(msg, "missing required argument(s): "+strings.Join(missing, ", "))
	}
	if len(unexpected) > 0 {
		msg = append(msg, "unexpected argument(s): "+strings.Join(unexpected, ", "))
	}
	return out, strings.Join(msg, "; ")
}

// literal is v when it is a string with no replacement field in it (so
// its value is known when the rule is stored).
func literal(v any) (string, bool) {
	s, ok := v.(string)
	return s, ok && !strings.Contains(s, "{")
}

func checkCondition(op Op) string {
	name, _, _ := inverted(op.Op)
	args, msg := namedArgs(operators[name], op.Args)
	if msg != "" {
		return msg
	}
	switch name {
	case "eq", "lt", "gt":
		if _, ok := args["values"].([]any); !ok {
			if _, isField := args["values"].(string); !isField {
				return "values must be a list of the values to compare"
			}
		}
		if f, ok := args["force_strings"]; ok {
			if _, isBool := f.(bool); !isBool {
				return "force_strings must be true or false"
			}
		}
	case "matches", "contains":
		if re, ok := literal(args["regex"]); ok {
			if _, err := regexp.Compile(re); err != nil {
				return fmt.Sprintf("invalid regular expression: %v", err)
			}
		} else if _, isStr := args["regex"].(string); !isStr {
			return "regex must be a string"
		}
	case "in-net":
		if s, ok := literal(args["subnet"]); ok {
			if _, err := netip.ParsePrefix(s); err != nil {
				if _, err2 := netip.ParseAddr(s); err2 != nil {
					return fmt.Sprintf("invalid value: subnet %q is not a network such as 192.0.2.0/24", short(s))
				}
			}
		}
	case "one-of":
		if v, ok := args["values"]; ok {
			if _, isList := v.([]any); !isList {
				if _, isStr := v.(string); !isStr {
					return "values must be a list"
				}
			}
		}
	}
	return ""
}

func checkAction(op Op) string {
	args, msg := namedArgs(actions[op.Op], op.Args)
	if msg != "" {
		return msg
	}
	switch op.Op {
	case "log":
		if l, ok := args["level"]; ok {
			s, _ := l.(string)
			if !slices.Contains(logLevels, strings.ToLower(s)) {
				return fmt.Sprintf("Invalid log level: %v. Choose from %s", short(fmt.Sprint(l)), strings.Join(logLevels, ", "))
			}
		}
	case "fail":
		if _, ok := args["msg"].(string); !ok {
			return "msg must be a string"
		}
	case "set-attribute", "extend-attribute", "del-attribute":
		p, ok := args["path"].(string)
		if !ok {
			return "path must be a string such as /driver_info/redfish_address or properties.cpu_arch"
		}
		if _, isLit := literal(p); isLit && op.Loop == nil {
			if err := checkPath(splitPath(p), op.Op); err != nil {
				return err.Error()
			}
		}
	case "set-capability", "unset-capability":
		n, ok := args["name"].(string)
		if !ok || n == "" || strings.ContainsAny(n, ":,") {
			return "name must be a capability's name (no ':' or ',')"
		}
	case "add-trait", "remove-trait":
		n, ok := args["name"].(string)
		if !ok {
			return "name must be a trait's name"
		}
		if _, isLit := literal(n); isLit && op.Loop == nil {
			if err := fsm.CheckTrait(n); err != nil {
				return err.Error()
			}
		}
	case "set-plugin-data", "extend-plugin-data", "unset-plugin-data":
		if p, ok := args["path"].(string); !ok || p == "" {
			return "path must be a dotted path such as lldp.switch"
		}
	case "set-port-attribute", "extend-port-attribute", "del-port-attribute":
		if id, ok := args["port_id"].(string); !ok || id == "" {
			return "port_id must be a port's UUID or MAC address"
		}
		p, ok := args["path"].(string)
		if !ok {
			return "path must be a string such as physical_network or /extra/KEY"
		}
		if _, isLit := literal(p); isLit && op.Loop == nil {
			parts := splitPath(p)
			if err := checkPortPath(parts, op.Op); err != nil {
				return err.Error()
			}
			if v, given := args["value"]; given && op.Op == "set-port-attribute" {
				if err := checkPortValue(parts, v); err != nil {
					return err.Error()
				}
			}
		}
	}
	if u, ok := args["unique"]; ok {
		if _, isBool := u.(bool); !isBool {
			return "unique must be true or false"
		}
	}
	return ""
}

// splitPath is Ironic's normalize_path: "/a/b" or "a.b".
func splitPath(p string) []string {
	if strings.Contains(p, "/") {
		return strings.Split(strings.Trim(p, "/"), "/")
	}
	return strings.Split(p, ".")
}

// checkPath says why an attribute path cannot be changed by action.
func checkPath(parts []string, action string) error {
	if len(parts) == 0 || parts[0] == "" {
		return fmt.Errorf("path is empty")
	}
	for _, p := range parts {
		if p == "" {
			return fmt.Errorf("path %q has an empty part", strings.Join(parts, "/"))
		}
	}
	f := parts[0]
	switch {
	case slices.Contains(settableMaps, f):
		if len(parts) == 1 && action != "extend-attribute" {
			return fmt.Errorf("path /%s names the whole dictionary; name a key below it, such as /%s/KEY", f, f)
		}
		if len(parts) == 1 {
			return fmt.Errorf("/%s is a dictionary, not a list", f)
		}
		if f == "properties" && len(parts) == 2 && parts[1] == "capabilities" {
			return fmt.Errorf("properties/capabilities is set with set-capability and unset-capability")
		}
	case slices.Contains(settableStrings, f):
		if len(parts) > 1 {
			return fmt.Errorf("/%s is a string field; it has no keys", f)
		}
		if action == "extend-attribute" {
			return fmt.Errorf("/%s is a string, not a list", f)
		}
	case f == "traits":
		return fmt.Errorf("traits are changed with add-trait and remove-trait")
	default:
		return fmt.Errorf("node field %q cannot be changed by an inspection rule; rules change %s (a key below each), and %s",
			short(f), strings.Join(settableMaps, ", "), strings.Join(settableStrings, ", "))
	}
	return nil
}

func short(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
