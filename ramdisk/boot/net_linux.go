package boot

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/u-root/u-root/pkg/dhclient"
	"github.com/vishvananda/netlink"
)

// NetInfo is the outcome of NetworkUp.
type NetInfo struct {
	Iface   string
	MAC     net.HardwareAddr
	Addr    netip.Prefix
	Gateway netip.Addr // invalid if none
	Mode    IPMode
}

// NetOptions tune NetworkUp; the zero value is right for the ramdisk.
type NetOptions struct {
	LinkTimeout time.Duration // wait for an interface to appear and get carrier; default 30s
	DHCPTimeout time.Duration // one DHCP attempt; default 10s
	DHCPRetries int           // default 5
}

// NetworkUp brings the node's network up as the parameters say and
// checks that the interface really has the address: a static address
// (bm.ip=ADDR/LEN, optional bm.gw and bm.dns) on the chosen interface,
// or a DHCPv4 lease on the first Ethernet interface that gets one.
// The interface is bm.iface or bm.mac/BOOTIF if given, otherwise, for a
// static address, the first Ethernet interface with carrier.
func NetworkUp(ctx context.Context, cfg NetConfig, opts NetOptions, logf func(string, ...any)) (NetInfo, error) {
	if opts.LinkTimeout == 0 {
		opts.LinkTimeout = 30 * time.Second
	}
	if opts.DHCPTimeout == 0 {
		opts.DHCPTimeout = 10 * time.Second
	}
	if opts.DHCPRetries == 0 {
		opts.DHCPRetries = 5
	}
	if lo, err := netlink.LinkByName("lo"); err == nil {
		_ = netlink.LinkSetUp(lo)
	}

	links, err := waitLinks(ctx, cfg, opts.LinkTimeout, logf)
	if err != nil {
		return NetInfo{}, err
	}
	if cfg.Mode == IPStatic {
		return staticUp(links[0], cfg, logf)
	}
	return dhcpUp(ctx, links, opts, logf)
}

// waitLinks returns the candidate interfaces, those with carrier first,
// waiting until at least one has carrier or the timeout passes.
func waitLinks(ctx context.Context, cfg NetConfig, timeout time.Duration, logf func(string, ...any)) ([]netlink.Link, error) {
	deadline := time.Now().Add(timeout)
	upped := map[string]bool{}
	logged := false
	for {
		all, err := dumpRetry(netlink.LinkList)
		if err != nil {
			return nil, fmt.Errorf("list network interfaces: %w", err)
		}
		var cands, withCarrier []netlink.Link
		for _, l := range all {
			if !candidate(l, cfg) {
				continue
			}
			cands = append(cands, l)
			name := l.Attrs().Name
			if !upped[name] {
				if err := netlink.LinkSetUp(l); err != nil {
					logf("net: %s: set up: %v", name, err)
				}
				upped[name] = true
			}
			if hasCarrier(name) {
				withCarrier = append(withCarrier, l)
			}
		}
		sortLinks(cands)
		sortLinks(withCarrier)
		if len(withCarrier) > 0 {
			return withCarrier, nil
		}
		if time.Now().After(deadline) {
			if len(cands) == 0 {
				return nil, fmt.Errorf("no network interface%s after %s (missing driver?)", selector(cfg), timeout)
			}
			// Some drivers report carrier late or never; try anyway.
			logf("net: no carrier on %s after %s; trying anyway", names(cands), timeout)
			return cands, nil
		}
		if !logged && len(cands) > 0 {
			logf("net: waiting for carrier on %s", names(cands))
			logged = true
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func candidate(l netlink.Link, cfg NetConfig) bool {
	a := l.Attrs()
	if cfg.Iface != "" {
		return a.Name == cfg.Iface
	}
	if cfg.MAC != nil {
		return bytes.Equal(a.HardwareAddr, cfg.MAC)
	}
	// Physical Ethernet only: no loopback, bridges, bonds, tunnels.
	return l.Type() == "device" && a.EncapType == "ether" && len(a.HardwareAddr) == 6
}

func selector(cfg NetConfig) string {
	switch {
	case cfg.Iface != "":
		return " named " + cfg.Iface
	case cfg.MAC != nil:
		return " with MAC " + cfg.MAC.String()
	}
	return ""
}

func hasCarrier(name string) bool {
	b, err := os.ReadFile("/sys/class/net/" + name + "/carrier")
	return err == nil && strings.TrimSpace(string(b)) == "1"
}

func sortLinks(ls []netlink.Link) {
	sort.Slice(ls, func(i, j int) bool { return ls[i].Attrs().Name < ls[j].Attrs().Name })
}

func names(ls []netlink.Link) string {
	var s []string
	for _, l := range ls {
		s = append(s, l.Attrs().Name)
	}
	return strings.Join(s, ",")
}

func staticUp(l netlink.Link, cfg NetConfig, logf func(string, ...any)) (NetInfo, error) {
	name := l.Attrs().Name
	addr := &netlink.Addr{IPNet: &net.IPNet{
		IP:   net.IP(cfg.Addr.Addr().AsSlice()),
		Mask: net.CIDRMask(cfg.Addr.Bits(), cfg.Addr.Addr().BitLen()),
	}}
	if err := netlink.AddrReplace(l, addr); err != nil {
		return NetInfo{}, fmt.Errorf("%s: add address %s: %w", name, cfg.Addr, err)
	}
	if cfg.Gateway.IsValid() {
		r := &netlink.Route{LinkIndex: l.Attrs().Index, Gw: net.IP(cfg.Gateway.AsSlice())}
		if err := netlink.RouteReplace(r); err != nil {
			return NetInfo{}, fmt.Errorf("%s: default route via %s: %w", name, cfg.Gateway, err)
		}
	}
	if len(cfg.DNS) > 0 {
		var ns []net.IP
		for _, a := range cfg.DNS {
			ns = append(ns, net.IP(a.AsSlice()))
		}
		if err := dhclient.WriteDNSSettings(ns, nil, "", "/etc/resolv.conf"); err != nil {
			logf("net: write /etc/resolv.conf: %v", err)
		}
	}
	got, err := addressOf(l, cfg.Addr.Addr())
	if err != nil {
		return NetInfo{}, err
	}
	logf("net: %s static %s gateway %s", name, got, orNone(cfg.Gateway))
	return NetInfo{Iface: name, MAC: l.Attrs().HardwareAddr, Addr: got, Gateway: cfg.Gateway, Mode: IPStatic}, nil
}

func dhcpUp(ctx context.Context, links []netlink.Link, opts NetOptions, logf func(string, ...any)) (NetInfo, error) {
	logf("net: DHCPv4 on %s", names(links))
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c := dhclient.Config{Timeout: opts.DHCPTimeout, Retries: opts.DHCPRetries, V4ClientIdentifier: true}
	var errs []error
	for res := range dhclient.SendRequests(dctx, links, true, false, c, opts.LinkTimeout) {
		name := res.Interface.Attrs().Name
		if res.Err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, res.Err))
			continue
		}
		if err := res.Lease.Configure(); err != nil {
			errs = append(errs, fmt.Errorf("%s: configure lease: %w", name, err))
			continue
		}
		// u-root's dhclient can report success without a lease: check.
		var want netip.Addr
		var gw netip.Addr
		if m4, _ := res.Lease.Message(); m4 != nil {
			want, _ = netip.AddrFromSlice(m4.YourIPAddr.To4())
			if r := m4.Router(); len(r) > 0 {
				gw, _ = netip.AddrFromSlice(r[0].To4())
			}
		}
		if !want.IsValid() || want.IsUnspecified() {
			errs = append(errs, fmt.Errorf("%s: DHCP answer without an address", name))
			continue
		}
		got, err := addressOf(res.Interface, want)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		cancel()
		logf("net: %s DHCP lease %s gateway %s", name, got, orNone(gw))
		return NetInfo{Iface: name, MAC: res.Interface.Attrs().HardwareAddr, Addr: got, Gateway: gw, Mode: IPDHCP}, nil
	}
	if len(errs) == 0 {
		errs = append(errs, errors.New("no interface came up"))
	}
	return NetInfo{}, fmt.Errorf("DHCP failed on %s: %w", names(links), errors.Join(errs...))
}

// addressOf checks that want is configured on l and returns it with its prefix.
func addressOf(l netlink.Link, want netip.Addr) (netip.Prefix, error) {
	addrs, err := dumpRetry(func() ([]netlink.Addr, error) { return netlink.AddrList(l, netlink.FAMILY_ALL) })
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%s: list addresses: %w", l.Attrs().Name, err)
	}
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		if ip.Unmap() == want.Unmap() {
			ones, _ := a.Mask.Size()
			return netip.PrefixFrom(ip.Unmap(), ones), nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("%s: address %s is not configured after setup", l.Attrs().Name, want)
}

func orNone(a netip.Addr) string {
	if !a.IsValid() {
		return "none"
	}
	return a.String()
}
