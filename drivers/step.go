// Package drivers declares the out-of-band hardware interfaces of a node
// (power, management, boot device and BMC steps) and the step declaration
// type shared by every driver and by the ramdisk's in-band steps. The
// coordinator uses it to know a driver's steps without asking anybody; the
// edge agent uses it to run them. It must never talk to the coordinator.
package drivers

import (
	"fmt"
	"sort"
	"strings"
)

// Interfaces in Ironic's tie-break order: at equal priority a step of an
// earlier interface runs first.
var interfaceRank = map[string]int{
	"vendor": 0, "power": 1, "management": 2, "firmware": 3, "deploy": 4, "bios": 5, "raid": 6,
}

// InterfaceRank returns the tie-break rank of an interface, -1 if unknown.
func InterfaceRank(iface string) int {
	if r, ok := interfaceRank[iface]; ok {
		return r
	}
	return -1
}

// Interfaces lists the known step interfaces in tie-break order.
func Interfaces() []string {
	return []string{"vendor", "power", "management", "firmware", "deploy", "bios", "raid"}
}

// ArgInfo describes one argument of a step.
type ArgInfo struct {
	Description string `json:"description"`
	Required    bool   `json:"required"`
}

// Step declares a clean or deploy step.
type Step struct {
	Interface string `json:"interface"`
	Step      string `json:"step"`
	Priority  int    `json:"priority"`
	Abortable bool   `json:"abortable"`
	// ArgsInfo maps argument name to its description, as Ironic's argsinfo.
	ArgsInfo map[string]ArgInfo `json:"argsinfo,omitempty"`
	// RequiresRamdisk is true for in-band steps, run by the ramdisk agent.
	RequiresRamdisk bool `json:"requires_ramdisk"`
}

// Name is "interface.step", the way operators and logs name a step.
func (s Step) Name() string { return s.Interface + "." + s.Step }

// Sort orders steps for execution: priority descending, then interface rank.
func Sort(steps []Step) {
	sort.SliceStable(steps, func(i, j int) bool {
		if steps[i].Priority != steps[j].Priority {
			return steps[i].Priority > steps[j].Priority
		}
		return InterfaceRank(steps[i].Interface) < InterfaceRank(steps[j].Interface)
	})
}

// CheckSet is the load-time check of a set of step declarations: known
// interfaces, and no two steps of one interface with the same non-zero
// priority (their order would be undefined).
func CheckSet(steps []Step) error {
	seen := map[string]string{}
	names := map[string]bool{}
	for _, s := range steps {
		if InterfaceRank(s.Interface) < 0 {
			return fmt.Errorf("step %s has unknown interface %q; known: %s", s.Name(), s.Interface, strings.Join(Interfaces(), ", "))
		}
		if s.Step == "" {
			return fmt.Errorf("a step of interface %q has no name", s.Interface)
		}
		if names[s.Name()] {
			return fmt.Errorf("step %s is declared twice", s.Name())
		}
		names[s.Name()] = true
		if s.Priority < 0 {
			return fmt.Errorf("step %s has negative priority %d", s.Name(), s.Priority)
		}
		if s.Priority == 0 {
			continue
		}
		key := fmt.Sprintf("%s/%d", s.Interface, s.Priority)
		if other, ok := seen[key]; ok {
			return fmt.Errorf("steps %s and %s of interface %s share priority %d; give one a different priority", other, s.Name(), s.Interface, s.Priority)
		}
		seen[key] = s.Name()
	}
	return nil
}

// Find returns the declared step with this interface and name.
func Find(steps []Step, iface, name string) (Step, bool) {
	for _, s := range steps {
		if s.Interface == iface && s.Step == name {
			return s, true
		}
	}
	return Step{}, false
}

// CheckArgs validates the arguments given for a declared step: every
// required argument present, no unknown argument.
func CheckArgs(decl Step, args map[string]any) error {
	for name, info := range decl.ArgsInfo {
		if _, ok := args[name]; info.Required && !ok {
			return fmt.Errorf("step %s: required argument %q is missing (%s)", decl.Name(), name, info.Description)
		}
	}
	for name := range args {
		if _, ok := decl.ArgsInfo[name]; !ok {
			known := make([]string, 0, len(decl.ArgsInfo))
			for k := range decl.ArgsInfo {
				known = append(known, k)
			}
			sort.Strings(known)
			if len(known) == 0 {
				return fmt.Errorf("step %s: unknown argument %q; this step takes no arguments", decl.Name(), name)
			}
			return fmt.Errorf("step %s: unknown argument %q; it takes %s", decl.Name(), name, strings.Join(known, ", "))
		}
	}
	return nil
}
