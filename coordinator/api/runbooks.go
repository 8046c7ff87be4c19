package api

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/bmedge/bmedge/coordinator/engine"
	"github.com/bmedge/bmedge/coordinator/fsm"
)

// Runbooks (API 1.92; below it the resource is 404 to GET and 405 to the
// other methods), in the shape of Ironic 1.92's RunbooksController: list
// (uuid and name, or ?detail=True or ?fields=; ?project= keeps a
// project's), show, create (201), PATCH of name, steps, extra, public
// and owner, delete (204). PUT .../states/provision with target clean or
// service and runbook NAME runs the runbook's steps (runbookRequest).

// minorRunbooks is the version of runbooks.
const minorRunbooks = 92

var runbookFields = []string{"uuid", "name", "steps", "extra", "public", "owner", "disable_ramdisk", "created_at", "updated_at"}

func runbookView(r *http.Request, rb fsm.Runbook) map[string]any {
	v := catalogView(r, "runbooks", rb.UUID, rb.Name, rb.Extra, rb.CreatedAt, rb.UpdatedAt)
	steps := make([]map[string]any, 0, len(rb.Steps))
	for _, s := range rb.Steps {
		steps = append(steps, map[string]any{"interface": s.Interface, "step": s.Step, "args": maskArgs(s.Args), "order": s.Order})
	}
	v["steps"] = steps
	v["public"], v["owner"], v["disable_ramdisk"] = rb.Public, nullable(rb.Owner), rb.DisableRamdisk
	return v
}

// runbookDoc is rb as the document a PATCH applies to (unmasked).
func runbookDoc(rb fsm.Runbook) map[string]any {
	steps := make([]any, 0, len(rb.Steps))
	for _, s := range rb.Steps {
		args := map[string]any{}
		for k, v := range s.Args {
			args[k] = v
		}
		steps = append(steps, map[string]any{"interface": s.Interface, "step": s.Step, "args": args, "order": float64(s.Order)})
	}
	doc := map[string]any{"uuid": rb.UUID, "name": rb.Name, "steps": steps, "public": rb.Public,
		"disable_ramdisk": rb.DisableRamdisk, "owner": nullable(rb.Owner)}
	doc["extra"] = map[string]any{}
	if rb.Extra != nil {
		doc["extra"] = rb.Extra
	}
	return doc
}

func (s *Server) listRunbooks(w http.ResponseWriter, r *http.Request) {
	project, filter := r.URL.Query()["project"]
	var items []catalogItem
	for _, rb := range s.e.Runbooks() {
		if filter && (len(project) != 1 || rb.Owner != project[0]) {
			continue
		}
		items = append(items, catalogItem{uuid: rb.UUID, name: rb.Name, created: rb.CreatedAt, updated: rb.UpdatedAt, owner: rb.Owner, view: runbookView(r, rb)})
	}
	listCatalog(w, r, catalogList{collection: "runbooks", what: "Runbook", fields: runbookFields, defaults: []string{"uuid", "name"},
		params: []string{"project"}, sortKeys: byName}, items)
}

func (s *Server) getRunbook(w http.ResponseWriter, r *http.Request) {
	fields, err := catalogFields(r.URL.Query(), runbookFields)
	if err != nil {
		writeError(w, 400, err.Error())
		return
	}
	rb, err := s.e.Runbook(r.PathValue("id"))
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, 200, pickCatalog(runbookView(r, rb), fields))
}

func (s *Server) createRunbook(w http.ResponseWriter, r *http.Request) {
	var doc map[string]any
	if !decode(w, r, &doc) {
		return
	}
	rb, err := fsm.ParseRunbook(doc)
	if err != nil {
		writeError(w, 400, err.Error())
		return
	}
	rb, err = s.e.CreateRunbook(rb)
	if err != nil {
		writeErr(w, err)
		return
	}
	w.Header().Set("Location", baseURL(r)+"/v1/runbooks/"+rb.UUID)
	writeJSON(w, 201, runbookView(r, rb))
}

func (s *Server) patchRunbook(w http.ResponseWriter, r *http.Request) {
	ops, ok := decodePatch(w, r)
	if !ok {
		return
	}
	// Ironic's rules for owner and public: a public runbook has no owner
	// (setting an owner needs public false in the same patch), and a
	// patch of public clears the owner before the patch applies.
	var ownerSet, publicSet, publicValue bool
	for _, op := range ops {
		var v any
		_ = json.Unmarshal(op.Value, &v)
		switch op.Path {
		case "/owner":
			ownerSet = ownerSet || (op.Op != "remove" && v != nil && v != "")
		case "/public":
			publicSet = true
			publicValue, _ = v.(bool)
		}
	}
	rb, err := s.e.UpdateRunbook(r.PathValue("id"), func(cur fsm.Runbook) (fsm.Runbook, error) {
		if ownerSet && ((cur.Public && !publicSet) || publicValue) {
			return cur, &engine.Error{Kind: engine.Invalid, Msg: fmt.Sprintf("There cannot be an owner for a public runbook (runbook %s); set public to false in the same patch to give it an owner", cur.Name)}
		}
		doc := runbookDoc(cur)
		if publicSet {
			doc["owner"] = nil
		}
		if err := patchCatalog(doc, ops, []string{"extra", "name", "steps", "public", "owner"}); err != nil {
			return cur, err
		}
		rb, err := fsm.ParseRunbook(doc)
		if err != nil {
			return cur, &engine.Error{Kind: engine.Invalid, Msg: err.Error()}
		}
		return rb, nil
	})
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, 200, runbookView(r, rb))
}

func (s *Server) deleteRunbook(w http.ResponseWriter, r *http.Request) {
	if err := s.e.DeleteRunbook(r.PathValue("id")); err != nil {
		writeErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// runbookRequest fills a provision request's steps from the runbook that
// raw (the body's runbook, a name or UUID) names, as Ironic 1.92's
// _handle_runbook: 406 below 1.92, 404 for a runbook that does not
// exist, 400 with clean_steps or service_steps given too. The state
// machine then refuses (400) a node without a trait of the runbook's
// name, and any verb but clean and service. It answers the request and
// returns false when it refuses.
func (s *Server) runbookRequest(w http.ResponseWriter, r *http.Request, req *fsm.VerbRequest, raw json.RawMessage) bool {
	if len(raw) == 0 || string(raw) == "null" {
		return true
	}
	if minor := apiMinor(r); minor < minorRunbooks {
		writeErr(w, tooNew("runbook", minorRunbooks, minor))
		return false
	}
	var name string
	if err := json.Unmarshal(raw, &name); err != nil || name == "" {
		writeError(w, 400, "Invalid runbook: it must be the name or UUID of a runbook (a string); list them with GET /v1/runbooks")
		return false
	}
	rb, err := s.e.Runbook(name)
	if err != nil {
		writeErr(w, err)
		return false
	}
	switch req.Verb {
	case fsm.Clean:
		if len(req.CleanSteps) > 0 {
			writeError(w, 400, "Please provide either \"clean_steps\" or a runbook, but not both.")
			return false
		}
		req.CleanSteps = rb.OrderedSteps()
	case fsm.Service:
		if len(req.ServiceSteps) > 0 {
			writeError(w, 400, "Please provide either \"service_steps\" or a runbook, but not both.")
			return false
		}
		req.ServiceSteps = rb.OrderedSteps()
	}
	req.Runbook, req.DisableRamdisk = rb.Name, rb.DisableRamdisk
	return true
}
