package netboot

import (
	"encoding/binary"
	"fmt"
	"net"
	"syscall"
)

// linkSender sends a DHCP answer to one client's MAC address, before the
// client has an address that could be resolved by ARP (RFC 2131 4.1: "the
// server unicasts DHCPOFFER and DHCPACK messages to the client's hardware
// address and 'yiaddr' address"). It writes the IPv4 and UDP headers
// itself on a packet socket (AF_PACKET, SOCK_DGRAM: the kernel adds the
// Ethernet header for the MAC given), which needs root or CAP_NET_RAW.
// It receives nothing (protocol 0).
type linkSender struct {
	fd      int
	ifindex int
	src     net.IP
}

func openLinkSender(iface string, src net.IP) (*linkSender, error) {
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return nil, err
	}
	if src.To4() == nil {
		return nil, fmt.Errorf("no IPv4 address to send from")
	}
	fd, err := syscall.Socket(syscall.AF_PACKET, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("packet socket: %w", err)
	}
	return &linkSender{fd: fd, ifindex: ifi.Index, src: src.To4()}, nil
}

func (l *linkSender) Close() error { return syscall.Close(l.fd) }

// send sends payload as a UDP datagram from the server's port 67 to the
// client's port 68 at IP address dst, in a frame to mac.
func (l *linkSender) send(mac net.HardwareAddr, dst net.IP, payload []byte) error {
	pkt := udpPacket(l.src, dst.To4(), 67, 68, payload)
	sa := &syscall.SockaddrLinklayer{Protocol: htons(syscall.ETH_P_IP), Ifindex: l.ifindex, Halen: uint8(len(mac))}
	copy(sa.Addr[:], mac)
	return syscall.Sendto(l.fd, pkt, 0, sa)
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// udpPacket is an IPv4 packet holding one UDP datagram, checksums set.
func udpPacket(src, dst net.IP, sport, dport uint16, payload []byte) []byte {
	const ihl, udpHdr = 20, 8
	total := ihl + udpHdr + len(payload)
	b := make([]byte, total)
	b[0] = 0x45 // IPv4, 5 words of header
	binary.BigEndian.PutUint16(b[2:], uint16(total))
	b[8] = 64 // TTL
	b[9] = syscall.IPPROTO_UDP
	copy(b[12:16], src)
	copy(b[16:20], dst)
	binary.BigEndian.PutUint16(b[10:], ^onesSum(0, b[:ihl]))
	u := b[ihl:]
	binary.BigEndian.PutUint16(u[0:], sport)
	binary.BigEndian.PutUint16(u[2:], dport)
	binary.BigEndian.PutUint16(u[4:], uint16(udpHdr+len(payload)))
	copy(u[udpHdr:], payload)
	// Pseudo-header: addresses, protocol, UDP length.
	sum := onesSum(0, b[12:20])
	sum = onesSum(sum, []byte{0, syscall.IPPROTO_UDP, u[4], u[5]})
	sum = onesSum(sum, u)
	c := ^sum
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(u[6:], c)
	return b
}

// onesSum adds b to the ones' complement sum acc (RFC 1071).
func onesSum(acc uint16, b []byte) uint16 {
	s := uint32(acc)
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return uint16(s)
}
