package freeport

import (
	"net"
	"strconv"
	"testing"
)

// Addresses are bindable, below the ephemeral range, and never repeat.
func TestAddrBindableOutsideEphemeralRange(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 50; i++ {
		addr, err := Addr("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		if seen[addr] {
			t.Fatalf("%s given twice", addr)
		}
		seen[addr] = true
		_, p, _ := net.SplitHostPort(addr)
		port, _ := strconv.Atoi(p)
		if l, ok := ephemeralLow(); ok && port >= l {
			t.Fatalf("%s is in the ephemeral range (from %d)", addr, l)
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("%s not bindable: %v", addr, err)
		}
		ln.Close()
	}
}

// LoopbackPort's ports bind on both loopbacks, and a port taken on [::1]
// alone counts as taken (chromedriver exits when it cannot bind it).
func TestLoopbackPortFreeOnBothFamilies(t *testing.T) {
	for i := 0; i < 20; i++ {
		port, err := LoopbackPort()
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			t.Fatalf("port %d not bindable on 127.0.0.1: %v", port, err)
		}
		ln.Close()
		if ln6, err := net.Listen("tcp6", net.JoinHostPort("::1", strconv.Itoa(port))); err == nil {
			ln6.Close()
		} else if freeOnV6Loopback(strconv.Itoa(port)) == false {
			t.Fatalf("port %d taken on [::1]: %v", port, err)
		}
	}
	ln6, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	defer ln6.Close()
	_, p, _ := net.SplitHostPort(ln6.Addr().String())
	if freeOnV6Loopback(p) {
		t.Fatalf("port %s is held on [::1] but counted free", p)
	}
}
