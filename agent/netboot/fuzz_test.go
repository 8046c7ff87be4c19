package netboot

import (
	"net"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"
)

// FuzzDHCPAnswer: any packet from the site network, in either mode and on
// either port, gets an answer only if it comes from the armed MAC, and
// the answer never leases outside the range.
func FuzzDHCPAnswer(f *testing.F) {
	hw := mac("52:54:00:00:00:01")
	for _, mods := range [][]dhcpv4.Modifier{nil, pxeMods(iana.INTEL_X86PC), append(pxeMods(iana.EFI_X86_64), ipxeClass),
		{dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest), dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.IPv4(10, 1, 0, 100)))}} {
		d, err := dhcpv4.NewDiscovery(hw, mods...)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(d.ToBytes())
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := dhcpv4.FromBytes(b)
		if err != nil {
			return
		}
		for _, mode := range []string{ModeDHCP, ModeProxy} {
			s := handlerServer(t, mode)
			if err := s.Arm(Boot{Node: "n1", MACs: []net.HardwareAddr{hw}, Cmdline: "x"}); err != nil {
				t.Fatal(err)
			}
			for _, proxyPort := range []bool{false, true} {
				r := s.answer(m, proxyPort)
				if r == nil {
					continue
				}
				if m.ClientHWAddr.String() != hw.String() {
					t.Fatalf("answered MAC %s, armed only %s", m.ClientHWAddr, hw)
				}
				if y := r.YourIPAddr; y != nil && !y.IsUnspecified() && !y.Equal(net.IPv4(10, 1, 0, 100)) && !y.Equal(net.IPv4(10, 1, 0, 101)) {
					t.Fatalf("leased %s outside the range", y)
				}
				_ = r.ToBytes()
			}
		}
	})
}
