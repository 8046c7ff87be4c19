package api

import "net/http"

// cacheImage is POST /v1/sites/{name}/cache. Not built yet.
func (s *Server) cacheImage(w http.ResponseWriter, r *http.Request) {
	s.notFound(w, r)
}
