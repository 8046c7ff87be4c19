package netboot

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/server4"
	"github.com/insomniacslk/dhcp/iana"

	"github.com/bmedge/bmedge/lib/ratelog"
)

// proxyPort is where PXE clients send their ProxyDHCP requests.
const proxyPort = 4011

// maxPacket bounds a DHCP packet read.
const maxPacket = 1500

func (s *Server) startDHCP() error {
	if s.cfg.DHCPPort < 0 {
		return nil // tests of TFTP and HTTP alone
	}
	ports := []int{s.cfg.DHCPPort}
	if s.cfg.Mode == ModeProxy {
		ports = append(ports, proxyPort)
	}
	// Answers to a client without an address that did not ask for
	// broadcast go to its MAC address alone (see deliver).
	ls, err := openLinkSender(s.cfg.Interface, s.cfg.Address)
	if err != nil {
		s.log.Warn("network boot DHCP: answers to clients without an address are broadcast on the site network, also when the client does not ask for it, so every machine there sees them (boot file, script URL): cannot send to a MAC address; run the agent as root or with CAP_NET_RAW", "interface", s.cfg.Interface, "err", err)
		ls = nil
	} else {
		s.onClose(func() { ls.Close() })
	}
	s.startRA()
	warn := ratelog.New(s.log, time.Minute)
	for _, p := range ports {
		// Port 67 takes broadcasts: bound to the interface (any address);
		// the proxy port gets unicasts to our address.
		addr := &net.UDPAddr{Port: p}
		if p == proxyPort {
			addr.IP = s.cfg.Address
		}
		conn, err := server4.NewIPv4UDPConn(s.cfg.Interface, addr)
		if err != nil {
			return fmt.Errorf("network boot DHCP on %s port %d: %w", s.cfg.Interface, p, err)
		}
		s.onClose(func() { conn.Close() })
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.serveDHCP(conn, p == proxyPort, ls, warn)
		}()
	}
	return nil
}

// serveDHCP answers one packet at a time: DHCP is cheap, and this bounds
// what a flood can cost.
func (s *Server) serveDHCP(conn *net.UDPConn, proxy bool, ls *linkSender, warn *ratelog.Limiter) {
	buf := make([]byte, maxPacket)
	for {
		n, peer, err := conn.ReadFromUDP(buf)
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				s.log.Error("network boot DHCP stopped", "err", err)
			}
			return
		}
		m, err := dhcpv4.FromBytes(buf[:n])
		if err != nil {
			continue
		}
		reply := s.answer(m, proxy)
		if reply == nil {
			continue
		}
		d := deliver(m, reply, peer, proxy)
		if d.mac != nil && ls == nil {
			d.mac = nil // no way to reach a MAC alone (logged at start)
			d.addr = &net.UDPAddr{IP: net.IPv4bcast, Port: dhcpv4.ClientPort}
		}
		if d.mac != nil {
			err = ls.send(d.mac, d.addr.IP, reply.ToBytes())
		} else {
			_, err = conn.WriteTo(reply.ToBytes(), d.addr)
		}
		if err != nil {
			warn.Warn("dhcp send", "network boot DHCP: answer not sent", "mac", m.ClientHWAddr.String(), "to", d.String(), "err", err)
		}
	}
}

// delivery is where an answer goes: to addr (UDP), in a frame to mac
// when mac is set.
type delivery struct {
	addr *net.UDPAddr
	mac  net.HardwareAddr
}

func (d delivery) String() string {
	if d.mac != nil {
		return d.addr.String() + " at " + d.mac.String()
	}
	return d.addr.String()
}

// deliver is where an answer goes (RFC 2131 4.1, without relays, which
// are not served): a ProxyDHCP answer on port 4011 back to its sender; a
// client with an address (ciaddr) to that address; a DHCPNAK, and any
// answer to a client that sets the broadcast flag, to every machine on
// the site network (broadcast); any other answer only to the client's
// MAC address, to the address it is given (yiaddr), or, for a ProxyDHCP
// offer, which gives none, to the broadcast address in a frame to that
// MAC alone. So another machine on a switched site network does not
// receive the boot file or the script URL of a client that does not ask
// for broadcast (iPXE on a fresh boot does not; docs/netboot.md).
func deliver(req, reply *dhcpv4.DHCPv4, peer *net.UDPAddr, proxy bool) delivery {
	if proxy && peer.IP != nil && !peer.IP.IsUnspecified() {
		return delivery{addr: peer}
	}
	if !req.ClientIPAddr.IsUnspecified() && req.ClientIPAddr != nil {
		return delivery{addr: &net.UDPAddr{IP: req.ClientIPAddr, Port: dhcpv4.ClientPort}}
	}
	bcast := &net.UDPAddr{IP: net.IPv4bcast, Port: dhcpv4.ClientPort}
	if reply.MessageType() == dhcpv4.MessageTypeNak || req.IsBroadcast() || len(req.ClientHWAddr) != 6 {
		return delivery{addr: bcast}
	}
	mac := append(net.HardwareAddr(nil), req.ClientHWAddr...)
	if yi := reply.YourIPAddr.To4(); yi != nil && !yi.IsUnspecified() {
		return delivery{addr: &net.UDPAddr{IP: yi, Port: dhcpv4.ClientPort}, mac: mac}
	}
	return delivery{addr: bcast, mac: mac}
}

// client is what a DHCP request says about its sender.
type client struct {
	pxe     bool // a PXE firmware or iPXE (vendor class PXEClient)
	ipxe    bool // iPXE (user class iPXE)
	arch    iana.Arch
	hasArch bool
}

func classify(m *dhcpv4.DHCPv4) client {
	var c client
	vc := m.GetOneOption(dhcpv4.OptionClassIdentifier)
	c.pxe = bytes.HasPrefix(vc, []byte("PXEClient"))
	c.ipxe = bytes.Contains(m.GetOneOption(dhcpv4.OptionUserClassInformation), []byte("iPXE"))
	if a := m.GetOneOption(dhcpv4.OptionClientSystemArchitectureType); len(a) >= 2 {
		c.arch, c.hasArch = iana.Arch(binary.BigEndian.Uint16(a)), true
	}
	return c
}

// bootFile is the boot file for a client of an armed boot: its script's
// URL for iPXE, the iPXE binary for its architecture for a PXE firmware
// (shim for a UEFI one when the boot is armed with SecureBoot); "" when
// there is none.
func (s *Server) bootFile(a *armed, c client) (file string, viaTFTP bool) {
	if c.ipxe {
		return s.scriptURL(a), false
	}
	if !c.pxe {
		return "", false
	}
	switch {
	case !c.hasArch || c.arch == iana.INTEL_X86PC:
		return BIOSBinary, true
	case (c.arch == iana.EFI_X86_64 || c.arch == iana.EFI_BC) && a.SecureBoot:
		return ShimBinary, true
	case c.arch == iana.EFI_X86_64 || c.arch == iana.EFI_BC:
		return UEFIBinary, true
	}
	return "", false
}

// answer builds the answer to a request, or nil for none.
func (s *Server) answer(m *dhcpv4.DHCPv4, proxy bool) *dhcpv4.DHCPv4 {
	if m.OpCode != dhcpv4.OpcodeBootRequest || m.HWType != iana.HWTypeEthernet || len(m.ClientHWAddr) != 6 {
		return nil
	}
	mac := m.ClientHWAddr
	a := s.bootOfMAC(mac)
	if a == nil && s.cfg.Unknown != nil && classify(m).pxe && (m.GatewayIPAddr == nil || m.GatewayIPAddr.IsUnspecified()) {
		// A PXE client that belongs to no node: discovery may take it.
		if b := s.cfg.Unknown(mac); b != nil {
			if err := s.Arm(*b); err != nil {
				s.log.Warn("network boot: discovery boot not armed", "mac", mac.String(), "err", err)
			}
			a = s.bootOfMAC(mac)
		}
	}
	if a == nil {
		// Not a node the coordinator is booting: no answer at all, so
		// that another DHCP server of the site serves it.
		s.log.Debug("network boot DHCP: no answer to a MAC not being booted", "mac", mac.String(), "type", m.MessageType().String())
		return nil
	}
	if !m.GatewayIPAddr.IsUnspecified() && m.GatewayIPAddr != nil {
		s.log.Debug("network boot DHCP: relayed requests are not served", "mac", mac.String(), "relay", m.GatewayIPAddr.String())
		return nil
	}
	c := classify(m)
	if s.cfg.Mode == ModeProxy {
		return s.proxyAnswer(m, a, c, proxy)
	}
	return s.dhcpAnswer(m, a, c)
}

func (s *Server) bootMods(a *armed, c client) []dhcpv4.Modifier {
	file, tftp := s.bootFile(a, c)
	if file == "" {
		if c.pxe {
			s.log.Warn("network boot DHCP: no iPXE binary for this client's architecture", "node", a.Node, "arch", strconv.Itoa(int(c.arch)))
		}
		return nil
	}
	mods := []dhcpv4.Modifier{
		func(d *dhcpv4.DHCPv4) { d.BootFileName = file },
		dhcpv4.WithOption(dhcpv4.OptBootFileName(file)),
	}
	if tftp {
		mods = append(mods, dhcpv4.WithServerIP(s.cfg.Address), dhcpv4.WithOption(dhcpv4.OptTFTPServerName(s.cfg.Address.String())))
	}
	return mods
}

func (s *Server) dhcpAnswer(m *dhcpv4.DHCPv4, a *armed, c client) *dhcpv4.DHCPv4 {
	mac := m.ClientHWAddr
	base := []dhcpv4.Modifier{
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(s.cfg.Address)),
		dhcpv4.WithNetmask(s.netmask),
		dhcpv4.WithLeaseTime(uint32(s.cfg.LeaseTime / time.Second)),
	}
	if s.cfg.Router != nil {
		base = append(base, dhcpv4.WithOption(dhcpv4.OptRouter(s.cfg.Router)))
	}
	if len(s.cfg.DNS) > 0 {
		base = append(base, dhcpv4.WithOption(dhcpv4.OptDNS(s.cfg.DNS...)))
	}
	base = append(base, s.bootMods(a, c)...)
	switch m.MessageType() {
	case dhcpv4.MessageTypeDiscover:
		ip, err := s.leases.offer(mac, m.RequestedIPAddress())
		if err != nil {
			s.log.Warn("network boot DHCP: no address to offer", "node", a.Node, "mac", mac.String(), "err", err)
			return nil
		}
		s.log.Info("network boot DHCP: offer", "node", a.Node, "mac", mac.String(), "ip", ip.String(), "pxe", c.pxe, "ipxe", c.ipxe)
		return reply(m, append(base, dhcpv4.WithMessageType(dhcpv4.MessageTypeOffer), dhcpv4.WithYourIP(ip))...)
	case dhcpv4.MessageTypeRequest:
		if sid := m.ServerIdentifier(); sid != nil && !sid.Equal(s.cfg.Address) {
			// The client took another server's offer.
			s.leases.release(mac, nil)
			return nil
		}
		want := m.RequestedIPAddress()
		if want == nil || want.IsUnspecified() {
			want = m.ClientIPAddr
		}
		ip, err := s.leases.bind(mac, want)
		if err != nil {
			s.log.Info("network boot DHCP: nak", "node", a.Node, "mac", mac.String(), "err", err)
			return reply(m, dhcpv4.WithMessageType(dhcpv4.MessageTypeNak), dhcpv4.WithOption(dhcpv4.OptServerIdentifier(s.cfg.Address)),
				dhcpv4.WithOption(dhcpv4.OptMessage(err.Error())))
		}
		s.log.Info("network boot DHCP: ack", "node", a.Node, "mac", mac.String(), "ip", ip.String(), "pxe", c.pxe, "ipxe", c.ipxe)
		return reply(m, append(base, dhcpv4.WithMessageType(dhcpv4.MessageTypeAck), dhcpv4.WithYourIP(ip))...)
	case dhcpv4.MessageTypeRelease:
		s.leases.release(mac, m.ClientIPAddr)
	case dhcpv4.MessageTypeDecline:
		s.leases.decline(mac, m.RequestedIPAddress())
	case dhcpv4.MessageTypeInform:
		return reply(m, append(base[:1:1], dhcpv4.WithMessageType(dhcpv4.MessageTypeAck))...)
	}
	return nil
}

// proxyAnswer is a ProxyDHCP offer (port 67, to a DHCPDISCOVER) or ack
// (port 4011, to a DHCPREQUEST) for a PXE client: no address, the boot
// file, and PXE discovery control "boot the file given here".
func (s *Server) proxyAnswer(m *dhcpv4.DHCPv4, a *armed, c client, onProxyPort bool) *dhcpv4.DHCPv4 {
	if !c.pxe {
		return nil
	}
	var typ dhcpv4.MessageType
	switch {
	case !onProxyPort && m.MessageType() == dhcpv4.MessageTypeDiscover:
		typ = dhcpv4.MessageTypeOffer
	case onProxyPort && m.MessageType() == dhcpv4.MessageTypeRequest:
		typ = dhcpv4.MessageTypeAck
	default:
		return nil
	}
	mods := s.bootMods(a, c)
	if mods == nil {
		return nil
	}
	mods = append(mods,
		dhcpv4.WithMessageType(typ),
		dhcpv4.WithYourIP(net.IPv4zero),
		dhcpv4.WithServerIP(s.cfg.Address),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(s.cfg.Address)),
		dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient")),
		// Vendor options: PXE_DISCOVERY_CONTROL (6) = 8, "download the
		// boot file of this answer, no boot server discovery".
		dhcpv4.WithGeneric(dhcpv4.OptionVendorSpecificInformation, []byte{6, 1, 8, 255}),
	)
	if uuid := m.GetOneOption(dhcpv4.OptionClientMachineIdentifier); len(uuid) > 0 && len(uuid) <= 17 {
		mods = append(mods, dhcpv4.WithGeneric(dhcpv4.OptionClientMachineIdentifier, uuid))
	}
	s.log.Info("network boot proxy-DHCP: "+typ.String(), "node", a.Node, "mac", m.ClientHWAddr.String(), "ipxe", c.ipxe)
	return reply(m, mods...)
}

func reply(m *dhcpv4.DHCPv4, mods ...dhcpv4.Modifier) *dhcpv4.DHCPv4 {
	r, err := dhcpv4.NewReplyFromRequest(m, mods...)
	if err != nil {
		return nil
	}
	return r
}

// leases is the address pool of ModeDHCP.
type leases struct {
	mu       sync.Mutex
	self     net.IP
	start    uint32
	size     uint32
	lease    time.Duration
	byMAC    map[string]*lease
	byIP     map[uint32]*lease
	declined map[uint32]time.Time
	now      func() time.Time
}

type lease struct {
	mac     string
	ip      uint32
	expires time.Time
	bound   bool
}

// maxRange bounds the pool.
const maxRange = 1 << 16

func newLeases(self net.IP, mask net.IPMask, from, to net.IP, d time.Duration) (*leases, error) {
	if from.To4() == nil || to.To4() == nil {
		return nil, errors.New("network boot in DHCP mode needs an address range (--netboot-dhcp-range FIRST-LAST), or --netboot-dhcp-mode proxy beside the site's own DHCP server")
	}
	subnet := net.IPNet{IP: self.Mask(mask), Mask: mask}
	if !subnet.Contains(from) || !subnet.Contains(to) {
		return nil, fmt.Errorf("network boot DHCP range %s-%s is not inside the site network %s", from, to, subnet.String())
	}
	a, b := ip4(from), ip4(to)
	if b < a {
		return nil, fmt.Errorf("network boot DHCP range %s-%s ends before it starts", from, to)
	}
	if b-a+1 > maxRange {
		return nil, fmt.Errorf("network boot DHCP range %s-%s has more than %d addresses", from, to, maxRange)
	}
	return &leases{self: self, start: a, size: b - a + 1, lease: d, byMAC: map[string]*lease{}, byIP: map[uint32]*lease{}, declined: map[uint32]time.Time{}, now: time.Now}, nil
}

func ip4(ip net.IP) uint32 { return binary.BigEndian.Uint32(ip.To4()) }

func fromU32(v uint32) net.IP {
	ip := make(net.IP, 4)
	binary.BigEndian.PutUint32(ip, v)
	return ip
}

func (l *leases) inRange(v uint32) bool {
	return v >= l.start && v-l.start < l.size && v != ip4(l.self)
}

// free reports whether an address can go to mac.
func (l *leases) free(v uint32, mac string, now time.Time) bool {
	if !l.inRange(v) {
		return false
	}
	if t, ok := l.declined[v]; ok && now.Sub(t) < 10*time.Minute {
		return false
	}
	o := l.byIP[v]
	return o == nil || o.mac == mac || now.After(o.expires)
}

func (l *leases) take(mac string, v uint32, now time.Time, d time.Duration, bound bool) net.IP {
	if old := l.byMAC[mac]; old != nil && l.byIP[old.ip] == old {
		delete(l.byIP, old.ip)
	}
	if o := l.byIP[v]; o != nil && o.mac != mac && l.byMAC[o.mac] == o {
		delete(l.byMAC, o.mac)
	}
	le := &lease{mac: mac, ip: v, expires: now.Add(d), bound: bound}
	l.byMAC[mac] = le
	l.byIP[v] = le
	return fromU32(v)
}

// offer picks an address for mac: its lease, the one it asks for, or the
// first free one. It is held for a minute unless bound by a request.
func (l *leases) offer(mac net.HardwareAddr, want net.IP) (net.IP, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now, key := l.now(), mac.String()
	hold := time.Minute
	if le := l.byMAC[key]; le != nil && l.free(le.ip, key, now) {
		if le.bound && now.Before(le.expires) {
			return fromU32(le.ip), nil
		}
		return l.take(key, le.ip, now, hold, false), nil
	}
	if want.To4() != nil && l.free(ip4(want), key, now) {
		return l.take(key, ip4(want), now, hold, false), nil
	}
	for i := uint32(0); i < l.size; i++ {
		if v := l.start + i; l.free(v, key, now) {
			return l.take(key, v, now, hold, false), nil
		}
	}
	return nil, errors.New("the DHCP range is exhausted")
}

// bind leases an address that a client requests.
func (l *leases) bind(mac net.HardwareAddr, want net.IP) (net.IP, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now, key := l.now(), mac.String()
	if want.To4() == nil || want.IsUnspecified() {
		return nil, errors.New("request names no address")
	}
	v := ip4(want)
	if !l.free(v, key, now) {
		return nil, fmt.Errorf("address %s is not available to %s", want, key)
	}
	return l.take(key, v, now, l.lease, true), nil
}

func (l *leases) release(mac net.HardwareAddr, ip net.IP) {
	l.mu.Lock()
	defer l.mu.Unlock()
	key := mac.String()
	le := l.byMAC[key]
	if le == nil || (ip != nil && !ip.IsUnspecified() && ip.To4() != nil && ip4(ip) != le.ip) {
		return
	}
	delete(l.byMAC, key)
	if l.byIP[le.ip] == le {
		delete(l.byIP, le.ip)
	}
}

func (l *leases) decline(mac net.HardwareAddr, ip net.IP) {
	if ip.To4() == nil {
		return
	}
	l.release(mac, ip)
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.declined) < maxRange {
		l.declined[ip4(ip)] = l.now()
	}
}

// macOf returns the MAC that holds a lease of ip, if any.
func (l *leases) macOf(ip net.IP) (string, bool) {
	if l == nil || ip.To4() == nil {
		return "", false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	le := l.byIP[ip4(ip)]
	if le == nil || l.now().After(le.expires) {
		return "", false
	}
	return le.mac, true
}
