package fsm

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/bmedge/bmedge/drivers"
)

// This file holds what deploy templates and runbooks do to a verb: the
// deploy templates that a deploy's instance_info traits name add their
// steps to the driver's (Ironic's conductor/steps.py), and a runbook runs
// on a node only if the node has a trait of its name.

// matchingTemplates are the deploy templates among given whose name is
// one of the traits the node's instance_info asks for, by name.
func matchingTemplates(n *Node, given []DeployTemplate) []DeployTemplate {
	want := InstanceTraits(n)
	var out []DeployTemplate
	for _, t := range given {
		if slices.Contains(want, t.Name) && !slices.ContainsFunc(out, func(o DeployTemplate) bool { return o.Name == t.Name }) {
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// templateStepObjects are the steps of templates as the deploy plan
// keeps them (as user deploy steps are kept, with the template's name).
func templateStepObjects(templates []DeployTemplate) []map[string]any {
	var out []map[string]any
	for _, t := range templates {
		for _, s := range t.Steps {
			args := s.Args
			if args == nil {
				args = map[string]any{}
			}
			out = append(out, map[string]any{"interface": s.Interface, "step": s.Step, "args": args, "priority": s.Priority, "template": t.Name})
		}
	}
	return out
}

func templateNames(templates []DeployTemplate) string {
	names := make([]string, 0, len(templates))
	for _, t := range templates {
		names = append(names, t.Name)
	}
	return strings.Join(names, ",")
}

// checkTemplates checks a deploy's traits and deploy templates before it
// starts, as Ironic's validate_instance_info_traits and
// validate_user_deploy_steps_and_templates (skip_missing): instance_info
// traits a list of strings, each a trait of the node; the matching
// templates' steps not twice the same step, and, for the steps the node
// is known to have, no unexpected or missing argument and the core step
// left alone. Steps the node's ramdisk may offer are checked when the
// plan is made.
func (m *Machine) checkTemplates(n *Node, req VerbRequest) error {
	if raw, ok := n.InstanceInfo["traits"]; ok && raw != nil && InstanceTraits(n) == nil {
		if l, isList := raw.([]any); !isList || len(l) > 0 {
			return fmt.Errorf("Error parsing traits from Node %s instance_info field. A list of strings is expected.", n.UUID)
		}
	}
	var missing []string
	for _, t := range InstanceTraits(n) {
		if !slices.Contains(n.Traits, t) {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("Cannot specify instance traits that are not also set on the node. Node %s is missing traits %s; add them with 'node trait add %s TRAIT' or remove them from instance_info/traits",
			n.UUID, strings.Join(missing, ", "), n.Ident())
	}
	templates := matchingTemplates(n, req.Templates)
	if len(templates) == 0 {
		return nil
	}
	prefix := fmt.Sprintf("Validation of deploy steps from deploy templates matching this node's instance traits failed. Matching deploy templates: %s. Errors: ", templateNames(templates))
	steps := templateStepObjects(templates)
	seen := map[string]int{}
	var dups []string
	for _, s := range steps {
		id := s["interface"].(string) + "." + s["step"].(string)
		if seen[id]++; seen[id] == 2 {
			dups = append(dups, id)
		}
	}
	if len(dups) > 0 {
		return fmt.Errorf("%sdeploy steps from all deploy templates matching this node's instance traits cannot have the same interface and step. Duplicate deploy steps for %s", prefix, strings.Join(dups, ", "))
	}
	known, err := m.knownDeploySteps(n)
	if err != nil {
		return err
	}
	for _, s := range steps {
		decl, ok := drivers.Find(known, s["interface"].(string), s["step"].(string))
		if !ok {
			continue
		}
		if err := checkTemplateStep(n, decl, s); err != nil {
			return fmt.Errorf("%s%v", prefix, err)
		}
	}
	return nil
}

// checkTemplateStep checks a template step against the node's step decl:
// not the core step, no unexpected argument, and every required one when
// the step is enabled (priority > 0).
func checkTemplateStep(n *Node, decl drivers.Step, s map[string]any) error {
	prio, _ := stepPriority(s["priority"])
	if decl.Name() == CoreDeployStep {
		return fmt.Errorf("deploy template %s has the core deploy step %s (priority %d): it writes the image, and can be neither re-prioritised nor disabled; remove it from the template", s["template"], CoreDeployStep, prio)
	}
	args, _ := s["args"].(map[string]any)
	var unexpected, missing []string
	for a := range args {
		if _, ok := decl.ArgsInfo[a]; !ok {
			unexpected = append(unexpected, a)
		}
	}
	if prio > 0 {
		for a, info := range decl.ArgsInfo {
			if _, ok := args[a]; info.Required && !ok {
				missing = append(missing, fmt.Sprintf("%s (%s)", a, info.Description))
			}
		}
	}
	sort.Strings(unexpected)
	sort.Strings(missing)
	if len(unexpected) > 0 {
		return fmt.Errorf("deploy step %s of deploy template %s has these unexpected arguments for node %s: %s", decl.Name(), s["template"], n.Ident(), strings.Join(unexpected, ", "))
	}
	if len(missing) > 0 {
		return fmt.Errorf("deploy step %s of deploy template %s is missing these required arguments: %s", decl.Name(), s["template"], strings.Join(missing, ", "))
	}
	return nil
}

// withTemplateSteps adds the deploy templates' steps to the user's deploy
// steps when the deploy plan is made, once the ramdisk has said which
// steps it has (Ironic's _get_all_deployment_steps): a user step
// overrides the template step of the same interface and step, and both
// override the driver's step of that name (a priority of 0 disables it).
// A template step that neither the driver nor the ramdisk offers fails
// the deploy, as Ironic's validation after the ramdisk boots does. The
// template steps come first: the plan's loop treats them as user steps.
func withTemplateSteps(n *Node, all []drivers.Step, tmpl, user []map[string]any) ([]map[string]any, error) {
	if len(tmpl) == 0 {
		return user, nil
	}
	var out []map[string]any
	for _, s := range tmpl {
		iface, _ := s["interface"].(string)
		name, _ := s["step"].(string)
		decl, ok := drivers.Find(all, iface, name)
		if !ok {
			return nil, fmt.Errorf("Deploy of node %s failed: deploy template %v has the deploy step %s.%s, which neither driver %s nor the node's ramdisk offers", n.Ident(), s["template"], iface, name, n.Driver)
		}
		if err := checkTemplateStep(n, decl, s); err != nil {
			return nil, fmt.Errorf("Deploy of node %s failed: %v", n.Ident(), err)
		}
		if slices.ContainsFunc(user, func(u map[string]any) bool { return u["interface"] == iface && u["step"] == name }) {
			continue
		}
		c := map[string]any{"interface": iface, "step": name, "priority": s["priority"], "args": s["args"]}
		if p, _ := stepPriority(s["priority"]); p == 0 {
			// A disabled step does not run: its arguments are not checked.
			delete(c, "args")
		}
		out = append(out, c)
	}
	return append(out, user...), nil
}

// checkRunbook checks a clean or service by runbook (req.Runbook, its
// steps in CleanSteps or ServiceSteps) as Ironic 1.92's _handle_runbook:
// only those two verbs, and only on a node that has a trait of the
// runbook's name; with the runbook's disable_ramdisk, no step that needs
// the ramdisk.
func (m *Machine) checkRunbook(n *Node, req VerbRequest) *Refusal {
	if req.Runbook == "" && !req.DisableRamdisk {
		return nil
	}
	if req.Verb != Clean && req.Verb != Service {
		return refuse(Invalid, "\"runbooks\" is only valid when setting target provision state to any of ['clean', 'service'], not %q", req.Verb)
	}
	if req.Runbook != "" && !slices.Contains(n.Traits, req.Runbook) {
		return refuse(Invalid, "This runbook has not been approved for use on this node %s. Please ask an administrator to add it to your node traits (node trait add %s %s).", n.UUID, n.Ident(), req.Runbook)
	}
	if !req.DisableRamdisk {
		return nil
	}
	d, err := m.nodeDriver(n)
	if err != nil {
		return refuse(Invalid, "%v", err)
	}
	kind, list := "clean", req.CleanSteps
	if req.Verb == Service {
		kind, list = "service", req.ServiceSteps
	}
	for _, s := range list {
		iface, _ := s["interface"].(string)
		name, _ := s["step"].(string)
		if decl, ok := drivers.Find(d.CleanSteps, iface, name); ok && !decl.RequiresRamdisk {
			continue
		}
		by := "disable_ramdisk is set"
		if req.Runbook != "" {
			by = "runbook " + req.Runbook + " has disable_ramdisk set"
		}
		return refuse(Invalid, "%s step %s.%s requires booting a ramdisk, and %s; only out-of-band steps of driver %s can run with it",
			kind, iface, name, by, n.Driver)
	}
	return nil
}
