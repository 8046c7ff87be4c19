package engine

import (
	"sort"
)

// SiteSoftware returns what the site's edge agent said it runs, or ""
// when it said nothing (an agent older than that field) or never
// connected since the coordinator started.
func (e *Engine) SiteSoftware(site string) string { return e.sites.Software(site) }

// SiteCache returns the pre-seeds of a site's image cache that this
// coordinator asked for (CacheImage) and still remembers, newest first.
// Images the cache took on its own (a deploy's fetch through it) are not
// known to the coordinator.
func (e *Engine) SiteCache(site string) []CacheStatus {
	book := e.cacheBook()
	book.mu.Lock()
	var out []CacheStatus
	for _, st := range book.byID {
		if st.Site == site {
			out = append(out, *st)
		}
	}
	book.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].RequestedAt.After(out[j].RequestedAt) })
	return out
}
