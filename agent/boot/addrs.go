package boot

import "net/url"

// Addrs are the addresses (host:port) the boot part listens on: the
// media server and the network boot's HTTP server. The edge agent's
// fetch rule refuses them (agent/fetchrule).
func (p *Boot) Addrs() []string {
	var out []string
	if p.media != nil {
		out = append(out, p.media.ln.Addr().String())
	}
	if st := p.netbootState(); st != nil && st.srv != nil {
		if u, err := url.Parse(st.srv.HTTPURL()); err == nil && u.Host != "" {
			out = append(out, u.Host)
		}
	}
	return out
}
