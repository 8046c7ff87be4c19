package boot

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/bmedge/bmedge/agent/netboot"
	"github.com/bmedge/bmedge/lib/netbudget"
	"github.com/bmedge/bmedge/protocol"
)

// NetbootOptions configure network boot (DHCP or proxy-DHCP, TFTP, HTTP)
// of the ramdisk for nodes whose BMC has no virtual media (ipmi): see
// docs/netboot.md. Network boot is on when Interface is set.
type NetbootOptions struct {
	// Interface is the site network's interface (DHCP is bound to it).
	Interface string
	// Address is the agent's IPv4 address on it (default: its first).
	Address string
	// Mode is "dhcp" (a DHCP server leasing Range to the nodes being
	// booted) or "proxy" (proxy-DHCP beside the site's DHCP server).
	Mode string
	// Range is FIRST-LAST, the addresses leased in dhcp mode.
	Range string
	// Router and DNS (comma-separated) go with a lease in dhcp mode.
	Router, DNS string
	// LeaseTime of a lease (default 1 hour).
	LeaseTime time.Duration
	// HTTPPort is the port of the HTTP server on Address (default 8082;
	// -1 any free port).
	HTTPPort int
	// TFTPPort (default 69; -1 any free port) and DHCPPort (default 67;
	// -1 none) are for tests.
	TFTPPort, DHCPPort int
	// IPXEDir holds Debian's undionly.kpxe and snponly.efi (default
	// /usr/lib/ipxe).
	IPXEDir string
	// HTTPConns are the HTTP server's connection budgets (fields <= 0:
	// DefaultNetbootHTTPConns').
	HTTPConns netbudget.Limits
	// Kernel and Initrd are the ramdisk (make ramdisk: build/ramdisk/
	// vmlinuz, build/ramdisk/initramfs.cpio.zst).
	Kernel, Initrd string
	// KernelParams start the ramdisk's kernel command line, before the
	// boot's parameters (default DefaultNetbootKernelParams).
	KernelParams string
	// TTL bounds how long a boot is answered when nothing ends it
	// (default 2 hours).
	TTL time.Duration
}

// DefaultNetbootKernelParams are the kernel parameters of a network boot
// before the boot's own: the ramdisk ISO's (serial console last, so that
// the agent's log lands where a BMC records it).
const DefaultNetbootKernelParams = "console=tty0 console=ttyS0,115200 panic=1 loglevel=4"

// netbootState is an agent's network boot: the server (nil when not
// configured) and what the BMC commands told about each node.
type netbootState struct {
	srv *netboot.Server
	mu  sync.Mutex
	// macs are a node's PXE-enabled port MACs from its last boot command;
	// fresh marks a node whose current command carries a new boot
	// credential; pxe marks a node whose boot device is pxe.
	macs  map[string][]net.HardwareAddr
	fresh map[string]bool
	pxe   map[string]bool
	// secure marks a node whose last boot command asks for UEFI Secure
	// Boot (args.secure_boot): its network boot gets the signed chain.
	secure map[string]bool
}

// netboots holds each running agent's network boot state.
// netbootState returns the agent's network boot state: one with no
// server when network boot is not configured.
func (p *Boot) netbootState() *netbootState { return p.nb }

func newNetbootState() *netbootState {
	return &netbootState{macs: map[string][]net.HardwareAddr{}, fresh: map[string]bool{}, pxe: map[string]bool{}, secure: map[string]bool{}}
}

// startNetboot starts the network boot services when configured; stop
// ends them.
func (p *Boot) startNetboot(ctx context.Context) (stop func(), err error) {
	o := p.cfg.Netboot
	if o.Interface == "" {
		if o.Kernel != "" || o.Initrd != "" || o.Range != "" || o.Address != "" || o.Router != "" || o.DNS != "" {
			return nil, fmt.Errorf("--netboot-kernel, --netboot-initrd, --netboot-dhcp-range, --netboot-address, --netboot-router and --netboot-dns go with --netboot-interface (the site network's interface, where the agent serves network boot)")
		}
		return func() {}, nil
	}
	st := newNetbootState()
	cfg := netboot.Config{Interface: o.Interface, Mode: o.Mode, LeaseTime: o.LeaseTime, HTTPPort: o.HTTPPort, TFTPPort: o.TFTPPort,
		DHCPPort: o.DHCPPort, IPXEDir: o.IPXEDir, Kernel: o.Kernel, Initrd: o.Initrd, TTL: o.TTL, Log: p.log, Clock: p.cfg.Clock,
		HTTPConns: o.HTTPConns.Or(DefaultNetbootHTTPConns)}
	ip := func(flag, v string) (net.IP, error) {
		if v == "" {
			return nil, nil
		}
		x := net.ParseIP(strings.TrimSpace(v)).To4()
		if x == nil {
			return nil, fmt.Errorf("%s %q is not an IPv4 address", flag, v)
		}
		return x, nil
	}
	if cfg.Address, err = ip("--netboot-address", o.Address); err != nil {
		return nil, err
	}
	if cfg.Router, err = ip("--netboot-router", o.Router); err != nil {
		return nil, err
	}
	for _, d := range strings.Split(o.DNS, ",") {
		if strings.TrimSpace(d) == "" {
			continue
		}
		x, err := ip("--netboot-dns", d)
		if err != nil {
			return nil, err
		}
		cfg.DNS = append(cfg.DNS, x)
	}
	if o.Range != "" {
		first, last, ok := strings.Cut(o.Range, "-")
		if !ok {
			return nil, fmt.Errorf("--netboot-dhcp-range %q: want FIRST-LAST, e.g. 10.1.0.100-10.1.0.199", o.Range)
		}
		if cfg.RangeStart, err = ip("--netboot-dhcp-range", first); err != nil {
			return nil, err
		}
		if cfg.RangeEnd, err = ip("--netboot-dhcp-range", last); err != nil {
			return nil, err
		}
	}
	if p.cfg.Discover != nil {
		cfg.Unknown = p.discoveryBoot
	}
	srv, err := netboot.New(cfg)
	if err != nil {
		return nil, err
	}
	st.srv = srv
	p.nb = st
	return func() { srv.Close() }, nil
}

// netbootNoteArgs takes what a BMC command tells about a node's boot
// (args.boot_macs of a power command that boots it).
func (p *Boot) netbootNoteArgs(node string, args map[string]any) {
	st := p.netbootState()
	macs, err := netboot.ParseMACs(args[protocol.ArgBootMACs])
	if err != nil {
		p.log.Warn("network boot: the boot command's MACs are not usable", "node", node, "err", err)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.macs[node] = macs
	st.fresh[node] = true
	if protocol.PowerArgsOf(args).SecureBoot {
		st.secure[node] = true
	} else {
		delete(st.secure, node)
	}
}

// BootMACs are the node's PXE-enabled port MACs from its last boot
// command (args.boot_macs), in their order; nil when none said any. The
// simulator gives its nodes these NICs.
func (p *Boot) BootMACs(node string) []string {
	st := p.netbootState()
	st.mu.Lock()
	defer st.mu.Unlock()
	var out []string
	for _, m := range st.macs[node] {
		out = append(out, m.String())
	}
	return out
}

// netbootForget drops what the BMC commands told about a deleted node.
func (p *Boot) netbootForget(node string) {
	st := p.netbootState()
	st.mu.Lock()
	defer st.mu.Unlock()
	delete(st.macs, node)
	delete(st.fresh, node)
	delete(st.pxe, node)
	delete(st.secure, node)
}

// netbootBootDevice is called when a node without virtual media gets boot
// device pxe (the ramdisk) or disk (its boot ended).
func (p *Boot) netbootBootDevice(node, device string) error {
	st := p.netbootState()
	if device == protocol.BootPXE {
		if st.srv == nil {
			return fmt.Errorf("this edge agent cannot boot the ramdisk on node %s: its BMC has no virtual media and the agent does not serve network boot; start the agent with --netboot-interface IFACE (the site network), --netboot-kernel and --netboot-initrd (make ramdisk builds build/ramdisk/vmlinuz and initramfs.cpio.zst), and --netboot-dhcp-range FIRST-LAST or --netboot-dhcp-mode proxy (docs/netboot.md)", node)
		}
		st.mu.Lock()
		st.pxe[node] = true
		st.mu.Unlock()
		return nil
	}
	st.mu.Lock()
	delete(st.pxe, node)
	st.mu.Unlock()
	if st.srv != nil {
		st.srv.Disarm(node)
	}
	return nil
}

// netbootPower is called before a node without virtual media is powered
// to state. A power-on or reboot that carries a new boot credential while
// the boot device is pxe arms the node's network boot with this boot's
// kernel command line; a power-off, or a power-on without a new boot,
// disarms it.
func (p *Boot) netbootPower(node, state string) error {
	st := p.netbootState()
	st.mu.Lock()
	fresh, pxe, macs, secure := st.fresh[node], st.pxe[node], st.macs[node], st.secure[node]
	delete(st.fresh, node)
	st.mu.Unlock()
	if st.srv == nil {
		return nil
	}
	if protocol.PowerIsOff(state) || !pxe || !fresh {
		st.srv.Disarm(node)
		return nil
	}
	params := p.bootParams(node)
	if strings.Contains(" "+params+" ", " bm.broker= ") {
		return fmt.Errorf("this edge agent cannot boot the ramdisk on node %s by network boot: it knows no broker for the ramdisks; start it with the site broker (--site-broker-listen) or --ramdisk-broker-url", node)
	}
	kp := p.cfg.Netboot.KernelParams
	if kp == "" {
		kp = DefaultNetbootKernelParams
	}
	return st.srv.Arm(netboot.Boot{Node: node, MACs: macs, Cmdline: kp + " " + params, SecureBoot: secure})
}

// discoveryBoot is the network boot of a machine that belongs to no
// node, when the site discovers it (Config.Discover): the ramdisk in
// discovery mode, named by its MAC, with a credential that lets it
// report one inventory to the site broker and nothing else. nil: no
// answer.
func (p *Boot) discoveryBoot(mac net.HardwareAddr) *netboot.Boot {
	url, pin, ok := p.cfg.SiteBroker()
	if !ok {
		// The ramdisks of discovered machines report to the site
		// broker, which keeps their inventories at the site.
		p.discWarn.Warn("no site broker", "network boot: not discovering a machine that belongs to no node: discovery needs the site broker (--site-broker-listen)", "mac", mac.String())
		return nil
	}
	password, ok := p.cfg.Discover(mac)
	if !ok {
		return nil
	}
	node := protocol.DiscoveryNode(mac)
	line := fmt.Sprintf("bm.node=%s bm.site=%s bm.broker=%s bm.user=node:%s bm.password=%s bm.mode=discovery", node, p.cfg.Site, url, node, password)
	if pin != "" {
		line += " bm.ca=" + pin
	}
	if o := p.cfg.Ramdisk.Params; o != "" {
		line += " " + o
	}
	kp := p.cfg.Netboot.KernelParams
	if kp == "" {
		kp = DefaultNetbootKernelParams
	}
	return &netboot.Boot{Node: node, MACs: []net.HardwareAddr{mac}, Cmdline: kp + " " + line}
}

// EndDiscovery ends the network boot of a discovered machine whose
// report was taken: its DHCP requests get no answer again.
func (p *Boot) EndDiscovery(node string) {
	if st := p.netbootState(); st.srv != nil {
		st.srv.Disarm(node)
	}
}
