package fsm

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/bmedge/bmedge/lib/shacrypt"
	"github.com/bmedge/bmedge/protocol"
)

// VerbSpec is one operator verb's row: everything the API, the CLI, the
// engine and the machine know of a verb is a field here.
type VerbSpec struct {
	Verb Event
	// Moves are the verb's rows of the transition table when they are
	// not listed in Table() itself (the verbs of Ironic's machine are,
	// in lifecycle order): Table() ends with them.
	Moves []Transition
	// Since is the API minor version from which Ironic takes the verb
	// (its MIN_VERB_VERSIONS); below it the request is refused with 406.
	Since int

	// CLI is the command's name (`node CLI NODE`); Short its one-line
	// help, CLIArgs the flags it needs, To where it goes, FromNotes a
	// word on some of the states it starts from, and Long more prose.
	// The CLI's help and docs/cli.md are made from these.
	CLI       string
	Short     string
	CLIArgs   string
	FromNotes map[State]string
	To        string
	Long      string

	// Phase is the phase of the operation it starts ("" when it starts
	// none: a direct move, unhold, abort).
	Phase Phase
	// Steps is the step list the request carries (clean_steps,
	// deploy_steps, service_steps), "" for none.
	Steps StepKind
	// Maintenance names, in Ironic's words, the operation refused for a
	// node in maintenance; "" when the verb starts in maintenance (as
	// Ironic's allow_provisioning_in_maintenance).
	Maintenance string
	// Ramdisk tells whether the verb always boots the ramdisk on node n;
	// RamdiskDoc says when, for docs/states.md ("" for never).
	Ramdisk    func(m *Machine, n *Node) bool
	RamdiskDoc string
	// MayBootRamdisk: the verb boots the ramdisk when its list has an
	// in-band step (a manual clean): fast track's settings are checked.
	MayBootRamdisk bool
	// Cap is the concurrency cap that limits it; CapAction names it in
	// the refusal.
	Cap       Cap
	CapAction string
	// Precheck and Check refuse the request for the verb's own reasons:
	// Precheck before the check of the driver's ramdisk boot (for what
	// decides whether the ramdisk boots), Check after every common
	// check; nil checks nothing more.
	Precheck func(m *Machine, n *Node, req VerbRequest) *Refusal
	Check    func(m *Machine, n *Node, req VerbRequest) *Refusal
	// Start starts the operation on a node the checks allowed.
	Start func(m *Machine, n *Node, req VerbRequest, now time.Time, out *Output)
}

func never(*Machine, *Node) bool  { return false }
func always(*Machine, *Node) bool { return true }

// verbSpecs is the verb table, in the order of the API's valid targets.
func verbSpecs() []VerbSpec {
	return []VerbSpec{
		{Verb: Manage, Since: 4, CLI: "manage", Short: "Verify a node's BMC and make it manageable",
			FromNotes: map[State]string{Enroll: "verifies the BMC"}, To: "manageable",
			Long:  "From enroll, manage verifies the BMC with the driver_info: a BMC that refuses the credentials\nsends the node back to enroll with the BMC's answer in last_error.",
			Phase: PhaseVerify, Ramdisk: never, Start: startManage},
		{Verb: Inspect, RamdiskDoc: "yes (no when the BMC inspects)", Since: 6, CLI: "inspect", Short: "Boot the ramdisk and fill the node's properties from its hardware",
			To:       "manageable, properties from the inventory",
			Long:     "The ramdisk boots and reports the hardware inventory ('node inventory NODE');\nproperties such as cpus, memory_mb and local_gb are filled from it.",
			Phase:    PhaseInspect,
			Ramdisk:  func(m *Machine, n *Node) bool { return !m.inspectsOOB(n) },
			Precheck: checkInspect, Start: startInspect},
		{Verb: Clean, RamdiskDoc: "for an in-band step", Since: 15, CLI: "clean", Short: "Run manual clean steps on a manageable node", CLIArgs: " --clean-steps FILE|-",
			To: "manageable",
			Long: `A clean steps file is Ironic's list: [{"interface": "deploy", "step": "erase_devices_metadata",
"args": {}}], run in order. Every step and argument is checked before anything runs; a bad
list leaves the node in clean failed with a last_error that names the step and the argument.
The reserved step {"interface": "deploy", "step": "hold"} stops the node there in clean hold
(its ramdisk kept running, no timeout) until 'node unhold NODE' or 'node abort NODE'.`,
			Phase: PhaseClean, Steps: StepsClean, Ramdisk: never, MayBootRamdisk: true, Cap: CapClean, CapAction: "cleaning",
			Check: checkClean,
			Start: func(m *Machine, n *Node, req VerbRequest, now time.Time, out *Output) {
				m.startManualClean(n, req.CleanSteps, now, out)
			}},
		{Verb: Provide, RamdiskDoc: "with automated cleaning", Since: 4, CLI: "provide", Short: "Make a node available, through automated cleaning",
			To:      "available (automated cleaning)",
			Long:    "Automated cleaning runs the clean steps of priority above 0 ('node steps NODE --min-priority 1')\nunless serve runs with --automated-clean=false. A retired node cannot be provided (409).",
			Phase:   PhaseClean,
			Ramdisk: func(m *Machine, n *Node) bool { return m.autoClean(n) && !m.fakeDeploy(n) },
			Check: func(m *Machine, n *Node, req VerbRequest) *Refusal {
				if n.Retired {
					return refuse(Conflict, "cannot provide node %s: node is retired (reason %q); unset retired first", n.Ident(), n.RetiredReason)
				}
				return nil
			},
			Start: func(m *Machine, n *Node, req VerbRequest, now time.Time, out *Output) {
				m.start(n, req.Verb, retiredTarget(n), PhaseClean, m.autoCleanPlan(n), now, out)
			}},
		{Verb: Deploy, RamdiskDoc: "yes (no for the fake and ramdisk deploy interfaces)", CLI: "deploy", Short: "Write the image of instance_info to a node and boot it",
			FromNotes: map[State]string{Available: "needs instance_info/image_source"}, To: "active",
			Long:  "Set the image first: node set NODE --instance-info image_source=URL --instance-info image_checksum=sha256:HEX.",
			Phase: PhaseDeploy, Steps: StepsDeploy, Ramdisk: deployBootsRamdisk, Maintenance: "provisioning",
			Cap: CapDeploy, CapAction: "provisioning", Check: checkDeploy, Start: startDeploy},
		{Verb: Rebuild, RamdiskDoc: "yes (no for the fake and ramdisk deploy interfaces)", CLI: "rebuild", Short: "Write the image again on a deployed node", To: "active",
			Phase: PhaseDeploy, Steps: StepsDeploy, Ramdisk: deployBootsRamdisk, Maintenance: "provisioning",
			Cap: CapDeploy, CapAction: "provisioning", Check: checkDeploy, Start: startDeploy},
		{Verb: RescueV, RamdiskDoc: "yes", Since: 38, CLI: "rescue", Short: "Boot a deployed node into the rescue ramdisk", CLIArgs: " --rescue-password PW",
			To: "rescue", Phase: PhaseRescue, Ramdisk: always, Maintenance: "rescuing",
			Check: func(m *Machine, n *Node, req VerbRequest) *Refusal {
				if req.HashedRescuePassword == "" {
					return refuse(Invalid, "A non-empty rescue_password is required to rescue node %s", n.Ident())
				}
				if err := shacrypt.Check(req.HashedRescuePassword); err != nil {
					return refuse(Invalid, "Cannot rescue node %s: hashed_rescue_password: %v", n.Ident(), err)
				}
				return nil
			},
			Start: startRescue},
		{Verb: Unrescue, Since: 38, CLI: "unrescue", Short: "Boot a rescued node back into its instance", To: "active",
			Phase: PhaseUnrescue, Ramdisk: never, Maintenance: "unrescuing",
			Start: func(m *Machine, n *Node, req VerbRequest, now time.Time, out *Output) {
				plan := []Action{powerAction(protocol.PowerOff), bootDevAction(protocol.BootDisk), powerAction(protocol.PowerOn)}
				m.start(n, req.Verb, Active, PhaseUnrescue, plan, now, out)
			}},
		{Verb: Undeploy, CLI: "undeploy", Short: "Take a node's instance away and clean it",
			To: "available (manageable if retired), through cleaning", Phase: PhaseDelete, Ramdisk: never,
			Cap: CapClean, CapAction: "unprovisioning", Start: startUndeploy},
		{Verb: Abort, Since: 13, CLI: "abort", Short: "Stop a node's operation where it waits",
			To: "the matching failed state (active from service wait, service hold and service failed)",
			Long: `Abort during an abortable step fails the node at once ("aborted by request during step X");
during a step that cannot be aborted (write_image) the node fails as soon as the step ends.
Abort in service wait, as Ironic's, fails the service and boots the node back into its
instance, in active with last_error saying it was aborted.`,
			Ramdisk: never,
			Check: func(m *Machine, n *Node, req VerbRequest) *Refusal {
				if n.ProvisionState == ServiceFailed && n.Maintenance {
					// Ironic's _do_abort, word for word.
					return refuse(Invalid, "Can not abort service on node %q while it is in maintenance mode. Please remove the node from maintenance prior to issuing the request to abort the service operation.", n.UUID)
				}
				return nil
			},
			Start: startAbort},
		{Verb: Service, Since: 87, CLI: "service", Short: "Run service steps on a deployed node, keeping its instance", CLIArgs: " --service-steps FILE|-",
			FromNotes: map[State]string{ServiceFailed: "maintenance unset"}, To: "active",
			Long: `Changes a running server without re-imaging it (Ironic API 1.87). A service steps file is
Ironic's list, run in order: [{"interface": "bios", "step": "apply_configuration",
"args": {"settings": [{"name": "ProcTurboMode", "value": "Disabled"}]}}]. Every step and
argument is checked before anything runs; a bad list leaves the node in service failed with a
last_error that names the step and the argument. Out-of-band steps (bios, management) run
through the site's edge agent with no reboot; an in-band step boots the ramdisk (service wait)
and then the instance again. Steps that erase or rewrite the instance's disk (erase_devices,
erase_devices_metadata, write_image) are refused (400). A step that fails leaves the node in
service failed and in maintenance: unset maintenance, then service again, rescue, undeploy or
abort (back to active). The step {"interface": "deploy", "step": "hold"} stops the node in
service hold until 'node unhold NODE', 'node abort NODE' (back to active) or service again.`,
			// Ironic's do_node_service: NodeInMaintenance.
			Phase: PhaseService, Steps: StepsService, Ramdisk: never, Maintenance: "service",
			Check: func(m *Machine, n *Node, req VerbRequest) *Refusal {
				if err := CheckServiceSteps(n.Ident(), req.ServiceSteps); err != nil {
					return refuse(Invalid, "%v", err)
				}
				if err := m.refusedSteps(n, "service", req.ServiceSteps); err != nil {
					return refuse(Invalid, "%v", err)
				}
				return nil
			},
			Start: func(m *Machine, n *Node, req VerbRequest, now time.Time, out *Output) {
				m.startService(n, req.ServiceSteps, now, out)
			}},
		{Verb: Unhold, Since: 85, CLI: "unhold", Short: "Release a node that a hold step stopped, going on with its next step",
			To: "where the held operation was going",
			Long: `A hold step ({"interface": "deploy", "step": "hold"} in clean steps, service steps or deploy
steps) stops a node in clean hold, deploy hold or service hold: unlocked, with no timeout,
its ramdisk (if booted) kept running, so that the operator can look at it. unhold (Ironic API
1.85) takes it back to its WAIT state and on with the step after the hold; abort stops the
operation instead. With --wait, unhold follows the node until it rests, or until another
hold step stops it.`,
			Ramdisk: never,
			Start: func(m *Machine, n *Node, req VerbRequest, now time.Time, out *Output) {
				m.unhold(n, now, out)
			}},
	}
}

// verbReg holds the verbs a test registered (registerVerb).
type verbReg struct {
	mu    sync.RWMutex
	extra []VerbSpec
}

var verbsExtra verbReg

var (
	verbsOnce sync.Once
	verbRows  []VerbSpec
)

// builtinVerbs is verbSpecs() built once (no package variable's
// initializer may reach the machine's code, which reads the table).
func builtinVerbs() []VerbSpec {
	verbsOnce.Do(func() { verbRows = verbSpecs() })
	return verbRows
}

// VerbSpecs returns the verb table, in the order of the API's valid targets.
func VerbSpecs() []VerbSpec {
	verbsExtra.mu.RLock()
	defer verbsExtra.mu.RUnlock()
	return append(slices.Clone(builtinVerbs()), verbsExtra.extra...)
}

// VerbInfo returns verb v's row.
func VerbInfo(v Event) (VerbSpec, bool) {
	for _, s := range builtinVerbs() {
		if s.Verb == v {
			return s, true
		}
	}
	verbsExtra.mu.RLock()
	defer verbsExtra.mu.RUnlock()
	for _, s := range verbsExtra.extra {
		if s.Verb == v {
			return s, true
		}
	}
	return VerbSpec{}, false
}

// VerbByName returns the row of the API target or CLI name v.
func VerbByName(v string) (VerbSpec, bool) {
	for _, s := range VerbSpecs() {
		if string(s.Verb) == v || s.CLI == v {
			return s, true
		}
	}
	return VerbSpec{}, false
}

// VerbTargets is the API's valid targets, "manage, inspect, ...".
func VerbTargets() string { return verbList(Verbs()) }

// From returns the states an operator starts the verb from, in table
// order, each with its note ("enroll (verifies the BMC)"), for the CLI:
// the states of its moves where a node rests unlocked (stable, wait or
// hold; the move from deleting to cleaning is the coordinator's).
func (s VerbSpec) From() string {
	var out []string
	seen := map[State]bool{}
	for _, t := range table() {
		r := stateRows()[t.From]
		if t.Event != s.Verb || seen[t.From] || !(r.Stable || r.Wait || r.Hold) {
			continue
		}
		seen[t.From] = true
		w := string(t.From)
		if note := s.FromNotes[t.From]; note != "" {
			w += " (" + note + ")"
		}
		out = append(out, w)
	}
	return strings.Join(out, ", ")
}

// registerVerb adds a verb row, with its Moves, to the tables: the
// recipe's test ("Adding a verb" in docs/architecture.md) proves with it
// that a row is all a verb needs. It returns the undo.
func registerVerb(s VerbSpec) (undo func()) {
	verbsExtra.mu.Lock()
	verbsExtra.extra = append(verbsExtra.extra, s)
	verbsExtra.mu.Unlock()
	return func() {
		verbsExtra.mu.Lock()
		verbsExtra.extra = slices.DeleteFunc(verbsExtra.extra, func(x VerbSpec) bool { return x.Verb == s.Verb })
		verbsExtra.mu.Unlock()
	}
}

func retiredTarget(n *Node) State {
	if n.Retired {
		return Manageable
	}
	return Available
}

func deployBootsRamdisk(m *Machine, n *Node) bool { return !m.fakeDeploy(n) && !m.ramdiskDeploy(n) }
