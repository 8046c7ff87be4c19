package api

import (
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// TestWriteNodeListLength: the streamed node list has exactly the
// Content-Length it announces and is the JSON writeJSON would write,
// with and without next, with skipped (nil) views, and past the
// writer's 64 KiB buffer; an error view is a 500.
func TestWriteNodeListLength(t *testing.T) {
	big := []byte(`{"uuid":"` + strings.Repeat("x", 100<<10) + `"}`)
	for _, c := range []struct {
		name  string
		next  string
		views []any
		n     int
	}{
		{"empty", "", nil, 0},
		{"one", "", []any{[]byte(`{"uuid":"a"}`)}, 1},
		{"next and a deleted node", "http://h/v1/nodes?marker=a\"b", []any{[]byte(`{"uuid":"a"}`), nil, []byte(`{"uuid":"b"}`)}, 2},
		{"larger than the buffer", "", []any{big, big, []byte(`{}`)}, 3},
	} {
		rec := httptest.NewRecorder()
		writeNodeList(rec, c.next, c.views)
		body := rec.Body.Bytes()
		if cl, _ := strconv.Atoi(rec.Header().Get("Content-Length")); cl != len(body) {
			t.Fatalf("%s: Content-Length %d, body %d bytes", c.name, cl, len(body))
		}
		var doc struct {
			Next  string            `json:"next"`
			Nodes []json.RawMessage `json:"nodes"`
		}
		if err := json.Unmarshal(body, &doc); err != nil || len(doc.Nodes) != c.n || doc.Next != c.next || !strings.HasSuffix(string(body), "]}\n") {
			t.Fatalf("%s: %v, %d nodes, next %q: %.200s", c.name, err, len(doc.Nodes), doc.Next, body)
		}
	}
	rec := httptest.NewRecorder()
	writeNodeList(rec, "", []any{[]byte(`{}`), errors.New("boom")})
	if rec.Code != 500 {
		t.Fatalf("an error view: %d, want 500", rec.Code)
	}
}
