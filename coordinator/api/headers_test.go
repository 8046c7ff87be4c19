package api_test

import (
	"testing"

	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestAnswerHeaders (issue 30): every /v1 answer, found or not, good or
// refused, carries X-Content-Type-Options: nosniff and Cache-Control:
// no-store (curl, an independent client, reads them).
func TestAnswerHeaders(t *testing.T) {
	c := testrig.Coordinator(t, testrig.Options{})
	base := testrig.NewClient(t, c).Base
	for _, tc := range []struct{ method, path, body string }{
		{"GET", "/", ""},
		{"GET", "/v1", ""},
		{"GET", "/v1/nodes", ""},
		{"GET", "/v1/nodes/no-such-node", ""},
		{"POST", "/v1/nodes", `{"driver":"no-such-driver"}`},
		{"GET", "/v1/sites", ""},
	} {
		a := vcurl(t, base, "", tc.method, tc.path, tc.body)
		if a.header["x-content-type-options"] != "nosniff" || a.header["cache-control"] != "no-store" {
			t.Errorf("%s %s (%d): X-Content-Type-Options %q, Cache-Control %q; want nosniff and no-store",
				tc.method, tc.path, a.status, a.header["x-content-type-options"], a.header["cache-control"])
		}
	}
}
