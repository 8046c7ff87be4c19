package fsm

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/bmedge/bmedge/drivers"
)

// This file holds node traits, deploy templates and runbooks as Ironic
// checks them at its API (api_utils.TRAITS_SCHEMA, DEPLOY_STEP_SCHEMA,
// RUNBOOK_STEP_SCHEMA and the schemas of its deploy_template and runbook
// controllers): what a valid one is, never where it is kept.

// MaxTraitsPerNode is the most traits a node has (Ironic's
// MAX_TRAITS_PER_NODE).
const MaxTraitsPerNode = 50

// maxNameLen is the longest trait, deploy template or runbook name, and
// the longest runbook owner (Ironic's maxLength 255).
const maxNameLen = 255

// MaxCatalogSteps bounds the steps of one deploy template or runbook
// (Ironic has no bound; a real one has a handful of steps), as
// MaxStepsPerRequest bounds a provision request's.
const MaxCatalogSteps = 100

var customTraitRE = regexp.MustCompile(`^CUSTOM_[A-Z0-9_]+$`)

// ErrNoSuchTrait is RemoveTrait's error for a trait the node does not
// have (Ironic's NodeTraitNotFound, a 404).
var ErrNoSuchTrait = errors.New("no such trait")

// CheckTrait says whether t is a valid trait name: a standard os-traits
// name or CUSTOM_ followed by capital letters, digits and underscores, at
// most 255 characters.
func CheckTrait(t string) error {
	if t == "" || len(t) > maxNameLen {
		return fmt.Errorf("Invalid trait %s: a trait has 1 to %d characters", shortText(t), maxNameLen)
	}
	if customTraitRE.MatchString(t) || standardTraits[t] {
		return nil
	}
	return fmt.Errorf("Invalid trait %s: a trait is either a standard os-traits name (such as HW_CPU_X86_AVX2) or CUSTOM_ followed by capital letters, digits and underscores (such as CUSTOM_BIOS_TUNED)", shortText(t))
}

// shortText quotes a client's string for a message, cut to a length that
// fits on a terminal line.
func shortText(s string) string {
	if len(s) > 64 {
		return fmt.Sprintf("%q...", s[:64])
	}
	return fmt.Sprintf("%q", s)
}

// SetTraits checks a node's whole new trait list (PUT
// /v1/nodes/{node}/traits) and returns it sorted, without duplicates.
func SetTraits(ident string, list []string) ([]string, error) {
	out := make([]string, 0, len(list))
	for _, t := range list {
		if err := CheckTrait(t); err != nil {
			return nil, err
		}
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	if len(out) > MaxTraitsPerNode {
		return nil, fmt.Errorf("Could not modify traits for node %s as it would exceed the maximum number of traits per node (%d vs. %d)", ident, len(out), MaxTraitsPerNode)
	}
	sort.Strings(out)
	return out, nil
}

// AddTrait adds t to a node's traits cur (adding one it has changes
// nothing, as in Ironic).
func AddTrait(ident string, cur []string, t string) ([]string, error) {
	if err := CheckTrait(t); err != nil {
		return nil, err
	}
	return SetTraits(ident, append(slices.Clone(cur), t))
}

// RemoveTrait removes t from a node's traits cur; ErrNoSuchTrait (with
// Ironic's message) when the node does not have it.
func RemoveTrait(ident string, cur []string, t string) ([]string, error) {
	i := slices.Index(cur, t)
	if i < 0 {
		return nil, fmt.Errorf("%w: Node %s doesn't have a trait '%s'", ErrNoSuchTrait, ident, t)
	}
	return slices.Delete(slices.Clone(cur), i, i+1), nil
}

// InstanceTraits are the traits a deploy asks for in instance_info
// (Ironic's instance_info["traits"], which a flavor or the operator sets):
// nil when there are none or they are not a list of strings (CheckVerb
// refuses such a deploy).
func InstanceTraits(n *Node) []string {
	l, ok := n.InstanceInfo["traits"].([]any)
	if !ok {
		if s, ok := n.InstanceInfo["traits"].([]string); ok {
			return s
		}
		return nil
	}
	out := make([]string, 0, len(l))
	for _, v := range l {
		s, ok := v.(string)
		if !ok {
			return nil
		}
		out = append(out, s)
	}
	return out
}

// TemplateStep is a step of a deploy template.
type TemplateStep struct {
	Interface string         `json:"interface"`
	Step      string         `json:"step"`
	Args      map[string]any `json:"args"`
	Priority  int            `json:"priority"`
}

// DeployTemplate is Ironic's deploy template (API 1.55): a deploy of a
// node whose instance_info traits name it runs its steps too.
type DeployTemplate struct {
	UUID      string         `json:"uuid"`
	Name      string         `json:"name"`
	Steps     []TemplateStep `json:"steps"`
	Extra     map[string]any `json:"extra,omitempty"`
	CreatedAt time.Time      `json:"created_at"`
	UpdatedAt *time.Time     `json:"updated_at,omitempty"`
}

// RunbookStep is a step of a runbook; Order orders the runbook's steps.
type RunbookStep struct {
	Interface string         `json:"interface"`
	Step      string         `json:"step"`
	Args      map[string]any `json:"args"`
	Order     int            `json:"order"`
}

// Runbook is Ironic's runbook (API 1.92): a named list of clean or
// service steps that runs on nodes that have a trait of its name.
type Runbook struct {
	UUID           string         `json:"uuid"`
	Name           string         `json:"name"`
	Steps          []RunbookStep  `json:"steps"`
	Extra          map[string]any `json:"extra,omitempty"`
	Public         bool           `json:"public"`
	Owner          string         `json:"owner,omitempty"`
	DisableRamdisk bool           `json:"disable_ramdisk"`
	CreatedAt      time.Time      `json:"created_at"`
	UpdatedAt      *time.Time     `json:"updated_at,omitempty"`
}

// OrderedSteps are the runbook's steps as clean_steps or service_steps:
// by order, steps of the same order as listed.
func (rb *Runbook) OrderedSteps() []map[string]any {
	steps := slices.Clone(rb.Steps)
	sort.SliceStable(steps, func(i, j int) bool { return steps[i].Order < steps[j].Order })
	out := make([]map[string]any, 0, len(steps))
	for _, s := range steps {
		args := s.Args
		if args == nil {
			args = map[string]any{}
		}
		out = append(out, map[string]any{"interface": s.Interface, "step": s.Step, "args": args})
	}
	return out
}

// fieldsCheck refuses a document with a property outside allowed, or
// without one of required, in the words of Ironic's schema errors.
func fieldsCheck(what string, doc map[string]any, allowed, required []string) error {
	keys := make([]string, 0, len(doc))
	for k := range doc {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !slices.Contains(allowed, k) {
			return fmt.Errorf("Invalid %s: additional properties are not allowed (%s was unexpected); a %s has %s", what, shortText(k), what, strings.Join(allowed, ", "))
		}
	}
	for _, k := range required {
		if _, ok := doc[k]; !ok {
			return fmt.Errorf("Invalid %s: '%s' is a required property", what, k)
		}
	}
	return nil
}

// catalogCommon reads what deploy templates and runbooks share: name,
// uuid, extra, and the list of steps (each an object, 1 to
// MaxCatalogSteps of them, no interface.step twice).
func catalogCommon(what string, doc map[string]any) (name, id string, extra map[string]any, steps []map[string]any, err error) {
	name, ok := doc["name"].(string)
	if !ok {
		return "", "", nil, nil, fmt.Errorf("Invalid %s: name must be a string, a trait name such as CUSTOM_BIOS_TUNED", what)
	}
	if err := CheckTrait(name); err != nil {
		return "", "", nil, nil, fmt.Errorf("Invalid %s name: %v", what, err)
	}
	switch v := doc["uuid"].(type) {
	case nil:
	case string:
		if uuid.Validate(v) != nil {
			return "", "", nil, nil, fmt.Errorf("Invalid %s: uuid %s is not a valid UUID", what, shortText(v))
		}
		id = strings.ToLower(v)
	default:
		return "", "", nil, nil, fmt.Errorf("Invalid %s: uuid must be a string (a UUID) or null", what)
	}
	switch v := doc["extra"].(type) {
	case nil:
	case map[string]any:
		extra = v
	default:
		return "", "", nil, nil, fmt.Errorf("Invalid %s: extra must be an object or null", what)
	}
	list, ok := doc["steps"].([]any)
	if !ok || len(list) == 0 {
		return "", "", nil, nil, fmt.Errorf("Invalid %s: steps must be a non-empty list of steps", what)
	}
	if len(list) > MaxCatalogSteps {
		return "", "", nil, nil, fmt.Errorf("Invalid %s: %d steps given, at most %d are accepted", what, len(list), MaxCatalogSteps)
	}
	steps = AsObjects(list)
	seen := map[string]bool{}
	var dups []string
	for i, s := range steps {
		if s == nil {
			return "", "", nil, nil, fmt.Errorf("Invalid %s: step %d is not an object", what, i+1)
		}
		iface, _ := s["interface"].(string)
		st, _ := s["step"].(string)
		key := fmt.Sprintf("interface: %s, step: %s", iface, st)
		if seen[key] && !slices.Contains(dups, key) {
			dups = append(dups, key)
		}
		seen[key] = true
	}
	if len(dups) > 0 {
		// Ironic's duplicate_steps, for runbooks too.
		return "", "", nil, nil, fmt.Errorf("Deploy template invalid: Duplicate deploy steps. A template cannot have multiple deploy steps with the same interface and step. Duplicates: %s", strings.Join(dups, "; "))
	}
	return name, id, extra, steps, nil
}

// ParseDeployTemplate checks a deploy template document (POST
// /v1/deploy_templates, or a template after a PATCH) as Ironic's
// TEMPLATE_SCHEMA does: name a trait name, steps of interface, step,
// args and priority, extra, uuid.
func ParseDeployTemplate(doc map[string]any) (DeployTemplate, error) {
	const what = "deploy template"
	if err := fieldsCheck(what, doc, []string{"extra", "name", "steps", "uuid"}, []string{"steps", "name"}); err != nil {
		return DeployTemplate{}, err
	}
	name, id, extra, steps, err := catalogCommon(what, doc)
	if err != nil {
		return DeployTemplate{}, err
	}
	t := DeployTemplate{UUID: id, Name: name, Extra: extra}
	for i, raw := range steps {
		if err := checkStepShape(raw, i, true); err != nil {
			return DeployTemplate{}, fmt.Errorf("Invalid deploy template steps: %v", err)
		}
		p, _ := stepPriority(raw["priority"])
		args, _ := raw["args"].(map[string]any)
		t.Steps = append(t.Steps, TemplateStep{Interface: raw["interface"].(string), Step: raw["step"].(string), Args: args, Priority: p})
	}
	return t, nil
}

// ParseRunbook checks a runbook document (POST /v1/runbooks, or a
// runbook after a PATCH) as Ironic 1.92's RUNBOOK_SCHEMA does: name a
// trait name, steps of interface, step, args and order, extra, public,
// owner, disable_ramdisk, uuid.
func ParseRunbook(doc map[string]any) (Runbook, error) {
	const what = "runbook"
	if err := fieldsCheck(what, doc, []string{"disable_ramdisk", "extra", "name", "owner", "public", "steps", "uuid"}, []string{"steps", "name"}); err != nil {
		return Runbook{}, err
	}
	name, id, extra, steps, err := catalogCommon(what, doc)
	if err != nil {
		return Runbook{}, err
	}
	rb := Runbook{UUID: id, Name: name, Extra: extra}
	for k, dst := range map[string]*bool{"public": &rb.Public, "disable_ramdisk": &rb.DisableRamdisk} {
		switch v := doc[k].(type) {
		case nil:
		case bool:
			*dst = v
		default:
			return Runbook{}, fmt.Errorf("Invalid runbook: %s must be true, false or null", k)
		}
	}
	switch v := doc["owner"].(type) {
	case nil:
	case string:
		if len(v) > maxNameLen {
			return Runbook{}, fmt.Errorf("Invalid runbook: owner has %d characters, at most %d", len(v), maxNameLen)
		}
		rb.Owner = v
	default:
		return Runbook{}, fmt.Errorf("Invalid runbook: owner must be a string or null")
	}
	for i, raw := range steps {
		if err := checkRunbookStep(raw, i); err != nil {
			return Runbook{}, fmt.Errorf("Invalid runbook steps: %v", err)
		}
		o, _ := stepPriority(raw["order"])
		args, _ := raw["args"].(map[string]any)
		rb.Steps = append(rb.Steps, RunbookStep{Interface: raw["interface"].(string), Step: raw["step"].(string), Args: args, Order: o})
	}
	return rb, nil
}

// checkRunbookStep checks one runbook step as Ironic's
// RUNBOOK_STEP_SCHEMA: interface, step and order required, args an
// object, nothing else.
func checkRunbookStep(raw map[string]any, i int) error {
	at := fmt.Sprintf("step %d", i+1)
	allowed := []string{"interface", "step", "args", "order"}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !slices.Contains(allowed, k) {
			hint := ""
			if k == "priority" {
				hint = " (a runbook's steps run by order, not priority)"
			}
			return fmt.Errorf("additional properties are not allowed ('%s' was unexpected) in %s; a runbook step has only %s%s", k, at, strings.Join(allowed, ", "), hint)
		}
	}
	for _, k := range []string{"interface", "step", "order"} {
		if _, ok := raw[k]; !ok {
			return fmt.Errorf("'%s' is a required property of %s", k, at)
		}
	}
	if iface, ok := raw["interface"].(string); !ok || drivers.InterfaceRank(iface) < 0 {
		return fmt.Errorf("%s: interface %v is not one of %s", at, quoteJSON(raw["interface"]), strings.Join(drivers.Interfaces(), ", "))
	}
	if name, ok := raw["step"].(string); !ok || name == "" {
		return fmt.Errorf("%s: step %v must be a non-empty string", at, quoteJSON(raw["step"]))
	}
	if v, ok := raw["args"]; ok {
		if _, obj := v.(map[string]any); !obj {
			return fmt.Errorf("%s: args %v is not an object of name: value", at, quoteJSON(v))
		}
	}
	if _, ok := stepPriority(raw["order"]); !ok {
		return fmt.Errorf("%s: order %v must be an integer >= 0", at, quoteJSON(raw["order"]))
	}
	return nil
}
