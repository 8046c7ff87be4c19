package api

import (
	"fmt"
	"net/http"
)

// This file answers Ironic's chassis. Nodes here are grouped by site
// (their conductor_group), not by chassis: no chassis exists, every
// node's chassis_uuid is null, the list is empty and creating one is
// refused, rather than accepted into a record nothing reads
// (docs/ironic-compat.md).

// listChassis is GET /v1/chassis and /v1/chassis/detail: empty.
func (s *Server) listChassis(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, 200, map[string]any{"chassis": []any{}})
}

// createChassis refuses POST /v1/chassis.
func (s *Server) createChassis(w http.ResponseWriter, r *http.Request) {
	writeError(w, 400, "Chassis are not supported by this coordinator: nodes are grouped by site (their conductor_group, 'baremetal node list --conductor-group SITE'); describe the hardware in a node's extra or description instead")
}

// noChassis answers a chassis by id: none exists (Ironic's ChassisNotFound).
func (s *Server) noChassis(w http.ResponseWriter, r *http.Request) {
	writeError(w, 404, fmt.Sprintf("Chassis %s could not be found.", r.PathValue("id")))
}
