package redfish

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
)

// Fewer round trips: the service root is read once per login and kept
// (it does not change while a session lasts), and a read-only operation
// reads each resource once, however many of its parts need it (the
// system, above all). Both are done in the transport, under gofish.

const rootPath = "/redfish/v1"

// cachingTransport keeps the service root of the current login and
// serves the GETs of an operation that carries a readCache.
type cachingTransport struct {
	base http.RoundTripper

	mu   sync.Mutex
	root []byte // the service root's body, nil when not read this login
	// expand: the root says the service takes $expand=.($levels=1)
	// (ProtocolFeaturesSupported.ExpandQuery Levels, with NoLinks or
	// ExpandAll): a collection and its members in one request.
	expand bool
}

// expandQuery is the query that reads a collection with its members.
const expandQuery = "$expand=.($levels=1)"

// canExpand tells whether this login's service takes expandQuery.
func (t *cachingTransport) canExpand() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.expand
}

// noExpand: the service refused expandQuery; read members one by one.
func (t *cachingTransport) noExpand() {
	t.mu.Lock()
	t.expand = false
	t.mu.Unlock()
}

// forget drops the service root (a new login reads it again).
func (t *cachingTransport) forget() {
	t.mu.Lock()
	t.root, t.expand = nil, false
	t.mu.Unlock()
}

func isRoot(p string) bool { return strings.TrimSuffix(p, "/") == rootPath }

func cachedResponse(req *http.Request, body []byte) *http.Response {
	return &http.Response{
		StatusCode: http.StatusOK, Status: "200 OK", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": []string{"application/json"}},
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)), Request: req,
	}
}

func (t *cachingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet {
		return t.base.RoundTrip(req)
	}
	if isRoot(req.URL.Path) {
		t.mu.Lock()
		root := t.root
		t.mu.Unlock()
		if root != nil {
			return cachedResponse(req, root), nil
		}
		resp, body, err := t.fetch(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			return resp, err
		}
		expand := expandSupported(body)
		body = cleanRoot(body)
		t.mu.Lock()
		t.root, t.expand = body, expand
		t.mu.Unlock()
		return cachedResponse(req, body), nil
	}
	rc, _ := req.Context().Value(readCacheKey{}).(*readCache)
	if rc == nil || req.Header.Get("If-None-Match") != "" {
		return t.base.RoundTrip(req)
	}
	key := req.URL.RequestURI()
	rc.mu.Lock()
	e := rc.docs[key]
	if e == nil {
		e = &cacheEntry{done: make(chan struct{})}
		rc.docs[key] = e
		rc.mu.Unlock()
		resp, body, err := t.fetch(req)
		if err == nil && resp.StatusCode == http.StatusOK {
			e.body = body
			close(e.done)
			if strings.Contains(req.URL.RawQuery, "expand") || strings.Contains(req.URL.RawQuery, "%24expand") {
				rc.seed(body)
			}
			return cachedResponse(req, body), nil
		}
		// Not kept: an error is the caller's to see, and a later
		// read may do better.
		rc.mu.Lock()
		delete(rc.docs, key)
		rc.mu.Unlock()
		close(e.done)
		if err != nil {
			return nil, err
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
		return resp, nil
	}
	rc.mu.Unlock()
	select {
	case <-e.done:
	case <-req.Context().Done():
		return nil, req.Context().Err()
	}
	if e.body == nil {
		return t.base.RoundTrip(req) // the first read failed: try ourselves
	}
	return cachedResponse(req, e.body), nil
}

// fetch does the request and reads the whole body.
func (t *cachingTransport) fetch(req *http.Request) (*http.Response, []byte, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return nil, nil, err
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	resp.Body.Close()
	if err != nil {
		return nil, nil, err
	}
	return resp, body, nil
}

// cleanRoot leaves ProtocolFeaturesSupported out of the service root:
// the driver does not use it, and gofish refuses the whole root when a
// BMC gives one of its fields another type than the schema's (sushy's
// samples give ExpandQuery as a bool), which would make the BMC unusable.
func cleanRoot(body []byte) []byte {
	var root map[string]json.RawMessage
	if json.Unmarshal(body, &root) != nil {
		return body
	}
	if _, ok := root["ProtocolFeaturesSupported"]; !ok {
		return body
	}
	delete(root, "ProtocolFeaturesSupported")
	if b, err := json.Marshal(root); err == nil {
		return b
	}
	return body
}

// readCache is one read-only operation's resources, each read once.
type readCache struct {
	mu   sync.Mutex
	docs map[string]*cacheEntry
}

// seed keeps the members of an expanded collection, so that their
// reads that follow are answered from it.
func (rc *readCache) seed(body []byte) {
	var col struct {
		Members []map[string]json.RawMessage `json:"Members"`
	}
	if json.Unmarshal(body, &col) != nil {
		return
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, m := range col.Members {
		var id string
		if len(m) < 2 || json.Unmarshal(m["@odata.id"], &id) != nil || id == "" {
			continue // a link, not the member
		}
		if u, err := url.Parse(id); err == nil {
			id = u.RequestURI()
		}
		if rc.docs[id] != nil {
			continue
		}
		doc, err := json.Marshal(m)
		if err != nil {
			continue
		}
		e := &cacheEntry{done: make(chan struct{}), body: doc}
		close(e.done)
		rc.docs[id] = e
	}
}

// expandSupported reads the root's ProtocolFeaturesSupported.ExpandQuery.
func expandSupported(root []byte) bool {
	var doc struct {
		PFS struct {
			ExpandQuery json.RawMessage `json:"ExpandQuery"`
		} `json:"ProtocolFeaturesSupported"`
	}
	if json.Unmarshal(root, &doc) != nil {
		return false
	}
	var eq struct {
		ExpandAll bool `json:"ExpandAll"`
		Levels    bool `json:"Levels"`
		NoLinks   bool `json:"NoLinks"`
	}
	if json.Unmarshal(doc.PFS.ExpandQuery, &eq) != nil {
		return false // absent, or not the schema's object (a bool)
	}
	return eq.Levels && (eq.NoLinks || eq.ExpandAll)
}

type cacheEntry struct {
	done chan struct{}
	body []byte
}

type readCacheKey struct{}

// reading returns ctx with a fresh read cache: the GETs under it are
// each made once.
func reading(ctx context.Context) context.Context {
	if rc, _ := ctx.Value(readCacheKey{}).(*readCache); rc != nil {
		return ctx
	}
	return context.WithValue(ctx, readCacheKey{}, &readCache{docs: map[string]*cacheEntry{}})
}
