// Package lldp reads IEEE 802.1AB LLDP frames: the TLVs of a frame
// (ParseFrame), the raw form Ironic Python Agent puts in an inventory
// interface's "lldp" list ([[type, "hex value"], ...]: Raw, FromRaw), and
// what the TLVs say (Decode): the switch's chassis ID, the port ID,
// system name and description, port description, the port's VLANs and
// MTU, in the names of Ironic's parse_lldp processing (Neighbour.Parsed).
// It only parses bytes; the ramdisk's listener (ramdisk/lldp) reads them.
package lldp

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"unicode/utf8"
)

// EtherType is LLDP's.
const EtherType = 0x88cc

// Multicast addresses LLDP frames are sent to: nearest bridge (what
// switches send), nearest non-TPMR bridge, nearest customer bridge.
var Multicast = []net.HardwareAddr{
	{0x01, 0x80, 0xc2, 0x00, 0x00, 0x0e},
	{0x01, 0x80, 0xc2, 0x00, 0x00, 0x03},
	{0x01, 0x80, 0xc2, 0x00, 0x00, 0x00},
}

// TLV types (IEEE 802.1AB).
const (
	TypeEnd             = 0
	TypeChassisID       = 1
	TypePortID          = 2
	TypeTTL             = 3
	TypePortDescription = 4
	TypeSystemName      = 5
	TypeSystemDesc      = 6
	TypeCapabilities    = 7
	TypeMgmtAddress     = 8
	TypeOrgSpecific     = 127
)

// Bounds: a TLV value has at most 511 bytes (its 9-bit length); a frame
// has at most MaxTLVs TLVs (a 1500-byte frame holds at most 750).
const (
	MaxValue = 511
	MaxTLVs  = 750
)

// TLV is one type-length-value of a frame.
type TLV struct {
	Type  int
	Value []byte
}

// ErrNotLLDP is a frame that is not an LLDP frame.
var ErrNotLLDP = errors.New("not an LLDP frame")

// ParseFrame reads the TLVs of an Ethernet frame (with or without one
// 802.1Q tag) up to the End TLV. A frame whose first TLVs are not the
// chassis ID, port ID and TTL, or whose TLVs run past its end, is
// refused.
func ParseFrame(frame []byte) ([]TLV, error) {
	if len(frame) < 14 {
		return nil, ErrNotLLDP
	}
	et := binary.BigEndian.Uint16(frame[12:14])
	body := frame[14:]
	if et == 0x8100 && len(frame) >= 18 {
		et, body = binary.BigEndian.Uint16(frame[16:18]), frame[18:]
	}
	if et != EtherType {
		return nil, ErrNotLLDP
	}
	return ParsePDU(body)
}

// ParsePDU reads the TLVs of an LLDPDU (the frame's payload).
func ParsePDU(b []byte) ([]TLV, error) {
	var out []TLV
	for len(b) > 0 {
		if len(b) < 2 {
			return nil, fmt.Errorf("LLDP: truncated TLV header")
		}
		h := binary.BigEndian.Uint16(b[:2])
		t, l := int(h>>9), int(h&0x1ff)
		if len(b) < 2+l {
			return nil, fmt.Errorf("LLDP: TLV type %d of %d bytes runs past the frame's end", t, l)
		}
		if t == TypeEnd {
			break
		}
		if len(out) == MaxTLVs {
			return nil, fmt.Errorf("LLDP: more than %d TLVs", MaxTLVs)
		}
		out = append(out, TLV{Type: t, Value: append([]byte(nil), b[2:2+l]...)})
		b = b[2+l:]
	}
	if len(out) < 3 || out[0].Type != TypeChassisID || out[1].Type != TypePortID || out[2].Type != TypeTTL {
		return nil, fmt.Errorf("LLDP: the frame does not begin with the chassis ID, port ID and TTL TLVs")
	}
	return out, nil
}

// Raw is tlvs as Ironic Python Agent reports them in an inventory
// interface's "lldp": [[type, "hex value"], ...].
func Raw(tlvs []TLV) [][]any {
	out := make([][]any, 0, len(tlvs))
	for _, t := range tlvs {
		out = append(out, []any{t.Type, hex.EncodeToString(t.Value)})
	}
	return out
}

// FromRaw reads the raw form back (as JSON decodes it: numbers are
// float64); a malformed entry is an error, as Ironic skips such data.
func FromRaw(v any) ([]TLV, error) {
	l, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("lldp is not a list of [type, hex value] pairs")
	}
	if len(l) > MaxTLVs {
		return nil, fmt.Errorf("lldp has more than %d TLVs", MaxTLVs)
	}
	var out []TLV
	for i, e := range l {
		pair, ok := e.([]any)
		if !ok || len(pair) != 2 {
			return nil, fmt.Errorf("lldp entry %d is not a [type, hex value] pair", i+1)
		}
		t, ok := pair[0].(float64)
		s, ok2 := pair[1].(string)
		if !ok || !ok2 || t != float64(int(t)) || t < 0 || t > 127 {
			return nil, fmt.Errorf("lldp entry %d is not a [type, hex value] pair", i+1)
		}
		b, err := hex.DecodeString(s)
		if err != nil || len(b) > MaxValue {
			return nil, fmt.Errorf("TLV value for TLV type %d is not in correct format: hexadecimal, at most %d bytes", int(t), MaxValue)
		}
		out = append(out, TLV{Type: int(t), Value: b})
	}
	return out, nil
}

// VLAN is one VLAN of the port (802.1 VLAN Name TLV).
type VLAN struct {
	ID   int    `json:"id"`
	Name string `json:"name"`
}

// Neighbour is what one switch port's LLDP frame says.
type Neighbour struct {
	// ChassisID and its subtype (mac_address, ifName, local, ...): a MAC
	// as 00:11:22:33:44:55.
	ChassisID, ChassisIDSubtype string
	// PortID and its subtype (ifName, mac_address, local, ifAlias, ...).
	PortID, PortIDSubtype string
	PortDescription       string
	SystemName            string
	SystemDescription     string
	// UntaggedVLAN is the port's VLAN ID (802.1 Port VLAN ID), 0 if none.
	UntaggedVLAN int
	VLANs        []VLAN
	// MTU is the 802.3 Maximum Frame Size, 0 if none.
	MTU int
	// MgmtAddresses are the switch's management IP addresses.
	MgmtAddresses []string
}

var chassisSubtypes = map[byte]string{1: "entPhysAlias_c", 2: "ifAlias", 3: "entPhysAlias_p", 4: "mac_address", 5: "IANA_address", 6: "ifName", 7: "local"}
var portSubtypes = map[byte]string{1: "ifAlias", 2: "entPhysicalAlias", 3: "mac_address", 4: "IANA_address", 5: "ifName", 7: "local"}

// idValue is a chassis or port ID's value by its subtype: a MAC, an IP
// address, or text.
func idValue(name string, v []byte) (string, bool) {
	switch name {
	case "mac_address":
		if len(v) != 6 {
			return "", false
		}
		return net.HardwareAddr(v).String(), true
	case "IANA_address":
		if len(v) < 1 {
			return "", false
		}
		if a, ok := netip.AddrFromSlice(v[1:]); ok {
			return a.String(), true
		}
		return "", false
	}
	return text(v), true
}

// text is v as UTF-8 text (invalid bytes replaced), without the NULs
// some switches pad with.
func text(v []byte) string {
	s := strings.TrimRight(string(v), "\x00")
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	return s
}

// Decode says what tlvs say. A chassis or port ID of an unknown subtype,
// or whose value does not fit it (a MAC that is not 6 bytes), is left
// empty.
func Decode(tlvs []TLV) Neighbour {
	var n Neighbour
	for _, t := range tlvs {
		v := t.Value
		switch t.Type {
		case TypeChassisID, TypePortID:
			if len(v) < 1 {
				continue
			}
			names := chassisSubtypes
			if t.Type == TypePortID {
				names = portSubtypes
			}
			name, ok := names[v[0]]
			if !ok {
				continue
			}
			val, ok := idValue(name, v[1:])
			if !ok {
				continue
			}
			if t.Type == TypeChassisID {
				n.ChassisID, n.ChassisIDSubtype = val, name
			} else {
				n.PortID, n.PortIDSubtype = val, name
			}
		case TypePortDescription:
			n.PortDescription = text(v)
		case TypeSystemName:
			n.SystemName = text(v)
		case TypeSystemDesc:
			n.SystemDescription = text(v)
		case TypeMgmtAddress:
			// length, subtype, address, ...
			if len(v) >= 2 && int(v[0]) >= 1 && len(v) >= 1+int(v[0]) {
				if a, ok := netip.AddrFromSlice(v[2 : 1+int(v[0])]); ok {
					n.MgmtAddresses = append(n.MgmtAddresses, a.String())
				}
			}
		case TypeOrgSpecific:
			if len(v) < 4 {
				continue
			}
			oui, sub, d := hex.EncodeToString(v[:3]), v[3], v[4:]
			switch {
			case oui == "0080c2" && sub == 1 && len(d) == 2: // 802.1 Port VLAN ID
				n.UntaggedVLAN = int(binary.BigEndian.Uint16(d))
			case oui == "0080c2" && sub == 3 && len(d) >= 3: // 802.1 VLAN Name
				l := int(d[2])
				if len(d) >= 3+l && len(n.VLANs) < 4096 {
					n.VLANs = append(n.VLANs, VLAN{ID: int(binary.BigEndian.Uint16(d[:2])), Name: text(d[3 : 3+l])})
				}
			case oui == "00120f" && sub == 4 && len(d) == 2: // 802.3 Maximum Frame Size
				n.MTU = int(binary.BigEndian.Uint16(d))
			}
		}
	}
	return n
}

// Parsed is n in the names of Ironic's parse_lldp hook (plugin_data
// parsed_lldp): only what the frame had.
func (n Neighbour) Parsed() map[string]any {
	out := map[string]any{}
	set := func(k, v string) {
		if v != "" {
			out[k] = v
		}
	}
	set("switch_chassis_id", n.ChassisID)
	set("switch_port_id", n.PortID)
	set("switch_port_description", n.PortDescription)
	set("switch_system_name", n.SystemName)
	set("switch_system_description", n.SystemDescription)
	if n.UntaggedVLAN != 0 {
		out["switch_port_untagged_vlan_id"] = n.UntaggedVLAN
	}
	if len(n.VLANs) > 0 {
		l := make([]any, 0, len(n.VLANs))
		for _, v := range n.VLANs {
			l = append(l, map[string]any{"id": v.ID, "name": v.Name})
		}
		out["switch_port_vlans"] = l
	}
	if n.MTU != 0 {
		out["switch_port_mtu"] = n.MTU
	}
	if len(n.MgmtAddresses) > 0 {
		l := make([]any, 0, len(n.MgmtAddresses))
		for _, a := range n.MgmtAddresses {
			l = append(l, a)
		}
		out["switch_mgmt_addresses"] = l
	}
	return out
}

// LocalLinkConnection is what Ironic's local_link_connection hook takes
// of n for a port: switch_id (the chassis ID, when it is a MAC), port_id
// and switch_info (the system name).
func (n Neighbour) LocalLinkConnection() map[string]string {
	out := map[string]string{}
	if n.ChassisIDSubtype == "mac_address" && n.ChassisID != "" {
		out["switch_id"] = n.ChassisID
	}
	if n.PortID != "" {
		out["port_id"] = n.PortID
	}
	if n.SystemName != "" {
		out["switch_info"] = n.SystemName
	}
	return out
}

// Basic is the TLVs of a frame that names a switch port: the chassis ID
// (a MAC), the port ID (an interface name), a TTL of 120 s, the port
// description and system name when given (what a simulated switch
// sends).
func Basic(chassis net.HardwareAddr, portID, portDescription, systemName string) []TLV {
	str := func(s string) []byte {
		if len(s) > MaxValue-1 {
			s = s[:MaxValue-1]
		}
		return []byte(s)
	}
	out := []TLV{{TypeChassisID, append([]byte{4}, chassis...)}, {TypePortID, append([]byte{5}, str(portID)...)}, {TypeTTL, []byte{0, 120}}}
	if portDescription != "" {
		out = append(out, TLV{TypePortDescription, str(portDescription)})
	}
	if systemName != "" {
		out = append(out, TLV{TypeSystemName, str(systemName)})
	}
	return out
}
