package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/bmedge/bmedge/coordinator/engine"
)

// showSite is GET /v1/sites/{name}: the site as the list shows it, with
// its discovered nodes (discovered_nodes).
func (s *Server) showSite(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	found, err := s.e.SiteDiscovered(name)
	if err != nil {
		writeErr(w, err)
		return
	}
	for _, i := range s.e.Sites() {
		if i.Name == name {
			b, _ := json.Marshal(i)
			var out map[string]any
			_ = json.Unmarshal(b, &out)
			// One answer, one count: the list and its count from the
			// same reading (the site list's count is read apart, and a
			// node enrolled between the two readings would make them
			// disagree).
			out["discovered_nodes"] = found
			out["discovered"] = len(found)
			writeJSON(w, 200, out)
			return
		}
	}
	writeError(w, 404, fmt.Sprintf("site %s could not be found; 'coordinator site list' shows the sites", name))
}

// siteFields are what PATCH /v1/sites/{name} changes.
var siteFields = []string{"discovery", "discovery_driver", "discovery_max_nodes", "discovery_rate"}

// patchSite is PATCH /v1/sites/{name}: a JSON object of the discovery
// fields to change (a merge, not a JSON Patch: a site has no other
// field to change); any other key is refused.
func (s *Server) patchSite(w http.ResponseWriter, r *http.Request) {
	var body map[string]json.RawMessage
	if !decode(w, r, &body) {
		return
	}
	if len(body) == 0 {
		writeError(w, 400, "nothing to change: send a JSON object with one or more of "+strings.Join(siteFields, ", "))
		return
	}
	keys := make([]string, 0, len(body))
	for k := range body {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var c engine.SiteDiscoveryChange
	for _, k := range keys {
		v := body[k]
		var err error
		switch k {
		case "discovery":
			c.Enabled = new(bool)
			err = json.Unmarshal(v, c.Enabled)
		case "discovery_max_nodes":
			c.MaxNodes = new(int)
			err = json.Unmarshal(v, c.MaxNodes)
		case "discovery_rate":
			c.Rate = new(int)
			err = json.Unmarshal(v, c.Rate)
		case "discovery_driver":
			c.Driver = new(string)
			err = json.Unmarshal(v, c.Driver)
		default:
			writeError(w, 400, fmt.Sprintf("a site has no field %q that can be changed; the fields are %s", k, strings.Join(siteFields, ", ")))
			return
		}
		if err != nil {
			writeError(w, 400, fmt.Sprintf("site field %q: %v", k, err))
			return
		}
	}
	if err := s.e.SetSiteDiscovery(r.PathValue("name"), c); err != nil {
		writeErr(w, err)
		return
	}
	s.showSite(w, r)
}
