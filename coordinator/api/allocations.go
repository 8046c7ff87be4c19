package api

import (
	"fmt"
	"net/http"

	"github.com/bmedge/bmedge/coordinator/fsm"
)

// This file answers Ironic's allocations (API 1.52; resourceSince answers
// 404 below it). This coordinator does not pick nodes for workloads: the
// operator (or Metal3) chooses an available node and deploys it. No
// allocation exists, every node's allocation_uuid is null, the list is
// empty and creating one is refused rather than left pending forever
// (docs/ironic-compat.md).

// listAllocations is GET /v1/allocations: empty.
func (s *Server) listAllocations(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, 200, map[string]any{"allocations": []any{}})
}

// createAllocation refuses POST /v1/allocations.
func (s *Server) createAllocation(w http.ResponseWriter, r *http.Request) {
	writeError(w, 400, "Allocations are not supported by this coordinator: choose an available node yourself ('baremetal node list --provision-state available --resource-class CLASS') and deploy it")
}

// noAllocation answers an allocation by id or name: none exists.
func (s *Server) noAllocation(w http.ResponseWriter, r *http.Request) {
	writeError(w, 404, fmt.Sprintf("Allocation %s could not be found.", r.PathValue("id")))
}

// nodeAllocation is GET /v1/nodes/{id}/allocation: a node never has one
// (Ironic's answer for a node without an allocation).
func (s *Server) nodeAllocation(w http.ResponseWriter, r *http.Request) {
	var uuid string
	if s.nodeDo(w, r, func(n *fsm.Node, _ bool) error { uuid = n.UUID; return nil }) {
		writeError(w, 404, fmt.Sprintf("Allocation for node %s could not be found.", uuid))
	}
}
