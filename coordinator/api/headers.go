package api

import "net/http"

// answerHeaders are set on every answer of the API, refusals included:
// a browser never sniffs a JSON or text answer into HTML
// (X-Content-Type-Options), and no cache (a browser's, a proxy's) keeps
// one, which may hold node details, a site's credential or a backup
// (Cache-Control: no-store).
func answerHeaders(h http.Header) {
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
}
