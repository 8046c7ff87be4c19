package ui

import (
	"net/http"
	"time"

	"github.com/bmedge/bmedge/coordinator/cluster"
)

type clusterPage struct {
	Title string
	Page  string
	// Member is false for a single coordinator (no cluster).
	Member bool
	Status cluster.Status
	// Err is why the status could not be read.
	Err string
	Now time.Time
}

// clusterView is the cluster's members as the member serving the page
// (the leader: a follower passes the web view on) sees them: the facts of
// `coordinator cluster status`. A single coordinator's page says it is
// one.
func (h *Handler) clusterView(w http.ResponseWriter, r *http.Request) {
	p := clusterPage{Title: "Cluster", Page: "cluster", Now: time.Now(), Member: h.o.Cluster != nil}
	if p.Member {
		st, err := h.o.Cluster()
		if err != nil {
			p.Err = err.Error()
		}
		p.Status = st
	}
	h.render(w, r, "cluster", p)
}
