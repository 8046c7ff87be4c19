package fsm

import (
	"fmt"
	"strings"

	"github.com/bmedge/bmedge/protocol"
)

// Markdown renders the transition table as docs/states.md: a diagram and
// the table, both generated from Table() and never edited by hand.
func Markdown() string {
	var b strings.Builder
	b.WriteString("# Node states\n\n")
	b.WriteString("<!-- Generated from coordinator/fsm/states.go by `make states-doc` (go run ./coordinator/fsm/gen). Do not edit. -->\n\n")
	b.WriteString("The node lifecycle is Ironic's provision state machine. Verbs (operator requests, the\n")
	b.WriteString("targets of `PUT /v1/nodes/{node}/states/provision`) are in **bold**; the other events come\n")
	b.WriteString("from the coordinator: `done` (operation finished), `fail` (step error, timeout),\n")
	b.WriteString("`wait` (an in-band step runs or the ramdisk boots), `resume` (the ramdisk answered).\n")
	b.WriteString("A verb from a state not listed for it is refused with HTTP 400 naming the allowed verbs;\n")
	b.WriteString("a node that the coordinator is working on (an -ING state) is locked: HTTP 409.\n")
	b.WriteString("The reserved step `hold` (any step interface, no args) in a manual clean list, in\n")
	b.WriteString("`deploy_steps` (where its priority puts it) or in a service list stops the node in\n")
	b.WriteString("clean hold, deploy hold or service hold (`hold`): unlocked, with no timeout, a running ramdisk\n")
	b.WriteString("kept. **unhold** (API 1.85) goes back to the WAIT state and on with the next step at once;\n")
	b.WriteString("**abort** ends in the failed state (from service hold, back in active).\n")
	b.WriteString("Fast track (docs/deploy.md) adds no state: an inspection or a cleaning ends in its stable\n")
	b.WriteString("state with the ramdisk still running, and the next operation runs in it with no `wait` for a boot.\n\n")
	b.WriteString("```mermaid\nstateDiagram-v2\n")
	ids := map[State]string{}
	for _, s := range AllStates() {
		id := strings.ReplaceAll(strings.ReplaceAll(string(s), " ", "_"), "-", "_")
		ids[s] = id
		fmt.Fprintf(&b, "    %s: %s\n", id, s)
	}
	fmt.Fprintf(&b, "    [*] --> %s\n", ids[Enroll])
	for _, t := range Table() {
		fmt.Fprintf(&b, "    %s --> %s: %s\n", ids[t.From], ids[t.To], t.Event)
	}
	b.WriteString("```\n\n## Transitions\n\n| from | event | to |\n|---|---|---|\n")
	for _, t := range Table() {
		ev := string(t.Event)
		if IsVerb(t.Event) {
			ev = "**" + ev + "**"
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", t.From, ev, t.To)
	}
	b.WriteString("\n## Verbs allowed in each state\n\n")
	b.WriteString("A failed state keeps the target of the operation that failed (`target_provision_state`),\n")
	b.WriteString("as Ironic's do; the other stable states have none. A node can be updated (PATCH) in the\n")
	b.WriteString("states marked so (elsewhere HTTP 409, \"can not be updated while a state transition is in\n")
	b.WriteString("progress\"), and deleted in the states marked so or, in any state, in maintenance. In\n")
	b.WriteString("maintenance `active`, `rebuild`, `rescue` and `unrescue` are refused (HTTP 400); the\n")
	b.WriteString("other verbs start, and the node pauses when it reaches a WAIT state.\n\n")
	b.WriteString("| state | kind | verbs | PATCH | DELETE |\n|---|---|---|---|---|\n")
	yes := func(ok bool) string {
		if ok {
			return "yes"
		}
		return "no"
	}
	for _, s := range AllStates() {
		kind := "transient (locked)"
		switch {
		case IsWait(s):
			kind = "wait"
		case KeepsTarget(s):
			kind = "failed (keeps target)"
		case Stable(s):
			kind = "stable"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", s, kind, verbList(Allowed(s)), yes(UpdateAllowed(s)), yes(DeleteAllowed(s)))
	}
	b.WriteString("\nVerb names as the CLI spells them: `deploy` is the target `active`, `undeploy` is `deleted`.\n")
	b.WriteString("\n## Verbs\n\n")
	b.WriteString("One row per verb (coordinator/fsm/verbtable.go), read by the API (its valid targets and\n")
	b.WriteString("versions), the CLI (its commands, from and to) and the engine (the one check of a request,\n")
	b.WriteString("the capacity check, the start). *API* is the version from which the verb is taken (HTTP 406\n")
	b.WriteString("below); *maintenance* names the operation refused for a node in maintenance (\"starts\": the\n")
	b.WriteString("verb starts and the node pauses at its WAIT state); *ramdisk* says whether the verb boots the\n")
	b.WriteString("ramdisk; *steps* the step list the request carries; *cap* the concurrency cap that limits it.\n\n")
	b.WriteString("| verb | CLI | API | from | phase | steps | maintenance | ramdisk | cap |\n|---|---|---|---|---|---|---|---|---|\n")
	or := func(s, none string) string {
		if s == "" {
			return none
		}
		return s
	}
	for _, v := range builtinVerbs() {
		ramdisk := or(v.RamdiskDoc, "no")
		since := "any"
		if v.Since > 0 {
			since = fmt.Sprintf("1.%d", v.Since)
		}
		steps := "none"
		if v.Steps != StepsNone {
			steps = "`" + string(v.Steps) + "_steps`"
		}
		fmt.Fprintf(&b, "| **%s** | %s | %s | %s | %s | %s | %s | %s | %s |\n", v.Verb, v.CLI, since, v.From(), or(string(v.Phase), "none"),
			steps, or(v.Maintenance, "starts"), ramdisk, or(string(v.Cap), "none"))
	}
	b.WriteString("\n## Phases\n\n")
	b.WriteString("One row per phase of an operation (coordinator/fsm/phases.go). *event type* is its history\n")
	b.WriteString("entries'; *steps* the step list it runs (its running step shows as `clean_step`, `deploy_step`\n")
	b.WriteString("or `service_step`); *site plan* whether those steps may go to the site's edge agent as one\n")
	b.WriteString("plan; *cap* the concurrency cap its nodes count toward; *keeps boot* whether its end leaves the\n")
	b.WriteString("ramdisk's boot alive; *aside* whether it runs beside the lifecycle (no provision move at its\n")
	b.WriteString("end); *fault* whether a failed step sets maintenance with fault `PHASE failure`; *fast track*\n")
	b.WriteString("whether its closing power-off may be skipped to keep the ramdisk.\n\n")
	b.WriteString("| phase | what | event type | steps | site plan | cap | keeps boot | aside | fault | fast track |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, p := range Phases() {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", p.Phase, p.Doc, p.EventType, or(string(p.Steps), "none"),
			yes(p.SitePlan), or(string(p.Cap), "none"), yes(p.KeepsBoot), yes(p.Aside), yes(p.FailMaintenance), yes(p.FastTrack))
	}
	b.WriteString("\n## disable_power_off\n\n")
	b.WriteString("A node with `disable_power_off` (API 1.95) is never powered off (coordinator/fsm/nopoweroff.go):\n")
	b.WriteString("each power-off of an operation's plan is rewritten when its turn comes, as Ironic does\n")
	b.WriteString("instead; `deploy.tear_down_agent` leaves the power on and `deploy.boot_instance` reboots;\n")
	b.WriteString("a power off or soft power off request is Ironic's 409 \"Failed to set node power state to …\";\n")
	b.WriteString("power-state sync records what the BMC reports and never forces it.\n\n")
	b.WriteString("| plan | actions | with disable_power_off |\n|---|---|---|\n")
	iso := &Node{InstanceInfo: map[string]any{BootISOField: "URL"}}
	for _, r := range []struct {
		what string
		plan []Action
	}{
		{"ramdisk deploy: boot of boot_iso", bootISOPlan(iso)},
		{"boot into the instance (unrescue, end of servicing)", bootInstance()},
		{"end of a ramdisk boot (inspection, cleaning, fast track window over)", []Action{endRamdisk()}},
		{"undeploy (direct)", []Action{powerAction(protocol.PowerOff)}},
		{"undeploy (ramdisk deploy)", ejectISOPlan()},
	} {
		rewritten := r.plan
		for i := 0; i < len(rewritten); i++ {
			if isPowerOff(rewritten[i]) {
				rewritten = withoutPowerOff(rewritten, i)
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", r.what, planText(r.plan), planText(rewritten))
	}
	return b.String()
}

// planText names a plan's out-of-band actions for the docs.
func planText(plan []Action) string {
	var w []string
	for _, a := range plan {
		switch {
		case a.Kind == ActOOB && a.Action == protocol.ActionPower:
			w = append(w, protocol.PowerArgsOf(a.Args).State)
		case a.Kind == ActOOB && a.Action == protocol.ActionBootDev:
			w = append(w, "boot device "+protocol.BootDeviceArgsOf(a.Args).Device)
		default:
			w = append(w, string(a.Kind))
		}
	}
	return strings.Join(w, ", ")
}
