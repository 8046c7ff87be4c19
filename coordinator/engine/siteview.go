package engine

import (
	"sort"
	"strings"
	"unicode"
)

// maxSoftwareLen bounds what the engine keeps of an agent's software
// name: an agent's presence is authenticated, but it is shown to
// operators as it came.
const maxSoftwareLen = 200

// noteSiteSoftware records the software a site's edge agent names in
// its online presence (protocol.Message.Software); an offline presence
// keeps what the last online one said. It lives in memory: the broker
// delivers the retained presence again after a restart.
func (e *Engine) noteSiteSoftware(site string, online bool, software string) {
	if !online {
		return
	}
	software = strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return -1
	}, software)
	if len(software) > maxSoftwareLen {
		software = software[:maxSoftwareLen]
	}
	if software == "" {
		e.software.Delete(site)
		return
	}
	e.software.Store(site, software)
}

// SiteSoftware returns what the site's edge agent said it runs, or ""
// when it said nothing (an agent older than that field) or never
// connected since the coordinator started.
func (e *Engine) SiteSoftware(site string) string {
	v, _ := e.software.Load(site)
	s, _ := v.(string)
	return s
}

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
