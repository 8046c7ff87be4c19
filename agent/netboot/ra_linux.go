//go:build linux

package netboot

import (
	"encoding/binary"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// startRA answers the IPv6 router solicitations of the machines being
// booted, and only theirs, with a router advertisement that configures
// nothing (router lifetime 0, no prefix, no DHCPv6), in a frame to the
// solicitor's MAC alone. iPXE configures IPv6 beside DHCPv4 and, on a
// site network without an IPv6 router, waits out three solicitations
// (about 12 s, the CPU spinning) before it fetches its script; the
// advertisement ends that wait at once. Other machines never see it, so
// nothing changes for the site's own IPv6. Needs a packet socket
// (CAP_NET_RAW); without one the boots work and iPXE waits.
func (s *Server) startRA() {
	ifi, err := net.InterfaceByName(s.cfg.Interface)
	if err != nil || len(ifi.HardwareAddr) != 6 {
		return
	}
	fd, err := syscall.Socket(syscall.AF_PACKET, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, int(htons(syscall.ETH_P_IPV6)))
	if err != nil {
		s.log.Debug("network boot: no IPv6 router advertisements to iPXE (it waits ~12 s for an IPv6 router)", "err", err)
		return
	}
	// Only router solicitations reach the socket: ICMPv6 (next header
	// 58) of type 133, without extension headers.
	prog := []unix.SockFilter{
		{Code: 0x30, K: 6},                 // ldb [6]: next header
		{Code: 0x15, Jt: 0, Jf: 3, K: 58},  // ICMPv6?
		{Code: 0x30, K: 40},                // ldb [40]: ICMPv6 type
		{Code: 0x15, Jt: 0, Jf: 1, K: 133}, // router solicitation?
		{Code: 0x06, K: 256},               // accept 256 bytes
		{Code: 0x06, K: 0},                 // drop
	}
	if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}); err != nil {
		syscall.Close(fd)
		return
	}
	if err := syscall.Bind(fd, &syscall.SockaddrLinklayer{Protocol: htons(syscall.ETH_P_IPV6), Ifindex: ifi.Index}); err != nil {
		syscall.Close(fd)
		return
	}
	// A receive timeout, so that the loop sees Close.
	tv := syscall.Timeval{Usec: 500000}
	syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv)
	var closed atomic.Bool
	src := linkLocal(ifi)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer syscall.Close(fd)
		last := map[string]time.Time{}
		buf := make([]byte, 256)
		for !closed.Load() {
			n, from, err := syscall.Recvfrom(fd, buf, 0)
			if err != nil {
				continue
			}
			ll, ok := from.(*syscall.SockaddrLinklayer)
			if !ok || ll.Halen != 6 {
				continue
			}
			mac := net.HardwareAddr(append([]byte(nil), ll.Addr[:6]...))
			rsSrc, ok := parseRS(buf[:n])
			if !ok || s.bootOfMAC(mac) == nil {
				continue
			}
			// At most one answer a second to a MAC.
			now := s.now()
			if t, ok := last[mac.String()]; ok && now.Sub(t) < time.Second {
				continue
			}
			if len(last) > 4096 {
				clear(last)
			}
			last[mac.String()] = now
			dst := rsSrc
			if dst.IsUnspecified() {
				dst = net.IPv6linklocalallnodes
			}
			pkt := routerAdvert(src, dst, ifi.HardwareAddr)
			sa := &syscall.SockaddrLinklayer{Protocol: htons(syscall.ETH_P_IPV6), Ifindex: ifi.Index, Halen: 6}
			copy(sa.Addr[:], mac)
			if err := syscall.Sendto(fd, pkt, 0, sa); err != nil {
				s.log.Debug("network boot: router advertisement not sent", "mac", mac.String(), "err", err)
				continue
			}
			s.log.Debug("network boot: router advertisement (no IPv6 router here) sent", "mac", mac.String())
		}
	}()
	s.onClose(func() { closed.Store(true) })
}

// parseRS checks b is an IPv6 packet holding a valid router solicitation
// (RFC 4861 6.1.1: hop limit 255, code 0) and returns its source address.
func parseRS(b []byte) (net.IP, bool) {
	if len(b) < 48 || b[0]>>4 != 6 || b[6] != 58 || b[7] != 255 || b[40] != 133 || b[41] != 0 {
		return nil, false
	}
	if int(binary.BigEndian.Uint16(b[4:])) < 8 {
		return nil, false
	}
	return net.IP(append([]byte(nil), b[8:24]...)), true
}

// linkLocal is the interface's IPv6 link-local address, or the one its
// MAC would give (EUI-64) when it has none: advertisements come from a
// link-local address.
func linkLocal(ifi *net.Interface) net.IP {
	if addrs, err := ifi.Addrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() == nil && n.IP.IsLinkLocalUnicast() {
				return n.IP
			}
		}
	}
	m := ifi.HardwareAddr
	return net.IP{0xfe, 0x80, 0, 0, 0, 0, 0, 0, m[0] ^ 2, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]}
}

// routerAdvert is an IPv6 packet with a router advertisement that
// configures nothing: hop limit unspecified, no managed or other flag,
// router lifetime 0 (not a default router), no prefix; with the source
// link-layer address option.
func routerAdvert(src, dst net.IP, mac net.HardwareAddr) []byte {
	const hdr, ra, opt = 40, 16, 8
	b := make([]byte, hdr+ra+opt)
	b[0] = 0x60
	binary.BigEndian.PutUint16(b[4:], ra+opt)
	b[6] = 58  // ICMPv6
	b[7] = 255 // hop limit: neighbour discovery's
	copy(b[8:24], src.To16())
	copy(b[24:40], dst.To16())
	m := b[hdr:]
	m[0] = 134 // router advertisement; the rest of its fields 0
	m[ra] = 1  // source link-layer address
	m[ra+1] = 1
	copy(m[ra+2:], mac)
	// Pseudo-header: addresses, upper-layer length, next header.
	sum := onesSum(0, b[8:40])
	sum = onesSum(sum, []byte{0, 0, 0, ra + opt, 0, 0, 0, 58})
	sum = onesSum(sum, m)
	binary.BigEndian.PutUint16(m[2:], ^sum)
	return b
}
