package engine

import (
	"sync"

	"github.com/bmedge/bmedge/coordinator/fsm"
)

// registry is the node registry: the nodes by UUID and name, their
// ports, port groups and allocations, the count of nodes per phase, the
// step lists ramdisks offered (stepcat.go) and each node's history
// bookkeeping (history.go). The loop changes it under mu held for
// writing; the engine's other readers take mu for reading. Readers of
// node views do not take it (views.go).
type registry struct {
	mu    sync.RWMutex
	nodes map[string]*fsm.Node
	names map[string]string
	ports map[string]*Port
	// pgroups are the port groups, allocs the allocations (resources.go).
	pgroups    map[string]*PortGroup
	allocs     map[string]*Allocation
	macs       map[string]string
	phaseCount map[string]int
	// cats are the step lists ramdisks offered, stored once each.
	cats *stepCats
	// plans are the operations' plans, stored once each (records.go).
	plans *planCats
	// hist is the bookkeeping of each node's history, to keep it under
	// the cap; histSeq orders entries of one instant. Used in the loop
	// only.
	hist    map[string]*histState
	histSeq uint64
}

func newRegistry() *registry {
	return &registry{nodes: map[string]*fsm.Node{}, names: map[string]string{}, ports: map[string]*Port{},
		pgroups: map[string]*PortGroup{}, allocs: map[string]*Allocation{}, macs: map[string]string{},
		phaseCount: map[string]int{}, cats: newStepCats(), plans: newPlanCats(), hist: map[string]*histState{}}
}
