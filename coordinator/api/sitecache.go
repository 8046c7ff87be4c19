package api

import "net/http"

// cacheImage is POST /v1/sites/{name}/cache: {"url": URL, "checksum":
// "sha256:HEX"} asks the site's edge agent to download the image into its
// cache ahead of deploys (202, with the request's status: state pending,
// and its command_id). {"command_id": ID} asks about that request instead:
// it is sent again while pending, and its outcome (state cached or
// failed, size, error) is returned once the agent answered. 404 for an
// unknown site or request; 400 for a bad URL or checksum.
func (s *Server) cacheImage(w http.ResponseWriter, r *http.Request) {
	var body struct {
		URL       string `json:"url"`
		Checksum  string `json:"checksum"`
		CommandID string `json:"command_id"`
	}
	if !decode(w, r, &body) {
		return
	}
	if body.CommandID != "" && (body.URL != "" || body.Checksum != "") {
		writeError(w, 400, "give either url and checksum (a new pre-seed) or command_id (the status of one), not both")
		return
	}
	st, err := s.e.CacheImage(r.PathValue("name"), body.URL, body.Checksum, body.CommandID)
	if err != nil {
		writeErr(w, err)
		return
	}
	code := http.StatusAccepted
	if body.CommandID != "" {
		code = http.StatusOK
	}
	writeJSON(w, code, st)
}
