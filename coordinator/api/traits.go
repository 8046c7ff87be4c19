package api

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/bmedge/bmedge/coordinator/fsm"
)

// Node traits (API 1.37; below it the path is 404, see nodeSubSince), as
// Ironic's NodeTraitsController: GET lists them, PUT with {"traits":
// [...]} replaces them all, PUT .../traits/TRAIT (no body) adds one,
// DELETE .../traits/TRAIT removes one, DELETE .../traits removes all.
// Traits change in any provision state, not while the node is locked.

func (s *Server) getTraits(w http.ResponseWriter, r *http.Request) {
	t, err := s.e.Traits(r.PathValue("id"))
	if err != nil {
		writeErr(w, err)
		return
	}
	if t == nil {
		t = []string{}
	}
	writeJSON(w, 200, map[string]any{"traits": t})
}

// traitsBodyRule is Ironic's message for a PUT that is neither form.
const traitsBodyRule = "A single node trait may be added via PUT /v1/nodes/<node identifier>/traits/<trait> with no body, or all node traits may be replaced via PUT /v1/nodes/<node identifier>/traits with the list of traits specified in the request body."

func (s *Server) setTraits(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength == 0 {
		writeError(w, 400, traitsBodyRule)
		return
	}
	var raw map[string]json.RawMessage
	if !decode(w, r, &raw) {
		return
	}
	for k := range raw {
		if k != "traits" {
			writeError(w, 400, fmt.Sprintf("Invalid input: additional properties are not allowed (%s was unexpected); the body is {\"traits\": [TRAIT, ...]}", shortQuote(k)))
			return
		}
	}
	body, ok := raw["traits"]
	if !ok || string(body) == "null" {
		writeError(w, 400, traitsBodyRule)
		return
	}
	var list []string
	if err := json.Unmarshal(body, &list); err != nil {
		writeError(w, 400, "Invalid input for field traits: it must be a list of trait names (strings), such as [\"CUSTOM_BIOS_TUNED\", \"HW_CPU_X86_AVX2\"]")
		return
	}
	err := s.e.ChangeTraits(r.PathValue("id"), func(ident string, _ []string) ([]string, error) {
		return fsm.SetTraits(ident, list)
	})
	if err != nil {
		writeErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) addTrait(w http.ResponseWriter, r *http.Request) {
	trait := r.PathValue("trait")
	// Ironic: "No body should be provided when adding a trait" (an empty
	// body, or an empty JSON object or list, is no body).
	b, err := io.ReadAll(io.LimitReader(r.Body, MaxBodyBytes))
	if err != nil {
		writeError(w, 400, "cannot read request body: "+err.Error())
		return
	}
	if t := strings.TrimSpace(string(b)); t != "" && t != "{}" && t != "[]" && t != "null" && t != `""` {
		writeError(w, 400, "No body should be provided when adding a trait (PUT /v1/nodes/<node>/traits/<trait>); to replace all traits, PUT /v1/nodes/<node>/traits with {\"traits\": [...]}")
		return
	}
	id := r.PathValue("id")
	err = s.e.ChangeTraits(id, func(ident string, cur []string) ([]string, error) {
		return fsm.AddTrait(ident, cur, trait)
	})
	if err != nil {
		writeErr(w, err)
		return
	}
	w.Header().Set("Location", baseURL(r)+"/v1/nodes/"+url.PathEscape(id)+"/traits/"+url.PathEscape(trait))
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) deleteTrait(w http.ResponseWriter, r *http.Request) {
	trait := r.PathValue("trait")
	err := s.e.ChangeTraits(r.PathValue("id"), func(ident string, cur []string) ([]string, error) {
		return fsm.RemoveTrait(ident, cur, trait)
	})
	if err != nil {
		writeErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) deleteTraits(w http.ResponseWriter, r *http.Request) {
	err := s.e.ChangeTraits(r.PathValue("id"), func(string, []string) ([]string, error) { return nil, nil })
	if err != nil {
		writeErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// traitsOf is the node's traits field (always a list).
func traitsOf(n *fsm.Node) []string {
	if len(n.Traits) == 0 {
		return []string{}
	}
	return append([]string(nil), n.Traits...)
}
