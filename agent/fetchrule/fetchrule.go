// Package fetchrule is the edge agent's rule for what it fetches on an
// operator's behalf (images, firmware images, config drives): never from
// the agent's own host (loopback, unspecified), a link-local address (a
// cloud's metadata service at 169.254.169.254), the agent's own
// listeners or the site's BMCs, unless the operator allows the network
// with the agent's --fetch-allow CIDR. The rule is checked on the
// address actually dialled (a net.Dialer Control hook, after DNS), so a
// name that resolves to a refused address (DNS rebinding) is refused as
// well, and on every redirect (docs/security.md, "What the edge agent
// fetches").
package fetchrule

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bmedge/bmedge/lib/fetchwords"
)

// Flag is the agent flag that allows a network.
const Flag = "--fetch-allow"

// MaxRedirects bounds the redirects a fetch follows.
const MaxRedirects = 5

// Rule says which addresses the agent may fetch from. The zero Rule
// refuses loopback, link-local, unspecified and multicast addresses.
type Rule struct {
	// Allow are the networks the operator allows (--fetch-allow): an
	// address in one is fetched from even if it is loopback,
	// link-local or a BMC's. The agent's own listeners stay refused.
	Allow []netip.Prefix
	// BMCNets are networks of the site's BMCs (--bmc-network): refused
	// unless allowed.
	BMCNets []netip.Prefix
	// BMCs returns the addresses of the BMCs the agent knows (their
	// driver_info address: a host, host:port or URL); those given as an
	// IP are refused unless allowed.
	BMCs func() []string
	// Own returns the agent's own listeners (host:port): always refused.
	Own func() []string
}

// Refused is the error of a refused address.
type Refused struct {
	Addr netip.AddrPort
	// Why names the rule, in words.
	Why string
	// Allowable: the operator may allow it with Flag (not for the
	// agent's own listeners).
	Allowable bool
}

func (e *Refused) Error() string {
	s := fmt.Sprintf("the edge agent does not fetch from %s on an operator's behalf: %s", e.Addr.Addr(), e.Why)
	if e.Allowable {
		net := "32"
		if e.Addr.Addr().Is6() {
			net = "128"
		}
		s += fmt.Sprintf(" (to allow it, start the edge agent with %s %s/%s, or a wider network)", Flag, e.Addr.Addr(), net)
	}
	return s
}

// Check tells whether the agent may fetch from addr.
func (r *Rule) Check(addr netip.AddrPort) error {
	ip := addr.Addr().Unmap()
	addr = netip.AddrPortFrom(ip, addr.Port())
	for _, o := range r.own() {
		if o.Port() == addr.Port() && (o.Addr() == ip || (o.Addr().IsUnspecified() && isLocal(ip))) {
			return &Refused{Addr: addr, Why: fmt.Sprintf("port %d there is one of the edge agent's own listeners", addr.Port())}
		}
	}
	if ip.IsUnspecified() || ip.IsMulticast() || ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}) || (ip.Is4() && ip.As4()[0] == 0) {
		return &Refused{Addr: addr, Why: "it is not a host's address (unspecified, multicast or broadcast)"}
	}
	for _, p := range r.Allow {
		if p.Contains(ip) {
			return nil
		}
	}
	refuse := func(why string) error { return &Refused{Addr: addr, Why: why, Allowable: true} }
	switch {
	case ip.IsLoopback():
		return refuse("it is a loopback address, the edge agent's own host")
	case ip.IsLinkLocalUnicast():
		return refuse("it is a link-local address (169.254.0.0/16 or fe80::/10, where a cloud's metadata service answers)")
	}
	for _, p := range r.BMCNets {
		if p.Contains(ip) {
			return refuse(fmt.Sprintf("it is in the BMC network %s (--bmc-network)", p))
		}
	}
	if r.BMCs != nil {
		for _, b := range r.BMCs() {
			if a, ok := bmcIP(b); ok && a == ip {
				return refuse("it is the address of one of the site's BMCs")
			}
		}
	}
	return nil
}

func (r *Rule) own() []netip.AddrPort {
	if r.Own == nil {
		return nil
	}
	var out []netip.AddrPort
	for _, s := range r.Own() {
		h, p, err := net.SplitHostPort(s)
		if err != nil {
			continue
		}
		port, err := strconv.ParseUint(p, 10, 16)
		if err != nil {
			continue
		}
		a, err := netip.ParseAddr(strings.Trim(h, "[]"))
		if h == "" {
			a, err = netip.IPv6Unspecified(), nil
		}
		if err != nil {
			continue
		}
		out = append(out, netip.AddrPortFrom(a.Unmap(), uint16(port)))
	}
	return out
}

// bmcIP is the IP of a BMC address (host, host:port, [v6]:port or URL).
func bmcIP(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	if u, err := url.Parse(s); err == nil && u.Host != "" {
		s = u.Hostname()
	} else if h, _, err := net.SplitHostPort(s); err == nil {
		s = h
	}
	a, err := netip.ParseAddr(strings.Trim(s, "[]"))
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

// isLocal tells whether ip is one of this host's addresses.
func isLocal(ip netip.Addr) bool {
	if ip.IsLoopback() || ip.IsUnspecified() {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if x, ok := netip.AddrFromSlice(n.IP); ok && x.Unmap() == ip {
				return true
			}
		}
	}
	return false
}

// control is the net.Dialer Control hook: the address about to be
// dialled, after name resolution.
func (r *Rule) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("the edge agent cannot tell the address %q it is about to dial", address)
	}
	return r.Check(ap)
}

// Dialer returns a dialer that refuses what the rule refuses.
func (r *Rule) Dialer(timeout time.Duration) *net.Dialer {
	return &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second, Control: r.control}
}

// CheckURL checks a URL before a fetch: http or https, and a host that
// is an IP checked at once (the dial checks names once resolved).
func (r *Rule) CheckURL(u *url.URL) error {
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%s is not an http:// or https:// URL", redactHost(u))
	}
	if a, err := netip.ParseAddr(strings.Trim(u.Hostname(), "[]")); err == nil {
		port := u.Port()
		if port == "" {
			port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
		}
		p, _ := strconv.ParseUint(port, 10, 16)
		return r.Check(netip.AddrPortFrom(a, uint16(p)))
	}
	if strings.EqualFold(strings.TrimSuffix(u.Hostname(), "."), "localhost") {
		// Resolved by the dial anyway; refused here with the same words
		// when the operator has not allowed loopback.
		p, _ := strconv.ParseUint(u.Port(), 10, 16)
		return r.Check(netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(p)))
	}
	return nil
}

func redactHost(u *url.URL) string {
	if u.Host == "" {
		return "the URL"
	}
	return "the URL of " + u.Host
}

// CheckRedirect is an http.Client CheckRedirect that holds every
// redirect to the rule and to MaxRedirects.
func (r *Rule) CheckRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= MaxRedirects {
		return errTooManyRedirects
	}
	if err := r.CheckURL(req.URL); err != nil {
		return &Redirect{Host: req.URL.Host, Err: err}
	}
	return nil
}

var errTooManyRedirects = fmt.Errorf("more than %d redirects", MaxRedirects)

// Redirect is a refused redirect.
type Redirect struct {
	Host string
	Err  error
}

func (e *Redirect) Error() string {
	return fmt.Sprintf("a redirect to %s was refused: %v", e.Host, e.Err)
}
func (e *Redirect) Unwrap() error { return e.Err }

// Transport returns an HTTP transport that dials only what the rule
// allows. A proxy from the environment is used; the rule then checks
// the proxy's address and the URLs' IP hosts, and the proxy decides the
// rest.
func (r *Rule) Transport() *http.Transport {
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           r.Dialer(30 * time.Second).DialContext,
		TLSHandshakeTimeout:   30 * time.Second,
		ResponseHeaderTimeout: 60 * time.Second,
		DisableCompression:    true,
		ForceAttemptHTTP2:     true,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
	}
}

// Client returns an HTTP client that fetches only what the rule allows,
// each fetch within timeout (0: none; the caller bounds it).
func (r *Rule) Client(timeout time.Duration) *http.Client {
	return &http.Client{Transport: r.Transport(), CheckRedirect: r.CheckRedirect, Timeout: timeout}
}

// Get is a GET of u under the rule: u checked first, then dialled.
func (r *Rule) Get(ctx context.Context, c *http.Client, u string) (*http.Response, error) {
	p, err := url.Parse(u)
	if err != nil {
		return nil, errors.New("the URL does not parse")
	}
	if err := r.CheckURL(p); err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, errors.New("the URL cannot be requested")
	}
	req.Header.Set("Accept-Encoding", "identity")
	return c.Do(req)
}

// Words is a fetch error in words for an operator: what the rule
// refused, a redirect refused, else the transport's error in the words
// the ramdisk uses too (lib/fetchwords: a timeout, a refused
// connection, a name that does not resolve), never the text of an
// answer.
func Words(err error) string {
	var rf *Refused
	var rd *Redirect
	switch {
	case errors.As(err, &rd) && errors.As(err, &rf):
		return fmt.Sprintf("a redirect to %s was refused: %v", rd.Host, rf)
	case errors.As(err, &rf):
		return rf.Error()
	case errors.As(err, &rd):
		return rd.Error()
	case errors.Is(err, errTooManyRedirects):
		return errTooManyRedirects.Error()
	}
	return fetchwords.Cause(err)
}

// ParseAllow parses --fetch-allow values (CIDRs, or single addresses).
func ParseAllow(vals []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, v := range vals {
		for _, s := range strings.Split(v, ",") {
			s = strings.TrimSpace(s)
			if s == "" {
				continue
			}
			p, err := netip.ParsePrefix(s)
			if err != nil {
				a, aerr := netip.ParseAddr(s)
				if aerr != nil {
					return nil, fmt.Errorf("%q is not a network (CIDR such as 10.1.0.0/16 or 127.0.0.0/8) or an address", s)
				}
				p = netip.PrefixFrom(a, a.BitLen())
			}
			out = append(out, p.Masked())
		}
	}
	return out, nil
}
