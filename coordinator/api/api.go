// Package api serves the coordinator's HTTP API in the shape of OpenStack
// Ironic's v1 API (same paths, field names, status codes, error bodies and
// version negotiation), so that Ironic's clients work against it. It must
// never show a secret: BMC passwords, agent tokens and rescue passwords
// are masked or left out of every response.
package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/bmedge/bmedge/coordinator/engine"
	"github.com/bmedge/bmedge/lib/ratelog"
)

// API versions served. 1.11 made new nodes start in enroll; 1.82 (node
// shards, always null here) is Ironic 21.4's newest; 1.83 parent_node
// (always null), 1.84 continue_inspection (not served: the ramdisk's
// inventory comes over MQTT), 1.85 unhold (releases a node from clean,
// deploy or service hold), 1.86 firmware_interface and node firmware, 1.87
// the service verb and service_step, 1.88 port names (refused: not kept),
// 1.89 virtual media attach (not served), 1.90 OVN VTEP keys of
// local_link_connection (refused: not kept), 1.91 .json in names (never
// stripped here, at any version), 1.92 runbooks, 1.93 virtual media GET
// (not served), 1.94 a port created with its node's name, 1.95
// disable_power_off (true: never powered off), 1.96 inspection rules
// (coordinator/inspectrules), 1.97 port description, 1.98 ~ and / in
// attribute keys (always here), 1.99 conductor_group filter of port and portgroup lists, 1.100
// and 1.101 port vendor and category, 1.102 and 1.103 portgroup
// physical_network and category, 1.104 instance_name, 1.106 shard filter
// of portgroups, 1.107 X-OpenStack-Request-Id, 1.108 disable_ramdisk with
// service, 1.109 health (null), 1.110 abort in deploy wait (at every
// version here) (docs/ironic-compat.md).
const (
	MinVersion = "1.1"
	MaxVersion = "1.110"
	maxMinor   = 110
)

// maxLimit is the longest page of a list (Ironic's max_limit).
const maxLimit = 1000

// Server is the HTTP handler.
type Server struct {
	e   *engine.Engine
	log *slog.Logger
	mux *http.ServeMux
	// auth, when set, is required of every request but the version
	// documents; nil means no authentication (loopback only, which
	// server.Start enforces).
	auth *BasicAuth
	// BrokerURL is written into site credentials for edge agents.
	BrokerURL string
	// refusalLog logs refused logins, at most one line per kind per
	// interval (a stranger can make as many as he likes).
	refusalOnce sync.Once
	refusalLog  *ratelog.Limiter
	// routes are the patterns registered on mux (Routes).
	routes []string
	// pages are the detail lists' kept pages (pagecache.go).
	pages pageCache
}

// refusals returns the rate-limited log of refused logins.
func (s *Server) refusals() *ratelog.Limiter {
	s.refusalOnce.Do(func() { s.refusalLog = ratelog.New(s.log, ratelog.DefaultInterval) })
	return s.refusalLog
}

// UseBasicAuth requires HTTP Basic credentials that a accepts of every
// request but the version documents.
func (s *Server) UseBasicAuth(a *BasicAuth) { s.auth = a }

// New returns the API handler for e.
func New(e *engine.Engine, log *slog.Logger, brokerURL string) *Server {
	s := &Server{e: e, log: log, mux: http.NewServeMux(), BrokerURL: brokerURL}
	m := routeList{s}
	m.HandleFunc("GET /{$}", s.root)
	m.HandleFunc("GET /v1", s.v1)
	m.HandleFunc("GET /v1/{$}", s.v1)
	m.HandleFunc("GET /v1/nodes", s.listNodes)
	m.HandleFunc("GET /v1/nodes/detail", s.listNodesDetail)
	m.HandleFunc("POST /v1/nodes", s.createNode)
	m.HandleFunc("GET /v1/nodes/{id}", s.getNode)
	m.HandleFunc("PATCH /v1/nodes/{id}", s.patchNode)
	m.HandleFunc("DELETE /v1/nodes/{id}", s.deleteNode)
	m.HandleFunc("GET /v1/nodes/{id}/states", s.getStates)
	m.HandleFunc("PUT /v1/nodes/{id}/states/provision", s.provision)
	m.HandleFunc("PUT /v1/nodes/{id}/states/power", s.power)
	m.HandleFunc("PUT /v1/nodes/{id}/states/raid", s.setRaid)
	m.HandleFunc("GET /v1/drivers/{name}/raid/logical_disk_properties", s.raidProperties)
	m.HandleFunc("PUT /v1/nodes/{id}/maintenance", s.setMaintenance)
	m.HandleFunc("DELETE /v1/nodes/{id}/maintenance", s.unsetMaintenance)
	m.HandleFunc("GET /v1/nodes/{id}/cleaning/steps", s.cleanSteps)
	m.HandleFunc("GET /v1/nodes/{id}/history", s.history)
	m.HandleFunc("GET /v1/nodes/{id}/inventory", s.inventory)
	m.HandleFunc("GET /v1/nodes/{id}/firmware", s.nodeFirmware)
	m.HandleFunc("GET /v1/nodes/{id}/sensors", s.nodeSensors)
	m.HandleFunc("GET /v1/nodes/{id}/events", s.nodeEvents)
	m.HandleFunc("GET /v1/nodes/{id}/bios", s.nodeBIOS)
	m.HandleFunc("GET /v1/nodes/{id}/bios/{name}", s.nodeBIOSSetting)
	m.HandleFunc("GET /v1/nodes/{id}/ports", s.nodePorts)
	m.HandleFunc("GET /v1/nodes/{id}/validate", s.validate)
	m.HandleFunc("POST /v1/nodes/{id}/vmedia", s.attachVMedia)
	m.HandleFunc("DELETE /v1/nodes/{id}/vmedia", s.detachVMedia)
	m.HandleFunc("GET /v1/nodes/{id}/vmedia", s.getVMedia)
	m.HandleFunc("GET /v1/ports", s.listPorts)
	m.HandleFunc("GET /v1/ports/detail", s.listPorts)
	m.HandleFunc("POST /v1/ports", s.createPort)
	m.HandleFunc("GET /v1/ports/{id}", s.getPort)
	m.HandleFunc("DELETE /v1/ports/{id}", s.deletePort)
	m.HandleFunc("GET /v1/nodes/{id}/management/boot_device", s.getBootDevice)
	m.HandleFunc("PUT /v1/nodes/{id}/management/boot_device", s.setBootDevice)
	m.HandleFunc("GET /v1/nodes/{id}/management/boot_device/supported", s.supportedBootDevices)
	m.HandleFunc("GET /v1/drivers", s.listDrivers)
	m.HandleFunc("GET /v1/drivers/{name}", s.getDriver)
	m.HandleFunc("GET /v1/drivers/{name}/properties", s.driverProperties)
	m.HandleFunc("POST /v1/sites", s.createSite)
	m.HandleFunc("GET /v1/sites", s.listSites)
	m.HandleFunc("POST /v1/sites/{name}/cache", s.cacheImage)
	m.HandleFunc("POST /v1/sites/{name}/credentials", s.rotateSite)
	m.HandleFunc("DELETE /v1/sites/{name}", s.deleteSite)
	m.HandleFunc("GET /v1/sites/{name}", s.showSite)
	m.HandleFunc("PATCH /v1/sites/{name}", s.patchSite)
	s.registerCatalog(m)
	m.HandleFunc("POST /v1/backup", (&backupHandler{s: s}).ServeHTTP)
	s.registerInspectionRules(m)
	s.registerCompat(m)
	m.HandleFunc("/", s.notFound)
	return s
}

// routeList registers routes on the server's mux and remembers their
// patterns, so that tests can walk every route.
type routeList struct{ s *Server }

func (l routeList) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	l.s.routes = append(l.s.routes, pattern)
	l.s.mux.HandleFunc(pattern, h)
}

// Routes returns the patterns of every route served ("METHOD /path/{id}",
// and "/" for the answer to paths no route serves), in the order made.
func (s *Server) Routes() []string { return append([]string(nil), s.routes...) }

// notFound answers, in Ironic's error shape, a path that no route serves
// (404) or a known path asked with a method it does not take (405).
func (s *Server) notFound(w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, m := range []string{"GET", "POST", "PUT", "PATCH", "DELETE"} {
		if m == r.Method {
			continue
		}
		c := r.Clone(r.Context())
		c.Method = m
		if _, pat := s.mux.Handler(c); pat != "/" && pat != "" {
			allow = append(allow, m)
		}
	}
	if len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("Method %s is not allowed on %s; allowed: %s", r.Method, r.URL.Path, strings.Join(allow, ", ")))
		return
	}
	writeError(w, http.StatusNotFound, fmt.Sprintf("The resource %s could not be found.", r.URL.Path))
}

// ServeHTTP authenticates the request, negotiates the API version,
// checks the body's type and size, and routes the request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("X-OpenStack-Ironic-API-Minimum-Version", MinVersion)
	h.Set("X-OpenStack-Ironic-API-Maximum-Version", MaxVersion)
	answerHeaders(h)
	h.Set("X-OpenStack-Request-Id", "req-"+uuid.NewString()) // Ironic's request id (documented from 1.107)
	if !s.authenticate(w, r) {
		return
	}
	// Once the database has failed the coordinator only waits to exit:
	// every request is 503 (engine.Stopped), reads too.
	if err := s.e.Stopped(); err != nil {
		writeErr(w, err)
		return
	}
	req := r.Header.Get("X-OpenStack-Ironic-API-Version")
	if v := r.Header.Get("OpenStack-API-Version"); req == "" && strings.HasPrefix(v, "baremetal ") {
		req = strings.TrimPrefix(v, "baremetal ")
	}
	// "latest" is the newest version, as in Ironic. A request without a
	// version is served at the newest version too, and says so in the
	// header (Ironic serves its minimum, 1.1): Ironic's clients always
	// send one, and people with curl address nodes by name, which 1.1
	// does not resolve (docs/ironic-compat.md).
	ver, minor := MaxVersion, maxMinor
	if req != "" && req != "latest" {
		m, ok := parseVersion(req)
		if !ok || m < 1 || m > maxMinor {
			notAcceptable(w, fmt.Sprintf("Version %s was requested but the minor version is not supported by this service. The supported version range is: [%s, %s].", req, MinVersion, MaxVersion))
			return
		}
		ver, minor = fmt.Sprintf("1.%d", m), m
	}
	h.Set("X-OpenStack-Ironic-API-Version", ver)
	h.Set("OpenStack-API-Version", "baremetal "+ver)
	if minor < maxMinor {
		r = r.WithContext(context.WithValue(r.Context(), versionKey{}, minor))
	}
	// Node names resolve from 1.5 (Ironic's get_rpc_node): before, an
	// identifier that is not a UUID is a node that does not exist.
	if id, ok := nodeIdent(r.URL.Path); ok && minor < minorNodeName && !uuidLike(id) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("Node %s could not be found.", id))
		return
	}
	// A resource of a later version than the request's does not exist
	// for it (Ironic: 404).
	if res, since := resourceSince(r.URL.Path); minor < since {
		writeError(w, catalogSinceMethod(res, r.Method), fmt.Sprintf("The resource %s could not be found: %s is in API version 1.%d and later, and this request asked for 1.%d", r.URL.Path, res, since, minor))
		return
	}
	// Ironic takes collection paths with a trailing slash too
	// (ironicclient asks "/v1/nodes/?provision_state=available").
	if p := r.URL.Path; len(p) > 1 && strings.HasSuffix(p, "/") && p != "/v1/" {
		u := *r.URL
		u.Path = strings.TrimRight(p, "/")
		u.RawPath = ""
		r2 := r.Clone(r.Context())
		r2.URL = &u
		r = r2
	}
	if !checkContentType(w, r) {
		return
	}
	// Handlers read bodies through decode; MaxBytesReader also stops a
	// handler that reads on its own, and closes the connection after an
	// oversize body instead of reading it to the end.
	r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w, code: 200}
	s.mux.ServeHTTP(sw, r)
	s.log.Debug("api", "method", r.Method, "path", r.URL.Path, "status", sw.code, "took", time.Since(start))
}

type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(c int) { w.code = c; w.ResponseWriter.WriteHeader(c) }

// Hijack lets a WebSocket (the node console) take the connection over.
func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := w.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, fmt.Errorf("the connection cannot be taken over")
	}
	w.code = http.StatusSwitchingProtocols
	return h.Hijack()
}

func parseVersion(v string) (int, bool) {
	maj, min, ok := strings.Cut(v, ".")
	if !ok || maj != "1" || min == "" || strings.TrimLeft(min, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.Atoi(min)
	return n, err == nil
}

// versionKey is the context key of the request's API minor version, set
// when it is below the newest (apiMinor).
type versionKey struct{}

// minorNodeName is the version from which nodes are found by name.
const minorNodeName = 5

// apiMinor is the minor API version the request is served at (1.x).
func apiMinor(r *http.Request) int {
	if m, ok := r.Context().Value(versionKey{}).(int); ok {
		return m
	}
	return maxMinor
}

// nodeIdent returns the node identifier of a path below /v1/nodes/ (not
// the collection's own paths, such as /v1/nodes/detail).
func nodeIdent(path string) (string, bool) {
	rest, ok := strings.CutPrefix(path, "/v1/nodes/")
	if !ok {
		return "", false
	}
	id, _, _ := strings.Cut(rest, "/")
	if id == "" || id == "detail" {
		return "", false
	}
	return id, true
}

// writeError answers in Ironic's error shape: error_message holds a JSON
// document with faultcode, faultstring and debuginfo.
func writeError(w http.ResponseWriter, code int, msg string) {
	fault := "Client"
	if code >= 500 {
		fault = "Server"
	}
	inner, _ := json.Marshal(map[string]any{"faultcode": fault, "faultstring": msg, "debuginfo": nil})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error_message": string(inner)})
}

// notAcceptable answers an unsupported API version as Ironic does: 406
// with the version range in the headers (and no version header), the
// body being the JSON document its web framework makes of an HTTP error
// ({code, title, description}) inside error_message; ironicclient reads
// description as it reads faultstring.
func notAcceptable(w http.ResponseWriter, msg string) {
	inner, _ := json.Marshal(map[string]any{"code": http.StatusNotAcceptable, "title": "Not Acceptable", "description": msg})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusNotAcceptable)
	_ = json.NewEncoder(w).Encode(map[string]string{"error_message": string(inner)})
}

// nodeSubSince are the node sub-resources that Ironic's node controller
// answers 404 below a version (its _lookup), and traits, which it does
// not route before 1.37.
var nodeSubSince = map[string]int{"portgroups": 24, "vifs": 28, "traits": 37, "bios": 40, "allocation": 52,
	"history": 78, "inventory": 81, "firmware": 86, "vmedia": 89}

// resourceSince names the resource of path that Ironic has only from a
// version, and that version (0 when path has none): the top-level
// resources of GET /v1 (v1Resources, and runbooks from 1.92) and the node
// sub-resources of nodeSubSince.
func resourceSince(path string) (string, int) {
	if id, ok := nodeIdent(path); ok {
		rest := strings.TrimPrefix(path, "/v1/nodes/"+id+"/")
		if rest == path {
			return "", 0
		}
		sub, _, _ := strings.Cut(rest, "/")
		return "/v1/nodes/{node}/" + sub, nodeSubSince[sub]
	}
	top, ok := strings.CutPrefix(path, "/v1/")
	if !ok {
		return "", 0
	}
	top, _, _ = strings.Cut(top, "/")
	if top == "runbooks" {
		return "/v1/runbooks", 92
	}
	for _, res := range v1Resources {
		if res.name == top {
			return "/v1/" + top, res.since
		}
	}
	return "", 0
}

// versionError is Ironic's NotAcceptable (406): the request names a
// field of a later API version than the one it asked for.
type versionError struct{ msg string }

func (e *versionError) Error() string { return e.msg }

// tooNew is the 406 for what (a field, "/retired" or "retired") that
// Ironic has from version 1.since, asked at 1.minor.
func tooNew(what string, since, minor int) error {
	return &versionError{fmt.Sprintf("Request not acceptable: %s is in API version 1.%d and later, and this request asked for 1.%d; send the header X-OpenStack-Ironic-API-Version: 1.%d (or later, up to %s)", what, since, minor, since, MaxVersion)}
}

func writeErr(w http.ResponseWriter, err error) {
	var ve *versionError
	if errors.As(err, &ve) {
		writeError(w, http.StatusNotAcceptable, ve.msg)
		return
	}
	var ee *engine.Error
	if errors.As(err, &ee) {
		writeError(w, status(ee.Kind), ee.Msg)
		return
	}
	writeError(w, 500, err.Error())
}

// status is the HTTP status Ironic answers for an error of kind k: the
// one place where the coordinator's refusals become HTTP.
func status(k engine.Kind) int {
	switch k {
	case engine.Invalid:
		return http.StatusBadRequest
	case engine.NotFound:
		return http.StatusNotFound
	case engine.Conflict:
		return http.StatusConflict
	case engine.Unavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	_ = enc.Encode(v)
}

// decode reads a JSON body into v; a bad body is a 400 saying why. An
// oversize body is a 400 too (not 413): Ironic has no body bound of its
// own, and its clients print a 400's message, which says what to do.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	body, ok := readBody(w, r)
	if !ok {
		return false
	}
	return decodeBody(w, body, v)
}

// readBody reads a request's body for decode, within MaxBodyBytes.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if r.ContentLength > MaxBodyBytes {
		writeError(w, 400, bodyTooLarge(r.ContentLength))
		return nil, false
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, 400, bodyTooLarge(-1))
			return nil, false
		}
		writeError(w, 400, "cannot read request body: "+err.Error())
		return nil, false
	}
	return body, true
}

// decodeBody is the rest of decode: the depth check and the JSON.
func decodeBody(w http.ResponseWriter, body []byte, v any) bool {
	if jsonDepth(body, MaxJSONDepth) > MaxJSONDepth {
		writeError(w, 400, fmt.Sprintf("Request body is nested deeper than %d levels of objects and arrays; nothing this API takes nests that deep", MaxJSONDepth))
		return false
	}
	if err := json.Unmarshal(body, v); err != nil {
		writeError(w, 400, "Invalid JSON in request body: "+err.Error())
		return false
	}
	return true
}

func bodyTooLarge(n int64) string {
	size := fmt.Sprintf("more than %d bytes", MaxBodyBytes)
	if n > 0 {
		size = fmt.Sprintf("%d bytes", n)
	}
	return fmt.Sprintf("Request body is too large: %s, at most %d bytes (1 MiB) are accepted; keep large data (images, inventories) out of node fields", size, MaxBodyBytes)
}

func baseURL(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

func link(r *http.Request, path string) []map[string]string {
	b := baseURL(r)
	return []map[string]string{{"href": b + path, "rel": "self"}, {"href": b + path, "rel": "bookmark"}}
}

func (s *Server) versionDoc(r *http.Request) map[string]any {
	return map[string]any{"id": "v1", "links": []map[string]string{{"href": baseURL(r) + "/v1/", "rel": "self"}},
		"status": "CURRENT", "min_version": MinVersion, "version": MaxVersion}
}

func (s *Server) root(w http.ResponseWriter, r *http.Request) {
	v := s.versionDoc(r)
	writeJSON(w, 200, map[string]any{"name": "bmedge coordinator", "description": "Bare-metal lifecycle for remote sites, speaking Ironic's v1 API.",
		"versions": []any{v}, "default_version": v})
}

// v1Resources are the resources Ironic 21.4's GET /v1 links to, with the
// API version from which it lists each (its v1() and the allow_*
// checks): chassis, nodes, ports and drivers always.
var v1Resources = []struct {
	name  string
	since int
}{{"chassis", 1}, {"nodes", 1}, {"ports", 1}, {"drivers", 1}, {"lookup", 22}, {"heartbeat", 22}, {"portgroups", 23},
	{"volume", 32}, {"conductors", 49}, {"allocations", 52}, {"events", 54}, {"deploy_templates", 55}, {"shards", 82}, {"runbooks", 92},
	{"inspection_rules", 96}}

// v1 is GET /v1 in Ironic's shape: media_types an object, links self
// and describedby, the version document, and a self and a bookmark link
// (the bookmark without /v1, as Ironic's) for each resource Ironic lists
// at the request's version that this API serves: a resource without a
// route here is left out rather than linked to a 404.
func (s *Server) v1(w http.ResponseWriter, r *http.Request) {
	b, minor := baseURL(r), apiMinor(r)
	doc := map[string]any{"id": "v1",
		"links": []map[string]string{{"href": b + "/v1/", "rel": "self"},
			{"href": "https://docs.openstack.org/ironic/latest/contributor/webapi.html", "rel": "describedby", "type": "text/html"}},
		"media_types": map[string]string{"base": "application/json", "type": "application/vnd.openstack.ironic.v1+json"},
		"version":     s.versionDoc(r)}
	for _, res := range v1Resources {
		if res.since > minor || !s.serves("/v1/"+res.name) {
			continue
		}
		doc[res.name] = []map[string]string{{"href": b + "/v1/" + res.name + "/", "rel": "self"}, {"href": b + "/" + res.name + "/", "rel": "bookmark"}}
	}
	writeJSON(w, 200, doc)
}

// serves says whether a route of this API answers GET or POST at path.
func (s *Server) serves(path string) bool {
	for _, m := range []string{"GET", "POST"} {
		if _, pat := s.mux.Handler(httptestRequest(m, path)); pat != "" && pat != "/" {
			return true
		}
	}
	return false
}

// httptestRequest is a bare request for a mux lookup.
func httptestRequest(method, path string) *http.Request {
	return &http.Request{Method: method, URL: &url.URL{Path: path}, Host: "localhost"}
}
