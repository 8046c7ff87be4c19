package inspectrules

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/bmedge/bmedge/coordinator/fsm"
)

// Doc is a node as rules read and change it: its fields by Ironic's
// names (uuid, name, driver, driver_info, properties, extra,
// instance_info, the interfaces, resource_class, ...) and its traits.
type Doc struct {
	Fields map[string]any
	Traits []string
	// ports are the node's ports, which the port actions change
	// (SetPorts, PortChanges).
	ports []*portDoc
}

// Event is a line for the node's history: a log action's message, a
// rule that ran, a trait a remove-trait did not find.
type Event struct {
	Severity string // INFO, WARNING or ERROR
	Text     string
}

// Result is what Apply did besides changing the Doc.
type Result struct {
	Events []Event
	// PluginData is the inspection's plugin data as the rules left it.
	PluginData map[string]any
	// Matched are the UUIDs of the rules whose actions ran, in order.
	Matched []string
}

// Failure fails the inspection: a fail action's message, or a rule that
// could not run (a comparison of values that do not compare, an
// attribute the node does not have).
type Failure struct {
	Rule string
	Msg  string
	// Fail is true for a fail action (the operator's message as is).
	Fail bool
}

func (f *Failure) Error() string {
	if f.Fail {
		return "Failed to inspect hardware. Reason: " + f.Msg
	}
	return fmt.Sprintf("Failed to apply inspection rule %s: %s", f.Rule, f.Msg)
}

// Check checks a string field a rule set (driver, an interface) against
// the rest of the node; nil accepts any.
type Check func(d *Doc, field string) error

// SensitiveFields are the inventory and plugin data keys shown to rules
// as "***" (Ironic's SENSITIVE_FIELDS with its default mask_secrets
// always); a node's driver_info secrets are masked too, for every rule
// but a sensitive one.
var SensitiveFields = []string{"password", "auth_token", "bmc_password"}

// Order sorts rules as Ironic runs them: highest priority first, rules
// of equal priority in the order given (stored rules by age, then the
// built-in ones).
func Order(rules []Rule) []Rule {
	out := slices.Clone(rules)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Priority > out[j].Priority })
	return out
}

// Apply runs rules (in Order) on d: each rule whose conditions all hold
// runs its actions, which change d and the plugin data. The first
// failure stops it (the inspection fails with it); what the rules
// before did stays in d, as in Ironic, where each action saves the node.
func Apply(rules []Rule, d *Doc, inventory, pluginData map[string]any, check Check) (Result, error) {
	res := Result{PluginData: copyMap(pluginData)}
	if res.PluginData == nil {
		res.PluginData = map[string]any{}
	}
	inv := mask(inventory, SensitiveFields, "***")
	for _, r := range Order(rules) {
		ev := &evaluation{rule: r, d: d, inv: inv, res: &res, check: check}
		ok, err := ev.conditions()
		if err != nil {
			return res, &Failure{Rule: r.UUID, Msg: err.Error()}
		}
		if !ok {
			continue
		}
		res.Matched = append(res.Matched, r.UUID)
		what := r.UUID
		if r.Description != "" {
			what += " (" + short(r.Description) + ")"
		}
		res.Events = append(res.Events, Event{Severity: "INFO", Text: "inspection rule " + what + " matched; applying its actions"})
		for _, a := range r.Actions {
			if err := ev.action(a); err != nil {
				if f, ok := err.(*Failure); ok {
					return res, f
				}
				return res, &Failure{Rule: r.UUID, Msg: fmt.Sprintf("action %s: %v", a.Op, err)}
			}
		}
	}
	return res, nil
}

// evaluation is one rule's run.
type evaluation struct {
	rule  Rule
	d     *Doc
	inv   map[string]any
	res   *Result
	check Check
}

// context is what replacement fields name: the node as it is now.
func (ev *evaluation) context(item any, inLoop bool) map[string]any {
	node := copyMap(ev.d.Fields)
	if di, ok := node["driver_info"].(map[string]any); ok && !ev.rule.Sensitive {
		node["driver_info"] = maskSecrets(di)
	}
	traits := make([]any, 0, len(ev.d.Traits))
	for _, t := range ev.d.Traits {
		traits = append(traits, t)
	}
	node["traits"] = traits
	ctx := map[string]any{"node": node, "inventory": ev.inv, "plugin_data": mask(ev.res.PluginData, SensitiveFields, "***")}
	if inLoop {
		ctx["item"] = item
	}
	return ctx
}

// loopItems are the items of op's loop (nil: no loop).
func (ev *evaluation) loopItems(op Op) ([]any, bool, error) {
	switch l := op.Loop.(type) {
	case nil:
		return nil, false, nil
	case []any:
		return l, true, nil
	case map[string]any:
		return []any{l}, true, nil
	case string:
		v, ok := formatString(l, ev.context(nil, false))
		if !ok {
			return nil, true, nil // names nothing: no items
		}
		switch x := v.(type) {
		case []any:
			if len(x) > MaxLoop {
				x = x[:MaxLoop]
			}
			return x, true, nil
		case map[string]any:
			return []any{x}, true, nil
		case nil:
			return nil, true, nil
		}
		return nil, true, fmt.Errorf("loop %s is %s, not a list", l, text(v))
	}
	return nil, false, fmt.Errorf("loop must be a list")
}

// args are op's named arguments, interpolated (the formatted ones, or
// all in a loop).
func (ev *evaluation) args(op Op, sig signature, item any, inLoop bool) (map[string]any, error) {
	raw, msg := namedArgs(sig, op.Args)
	if msg != "" {
		return nil, fmt.Errorf("%s", msg)
	}
	name, _, _ := inverted(op.Op)
	ctx := ev.context(item, inLoop)
	out := make(map[string]any, len(raw))
	for k, v := range raw {
		if inLoop || slices.Contains(sig.formatted, k) {
			v = interpolate(v, ctx, name == "is-empty")
		}
		if inLoop {
			// Ironic formats a loop's args twice: an item may hold
			// replacement fields of its own ({"value": "{inventory[...]}"}).
			v = interpolate(v, ctx, name == "is-empty")
		}
		out[k] = v
	}
	if inLoop && slices.Contains(sig.optional, "force_strings") {
		out["force_strings"] = true
	}
	return out, nil
}

func (ev *evaluation) conditions() (bool, error) {
	for _, c := range ev.rule.Conditions {
		ok, err := ev.condition(c)
		if err != nil {
			return false, fmt.Errorf("condition %s: %v", c.Op, err)
		}
		if !ok {
			return false, nil
		}
	}
	return true, nil
}

func (ev *evaluation) condition(c Op) (bool, error) {
	name, inv, err := inverted(c.Op)
	if err != nil {
		return false, err
	}
	sig := operators[name]
	one := func(item any, inLoop bool) (bool, error) {
		args, err := ev.args(c, sig, item, inLoop)
		if err != nil {
			return false, err
		}
		r, err := operate(name, args)
		return r != inv, err
	}
	items, looped, err := ev.loopItems(c)
	if err != nil {
		return false, err
	}
	if !looped {
		return one(nil, false)
	}
	multiple := c.Multiple
	if multiple == "" {
		multiple = "any"
	}
	// Ironic's check_with_loop: any and all as said; first is true at
	// the first item that holds (and else the first item's result);
	// last is the last item's result.
	var results []bool
	for _, it := range items {
		r, err := one(it, true)
		if err != nil {
			return false, err
		}
		results = append(results, r)
		if multiple == "first" && r {
			return true, nil
		}
	}
	switch multiple {
	case "all":
		for _, r := range results {
			if !r {
				return false, nil
			}
		}
		return true, nil
	case "last":
		return len(results) > 0 && results[len(results)-1], nil
	case "first":
		return len(results) > 0 && results[0], nil
	}
	return slices.Contains(results, true), nil
}

// operate is one condition operator on its arguments.
func operate(name string, a map[string]any) (bool, error) {
	switch name {
	case "eq", "lt", "gt":
		values, ok := a["values"].([]any)
		if !ok {
			return false, fmt.Errorf("Expected list for 'values', got: %s", text(a["values"]))
		}
		if fs, _ := a["force_strings"].(bool); fs {
			for i := range values {
				values[i] = text(values[i])
			}
		}
		for i := 0; i+1 < len(values); i++ {
			c, err := compare(values[i], values[i+1], name == "eq")
			if err != nil {
				return false, err
			}
			if (name == "eq" && c != 0) || (name == "lt" && c >= 0) || (name == "gt" && c <= 0) {
				return false, nil
			}
		}
		return true, nil
	case "is-empty":
		v := a["value"]
		switch x := v.(type) {
		case []any:
			return len(x) == 0, nil
		case map[string]any:
			return len(x) == 0, nil
		}
		return slices.Contains([]string{"", "None", "[]", "{}"}, text(v)), nil
	case "in-net":
		addr, err := netip.ParseAddr(text(a["address"]))
		if err != nil {
			return false, fmt.Errorf("invalid value: address %q is not an IP address", short(text(a["address"])))
		}
		sub := text(a["subnet"])
		p, err := netip.ParsePrefix(sub)
		if err != nil {
			one, err2 := netip.ParseAddr(sub)
			if err2 != nil {
				return false, fmt.Errorf("invalid value: subnet %q is not a network", short(sub))
			}
			p = netip.PrefixFrom(one, one.BitLen())
		}
		return p.Contains(addr.Unmap()), nil
	case "matches", "contains":
		re := text(a["regex"])
		if name == "matches" {
			re = "^(?:" + re + ")$"
		}
		rx, err := regexp.Compile(re)
		if err != nil {
			return false, fmt.Errorf("invalid regular expression: %v", err)
		}
		return rx.MatchString(text(a["value"])), nil
	case "one-of":
		values, _ := a["values"].([]any)
		for _, v := range values {
			if c, err := compare(a["value"], v, true); err == nil && c == 0 {
				return true, nil
			}
		}
		return false, nil
	case "is-none":
		return a["value"] == nil, nil
	case "is-true":
		switch x := a["value"].(type) {
		case bool:
			return x, nil
		case float64:
			return x != 0, nil
		case string:
			return slices.Contains([]string{"yes", "true"}, strings.ToLower(x)), nil
		}
		return false, nil
	case "is-false":
		switch x := a["value"].(type) {
		case bool:
			return !x, nil
		case float64:
			return x == 0, nil
		case string:
			return slices.Contains([]string{"no", "false"}, strings.ToLower(x)), nil
		case nil:
			return true, nil
		}
		return false, nil
	}
	return false, fmt.Errorf("Unsupported operator '%s'", name)
}

// number is v as a number: a JSON number, or a string that is one when
// asNumber.
func number(v any, fromString bool) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case int:
		return float64(x), true
	case string:
		if fromString {
			f, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
			return f, err == nil
		}
	}
	return 0, false
}

// compare orders a and b: numbers as numbers (a number and a string
// that is a number too), strings as strings; eq compares anything else
// for equality, the others refuse it.
func compare(a, b any, eq bool) (int, error) {
	_, aNum := number(a, false)
	_, bNum := number(b, false)
	if x, ok := number(a, bNum); ok {
		if y, ok := number(b, aNum); ok {
			switch {
			case x < y:
				return -1, nil
			case x > y:
				return 1, nil
			}
			return 0, nil
		}
	}
	sa, aStr := a.(string)
	sb, bStr := b.(string)
	if aStr && bStr {
		return strings.Compare(sa, sb), nil
	}
	if eq {
		if reflect.DeepEqual(a, b) {
			return 0, nil
		}
		return 1, nil
	}
	return 0, fmt.Errorf("cannot compare %s with %s", short(text(a)), short(text(b)))
}

func (ev *evaluation) action(a Op) error {
	sig := actions[a.Op]
	items, looped, err := ev.loopItems(a)
	if err != nil {
		return err
	}
	if !looped {
		return ev.act(a, sig, nil, false)
	}
	for _, it := range items {
		if err := ev.act(a, sig, it, true); err != nil {
			return err
		}
	}
	return nil
}

func (ev *evaluation) act(a Op, sig signature, item any, inLoop bool) error {
	args, err := ev.args(a, sig, item, inLoop)
	if err != nil {
		return err
	}
	d := ev.d
	unique, _ := args["unique"].(bool)
	switch a.Op {
	case "fail":
		return &Failure{Rule: ev.rule.UUID, Msg: text(args["msg"]), Fail: true}
	case "log":
		level, _ := args["level"].(string)
		sev := map[string]string{"debug": "INFO", "info": "INFO", "": "INFO", "warning": "WARNING", "error": "ERROR", "critical": "ERROR"}[strings.ToLower(level)]
		if sev == "" {
			return fmt.Errorf("Invalid log level: %s. Choose from %s", short(level), strings.Join(logLevels, ", "))
		}
		ev.res.Events = append(ev.res.Events, Event{Severity: sev, Text: fmt.Sprintf("inspection rule %s: %s", ev.rule.UUID, text(args["msg"]))})
	case "set-attribute", "extend-attribute", "del-attribute":
		parts := splitPath(text(args["path"]))
		if err := checkPath(parts, a.Op); err != nil {
			return err
		}
		return ev.attribute(a.Op, parts, args["value"], unique)
	case "set-capability", "unset-capability":
		props := copyMap(asMap(d.Fields["properties"]))
		if props == nil {
			props = map[string]any{}
		}
		cur, _ := props["capabilities"].(string)
		name := text(args["name"])
		if a.Op == "set-capability" {
			props["capabilities"] = setCapability(cur, name, text(args["value"]))
		} else {
			props["capabilities"] = setCapability(cur, name, "")
		}
		d.Fields["properties"] = props
	case "add-trait":
		name := text(args["name"])
		t, err := fsm.AddTrait(text(d.Fields["uuid"]), d.Traits, name)
		if err != nil {
			return err
		}
		d.Traits = t
	case "remove-trait":
		name := text(args["name"])
		t, err := fsm.RemoveTrait(text(d.Fields["uuid"]), d.Traits, name)
		if err != nil {
			ev.res.Events = append(ev.res.Events, Event{Severity: "WARNING", Text: fmt.Sprintf("inspection rule %s: Failed to remove trait %s: %v", ev.rule.UUID, name, err)})
			return nil
		}
		d.Traits = t
	case "set-plugin-data", "extend-plugin-data", "unset-plugin-data":
		return pluginData(ev.res.PluginData, a.Op, strings.Split(text(args["path"]), "."), args["value"], unique)
	case "set-port-attribute", "extend-port-attribute", "del-port-attribute":
		return ev.portAction(a.Op, text(args["port_id"]), splitPath(text(args["path"])), args["value"], unique)
	default:
		return fmt.Errorf("Unsupported action '%s'", a.Op)
	}
	return nil
}

// attribute sets, extends or deletes the node field at parts.
func (ev *evaluation) attribute(op string, parts []string, value any, unique bool) error {
	d := ev.d
	f := parts[0]
	if slices.Contains(settableStrings, f) {
		switch op {
		case "del-attribute":
			d.Fields[f] = ""
		default:
			s, ok := value.(string)
			if !ok {
				return fmt.Errorf("Failed to set attribute %s with value %s: %s takes a string", f, short(text(value)), f)
			}
			d.Fields[f] = s
		}
		if ev.check != nil {
			if err := ev.check(d, f); err != nil {
				return fmt.Errorf("Failed to set attribute %s: %v", f, err)
			}
		}
		return nil
	}
	return changeDict(d.Fields, op, parts, value, unique)
}

// changeDict sets, extends or deletes the key at parts[1:] of the
// dictionary fields[parts[0]]: a new copy, changed below parts[1:].
func changeDict(fields map[string]any, op string, parts []string, value any, unique bool) error {
	f := parts[0]
	root := copyMap(asMap(fields[f]))
	if root == nil {
		root = map[string]any{}
	}
	cur := root
	for _, p := range parts[1 : len(parts)-1] {
		next, ok := cur[p].(map[string]any)
		if !ok {
			if op == "del-attribute" {
				return fmt.Errorf("Failed to delete attribute at %s: %s has no key %s", strings.Join(parts, "/"), f, p)
			}
			if _, exists := cur[p]; exists {
				return fmt.Errorf("%s is not a dictionary", strings.Join(parts, "/"))
			}
			next = map[string]any{}
		} else {
			next = copyMap(next)
		}
		cur[p] = next
		cur = next
	}
	last := parts[len(parts)-1]
	switch op {
	case "set-attribute":
		cur[last] = value
	case "extend-attribute":
		l, ok := cur[last].([]any)
		if _, exists := cur[last]; exists && !ok {
			return fmt.Errorf("Cannot extend non-list attribute %s with value %s", strings.Join(parts, "/"), short(text(value)))
		}
		if !unique || !containsValue(l, value) {
			l = append(slices.Clone(l), value)
		}
		cur[last] = l
	case "del-attribute":
		if _, ok := cur[last]; !ok {
			return fmt.Errorf("Failed to delete attribute at %s: no such key", strings.Join(parts, "/"))
		}
		delete(cur, last)
	}
	fields[f] = root
	return nil
}

// pluginData is Ironic's set-, extend- and unset-plugin-data on pd.
func pluginData(pd map[string]any, op string, keys []string, value any, unique bool) error {
	cur := pd
	for i, k := range keys[:len(keys)-1] {
		next, ok := cur[k].(map[string]any)
		if !ok {
			if op == "unset-plugin-data" {
				return nil
			}
			if _, exists := cur[k]; exists {
				return fmt.Errorf("plugin data %s is not a dictionary", strings.Join(keys[:i+1], "."))
			}
			next = map[string]any{}
			cur[k] = next
		}
		cur = next
	}
	last := keys[len(keys)-1]
	switch op {
	case "set-plugin-data":
		cur[last] = value
	case "extend-plugin-data":
		l, ok := cur[last].([]any)
		if _, exists := cur[last]; exists && cur[last] != nil && !ok {
			return fmt.Errorf("plugin data %s is not a list", strings.Join(keys, "."))
		}
		if !unique || !containsValue(l, value) {
			l = append(l, value)
		}
		cur[last] = l
	case "unset-plugin-data":
		delete(cur, last)
	}
	return nil
}

// setCapability sets name to value in Ironic's capabilities string
// ("k1:v1,k2:v2"), keeping the others in order; value "" removes it.
func setCapability(cur, name, value string) string {
	var parts []string
	done := false
	for _, kv := range strings.Split(cur, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, _, _ := strings.Cut(kv, ":")
		if k == name {
			if !done && value != "" {
				parts = append(parts, name+":"+value)
			}
			done = true
			continue
		}
		parts = append(parts, kv)
	}
	if !done && value != "" {
		parts = append(parts, name+":"+value)
	}
	return strings.Join(parts, ",")
}

func containsValue(l []any, v any) bool {
	for _, x := range l {
		if c, err := compare(x, v, true); err == nil && c == 0 {
			return true
		}
	}
	return false
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

// copyMap is a deep copy of m (JSON values).
func copyMap(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return map[string]any{}
	}
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return out
}

// mask is a deep copy of m with the values of keys replaced by with, at
// any depth.
func mask(m map[string]any, keys []string, with string) map[string]any {
	var walk func(v any) any
	walk = func(v any) any {
		switch x := v.(type) {
		case map[string]any:
			out := make(map[string]any, len(x))
			for k, e := range x {
				if slices.Contains(keys, k) {
					out[k] = with
				} else {
					out[k] = walk(e)
				}
			}
			return out
		case []any:
			out := make([]any, len(x))
			for i, e := range x {
				out[i] = walk(e)
			}
			return out
		}
		return v
	}
	if m == nil {
		return map[string]any{}
	}
	return walk(m).(map[string]any)
}

// maskSecrets masks a driver_info's secrets as the API shows them.
func maskSecrets(di map[string]any) map[string]any {
	out := make(map[string]any, len(di))
	for k, v := range di {
		l := strings.ToLower(k)
		if strings.Contains(l, "password") || strings.Contains(l, "secret") || strings.Contains(l, "token") || strings.Contains(l, "private_key") {
			out[k] = "******"
			continue
		}
		out[k] = v
	}
	return out
}
