// Package recorded is a test BMC that serves a recorded Redfish tree (a
// DMTF mockup or a vendor's tree captured from a real server, under
// testdata/<fixture>/, one index.json per resource as DMTF's mockup
// server lays them out) and acts on it as the vendor does: power and boot
// override changes by ComputerSystem.Reset and PATCH, virtual media by
// InsertMedia/EjectMedia or by PATCH of Image and Inserted (as the tree
// offers), BIOS settings by PATCH of the settings resource, RAID volumes
// by POST and DELETE (with a task when the vendor answers 202), sessions
// or Basic authentication, an answer delay, and per-vendor quirks:
// resources missing, 404 or 405 or 400 for an action the tree lacks,
// Inserted required, sessions refused. It is for tests and benchmarks,
// never for production: one account, compared as given.
package recorded

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"
)

const root = "/redfish/v1"

// Quirks are how a vendor's BMC differs from the spec's reading of its tree.
type Quirks struct {
	// NoSessionService answers 404 at the session service and leaves
	// Links.Sessions out of the service root: Basic only.
	NoSessionService bool
	// SessionsRefused answers 401 to every session login, even with the
	// right password (Basic works): a BMC whose session slots are
	// reserved, or that allows sessions to other roles only.
	SessionsRefused bool
	// Missing paths (and everything under them) answer 404.
	Missing []string
	// ActionMissingStatus is the status of a POST to an action the tree
	// does not offer (default 404; 405 and 400 as some vendors answer).
	ActionMissingStatus int
	// PatchMedia lets a PATCH of Image and Inserted mount virtual media
	// (the spec's alternative to InsertMedia); without it a PATCH of a
	// virtual media resource answers 405.
	PatchMedia bool
	// InsertedRequired: a PATCH that sets Image without "Inserted": true
	// is accepted but leaves the media not inserted, as DMTF's mockup
	// server and several BMCs do.
	InsertedRequired bool
	// InsertRefusesFlags: InsertMedia with Inserted or WriteProtected in
	// its body answers 400 (sushy learnt this on Supermicro X11).
	InsertRefusesFlags bool
	// VolumeTask: POST and DELETE of volumes answer 202 with a task
	// monitor (Dell's and HPE's controllers), instead of 201/204.
	VolumeTask bool
	// CaseInsensitive paths, as iLO serves them (its trees link
	// /redfish/v1/systems/1/bios beside /redfish/v1/Systems/1).
	CaseInsensitive bool
	// ExpandRefused answers 400 to $expand, whatever the root says.
	ExpandRefused bool
	// TaskPolls is how many reads a task stays Running (default 2).
	TaskPolls int
}

// Profiles are the quirks each fixture's BMC is served with: what its
// tree shows, and what sushy's and Ironic's vendor code say of the
// vendor (see each fixture's SOURCE.md and docs/drivers.md, "Vendors").
var Profiles = map[string]Quirks{
	// DMTF's mockup server: virtual media under the System without
	// InsertMedia; a PATCH of Image mounts only with Inserted.
	"dmtf-public-rackmount1": {PatchMedia: true, InsertedRequired: true},
	// iLO 5: paths are case-insensitive; storage changes are tasks; a
	// POST to an action it lacks answers 405 (modelled: vendors differ
	// between 400, 404 and 405 there; the recordings do not show it).
	"hpe-ilo5-dl325": {CaseInsensitive: true, VolumeTask: true, ActionMissingStatus: http.StatusMethodNotAllowed},
	// AMI MegaRAC (GIGABYTE): an action it lacks answers 400 (modelled,
	// as above).
	"gigabyte-ami-h262": {ActionMissingStatus: http.StatusBadRequest},
	// Intel's BMC of this recording: served without a session service
	// (Basic only), to cover that shape.
	"intel-s2600bp": {NoSessionService: true},
	// OpenBMC's stock image: served as recorded.
	"openbmc-stock": {},
	// sushy's samples: InsertMedia refuses Inserted and WriteProtected
	// (Supermicro X11's way, as sushy's virtual media code notes); the
	// system links .../Bios, the sample is at .../BIOS.
	"sushy-samples": {InsertRefusesFlags: true, CaseInsensitive: true},
}

// Options describe one recorded BMC.
type Options struct {
	// Fixture is a folder under this package's testdata, or a path.
	Fixture  string
	Username string
	Password string
	// Delay is added to every answer (a slow BMC: real iDRACs take 1–3 s).
	Delay  time.Duration
	Quirks Quirks
	// Addr to listen on (default 127.0.0.1:0).
	Addr string
}

// Server is one recorded BMC on a listener.
type Server struct {
	URL  string
	opts Options
	srv  *http.Server
	ln   net.Listener

	mu       sync.Mutex
	docs     map[string]map[string]any // by path without trailing slash
	sessions map[string]string         // token -> session path
	requests []string
	tasks    map[string]*task
	nextID   int
	// atReset runs at the system's next start or restart (volumes
	// created with @Redfish.OperationApplyTime OnReset).
	atReset []func()
}

type task struct {
	polls int
	done  func()
	doc   map[string]any
}

// Dir returns the folder of a fixture of this package's testdata.
func Dir(fixture string) string {
	if filepath.IsAbs(fixture) || strings.ContainsRune(fixture, filepath.Separator) {
		return fixture
	}
	return filepath.Join(testdata(), fixture)
}

func testdata() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "testdata")
}

// Fixtures lists the fixtures in this package's testdata.
func Fixtures() []string {
	entries, _ := os.ReadDir(testdata())
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out
}

// Load reads a fixture's tree: each index.json under the folder is the
// resource at /redfish/v1/<its folder>.
func Load(fixture string) (map[string]map[string]any, error) {
	dir := Dir(fixture)
	docs := map[string]map[string]any{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || d.Name() != "index.json" {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		var doc map[string]any
		if err := json.Unmarshal(data, &doc); err != nil {
			return fmt.Errorf("%s: %v", p, err)
		}
		rel, _ := filepath.Rel(dir, filepath.Dir(p))
		key := root
		if rel != "." {
			key = root + "/" + filepath.ToSlash(rel)
		}
		docs[key] = doc
		return nil
	})
	if err != nil {
		return nil, err
	}
	if docs[root] == nil {
		return nil, fmt.Errorf("fixture %s has no service root (index.json)", dir)
	}
	return docs, nil
}

// Start loads the fixture and serves it on 127.0.0.1.
func Start(o Options) (*Server, error) {
	docs, err := Load(o.Fixture)
	if err != nil {
		return nil, err
	}
	if o.Addr == "" {
		o.Addr = "127.0.0.1:0"
	}
	if o.Quirks.ActionMissingStatus == 0 {
		o.Quirks.ActionMissingStatus = http.StatusNotFound
	}
	if o.Quirks.TaskPolls == 0 {
		o.Quirks.TaskPolls = 2
	}
	s := &Server{opts: o, docs: docs, sessions: map[string]string{}, tasks: map[string]*task{}}
	if o.Quirks.NoSessionService {
		if links, ok := docs[root]["Links"].(map[string]any); ok {
			delete(links, "Sessions")
		}
		delete(docs[root], "SessionService")
		for k := range docs {
			if strings.HasPrefix(k, root+"/SessionService") {
				delete(docs, k)
			}
		}
	}
	for _, m := range o.Quirks.Missing {
		m = strings.TrimSuffix(m, "/")
		for k := range docs {
			if k == m || strings.HasPrefix(k, m+"/") {
				delete(docs, k)
			}
		}
	}
	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return nil, err
	}
	s.ln = ln
	s.URL = "http://" + ln.Addr().String()
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go s.srv.Serve(ln)
	return s, nil
}

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// Requests returns "METHOD path" of every request so far.
func (s *Server) Requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.requests...)
}

// ResetRequests forgets the requests so far.
func (s *Server) ResetRequests() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = nil
}

// Doc returns a copy of the resource at path (nil if there is none).
func (s *Server) Doc(p string) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.docs[clean(p)]
	if d == nil {
		return nil
	}
	var out map[string]any
	b, _ := json.Marshal(d)
	_ = json.Unmarshal(b, &out)
	return out
}

// Paths lists the paths of the tree's resources, sorted.
func (s *Server) Paths() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for k := range s.docs {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Edit changes the resource at path in place (a test's setup).
func (s *Server) Edit(p string, f func(doc map[string]any)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d := s.docs[clean(p)]; d != nil {
		f(d)
	}
}

// Sessions is how many sessions are open.
func (s *Server) Sessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions)
}

func clean(p string) string {
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		p = p[:i]
	}
	p = path.Clean("/" + p)
	return p
}

// redfishError writes an error in Redfish's shape.
func redfishError(w http.ResponseWriter, status int, id, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
		"code": "Base.1.8.GeneralError", "message": "A general error has occurred. See ExtendedInfo for more information.",
		"@Message.ExtendedInfo": []any{map[string]any{"MessageId": id, "Message": msg, "Severity": "Warning"}},
	}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("OData-Version", "4.0")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) authorized(r *http.Request) bool {
	if tok := r.Header.Get("X-Auth-Token"); tok != "" {
		_, ok := s.sessions[tok]
		return ok
	}
	u, p, ok := r.BasicAuth()
	return ok && s.creds(u, p)
}

func (s *Server) creds(u, p string) bool {
	return subtle.ConstantTimeCompare([]byte(u), []byte(s.opts.Username)) == 1 &&
		subtle.ConstantTimeCompare([]byte(p), []byte(s.opts.Password)) == 1
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.opts.Delay > 0 {
		select {
		case <-time.After(s.opts.Delay):
		case <-r.Context().Done():
			return
		}
	}
	p := clean(r.URL.Path)
	var body map[string]any
	if r.Body != nil && (r.Method == http.MethodPost || r.Method == http.MethodPatch || r.Method == http.MethodDelete) {
		data, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if len(data) > 0 && json.Unmarshal(data, &body) != nil {
			s.mu.Lock()
			s.requests = append(s.requests, r.Method+" "+p)
			s.mu.Unlock()
			redfishError(w, http.StatusBadRequest, "Base.1.8.MalformedJSON", "The request body submitted was malformed JSON and could not be parsed by the receiving service.")
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, r.Method+" "+p)

	if p == "/redfish" {
		writeJSON(w, 200, map[string]any{"v1": root + "/"})
		return
	}
	if p == root && r.Method == http.MethodGet {
		writeJSON(w, 200, s.docs[root])
		return
	}
	if p == root+"/SessionService/Sessions" && r.Method == http.MethodPost {
		s.login(w, body)
		return
	}
	if !s.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Basic realm="Redfish"`)
		redfishError(w, http.StatusUnauthorized, "Base.1.8.NoValidSession", "There is no valid session established with the implementation.")
		return
	}
	if t := s.tasks[p]; t != nil && r.Method == http.MethodGet {
		s.pollTask(w, p, t)
		return
	}
	doc := s.docs[p]
	if doc == nil && s.opts.Quirks.CaseInsensitive {
		for k, d := range s.docs {
			if strings.EqualFold(k, p) {
				p, doc = k, d
				break
			}
		}
	}
	switch r.Method {
	case http.MethodGet:
		if doc == nil {
			redfishError(w, http.StatusNotFound, "Base.1.8.ResourceMissingAtURI", fmt.Sprintf("The resource at the URI %s was not found.", p))
			return
		}
		if r.URL.Query().Has("$expand") {
			s.expanded(w, r, doc)
			return
		}
		writeJSON(w, 200, doc)
	case http.MethodDelete:
		s.delete(w, p, doc, body)
	case http.MethodPatch:
		if doc == nil {
			redfishError(w, http.StatusNotFound, "Base.1.8.ResourceMissingAtURI", fmt.Sprintf("The resource at the URI %s was not found.", p))
			return
		}
		s.patch(w, p, doc, body)
	case http.MethodPost:
		s.post(w, p, doc, body)
	default:
		redfishError(w, http.StatusMethodNotAllowed, "Base.1.8.OperationNotAllowed", "The HTTP method is not allowed on this resource.")
	}
}

// expanded answers a GET with $expand=.($levels=1) (or *), when the
// tree's service root says it takes it: a collection with its members.
func (s *Server) expanded(w http.ResponseWriter, r *http.Request, doc map[string]any) {
	pfs, _ := s.docs[root]["ProtocolFeaturesSupported"].(map[string]any)
	eq, _ := pfs["ExpandQuery"].(map[string]any)
	q := r.URL.Query().Get("$expand")
	if eq["Levels"] != true || s.opts.Quirks.ExpandRefused || (q != ".($levels=1)" && q != "*($levels=1)") {
		redfishError(w, http.StatusBadRequest, "Base.1.8.QueryNotSupported", fmt.Sprintf("Querying with $expand=%s is not supported by the implementation.", q))
		return
	}
	out := map[string]any{}
	for k, v := range doc {
		out[k] = v
	}
	if ms, ok := doc["Members"].([]any); ok {
		var full []any
		for _, m := range ms {
			mm, _ := m.(map[string]any)
			if d := s.docs[clean(fmt.Sprint(mm["@odata.id"]))]; d != nil {
				full = append(full, d)
			} else {
				full = append(full, m)
			}
		}
		out["Members"] = full
	}
	writeJSON(w, 200, out)
}

func (s *Server) login(w http.ResponseWriter, body map[string]any) {
	q := s.opts.Quirks
	if q.NoSessionService {
		redfishError(w, http.StatusNotFound, "Base.1.8.ResourceMissingAtURI", "The resource at the URI /redfish/v1/SessionService/Sessions was not found.")
		return
	}
	u, _ := body["UserName"].(string)
	pw, _ := body["Password"].(string)
	if !s.creds(u, pw) {
		redfishError(w, http.StatusUnauthorized, "Base.1.8.ResourceAtUriUnauthorized", "While accessing the resource at /redfish/v1/SessionService/Sessions, the service received an authorization error: invalid user name or password.")
		return
	}
	if q.SessionsRefused {
		redfishError(w, http.StatusUnauthorized, "Base.1.8.InsufficientPrivilege", "There are insufficient privileges for the account or credentials associated with the current session to perform the requested operation.")
		return
	}
	s.nextID++
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	tok := hex.EncodeToString(b)
	sp := fmt.Sprintf("%s/SessionService/Sessions/%d", root, s.nextID)
	s.sessions[tok] = sp
	doc := map[string]any{"@odata.id": sp, "@odata.type": "#Session.v1_0_0.Session", "Id": fmt.Sprint(s.nextID), "Name": "User Session", "UserName": u}
	s.docs[sp] = doc
	s.addMember(root+"/SessionService/Sessions", sp)
	w.Header().Set("X-Auth-Token", tok)
	w.Header().Set("Location", sp)
	writeJSON(w, http.StatusCreated, doc)
}

func (s *Server) addMember(col, member string) {
	c := s.docs[col]
	if c == nil {
		return
	}
	ms, _ := c["Members"].([]any)
	ms = append(ms, map[string]any{"@odata.id": member})
	c["Members"] = ms
	c["Members@odata.count"] = len(ms)
}

func (s *Server) removeMember(col, member string) {
	c := s.docs[col]
	if c == nil {
		return
	}
	ms, _ := c["Members"].([]any)
	var out []any
	for _, m := range ms {
		if mm, ok := m.(map[string]any); ok && clean(fmt.Sprint(mm["@odata.id"])) == member {
			continue
		}
		out = append(out, m)
	}
	if out == nil {
		out = []any{}
	}
	c["Members"] = out
	c["Members@odata.count"] = len(out)
}

func (s *Server) delete(w http.ResponseWriter, p string, doc, body map[string]any) {
	if strings.HasPrefix(p, root+"/SessionService/Sessions/") && doc != nil {
		for tok, sp := range s.sessions {
			if sp == p {
				delete(s.sessions, tok)
			}
		}
		delete(s.docs, p)
		s.removeMember(root+"/SessionService/Sessions", p)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if doc != nil && strings.Contains(fmt.Sprint(doc["@odata.type"]), "#Volume.") {
		gone := func() {
			delete(s.docs, p)
			s.removeMember(path.Dir(p), p)
		}
		if body["@Redfish.OperationApplyTime"] == "OnReset" {
			s.atReset = append(s.atReset, gone)
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if s.opts.Quirks.VolumeTask {
			s.startTask(w, gone)
			return
		}
		gone()
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if doc == nil {
		redfishError(w, http.StatusNotFound, "Base.1.8.ResourceMissingAtURI", fmt.Sprintf("The resource at the URI %s was not found.", p))
		return
	}
	redfishError(w, http.StatusMethodNotAllowed, "Base.1.8.OperationNotAllowed", "DELETE is not allowed on "+p)
}

func kind(doc map[string]any) string {
	t := fmt.Sprint(doc["@odata.type"])
	t = strings.TrimPrefix(t, "#")
	if i := strings.Index(t, "."); i >= 0 {
		t = t[:i]
	}
	return t
}

func (s *Server) patch(w http.ResponseWriter, p string, doc, body map[string]any) {
	switch kind(doc) {
	case "ComputerSystem":
		boot, _ := body["Boot"].(map[string]any)
		if boot == nil || len(body) != 1 {
			redfishError(w, http.StatusBadRequest, "Base.1.8.PropertyNotWritable", "Only Boot is writable on "+p+" in this recorded BMC.")
			return
		}
		cur, _ := doc["Boot"].(map[string]any)
		if cur == nil {
			cur = map[string]any{}
			doc["Boot"] = cur
		}
		for k, v := range boot {
			if allowed, ok := cur[k+"@Redfish.AllowableValues"].([]any); ok && !contains(allowed, v) {
				redfishError(w, http.StatusBadRequest, "Base.1.8.PropertyValueNotInList",
					fmt.Sprintf("The value %v for the property %s is not in the list of acceptable values.", v, k))
				return
			}
			if _, known := cur[k]; !known && k != "BootSourceOverrideEnabled" && k != "BootSourceOverrideTarget" && k != "BootSourceOverrideMode" {
				redfishError(w, http.StatusBadRequest, "Base.1.8.PropertyUnknown", fmt.Sprintf("The property %s is not in the list of valid properties for the resource.", k))
				return
			}
		}
		for k, v := range boot {
			cur[k] = v
		}
		w.WriteHeader(http.StatusNoContent)
	case "VirtualMedia":
		if !s.opts.Quirks.PatchMedia {
			redfishError(w, http.StatusMethodNotAllowed, "Base.1.8.OperationNotAllowed", "PATCH is not allowed on "+p+"; use the InsertMedia and EjectMedia actions.")
			return
		}
		img, hasImg := body["Image"]
		ins, hasIns := body["Inserted"].(bool)
		if hasImg {
			doc["Image"] = img
			if img == nil || img == "" {
				doc["Inserted"] = false
			} else if hasIns || !s.opts.Quirks.InsertedRequired {
				doc["Inserted"] = !hasIns || ins
			}
		} else if hasIns {
			doc["Inserted"] = ins
			if !ins {
				doc["Image"] = nil
			}
		}
		if wp, ok := body["WriteProtected"].(bool); ok {
			doc["WriteProtected"] = wp
		}
		w.WriteHeader(http.StatusNoContent)
	case "Bios":
		attrs, _ := body["Attributes"].(map[string]any)
		if attrs == nil {
			redfishError(w, http.StatusBadRequest, "Base.1.8.PropertyMissing", "The property Attributes is a required property and must be included in the request.")
			return
		}
		cur, _ := doc["Attributes"].(map[string]any)
		if cur == nil {
			cur = map[string]any{}
			doc["Attributes"] = cur
		}
		for k, v := range attrs {
			cur[k] = v
		}
		w.WriteHeader(http.StatusNoContent)
	default:
		redfishError(w, http.StatusMethodNotAllowed, "Base.1.8.OperationNotAllowed", "PATCH is not allowed on "+p)
	}
}

func contains(list []any, v any) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// action finds the resource offering an action at target p: its doc and
// the action's name ("ComputerSystem.Reset", ...).
func (s *Server) action(p string) (string, map[string]any, map[string]any) {
	i := strings.Index(p, "/Actions/")
	if i < 0 {
		return "", nil, nil
	}
	owner := p[:i]
	doc := s.docs[owner]
	if doc == nil {
		return "", nil, nil
	}
	acts, _ := doc["Actions"].(map[string]any)
	for name, a := range acts {
		am, _ := a.(map[string]any)
		if am != nil && clean(fmt.Sprint(am["target"])) == p {
			return strings.TrimPrefix(name, "#"), doc, am
		}
	}
	return "", doc, nil
}

func (s *Server) post(w http.ResponseWriter, p string, doc, body map[string]any) {
	if doc != nil && kind(doc) == "VolumeCollection" {
		s.createVolume(w, p, body)
		return
	}
	name, owner, act := s.action(p)
	if act == nil {
		st := s.opts.Quirks.ActionMissingStatus
		msg := fmt.Sprintf("The resource at the URI %s was not found.", p)
		id := "Base.1.8.ResourceMissingAtURI"
		switch st {
		case http.StatusMethodNotAllowed:
			id, msg = "Base.1.8.OperationNotAllowed", "POST is not allowed on "+p
		case http.StatusBadRequest:
			id, msg = "Base.1.8.ActionNotSupported", fmt.Sprintf("The action %s is not supported by the resource.", path.Base(p))
		}
		if owner == nil && doc == nil {
			st, id, msg = http.StatusNotFound, "Base.1.8.ResourceMissingAtURI", fmt.Sprintf("The resource at the URI %s was not found.", p)
		}
		redfishError(w, st, id, msg)
		return
	}
	switch name {
	case "ComputerSystem.Reset":
		rt, _ := body["ResetType"].(string)
		if allowed, ok := act["ResetType@Redfish.AllowableValues"].([]any); ok && !contains(allowed, rt) {
			redfishError(w, http.StatusBadRequest, "Base.1.8.ActionParameterNotSupported",
				fmt.Sprintf("The parameter ResetType with the value %q is not supported by the action ComputerSystem.Reset.", rt))
			return
		}
		on := owner["PowerState"] == "On"
		switch rt {
		case "On", "ForceOn":
			on = true
		case "ForceOff", "GracefulShutdown":
			on = false
		case "ForceRestart", "GracefulRestart", "PowerCycle":
			if on {
				s.applyPending(owner)
			}
		case "PushPowerButton":
			on = !on
		case "Nmi":
		default:
			redfishError(w, http.StatusBadRequest, "Base.1.8.ActionParameterMissing", "The action ComputerSystem.Reset requires the parameter ResetType to be present in the request body.")
			return
		}
		if on && owner["PowerState"] != "On" {
			s.applyPending(owner)
		}
		if on {
			owner["PowerState"] = "On"
		} else {
			owner["PowerState"] = "Off"
		}
		w.WriteHeader(http.StatusNoContent)
	case "Manager.Reset":
		w.WriteHeader(http.StatusNoContent)
	case "VirtualMedia.InsertMedia":
		if s.opts.Quirks.InsertRefusesFlags {
			for _, k := range []string{"Inserted", "WriteProtected"} {
				if _, ok := body[k]; ok {
					redfishError(w, http.StatusBadRequest, "Base.1.8.ActionParameterNotSupported",
						fmt.Sprintf("The parameter %s for the action VirtualMedia.InsertMedia is not supported on the target resource.", k))
					return
				}
			}
		}
		img, _ := body["Image"].(string)
		if img == "" {
			redfishError(w, http.StatusBadRequest, "Base.1.8.ActionParameterMissing", "The action VirtualMedia.InsertMedia requires the parameter Image to be present in the request body.")
			return
		}
		owner["Image"] = img
		owner["Inserted"] = true
		if wp, ok := body["WriteProtected"].(bool); ok {
			owner["WriteProtected"] = wp
		}
		w.WriteHeader(http.StatusNoContent)
	case "VirtualMedia.EjectMedia":
		owner["Image"] = nil
		owner["Inserted"] = false
		w.WriteHeader(http.StatusNoContent)
	default:
		redfishError(w, http.StatusBadRequest, "Base.1.8.ActionNotSupported", fmt.Sprintf("The action %s is not supported by this recorded BMC.", name))
	}
}

// applyPending applies what waits for a system's start: its pending
// BIOS settings and the volumes created OnReset.
func (s *Server) applyPending(sys map[string]any) {
	for _, f := range s.atReset {
		f()
	}
	s.atReset = nil
	bl, _ := sys["Bios"].(map[string]any)
	if bl == nil {
		return
	}
	bios := s.docs[clean(fmt.Sprint(bl["@odata.id"]))]
	if bios == nil {
		return
	}
	st, _ := bios["@Redfish.Settings"].(map[string]any)
	so, _ := st["SettingsObject"].(map[string]any)
	if so == nil {
		return
	}
	pending := s.docs[clean(fmt.Sprint(so["@odata.id"]))]
	if pending == nil || pending["Attributes"] == nil {
		return
	}
	cur, _ := bios["Attributes"].(map[string]any)
	for k, v := range pending["Attributes"].(map[string]any) {
		if cur != nil {
			cur[k] = v
		}
	}
	pending["Attributes"] = map[string]any{}
}

func (s *Server) createVolume(w http.ResponseWriter, col string, body map[string]any) {
	s.nextID++
	id := fmt.Sprintf("Volume%d", s.nextID)
	vp := col + "/" + id
	doc := map[string]any{"@odata.id": vp, "@odata.type": "#Volume.v1_5_0.Volume", "Id": id, "Name": id}
	for _, k := range []string{"RAIDType", "CapacityBytes", "Links", "Name", "VolumeType"} {
		if v, ok := body[k]; ok {
			doc[k] = v
		}
	}
	if _, ok := doc["CapacityBytes"]; !ok {
		doc["CapacityBytes"] = 0
	}
	add := func() {
		s.docs[vp] = doc
		s.addMember(col, vp)
	}
	if body["@Redfish.OperationApplyTime"] == "OnReset" {
		s.atReset = append(s.atReset, add)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if s.opts.Quirks.VolumeTask {
		s.startTask(w, add)
		return
	}
	add()
	w.Header().Set("Location", vp)
	writeJSON(w, http.StatusCreated, doc)
}

func (s *Server) startTask(w http.ResponseWriter, done func()) {
	s.nextID++
	tp := fmt.Sprintf("%s/TaskService/Tasks/%d", root, s.nextID)
	t := &task{done: done, doc: map[string]any{"@odata.id": tp, "@odata.type": "#Task.v1_4_3.Task", "Id": fmt.Sprint(s.nextID), "Name": "Task", "TaskState": "Running"}}
	s.tasks[tp] = t
	w.Header().Set("Location", tp)
	writeJSON(w, http.StatusAccepted, t.doc)
}

func (s *Server) pollTask(w http.ResponseWriter, p string, t *task) {
	t.polls++
	if t.polls > s.opts.Quirks.TaskPolls && t.doc["TaskState"] == "Running" {
		t.doc["TaskState"] = "Completed"
		t.doc["PercentComplete"] = 100
		if t.done != nil {
			t.done()
		}
	}
	status := http.StatusOK
	if t.doc["TaskState"] == "Running" {
		status = http.StatusAccepted
	}
	writeJSON(w, status, t.doc)
}
