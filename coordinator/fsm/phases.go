package fsm

import (
	"fmt"
	"sync"
	"time"
)

// Phase is the kind of operation a node runs (Operation.Phase): each verb
// starts one, and power and boot device changes run their own. Its
// attributes are a row of Phases(); no other code compares phases.
type Phase string

// Phases of an operation, spelled as they are stored.
const (
	PhaseVerify       Phase = "verify"
	PhaseInspect      Phase = "inspect"
	PhaseClean        Phase = "clean"
	PhaseDeploy       Phase = "deploy"
	PhaseRescue       Phase = "rescue"
	PhaseUnrescue     Phase = "unrescue"
	PhaseDelete       Phase = "delete"
	PhaseService      Phase = "service"
	PhaseServiceAbort Phase = "service_abort"
	PhasePower        Phase = "power"
	PhaseBootDevice   Phase = "boot_device"
	PhaseVMedia       Phase = "vmedia"
)

// StepKind names the step list a phase runs and the node field that shows
// its running step: clean_step, deploy_step or service_step.
type StepKind string

// Step lists.
const (
	StepsNone    StepKind = ""
	StepsClean   StepKind = "clean"
	StepsDeploy  StepKind = "deploy"
	StepsService StepKind = "service"
)

// Cap names a concurrency cap (Ironic's max_concurrent_clean and
// max_concurrent_deploy): the nodes of the phases that count toward it
// are limited.
type Cap string

// Concurrency caps.
const (
	CapNone   Cap = ""
	CapClean  Cap = "max_concurrent_clean"
	CapDeploy Cap = "max_concurrent_deploy"
)

// PhaseInfo is one phase's row.
type PhaseInfo struct {
	Phase Phase
	// EventType is the event_type of the phase's history entries.
	EventType string
	// Steps is the step list the phase runs ("" for none).
	Steps StepKind
	// SitePlan: its steps may go to the site's edge agent as one plan
	// (siteplan.go).
	SitePlan bool
	// Cap is the concurrency cap the phase's nodes count toward.
	Cap Cap
	// KeepsBoot: its end does not end the ramdisk's boot (a rescued node
	// keeps its ramdisk until unrescue powers it off; setting the boot
	// device ends no boot, nor does its failure).
	KeepsBoot bool
	// Aside: the phase runs beside the lifecycle: it moves no provision
	// state at its end or failure (power, boot device, service abort).
	Aside bool
	// FailMaintenance: a step that fails leaves the node in maintenance
	// with fault "<phase> failure" (Ironic's cleaning and servicing error
	// handlers).
	FailMaintenance bool
	// FastTrack: the phase's closing power-off may be skipped to keep
	// the ramdisk for the next operation (fasttrack.go).
	FastTrack bool
	// Finish, when set, is what the phase does when its plan ends, before
	// the node moves to the operation's target; it tells whether another
	// operation follows instead (undeploy's cleaning).
	Finish func(m *Machine, n *Node, op *Operation, now time.Time, out *Output) (goesOn bool)
	// Doc says what the phase does, for docs/states.md.
	Doc string
}

// Phases is the phase table.
func Phases() []PhaseInfo {
	return []PhaseInfo{
		{Phase: PhaseVerify, EventType: "verification", Doc: "manage from enroll: the BMC's credentials are checked"},
		{Phase: PhaseInspect, EventType: "inspection", FastTrack: true, Finish: finishInspect, Doc: "inspect: the ramdisk (or the BMC) reads the hardware"},
		{Phase: PhaseClean, EventType: "cleaning", Steps: StepsClean, SitePlan: true, Cap: CapClean, FailMaintenance: true, FastTrack: true,
			Doc: "provide, clean, and the cleaning after undeploy"},
		{Phase: PhaseDeploy, EventType: "deployment", Steps: StepsDeploy, SitePlan: true, Cap: CapDeploy, Doc: "deploy and rebuild"},
		{Phase: PhaseRescue, EventType: "rescue", KeepsBoot: true, Doc: "rescue: the rescue ramdisk boots and stays up"},
		{Phase: PhaseUnrescue, EventType: "unrescue", Doc: "unrescue: the instance boots again"},
		{Phase: PhaseDelete, EventType: "delete", Cap: CapClean, Finish: finishDelete, Doc: "undeploy: the instance is torn down, then cleaned"},
		{Phase: PhaseService, EventType: "servicing", Steps: StepsService, SitePlan: true, FailMaintenance: true, Doc: "service: steps on an active node, its instance kept"},
		{Phase: PhaseServiceAbort, EventType: "servicing", Aside: true, Doc: "abort from service failed: the instance boots again"},
		{Phase: PhasePower, EventType: "power", Aside: true, Doc: "a power change outside any provision operation"},
		{Phase: PhaseBootDevice, EventType: "boot_device", KeepsBoot: true, Aside: true, Doc: "a boot device change"},
		{Phase: PhaseVMedia, EventType: "vmedia", KeepsBoot: true, Aside: true, Doc: "an operator's virtual media attach or detach (API 1.89)"},
	}
}

var (
	phaseOnce sync.Once
	phaseMap  map[Phase]PhaseInfo
)

// phaseRows is Phases() by phase, built once (no package variable's
// initializer may reach the machine's code, which the rows name).
func phaseRows() map[Phase]PhaseInfo {
	phaseOnce.Do(func() {
		phaseMap = map[Phase]PhaseInfo{}
		for _, r := range Phases() {
			phaseMap[r.Phase] = r
		}
	})
	return phaseMap
}

// Info is the phase's row; a phase not in the table (a record from a
// newer coordinator) has only its name as event type.
func (p Phase) Info() PhaseInfo {
	if r, ok := phaseRows()[p]; ok {
		return r
	}
	return PhaseInfo{Phase: p, EventType: string(p)}
}

// Limits are the concurrency caps' values.
type Limits struct {
	MaxConcurrentClean, MaxConcurrentDeploy int
}

func (l Limits) of(c Cap) int {
	switch c {
	case CapClean:
		return l.MaxConcurrentClean
	case CapDeploy:
		return l.MaxConcurrentDeploy
	}
	return 0
}

// Capacity says whether verb v may start now (Metal3's ensureCapacity):
// count gives the nodes in each phase. It is Ironic's concurrent action
// limit; a verb whose row names no cap (provide) is never limited. The
// refusal is the message of Ironic's ConcurrentActionLimit, an HTTP 500.
func Capacity(v Event, count func(Phase) int, l Limits) (refusal string, ok bool) {
	row, known := VerbInfo(v)
	if !known || row.Cap == CapNone {
		return "", true
	}
	busy := 0
	for _, p := range Phases() {
		if p.Cap == row.Cap {
			busy += count(p.Phase)
		}
	}
	max := l.of(row.Cap)
	if busy < max {
		return "", true
	}
	noun := map[Cap]string{CapClean: "cleaning", CapDeploy: "deploying"}[row.Cap]
	return fmt.Sprintf("Unable to process request at this time. The concurrent action limit for %s has been reached. Please contact your administrator and try again later. (%d nodes are %s: %s)",
		row.CapAction, max, noun, row.Cap), false
}
