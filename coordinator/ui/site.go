package ui

import (
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/bmedge/bmedge/coordinator/engine"
	"github.com/bmedge/bmedge/coordinator/fsm"
)

// cacheRow is one pre-seed of a site's image cache as the site page
// shows it: the URL without credentials or query (a signed URL's token
// is a secret).
type cacheRow struct {
	engine.CacheStatus
	Shown string
}

type sitePage struct {
	Title       string
	Page        string
	Site        engine.SiteInfo
	Software    string
	States      []stateCount
	Failed      int
	Maintenance int
	Retired     int
	Nodes       []Summary
	Query       url.Values
	Cache       []cacheRow
	// Discovered are the site's nodes that discovery enrolled.
	Discovered []engine.DiscoveredNode
	Now        time.Time
}

// site is a site's page: its reachability, its edge agent's software,
// its nodes per state and the first page of them, and the pre-seeds of
// its image cache the coordinator remembers.
func (h *Handler) site(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	p := sitePage{Title: "Site " + name, Page: "site", Now: time.Now(), Query: url.Values{"site": {name}}}
	found := false
	for _, s := range h.e.Sites() {
		if s.Name == name {
			p.Site, found = s, true
		}
	}
	if !found {
		http.Error(w, fmt.Sprintf("Site %s could not be found: the fleet page at /ui/ lists the sites", name), http.StatusNotFound)
		return
	}
	p.Software = h.e.SiteSoftware(name)
	all := map[string]int{}
	h.e.Each(func(n *fsm.Node) bool {
		if n.Site != name {
			return true
		}
		st := string(n.ProvisionState)
		all[st]++
		if failedState(st) {
			p.Failed++
		}
		if n.Maintenance {
			p.Maintenance++
		}
		if n.Retired {
			p.Retired++
		}
		if len(p.Nodes) < PageSize {
			p.Nodes = append(p.Nodes, summarize(n, p.Site.Online))
		}
		return true
	})
	p.States = counts(all)
	p.Discovered, _ = h.e.SiteDiscovered(name)
	for _, c := range h.e.SiteCache(name) {
		p.Cache = append(p.Cache, cacheRow{CacheStatus: c, Shown: shownURL(c.URL)})
	}
	h.render(w, r, "site", p)
}

// shownURL is an image URL without user information, query or fragment.
func shownURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(a URL that does not parse)"
	}
	u.User = nil
	if u.RawQuery != "" {
		u.RawQuery = "…"
	}
	u.Fragment = ""
	s := u.String()
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
