package boot

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

func TestSplitCmdline(t *testing.T) {
	got := SplitCmdline(`BOOT_IMAGE=/vmlinuz console=ttyS0  panic=1 bm.password="a b\c" "bm.site=x y"` + "\n")
	want := []string{"BOOT_IMAGE=/vmlinuz", "console=ttyS0", "panic=1", `bm.password=a b\c`, "bm.site=x y"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	if got := SplitCmdline("  \n"); len(got) != 0 {
		t.Fatalf("blank: got %q", got)
	}
	if got := SplitCmdline(`a="" b`); !reflect.DeepEqual(got, []string{"a=", "b"}) {
		t.Fatalf("empty quoted: got %q", got)
	}
}

func TestParseCmdlineStatic(t *testing.T) {
	p, err := ParseCmdline(`console=ttyS0 panic=1 bm.node=test bm.ip=10.0.2.15/24 bm.gw=10.0.2.2 bm.dns=10.0.2.3,1.1.1.1 ` +
		`bm.broker=mqtt://10.0.2.2:1883 bm.site=s1 bm.user=node-test bm.password="s3cret x" bm.future=1 bm.node=test2`)
	if err != nil {
		t.Fatal(err)
	}
	if p.Node != "test2" {
		t.Errorf("last bm.node should win: %q", p.Node)
	}
	if p.Broker != "mqtt://10.0.2.2:1883" || p.Site != "s1" || p.User != "node-test" || p.Password != "s3cret x" {
		t.Errorf("params: %+v", p)
	}
	if p.Net.Mode != IPStatic || p.Net.Addr != netip.MustParsePrefix("10.0.2.15/24") || p.Net.Gateway != netip.MustParseAddr("10.0.2.2") {
		t.Errorf("net: %+v", p.Net)
	}
	if len(p.Net.DNS) != 2 || p.Net.DNS[1] != netip.MustParseAddr("1.1.1.1") {
		t.Errorf("dns: %v", p.Net.DNS)
	}
	if p.All["bm.future"] != "1" {
		t.Errorf("unknown bm.* params must be kept: %v", p.All)
	}
	if s := p.String(); strings.Contains(s, "s3cret") || !strings.Contains(s, "bm.password=<redacted>") || !strings.Contains(s, "bm.node=test2") {
		t.Errorf("String leaks or misses: %s", s)
	}
}

func TestParseCmdlineDefaultsAndDHCP(t *testing.T) {
	for _, cl := range []string{"bm.node=n1", "bm.node=n1 bm.ip=dhcp", "bm.node=n1 bm.ip=DHCP", "bm.node=n1 bm.ip="} {
		p, err := ParseCmdline(cl)
		if err != nil {
			t.Fatalf("%q: %v", cl, err)
		}
		if p.Net.Mode != IPDHCP || p.Debug {
			t.Errorf("%q: %+v", cl, p)
		}
	}
	p, err := ParseCmdline("bm.node=n1 bm.debug")
	if err != nil || !p.Debug {
		t.Errorf("bm.debug: %v %+v", err, p)
	}
}

func TestParseCmdlineInterfaceSelection(t *testing.T) {
	p, err := ParseCmdline("bm.node=n BOOTIF=01-52-54-00-12-34-56")
	if err != nil {
		t.Fatal(err)
	}
	if p.Net.MAC.String() != "52:54:00:12:34:56" {
		t.Errorf("BOOTIF: %v", p.Net.MAC)
	}
	p, err = ParseCmdline("bm.node=n bm.mac=52:54:00:aa:bb:cc BOOTIF=01-52-54-00-12-34-56 bm.iface=eth1")
	if err != nil {
		t.Fatal(err)
	}
	if p.Net.MAC.String() != "52:54:00:aa:bb:cc" || p.Net.Iface != "eth1" {
		t.Errorf("bm.mac must win over BOOTIF: %+v", p.Net)
	}
}

func TestParseCmdlineErrors(t *testing.T) {
	if _, err := ParseCmdline("console=ttyS0 bm.ip=10.0.2.15/24"); !errors.Is(err, ErrNoNode) {
		t.Errorf("missing node: %v", err)
	}
	for _, cl := range []string{
		"bm.node=n bm.ip=10.0.2.15",    // no prefix length
		"bm.node=n bm.ip=10.0.2.0/24",  // network address
		"bm.node=n bm.ip=0.0.0.0/0",    // unspecified
		"bm.node=n bm.ip=300.0.0.1/24", // not an address
		"bm.node=n bm.ip=10.0.2.15/24 bm.gw=fe80::1",
		"bm.node=n bm.gw=gateway",
		"bm.node=n bm.dns=10.0.2.3,nope",
		"bm.node=n bm.mac=zz",
		"bm.node=n BOOTIF=garbage",
	} {
		if _, err := ParseCmdline(cl); err == nil || errors.Is(err, ErrNoNode) {
			t.Errorf("%q: want a parameter error, got %v", cl, err)
		}
	}
	if _, err := ParseCmdline("bm.node=n bm.ip=fd00::15/64 bm.gw=fd00::1"); err != nil {
		t.Errorf("IPv6 static: %v", err)
	}
}
