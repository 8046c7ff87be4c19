package api

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
)

// Detail lists of nodes are answered from whole pages kept while nothing
// they show changed (engine.ViewsGen): a client polling the same page of
// an unchanged fleet gets the bytes of the last answer, not a new build
// of it from every node's kept JSON. The page is the one writeNodeList
// writes, byte for byte (nodeListBytes). A page built is kept with the
// generation read before its nodes were, so that it is never newer than
// its number says; a request that finds a page of the generation it read
// on arrival, or a later one, takes it. One page is built at a time:
// readers that arrive meanwhile wait for it and take it if it is current
// for them, so that many clients listing at once after a change hold one
// copy of the page, not one each.

// maxPages is how many pages are kept (each ~4 MB for 1000 nodes).
const maxPages = 4

type keptPage struct {
	gen  uint64
	body []byte
}

type pageCache struct {
	mu    sync.Mutex
	pages map[string]keptPage
	build sync.Mutex
}

func (c *pageCache) get(key string, gen uint64) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.pages[key]; ok && p.gen >= gen {
		return p.body
	}
	return nil
}

func (c *pageCache) put(key string, gen uint64, body []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pages == nil {
		c.pages = map[string]keptPage{}
	}
	if _, ok := c.pages[key]; !ok && len(c.pages) >= maxPages {
		// Drop the oldest page.
		oldest := ""
		for k, p := range c.pages {
			if oldest == "" || p.gen < c.pages[oldest].gen {
				oldest = k
			}
		}
		delete(c.pages, oldest)
	}
	c.pages[key] = keptPage{gen: gen, body: body}
}

// page returns the page for key, current for generation gen (read before
// the call): a kept one, or what build makes (from views read after gen
// was; it returns the generation to keep it with, and whether to keep
// it).
func (c *pageCache) page(key string, gen uint64, build func() (gen uint64, body []byte, keep bool)) []byte {
	if b := c.get(key, gen); b != nil {
		return b
	}
	c.build.Lock()
	defer c.build.Unlock()
	if b := c.get(key, gen); b != nil {
		return b
	}
	g, b, keep := build()
	if keep {
		c.put(key, g, b)
	}
	return b
}

// nodeListBytes is the answer writeNodeList writes, as bytes, or the
// first view that is an encoding error.
func nodeListBytes(next string, views []any) ([]byte, error) {
	var nb []byte
	if next != "" {
		nb, _ = json.Marshal(next)
	}
	size, count := 1+len(`"nodes":[`)+len("]}\n"), 0
	if nb != nil {
		size += len(`"next":`) + len(nb) + 1
	}
	for _, v := range views {
		switch v := v.(type) {
		case []byte:
			size += len(v)
			count++
		case error:
			return nil, v
		}
	}
	if count > 1 {
		size += count - 1
	}
	out := make([]byte, 0, size)
	out = append(out, '{')
	if nb != nil {
		out = append(out, `"next":`...)
		out = append(out, nb...)
		out = append(out, ',')
	}
	out = append(out, `"nodes":[`...)
	first := true
	for _, v := range views {
		if b, ok := v.([]byte); ok {
			if !first {
				out = append(out, ',')
			}
			first = false
			out = append(out, b...)
		}
	}
	return append(out, "]}\n"...), nil
}

// writeNodeListBytes writes a page from nodeListBytes as writeNodeList
// writes it.
func writeNodeListBytes(w http.ResponseWriter, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(200)
	_, _ = w.Write(b)
}
