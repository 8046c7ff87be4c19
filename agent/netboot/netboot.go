// Package netboot serves network boot of the ramdisk on a site network, for
// nodes whose BMC has no virtual media (ipmi): DHCP (a full server with an
// address range, or proxy-DHCP beside the site's own DHCP server), TFTP for
// the iPXE binaries of Debian's ipxe package, and HTTP for each boot's iPXE
// script, the ramdisk kernel and its initramfs.
//
// Nothing is answered to a MAC that is not armed (but what discovery
// arms through Config.Unknown, at a site that discovers): the edge agent arms a
// node's PXE-enabled MACs when the coordinator boots it into the ramdisk
// (Arm) and disarms them when that boot ends (Disarm, or after Config.TTL).
// A DHCP request of any other MAC is dropped without an answer. Each boot's
// script (it holds the boot's MQTT credential on the kernel command line)
// is served under a random 128-bit path, only to requests whose source
// address the kernel's neighbour table maps to one of the boot's MACs.
//
// The chain is the standard one: a PXE firmware (no user class "iPXE")
// gets the iPXE binary for its architecture (DHCP option 93) by TFTP; iPXE
// (user class "iPXE", as iPXE sends it, whether chainloaded or a NIC's own
// iPXE ROM) gets the URL of its boot's script.
//
// A boot armed with SecureBoot gives a UEFI firmware Debian's signed chain
// instead, since iPXE is not signed: shimx64.efi by TFTP (signed by
// Microsoft's UEFI CA), which loads grubx64.efi from the same server
// (Debian's signed network GRUB), which reads grub/grub.cfg by TFTP (the
// boot's configuration, served only to its MACs) and loads the signed
// kernel and the initramfs by TFTP (that GRUB has no HTTP), under the
// boot's random path, verifying the kernel through shim.
package netboot

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/bmedge/bmedge/lib/clock"
	"github.com/bmedge/bmedge/lib/netbudget"
)

// Modes of the DHCP service.
const (
	// ModeDHCP is a full DHCP server for the armed MACs: it leases
	// addresses of Config.RangeStart..RangeEnd.
	ModeDHCP = "dhcp"
	// ModeProxy is proxy-DHCP (PXE specification): the site's own DHCP
	// server gives the addresses; this one answers PXE clients only, with
	// the boot file and no address, on ports 67 and 4011.
	ModeProxy = "proxy"
)

// Config configures the network boot services of one site network.
type Config struct {
	// Interface is the site network's interface; the DHCP service is
	// bound to it (required).
	Interface string
	// Address is this host's IPv4 address on Interface (default: the
	// interface's first IPv4 address). TFTP and HTTP listen on it and the
	// DHCP answers name it.
	Address net.IP
	// Mode is ModeDHCP or ModeProxy.
	Mode string
	// RangeStart and RangeEnd bound the addresses leased (ModeDHCP); they
	// must be in Address's subnet.
	RangeStart, RangeEnd net.IP
	// Netmask of the site network (default: the interface address's).
	Netmask net.IPMask
	// Router and DNS are handed out with a lease (ModeDHCP), when set.
	Router net.IP
	DNS    []net.IP
	// LeaseTime of a lease (default 1 hour).
	LeaseTime time.Duration
	// HTTPPort is the HTTP server's port on Address (default 8082; 0
	// means the default, -1 any free port, for tests).
	HTTPPort int
	// TFTPPort is the TFTP server's port (default 69; -1 any free port,
	// for tests).
	TFTPPort int
	// DHCPPort is the DHCP server's port (default 67; -1 none, for tests).
	DHCPPort int
	// IPXEDir holds undionly.kpxe (BIOS) and snponly.efi (UEFI x86-64)
	// (default /usr/lib/ipxe, Debian's ipxe package).
	IPXEDir string
	// Kernel and Initrd are the ramdisk (make ramdisk: build/ramdisk/
	// vmlinuz and initramfs.cpio.zst).
	Kernel, Initrd string
	// ShimDir holds shimx64.efi and grubx64.efi, Debian's signed shim and
	// network GRUB, for the boots armed with SecureBoot (default: the
	// Kernel's folder, where make ramdisk puts them).
	ShimDir string
	// TTL bounds how long a boot stays armed when nothing ends it first
	// (default 2 hours).
	TTL time.Duration
	// HTTPConns are the HTTP listener's connection budgets, from the
	// process's descriptor pool (netbudget.Default); fields <= 0 are no
	// cap of their kind.
	HTTPConns netbudget.Limits
	Log       *slog.Logger
	// Clock runs the boots' TTL and the DHCP leases' expiry (nil:
	// clock.Real).
	Clock clock.Clock
	// Unknown, when set, is asked about a PXE client whose MAC is armed
	// for no boot: a boot to arm for it (discovery, agent/discover), or
	// nil for no answer. It is called for every such request, a flood's
	// too: it must be cheap and bound what it admits.
	Unknown func(mac net.HardwareAddr) *Boot
	// macOf maps a client's IPv4 address to its MAC (default: the
	// kernel's neighbour table on Interface); tests replace it.
	macOf func(ip net.IP) (net.HardwareAddr, bool)
}

// BIOS and UEFI binaries in IPXEDir.
const (
	BIOSBinary = "undionly.kpxe"
	UEFIBinary = "snponly.efi"
)

// The Secure Boot chain in ShimDir, and the TFTP path of a boot's GRUB
// configuration (Debian's network GRUB has its prefix at /grub and reads
// grub/x86_64-efi/grub.cfg, else grub/grub.cfg).
const (
	ShimBinary = "shimx64.efi"
	GRUBBinary = "grubx64.efi"
	GRUBConfig = "grub/grub.cfg"
)

// Boot is one ramdisk boot of a node.
type Boot struct {
	Node string
	MACs []net.HardwareAddr
	// Cmdline is the kernel command line of the ramdisk (it holds the
	// boot's credential: it is never logged).
	Cmdline string
	// SecureBoot gives a UEFI firmware the signed chain (shim, GRUB, the
	// signed kernel) instead of iPXE, so that the node boots with UEFI
	// Secure Boot on (it boots with it off as well). A BIOS firmware gets
	// iPXE either way.
	SecureBoot bool
}

type armed struct {
	Boot
	token   string
	created time.Time
}

// Server runs the network boot services.
type Server struct {
	cfg     Config
	log     *slog.Logger
	netmask net.IPMask
	httpURL string

	mu     sync.Mutex
	boots  map[string]*armed // by node
	byMAC  map[string]*armed // by MAC (lower-case, colons)
	byTok  map[string]*armed // by token
	leases *leases

	closers []func()
	wg      sync.WaitGroup
}

// New checks cfg and opens the services' sockets; Close ends them.
func New(cfg Config) (*Server, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.Interface == "" {
		return nil, errors.New("network boot needs the site network's interface (--netboot-interface)")
	}
	ifc, err := net.InterfaceByName(cfg.Interface)
	if err != nil {
		return nil, fmt.Errorf("network boot interface %q: %w", cfg.Interface, err)
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return nil, fmt.Errorf("network boot interface %q: %w", cfg.Interface, err)
	}
	var mask net.IPMask
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok || n.IP.To4() == nil {
			continue
		}
		if cfg.Address == nil {
			cfg.Address = n.IP.To4()
		}
		if n.IP.Equal(cfg.Address) {
			mask = n.Mask
		}
	}
	if cfg.Address == nil || cfg.Address.To4() == nil {
		return nil, fmt.Errorf("network boot interface %s has no IPv4 address; give it one (or --netboot-address)", cfg.Interface)
	}
	cfg.Address = cfg.Address.To4()
	if mask == nil {
		return nil, fmt.Errorf("network boot address %s is not an address of interface %s", cfg.Address, cfg.Interface)
	}
	if cfg.Netmask == nil {
		cfg.Netmask = mask
	}
	if len(cfg.Netmask) == net.IPv6len {
		cfg.Netmask = cfg.Netmask[12:]
	}
	switch cfg.Mode {
	case "":
		cfg.Mode = ModeDHCP
	case ModeDHCP, ModeProxy:
	default:
		return nil, fmt.Errorf("network boot DHCP mode %q: want %q or %q", cfg.Mode, ModeDHCP, ModeProxy)
	}
	if cfg.LeaseTime <= 0 {
		cfg.LeaseTime = time.Hour
	}
	if cfg.TTL <= 0 {
		cfg.TTL = 2 * time.Hour
	}
	if cfg.HTTPPort == 0 {
		cfg.HTTPPort = 8082
	}
	if cfg.TFTPPort == 0 {
		cfg.TFTPPort = 69
	}
	if cfg.DHCPPort == 0 {
		cfg.DHCPPort = 67
	}
	if cfg.IPXEDir == "" {
		cfg.IPXEDir = "/usr/lib/ipxe"
	}
	for _, f := range []string{filepath.Join(cfg.IPXEDir, BIOSBinary), filepath.Join(cfg.IPXEDir, UEFIBinary)} {
		if _, err := os.Stat(f); err != nil {
			return nil, fmt.Errorf("network boot: iPXE binary %w (install Debian's ipxe package, or give --netboot-ipxe-dir)", err)
		}
	}
	for _, f := range []string{cfg.Kernel, cfg.Initrd} {
		if f == "" {
			return nil, errors.New("network boot needs the ramdisk: --netboot-kernel and --netboot-initrd (make ramdisk builds build/ramdisk/vmlinuz and initramfs.cpio.zst)")
		}
		if st, err := os.Stat(f); err != nil {
			return nil, fmt.Errorf("network boot ramdisk: %w (make ramdisk builds it)", err)
		} else if st.IsDir() {
			return nil, fmt.Errorf("network boot ramdisk: %s is a folder", f)
		}
	}
	if cfg.ShimDir == "" {
		cfg.ShimDir = filepath.Dir(cfg.Kernel)
	}
	s := &Server{cfg: cfg, log: cfg.Log, netmask: cfg.Netmask, boots: map[string]*armed{}, byMAC: map[string]*armed{}, byTok: map[string]*armed{}}
	if cfg.Mode == ModeDHCP {
		l, err := newLeases(cfg.Address, cfg.Netmask, cfg.RangeStart, cfg.RangeEnd, cfg.LeaseTime)
		if err != nil {
			return nil, err
		}
		l.now = cfg.Clock.Now
		s.leases = l
	}
	if s.cfg.macOf == nil {
		s.cfg.macOf = func(ip net.IP) (net.HardwareAddr, bool) { return neighbourMAC(cfg.Interface, ip) }
	}
	if err := s.start(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Server) start() error {
	if err := s.startHTTP(); err != nil {
		return err
	}
	if err := s.startTFTP(); err != nil {
		return err
	}
	if err := s.startDHCP(); err != nil {
		return err
	}
	s.log.Info("network boot up", "interface", s.cfg.Interface, "address", s.cfg.Address.String(), "dhcp_mode", s.cfg.Mode,
		"tftp_port", s.cfg.TFTPPort, "http", s.httpURL)
	return nil
}

// Close stops every service.
func (s *Server) Close() {
	s.mu.Lock()
	cl := s.closers
	s.closers = nil
	s.mu.Unlock()
	for i := len(cl) - 1; i >= 0; i-- {
		cl[i]()
	}
	s.wg.Wait()
}

func (s *Server) onClose(f func()) {
	s.mu.Lock()
	s.closers = append(s.closers, f)
	s.mu.Unlock()
}

// HTTPURL is the HTTP server's base URL as the nodes reach it.
func (s *Server) HTTPURL() string { return s.httpURL }

// Arm makes the node's boot answerable: DHCP answers its MACs, its script
// is served. A node's earlier boot is disarmed first; a MAC armed for
// another node moves to this one.
func (s *Server) Arm(b Boot) error {
	if len(b.MACs) == 0 {
		return fmt.Errorf("node %s has no PXE-enabled port: network boot answers only the MACs of a node's ports with pxe_enabled (create one: coordinator port create MAC --node %s)", b.Node, b.Node)
	}
	if b.SecureBoot {
		for _, f := range []string{ShimBinary, GRUBBinary} {
			if st, err := os.Stat(filepath.Join(s.cfg.ShimDir, f)); err != nil || !st.Mode().IsRegular() {
				return fmt.Errorf("node %s boots with Secure Boot, which needs Debian's signed %s in %s (make ramdisk puts shimx64.efi and grubx64.efi beside the kernel)", b.Node, f, s.cfg.ShimDir)
			}
		}
	}
	tb := make([]byte, 16)
	if _, err := rand.Read(tb); err != nil {
		return err
	}
	a := &armed{Boot: b, token: hex.EncodeToString(tb), created: s.now()}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.disarmLocked(b.Node)
	for _, m := range b.MACs {
		if old := s.byMAC[m.String()]; old != nil {
			s.disarmLocked(old.Node)
		}
	}
	s.boots[b.Node] = a
	s.byTok[a.token] = a
	for _, m := range b.MACs {
		s.byMAC[m.String()] = a
	}
	macs := make([]string, len(b.MACs))
	for i, m := range b.MACs {
		macs[i] = m.String()
	}
	s.log.Info("network boot armed", "node", b.Node, "macs", strings.Join(macs, ","), "secure_boot", b.SecureBoot)
	return nil
}

// Disarm ends a node's boot: its MACs get no answer, its script is gone.
func (s *Server) Disarm(node string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.disarmLocked(node) {
		s.log.Info("network boot disarmed", "node", node)
	}
}

// Armed tells whether a node's boot is armed.
func (s *Server) Armed(node string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.boots[node]
	return a != nil && !s.expiredLocked(a)
}

func (s *Server) disarmLocked(node string) bool {
	a := s.boots[node]
	if a == nil {
		return false
	}
	delete(s.boots, node)
	delete(s.byTok, a.token)
	for _, m := range a.MACs {
		if s.byMAC[m.String()] == a {
			delete(s.byMAC, m.String())
		}
	}
	return true
}

// now is the time on the server's clock (New sets Config.Clock; a
// Server built without New reads the system clock).
func (s *Server) now() time.Time { return clock.Or(s.cfg.Clock).Now() }

func (s *Server) expiredLocked(a *armed) bool {
	if s.now().Sub(a.created) <= s.cfg.TTL {
		return false
	}
	s.disarmLocked(a.Node)
	s.log.Info("network boot disarmed: its time to live ran out", "node", a.Node, "ttl", s.cfg.TTL)
	return true
}

// bootOfMAC returns the armed boot of a MAC, or nil.
func (s *Server) bootOfMAC(mac net.HardwareAddr) *armed {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.byMAC[mac.String()]
	if a == nil || s.expiredLocked(a) {
		return nil
	}
	return a
}

// bootOfToken returns the armed boot of a script token, or nil.
func (s *Server) bootOfToken(tok string) *armed {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.byTok[tok]
	if a == nil || s.expiredLocked(a) {
		return nil
	}
	return a
}

// ParseMACs reads a boot command's boot_macs (a JSON list of strings).
func ParseMACs(v any) ([]net.HardwareAddr, error) {
	var list []string
	switch x := v.(type) {
	case nil:
		return nil, nil
	case []string:
		list = x
	case []any:
		for _, e := range x {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("boot_macs holds %T, want MAC strings", e)
			}
			list = append(list, s)
		}
	default:
		return nil, fmt.Errorf("boot_macs is %T, want a list of MACs", v)
	}
	if len(list) > 64 {
		return nil, fmt.Errorf("boot_macs lists %d MACs; at most 64", len(list))
	}
	var out []net.HardwareAddr
	for _, s := range list {
		m, err := net.ParseMAC(s)
		if err != nil || len(m) != 6 {
			return nil, fmt.Errorf("boot_macs: %q is not an Ethernet MAC", s)
		}
		out = append(out, m)
	}
	return out, nil
}
