package cluster

import (
	"net/http"
	"net/http/httputil"
)

// Forward answers an API request on a follower with the leader's
// answer: the request goes over the link (mutual TLS) to the leader as
// it came, the caller's credentials with it, and the caller's address
// in ForwardedFor; the leader authenticates it as its own. With no
// leader the answer is 503 with Retry-After.
func (m *Member) Forward(w http.ResponseWriter, r *http.Request) {
	leader := m.Leader()
	if leader.Name == "" || leader.Name == m.cfg.Name || m.client == nil {
		Unavailable(w, "the cluster has no leader at the moment (an election is under way, or a majority of its members is down); try again")
		return
	}
	p := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "https"
			pr.Out.URL.Host = leader.Addr
			pr.Out.Host = pr.In.Host
			pr.Out.Header.Set(ForwardedFor, pr.In.RemoteAddr)
		},
		Transport:     m.client.Transport,
		FlushInterval: -1, // the web view's event streams
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			m.log.Warn("forwarding to the leader failed", "leader", leader.Name, "err", err)
			Unavailable(w, "the cluster's leader "+leader.Name+" did not answer (it may have just stopped); try again")
		},
	}
	p.ServeHTTP(w, r)
}
