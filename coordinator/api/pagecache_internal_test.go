package api

import (
	"bytes"
	"errors"
	"net/http/httptest"
	"testing"
)

func TestNodeListBytesIsWriteNodeList(t *testing.T) {
	for _, c := range []struct {
		next  string
		views []any
	}{
		{"", nil}, {"", []any{[]byte(`{"a":1}`)}}, {"http://x/v1/nodes?limit=2&marker=u<>", []any{[]byte(`{}`), nil, []byte(`{"b":2}`)}},
	} {
		rec := httptest.NewRecorder()
		writeNodeList(rec, c.next, c.views)
		b, err := nodeListBytes(c.next, c.views)
		if err != nil {
			t.Fatal(err)
		}
		rec2 := httptest.NewRecorder()
		writeNodeListBytes(rec2, b)
		if !bytes.Equal(rec.Body.Bytes(), rec2.Body.Bytes()) || rec.Header().Get("Content-Length") != rec2.Header().Get("Content-Length") ||
			rec.Header().Get("Content-Type") != rec2.Header().Get("Content-Type") || rec.Code != rec2.Code {
			t.Errorf("writeNodeList: %d %v %q; nodeListBytes: %d %v %q", rec.Code, rec.Header(), rec.Body.Bytes(), rec2.Code, rec2.Header(), rec2.Body.Bytes())
		}
	}
	if _, err := nodeListBytes("", []any{[]byte(`{}`), errors.New("boom")}); err == nil {
		t.Error("an encoding error is not reported")
	}
}

func TestPageCacheKeepsByGeneration(t *testing.T) {
	var c pageCache
	builds := 0
	build := func(g uint64) func() (uint64, []byte, bool) {
		return func() (uint64, []byte, bool) { builds++; return g, []byte{byte(g)}, true }
	}
	if b := c.page("k", 1, build(1)); b[0] != 1 || builds != 1 {
		t.Fatalf("first page %v, %d builds", b, builds)
	}
	if b := c.page("k", 1, build(1)); b[0] != 1 || builds != 1 {
		t.Fatalf("same generation: %v, %d builds", b, builds)
	}
	if b := c.page("k", 2, build(2)); b[0] != 2 || builds != 2 {
		t.Fatalf("a later generation: %v, %d builds", b, builds)
	}
	if b := c.page("k", 1, build(1)); b[0] != 2 || builds != 2 {
		t.Fatalf("an earlier generation takes the newer page: %v, %d builds", b, builds)
	}
	for i := 0; i < maxPages+2; i++ {
		c.page(string(rune('a'+i)), uint64(10+i), build(uint64(10+i)))
	}
	if len(c.pages) > maxPages {
		t.Errorf("%d pages kept, at most %d", len(c.pages), maxPages)
	}
}
