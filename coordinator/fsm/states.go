// Package fsm is the node lifecycle of the coordinator: Ironic's provision
// state machine as a transition table, and the pure functions that move a
// node through its operations (verbs, step results, heartbeats, timeouts).
// It does no I/O and reads no clock: the engine passes the time in, stores
// the node it gets back and sends the messages it is handed.
package fsm

import (
	"slices"
	"sync"
)

// State is a provision state, spelled as Ironic spells it on the API.
type State string

// Provision states. Stable states are where a node rests; every other
// state is transient and has a target_provision_state.
const (
	// Enroll: registered, BMC not yet verified. manage → Verifying.
	Enroll State = "enroll"
	// Verifying: checking the BMC credentials. done → Manageable, fail → Enroll.
	Verifying State = "verifying"
	// Manageable: verified, owned by the operator. inspect, clean, provide.
	Manageable State = "manageable"
	// Inspecting: booting the ramdisk to read hardware. wait → InspectWait.
	Inspecting State = "inspecting"
	// InspectWait: waiting for the ramdisk's inventory. resume → Inspecting.
	InspectWait State = "inspect wait"
	// InspectFailed: inspection failed; inspect again or manage.
	InspectFailed State = "inspect failed"
	// Cleaning: running clean steps out of band or starting an in-band one.
	Cleaning State = "cleaning"
	// CleanWait: an in-band clean step runs on the node, or its ramdisk boots.
	CleanWait State = "clean wait"
	// CleanHold: a hold step stopped the cleaning until the operator's
	// unhold (API 1.85) or abort.
	CleanHold State = "clean hold"
	// CleanFailed: a clean step failed, timed out or was aborted.
	CleanFailed State = "clean failed"
	// Available: clean, ready to deploy.
	Available State = "available"
	// Deploying: running deploy steps. wait → DeployWait.
	Deploying State = "deploying"
	// DeployWait: an in-band deploy step runs, or the ramdisk boots.
	DeployWait State = "wait call-back"
	// DeployHold: a hold step stopped the deploy until unhold or abort.
	DeployHold State = "deploy hold"
	// DeployFailed: the deploy failed; rebuild, redeploy or undeploy.
	DeployFailed State = "deploy failed"
	// Active: the instance runs.
	Active State = "active"
	// Deleting: tearing the instance down, then cleaning.
	Deleting State = "deleting"
	// Error: tearing down failed.
	Error State = "error"
	// Rescuing: booting the rescue ramdisk. wait → RescueWait.
	Rescuing State = "rescuing"
	// RescueWait: waiting for the rescue ramdisk to finish its setup.
	RescueWait State = "rescue wait"
	// RescueFailed: rescue failed; rescue, unrescue or undeploy.
	RescueFailed State = "rescue failed"
	// Rescue: the rescue ramdisk runs and the operator can log in.
	Rescue State = "rescue"
	// Unrescuing: booting the instance again. done → Active.
	Unrescuing State = "unrescuing"
	// UnrescueFailed: unrescue failed.
	UnrescueFailed State = "unrescue failed"
	// Servicing: running service steps on an active node (API 1.87).
	Servicing State = "servicing"
	// ServiceWait: an in-band service step runs, or the ramdisk boots.
	ServiceWait State = "service wait"
	// ServiceHold: a hold step stopped the servicing until unhold, abort
	// (back to active) or service with new steps.
	ServiceHold State = "service hold"
	// ServiceFailed: a service step failed, timed out or was aborted;
	// service again, rescue, abort (back to active) or undeploy.
	ServiceFailed State = "service failed"
)

// AllStates lists every state, stable ones first in lifecycle order
// (the order of States()).
func AllStates() []State {
	var out []State
	for _, r := range States() {
		out = append(out, r.State)
	}
	return out
}

// Event moves a node along the table. Verbs come from operators (their
// names are the API's provision targets); the rest come from the engine.
type Event string

// Operator verbs, named as the targets of PUT /v1/nodes/{node}/states/provision.
const (
	Manage   Event = "manage"
	Inspect  Event = "inspect"
	Clean    Event = "clean"
	Provide  Event = "provide"
	Deploy   Event = "active"
	Rebuild  Event = "rebuild"
	RescueV  Event = "rescue"
	Unrescue Event = "unrescue"
	Undeploy Event = "deleted"
	Abort    Event = "abort"
	Service  Event = "service"
	// Unhold (API 1.85) releases a node from a hold state (clean hold,
	// deploy hold, service hold): its operation goes on with the step
	// after the hold step. Elsewhere it is refused, as Ironic refuses it.
	Unhold Event = "unhold"
)

// Internal events.
const (
	Done   Event = "done"   // the operation finished
	Fail   Event = "fail"   // the operation failed (step error, timeout, abort)
	Wait   Event = "wait"   // an in-band step or the ramdisk boot is awaited
	Resume Event = "resume" // the awaited thing arrived
	Hold   Event = "hold"   // a hold step was reached: the node waits for unhold
)

// HoldStep is the reserved step name that holds a node (Ironic's "hold"
// step, of any step interface): in a manual clean, deploy_steps or a
// service list, the node stops in clean hold, deploy hold or service
// hold until the operator's unhold (the next step runs) or abort.
const HoldStep = "hold"

// Verbs lists the operator verbs, in the order of the verb table.
func Verbs() []Event {
	var out []Event
	for _, s := range VerbSpecs() {
		out = append(out, s.Verb)
	}
	return out
}

// IsVerb tells whether e is an operator verb (a row of the verb table).
func IsVerb(e Event) bool {
	_, ok := VerbInfo(e)
	return ok
}

// Transition is one row of the table.
type Transition struct {
	From  State
	Event Event
	To    State
}

// Table is the single source of truth of the lifecycle: every move a node
// makes is a row here (or of its verb's row, VerbSpec.Moves, which end
// it), docs/states.md is generated from it, and any move not in it is
// refused.
func Table() []Transition {
	rows := []Transition{
		{Enroll, Manage, Verifying},
		{Verifying, Done, Manageable},
		{Verifying, Fail, Enroll},

		{Manageable, Inspect, Inspecting},
		{InspectFailed, Inspect, Inspecting},
		{Inspecting, Wait, InspectWait},
		{InspectWait, Resume, Inspecting},
		{Inspecting, Done, Manageable},
		{Inspecting, Fail, InspectFailed},
		{InspectWait, Fail, InspectFailed},
		{InspectWait, Abort, InspectFailed},
		{InspectFailed, Manage, Manageable},

		{Manageable, Clean, Cleaning},
		{Manageable, Provide, Cleaning},
		{CleanFailed, Provide, Cleaning},
		{CleanFailed, Clean, Cleaning},
		{Cleaning, Wait, CleanWait},
		{CleanWait, Resume, Cleaning},
		{Cleaning, Done, Available},
		{Cleaning, Done, Manageable},
		{Cleaning, Fail, CleanFailed},
		{CleanWait, Fail, CleanFailed},
		{CleanWait, Abort, CleanFailed},
		// Hold (Ironic's state_machine.py): unhold goes back to the WAIT
		// state, from which the operation goes on with its next step.
		{Cleaning, Hold, CleanHold},
		{CleanWait, Hold, CleanHold},
		{CleanHold, Unhold, CleanWait},
		{CleanHold, Abort, CleanFailed},
		{CleanHold, Fail, CleanFailed},
		{CleanFailed, Manage, Manageable},
		{Available, Manage, Manageable},

		{Available, Deploy, Deploying},
		{Active, Rebuild, Deploying},
		{DeployFailed, Rebuild, Deploying},
		{Error, Rebuild, Deploying},
		{Deploying, Wait, DeployWait},
		{DeployWait, Resume, Deploying},
		{Deploying, Done, Active},
		{Deploying, Fail, DeployFailed},
		{DeployWait, Fail, DeployFailed},
		{DeployWait, Abort, DeployFailed},
		{Deploying, Hold, DeployHold},
		{DeployWait, Hold, DeployHold},
		{DeployHold, Unhold, DeployWait},
		{DeployHold, Abort, DeployFailed},
		{DeployHold, Fail, DeployFailed},

		{Active, RescueV, Rescuing},
		{Rescue, RescueV, Rescuing},
		{RescueFailed, RescueV, Rescuing},
		{Rescuing, Wait, RescueWait},
		{RescueWait, Resume, Rescuing},
		{Rescuing, Done, Rescue},
		{Rescuing, Fail, RescueFailed},
		{RescueWait, Fail, RescueFailed},
		{RescueWait, Abort, RescueFailed},

		{Rescue, Unrescue, Unrescuing},
		{UnrescueFailed, Unrescue, Unrescuing},
		{Unrescuing, Done, Active},
		{Unrescuing, Fail, UnrescueFailed},

		{Active, Undeploy, Deleting},
		{Rescue, Undeploy, Deleting},
		{DeployWait, Undeploy, Deleting},
		{DeployFailed, Undeploy, Deleting},
		{Error, Undeploy, Deleting},
		{RescueFailed, Undeploy, Deleting},
		{UnrescueFailed, Undeploy, Deleting},
		{Deleting, Clean, Cleaning},
		{Deleting, Done, Available},
		{Deleting, Done, Manageable},
		{Deleting, Fail, Error},

		// Service (Ironic's state_machine.py).
		{Active, Service, Servicing},
		{ServiceFailed, Service, Servicing},
		{Servicing, Wait, ServiceWait},
		{ServiceWait, Resume, Servicing},
		{Servicing, Done, Active},
		{Servicing, Fail, ServiceFailed},
		{ServiceWait, Fail, ServiceFailed},
		{ServiceWait, Abort, ServiceFailed},
		{ServiceFailed, Abort, Active},
		{ServiceFailed, RescueV, Rescuing},
		{ServiceWait, Undeploy, Deleting},
		{ServiceFailed, Undeploy, Deleting},
		{Servicing, Hold, ServiceHold},
		{ServiceWait, Hold, ServiceHold},
		{ServiceHold, Unhold, ServiceWait},
		{ServiceHold, Abort, ServiceFailed},
		{ServiceHold, Fail, ServiceFailed},
		{ServiceHold, Service, Servicing},
	}
	// Verbs whose row lists their moves (VerbSpec.Moves).
	for _, v := range builtinVerbs() {
		rows = append(rows, v.Moves...)
	}
	return rows
}

// StateInfo is one state's row: every attribute of a state is a field
// here, read by the functions below; no other code lists states by kind.
type StateInfo struct {
	State State
	// Stable: a resting state (no target_provision_state).
	Stable bool
	// KeepsTarget: a failed state, which keeps the target_provision_state
	// of the operation that failed (Ironic's failed states have a target:
	// clean failed → available, or manageable after a manual clean,
	// deploy failed → active, ...). Other stable states have none.
	KeepsTarget bool
	// UpdateAllowed: the node may be updated (PATCH): not while a state
	// transition is in progress, except in the states where Ironic allows
	// it (its UPDATE_ALLOWED_STATES: verifying, inspecting, inspect wait,
	// service hold and the failed states, besides the stable ones).
	UpdateAllowed bool
	// DeleteAllowed: the node may be deleted outside maintenance
	// (Ironic's DELETE_ALLOWED_STATES with available, as
	// allow_deleting_available_nodes defaults). In maintenance a node may
	// be deleted in any state, once it is not locked.
	DeleteAllowed bool
	// Wait: a WAIT state, where the node waits for its ramdisk.
	Wait bool
	// Hold: a hold state, where the node waits for the operator's unhold
	// or abort: unlocked, with no timeout.
	Hold bool
}

// States is the state table, stable states first in lifecycle order.
func States() []StateInfo {
	const (
		stable, keeps, upd, del, wait, hold = true, true, true, true, true, true
		no                                  = false
	)
	return []StateInfo{
		{Enroll, stable, no, upd, del, no, no},
		{Verifying, no, no, upd, no, no, no},
		{Manageable, stable, no, upd, del, no, no},
		{Inspecting, no, no, upd, no, no, no},
		{InspectWait, no, no, upd, no, wait, no},
		{InspectFailed, stable, keeps, upd, no, no, no},
		{Cleaning, no, no, no, no, no, no},
		{CleanWait, no, no, no, no, wait, no},
		{CleanHold, no, no, no, no, no, hold},
		{CleanFailed, stable, keeps, upd, no, no, no},
		{Available, stable, no, upd, del, no, no},
		{Deploying, no, no, no, no, no, no},
		{DeployWait, no, no, no, no, wait, no},
		{DeployHold, no, no, no, no, no, hold},
		{DeployFailed, stable, keeps, upd, no, no, no},
		{Active, stable, no, upd, no, no, no},
		{Deleting, no, no, no, no, no, no},
		{Error, stable, no, upd, no, no, no},
		{Rescuing, no, no, no, no, no, no},
		{RescueWait, no, no, no, no, wait, no},
		{RescueFailed, stable, keeps, upd, no, no, no},
		{Rescue, stable, no, upd, no, no, no},
		{Unrescuing, no, no, no, no, no, no},
		{UnrescueFailed, stable, keeps, upd, no, no, no},
		{Servicing, no, no, no, no, no, no},
		{ServiceWait, no, no, no, no, wait, no},
		{ServiceHold, no, no, upd, no, no, hold},
		{ServiceFailed, stable, keeps, upd, no, no, no},
	}
}

// stateRows is States() by state, built once.
var stateRows = sync.OnceValue(func() map[State]StateInfo {
	out := map[State]StateInfo{}
	for _, r := range States() {
		out[r.State] = r
	}
	return out
})

// Stable tells whether s is a resting state (no target_provision_state).
func Stable(s State) bool { return stateRows()[s].Stable }

// KeepsTarget tells whether s is a failed state, which keeps the
// target_provision_state of the operation that failed.
func KeepsTarget(s State) bool { return stateRows()[s].KeepsTarget }

// UpdateAllowed tells whether a node in s may be updated (PATCH). A state
// not in the table (none is) may be.
func UpdateAllowed(s State) bool {
	r, ok := stateRows()[s]
	return !ok || r.UpdateAllowed
}

// DeleteAllowed tells whether a node in s may be deleted outside
// maintenance.
func DeleteAllowed(s State) bool { return stateRows()[s].DeleteAllowed }

// IsWait tells whether s is a WAIT state, where the node waits for its ramdisk.
func IsWait(s State) bool { return stateRows()[s].Wait }

// IsHold tells whether s is a hold state, where the node waits for the
// operator's unhold or abort: unlocked, with no timeout.
func IsHold(s State) bool { return stateRows()[s].Hold }

var (
	tableOnce sync.Once
	tableRows []Transition
)

// builtinTable is Table() built once: Next runs for every message and
// verb. Nothing changes it.
func builtinTable() []Transition {
	tableOnce.Do(func() { tableRows = Table() })
	return tableRows
}

// table is Table() with the moves of the verbs a test registered.
func table() []Transition {
	verbsExtra.mu.RLock()
	defer verbsExtra.mu.RUnlock()
	if len(verbsExtra.extra) == 0 {
		return builtinTable()
	}
	out := slices.Clone(builtinTable())
	for _, v := range verbsExtra.extra {
		out = append(out, v.Moves...)
	}
	return out
}

// Allowed returns the verbs allowed from state s, in table order.
func Allowed(s State) []Event {
	var out []Event
	seen := map[Event]bool{}
	for _, t := range table() {
		if t.From == s && IsVerb(t.Event) && !seen[t.Event] {
			out = append(out, t.Event)
			seen[t.Event] = true
		}
	}
	return out
}

// Next returns the state the table reaches from s by e. When a row has
// several targets (cleaning done: available or manageable) want chooses;
// an empty want takes the first.
func Next(s State, e Event, want State) (State, bool) {
	var first State
	found := false
	for _, t := range table() {
		if t.From == s && t.Event == e {
			if want == "" || t.To == want {
				return t.To, true
			}
			if !found {
				first, found = t.To, true
			}
		}
	}
	if want != "" {
		return "", false
	}
	return first, found
}
