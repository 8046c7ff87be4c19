package lldp

import (
	"encoding/hex"
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"
)

// recorded reads the frame of testdata/lldpd-1.0.16.txt.
func recorded(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/lldpd-1.0.16.txt")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if line != "" && !strings.HasPrefix(line, "#") {
			f, err := hex.DecodeString(strings.TrimSpace(line))
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatal("no frame in testdata/lldpd-1.0.16.txt")
	return nil
}

// TestParseLLDPDFrame: a frame lldpd sent gives its chassis (a MAC),
// port (an interface name), system name and description, port
// description and management address; the raw form round-trips through
// JSON as an inventory carries it; local_link_connection is Ironic's.
func TestParseLLDPDFrame(t *testing.T) {
	tlvs, err := ParseFrame(recorded(t))
	if err != nil {
		t.Fatal(err)
	}
	n := Decode(tlvs)
	want := Neighbour{ChassisID: "fa:29:a4:48:61:e0", ChassisIDSubtype: "mac_address", PortID: "bmlt0", PortIDSubtype: "ifName",
		PortDescription: "rack 4 port 7", SystemName: "sw-lab-01", SystemDescription: "bmedge test switch",
		MgmtAddresses: []string{"fe80::f829:a4ff:fe48:61e0"}}
	if !reflect.DeepEqual(n, want) {
		t.Fatalf("decoded\n%+v\nwant\n%+v", n, want)
	}
	b, _ := json.Marshal(map[string]any{"lldp": Raw(tlvs)})
	var back map[string]any
	_ = json.Unmarshal(b, &back)
	again, err := FromRaw(back["lldp"])
	if err != nil || !reflect.DeepEqual(Decode(again), n) {
		t.Fatalf("raw round trip: %v %+v", err, Decode(again))
	}
	if llc := n.LocalLinkConnection(); !reflect.DeepEqual(llc, map[string]string{"switch_id": "fa:29:a4:48:61:e0", "port_id": "bmlt0", "switch_info": "sw-lab-01"}) {
		t.Fatalf("local_link_connection %v", llc)
	}
	if p := n.Parsed(); p["switch_system_name"] != "sw-lab-01" || p["switch_port_description"] != "rack 4 port 7" {
		t.Fatalf("parsed %v", p)
	}
}

// tlv makes one TLV's bytes.
func tlv(typ int, v ...byte) []byte {
	h := uint16(typ)<<9 | uint16(len(v))
	return append([]byte{byte(h >> 8), byte(h)}, v...)
}

func frame(tlvs ...[]byte) []byte {
	f := []byte{0x01, 0x80, 0xc2, 0, 0, 0x0e, 0x02, 0, 0, 0, 0, 1, 0x88, 0xcc}
	for _, t := range tlvs {
		f = append(f, t...)
	}
	return append(f, 0, 0)
}

// TestDecodeVLANAndMTU: the 802.1 Port VLAN ID and VLAN Name TLVs and
// the 802.3 Maximum Frame Size TLV (IEEE 802.1AB annexes E and F; lldpd
// sends them for a port with VLANs and a known frame size, which a veth
// in a test namespace has not), a chassis ID that is not a MAC (so no
// switch_id), a port ID that is a MAC, an 802.1Q-tagged frame.
func TestDecodeVLANAndMTU(t *testing.T) {
	f := frame(tlv(TypeChassisID, append([]byte{7}, "chassis-7"...)...), tlv(TypePortID, 3, 0x52, 0x54, 0, 1, 2, 3), tlv(TypeTTL, 0, 120),
		tlv(TypeOrgSpecific, 0x00, 0x80, 0xc2, 1, 0x00, 0x2a),
		tlv(TypeOrgSpecific, append([]byte{0x00, 0x80, 0xc2, 3, 0x00, 0x2a, 4}, "prod"...)...),
		tlv(TypeOrgSpecific, 0x00, 0x12, 0x0f, 4, 0x23, 0x28))
	tlvs, err := ParseFrame(f)
	if err != nil {
		t.Fatal(err)
	}
	n := Decode(tlvs)
	if n.ChassisID != "chassis-7" || n.ChassisIDSubtype != "local" || n.PortID != "52:54:00:01:02:03" || n.UntaggedVLAN != 42 ||
		!reflect.DeepEqual(n.VLANs, []VLAN{{42, "prod"}}) || n.MTU != 9000 {
		t.Fatalf("decoded %+v", n)
	}
	if llc := n.LocalLinkConnection(); !reflect.DeepEqual(llc, map[string]string{"port_id": "52:54:00:01:02:03"}) {
		t.Fatalf("local_link_connection %v: switch_id only for a MAC chassis ID", llc)
	}
	p := n.Parsed()
	if p["switch_port_untagged_vlan_id"] != 42 || p["switch_port_mtu"] != 9000 {
		t.Fatalf("parsed %v", p)
	}
	tagged := append(append(append([]byte{}, f[:12]...), 0x81, 0x00, 0x00, 0x2a), f[12:]...)
	if tlvs2, err := ParseFrame(tagged); err != nil || !reflect.DeepEqual(tlvs2, tlvs) {
		t.Fatalf("802.1Q-tagged frame: %v", err)
	}
}

// TestParseFrameRefusals: what is not a well-formed LLDP frame is
// refused, never read past its end.
func TestParseFrameRefusals(t *testing.T) {
	good := recorded(t)
	cases := map[string][]byte{
		"short":          good[:10],
		"IPv4":           append(append([]byte{}, good[:12]...), 0x08, 0x00, 0x45),
		"truncated TLV":  good[:len(good)-40],
		"half a header":  frame(tlv(TypeChassisID, 4, 1, 2, 3, 4, 5, 6))[:15+8],
		"no port ID":     frame(tlv(TypeChassisID, 4, 1, 2, 3, 4, 5, 6), tlv(TypeTTL, 0, 120)),
		"length too big": append(append([]byte{}, good[:14]...), 0x03, 0xff, 0x04),
	}
	for name, f := range cases {
		if _, err := ParseFrame(f); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	for name, raw := range map[string]any{
		"not a list": "x", "not a pair": []any{[]any{1.0}}, "bad hex": []any{[]any{1.0, "zz"}}, "type": []any{[]any{300.0, "00"}},
	} {
		if _, err := FromRaw(raw); err == nil {
			t.Errorf("FromRaw %s: accepted", name)
		}
	}
}
