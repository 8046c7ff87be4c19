package api

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/bmedge/bmedge/coordinator/fsm"
)

// This file serves the node sub-resources a `baremetal` user reaches that
// this project has no driver interface for, answered as Ironic answers
// for the interfaces this project's nodes have (docs/ironic-compat.md):
// network noop (no VIFs), console no-console, vendor no-vendor, and no
// NMI in the management interfaces; and one history record by its ID.

// registerCompat registers the routes of conductors.go, chassis.go,
// resources.go and this file.
func (s *Server) registerCompat(m routeList) {
	m.HandleFunc("GET /v1/conductors", s.listConductors)
	m.HandleFunc("GET /v1/conductors/{hostname}", s.getConductor)
	m.HandleFunc("GET /v1/chassis", s.listChassis)
	m.HandleFunc("GET /v1/chassis/detail", s.listChassis)
	m.HandleFunc("POST /v1/chassis", s.createChassis)
	m.HandleFunc("GET /v1/chassis/{id}", s.noChassis)
	m.HandleFunc("PATCH /v1/chassis/{id}", s.noChassis)
	m.HandleFunc("DELETE /v1/chassis/{id}", s.noChassis)
	m.HandleFunc("GET /v1/chassis/{id}/nodes", s.noChassis)
	s.registerResources(m)
	m.HandleFunc("GET /v1/nodes/{id}/vifs", s.listVIFs)
	m.HandleFunc("POST /v1/nodes/{id}/vifs", s.attachVIF)
	m.HandleFunc("DELETE /v1/nodes/{id}/vifs/{vif}", s.detachVIF)
	m.HandleFunc("GET /v1/nodes/{id}/states/console", s.getConsole)
	m.HandleFunc("PUT /v1/nodes/{id}/states/console", s.setConsole)
	m.HandleFunc("GET /v1/nodes/{id}/console", s.consoleSocket)
	m.HandleFunc("GET /v1/nodes/{id}/console/log", s.consoleLog)
	m.HandleFunc("GET /v1/nodes/{id}/vendor_passthru/methods", s.passthruMethods)
	m.HandleFunc("/v1/nodes/{id}/vendor_passthru", s.passthruCall)
	m.HandleFunc("GET /v1/drivers/{name}/vendor_passthru/methods", s.driverPassthruMethods)
	m.HandleFunc("/v1/drivers/{name}/vendor_passthru", s.driverPassthruCall)
	m.HandleFunc("PUT /v1/nodes/{id}/management/inject_nmi", s.injectNMI)
	m.HandleFunc("GET /v1/nodes/{id}/history/{event}", s.historyEvent)
}

// unsupported is Ironic's UnsupportedDriverExtension message.
func unsupported(driver, extension string) string {
	return fmt.Sprintf("Driver %s does not support %s (disabled or not implemented).", driver, extension)
}

// nodeDo runs fn on the node of the request's {id} and answers its
// error; it says whether the node was found and fn succeeded.
func (s *Server) nodeDo(w http.ResponseWriter, r *http.Request, fn func(n *fsm.Node, online bool) error) bool {
	if err := s.e.View(r.PathValue("id"), fn); err != nil {
		writeErr(w, err)
		return false
	}
	return true
}

// statusError is a refusal with its HTTP status, from inside a View.
type statusError struct {
	code int
	msg  string
}

func (e *statusError) Error() string { return e.msg }

func writeStatus(w http.ResponseWriter, err error) {
	if se, ok := err.(*statusError); ok {
		writeError(w, se.code, se.msg)
		return
	}
	writeErr(w, err)
}

// emptyBody reads a request body that must be empty or {} (the client
// sends {}); anything in it is refused rather than ignored.
func emptyBody(w http.ResponseWriter, r *http.Request, what string) bool {
	if r.ContentLength == 0 {
		return true
	}
	var body map[string]any
	if !decode(w, r, &body) {
		return false
	}
	if len(body) > 0 {
		keys := make([]string, 0, len(body))
		for k := range body {
			keys = append(keys, k)
		}
		writeError(w, 400, fmt.Sprintf("%s takes no arguments; got %s", what, strings.Join(keys, ", ")))
		return false
	}
	return true
}

// listVIFs is GET /v1/nodes/{id}/vifs (API 1.28): the network interface
// of every node here is noop (no Neutron, the sites' networks are the
// operator's), whose VIF list is empty, as Ironic's noop's.
func (s *Server) listVIFs(w http.ResponseWriter, r *http.Request) {
	if s.nodeDo(w, r, func(*fsm.Node, bool) error { return nil }) {
		writeJSON(w, 200, map[string]any{"vifs": []any{}})
	}
}

// attachVIF refuses to attach a VIF: Ironic's noop network interface
// takes the request and attaches nothing (204); here the request is
// refused rather than accepted and ignored.
func (s *Server) attachVIF(w http.ResponseWriter, r *http.Request) {
	var driver string
	if !s.nodeDo(w, r, func(n *fsm.Node, _ bool) error { driver = n.Driver; return nil }) {
		return
	}
	writeError(w, 400, fmt.Sprintf("Cannot attach a VIF to node %s: its network interface is noop (this coordinator does not manage networks; the site's network is configured outside it), so nothing would be attached. %s",
		r.PathValue("id"), unsupported(driver, "VIF attachment")))
}

// detachVIF answers as Ironic's VifNotAttached: no VIF is ever attached.
func (s *Server) detachVIF(w http.ResponseWriter, r *http.Request) {
	var uuid string
	if s.nodeDo(w, r, func(n *fsm.Node, _ bool) error { uuid = n.UUID; return nil }) {
		writeError(w, 400, fmt.Sprintf("Unable to detach VIF %s from node %s because it is not attached to it.", r.PathValue("vif"), uuid))
	}
}

// passthruMethods is GET /v1/nodes/{id}/vendor_passthru/methods: the
// vendor interface is no-vendor, with no methods ({}), as Ironic's.
func (s *Server) passthruMethods(w http.ResponseWriter, r *http.Request) {
	if s.nodeDo(w, r, func(*fsm.Node, bool) error { return nil }) {
		writeJSON(w, 200, map[string]any{})
	}
}

// passthruCall is a vendor passthru call on a node: Ironic's answer for a
// method no route has.
func (s *Server) passthruCall(w http.ResponseWriter, r *http.Request) {
	if !s.nodeDo(w, r, func(*fsm.Node, bool) error { return nil }) {
		return
	}
	noHandler(w, r)
}

func noHandler(w http.ResponseWriter, r *http.Request) {
	method := r.URL.Query().Get("method")
	if method == "" {
		writeError(w, 400, `Missing argument: "method" (the vendor method to call, ?method=NAME)`)
		return
	}
	writeError(w, 400, fmt.Sprintf("No handler for method %s: the vendor interfaces here (no-vendor, and idrac's idrac-redfish) have no methods (vendor_passthru/methods lists none)", method))
}

// driverPassthruMethods is GET /v1/drivers/{name}/vendor_passthru/methods.
func (s *Server) driverPassthruMethods(w http.ResponseWriter, r *http.Request) {
	if _, err := s.e.Machine().Config().Drivers.Get(r.PathValue("name")); err != nil {
		writeError(w, 404, fmt.Sprintf("Could not find the following driver(s) or hardware type(s): %s.", r.PathValue("name")))
		return
	}
	writeJSON(w, 200, map[string]any{})
}

func (s *Server) driverPassthruCall(w http.ResponseWriter, r *http.Request) {
	if _, err := s.e.Machine().Config().Drivers.Get(r.PathValue("name")); err != nil {
		writeError(w, 404, fmt.Sprintf("Could not find the following driver(s) or hardware type(s): %s.", r.PathValue("name")))
		return
	}
	noHandler(w, r)
}

// minorInjectNMI is the version of PUT management/inject_nmi (Ironic's
// allow_inject_nmi; below it, 404).
const minorInjectNMI = 29

// injectNMI is PUT /v1/nodes/{id}/management/inject_nmi, as Ironic's
// conductor takes it: a locked node is 409, a management interface that
// fails validation (driver_info) 400 with why, and then, since none of
// this project's drivers sends an NMI through its BMC, Ironic's answer
// for a management interface without inject_nmi (400).
func (s *Server) injectNMI(w http.ResponseWriter, r *http.Request) {
	if minor := apiMinor(r); minor < minorInjectNMI {
		writeError(w, 404, fmt.Sprintf("The resource %s could not be found: inject_nmi is in API version 1.%d and later, and this request asked for 1.%d", r.URL.Path, minorInjectNMI, minor))
		return
	}
	if !emptyBody(w, r, "inject_nmi") {
		return
	}
	err := s.e.View(r.PathValue("id"), func(n *fsm.Node, _ bool) error {
		if n.Locked() {
			return &statusError{409, fmt.Sprintf("Node %s is locked by host %s, please retry after the current operation is completed.", n.UUID, n.Reservation)}
		}
		if c := s.e.Machine().Validate(n)["management"]; c.Result != nil && !*c.Result {
			return &statusError{400, c.Reason}
		}
		return &statusError{400, unsupported(n.Driver, "inject_nmi")}
	})
	writeStatus(w, err)
}

// historyEvent is GET /v1/nodes/{id}/history/{event} (API 1.78): one
// record, by the uuid that the history list shows ("NODE-UUID-N", the
// record's place in the node's history, which only grows).
func (s *Server) historyEvent(w http.ResponseWriter, r *http.Request) {
	var id string
	if !s.nodeDo(w, r, func(n *fsm.Node, _ bool) error { id = n.UUID; return nil }) {
		return
	}
	event := r.PathValue("event")
	notFound := func() { writeError(w, 404, fmt.Sprintf("Node history record %s could not be found.", event)) }
	rest, ok := strings.CutPrefix(event, id+"-")
	i, err := strconv.Atoi(rest)
	if !ok || err != nil || i < 0 || strconv.Itoa(i) != rest {
		notFound()
		return
	}
	h, err := s.e.History(id)
	if err != nil {
		writeErr(w, err)
		return
	}
	if i >= len(h) {
		notFound()
		return
	}
	e := h[i]
	writeJSON(w, 200, map[string]any{"uuid": event, "created_at": e.Time, "severity": e.Severity, "event": e.Event,
		"event_type": e.EventType, "conductor": coordinatorHost, "user": nil,
		"links": link(r, "/v1/nodes/"+id+"/history/"+event)})
}
