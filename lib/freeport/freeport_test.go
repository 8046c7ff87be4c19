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
		if !freeOnV6Loopback(strconv.Itoa(port)) {
			t.Fatalf("port %d taken on [::1]", port)
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

// LoopbackPort passes over ports held on [::1] alone: with every fourth
// port of the range held there, 30 ports drawn hit none of them (without
// the check about one in four would).
func TestLoopbackPortSkipsHeldOnV6(t *testing.T) {
	if ln, err := net.Listen("tcp6", "[::1]:0"); err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	} else {
		ln.Close()
	}
	held := map[int]bool{}
	for p := low; p <= high; p += 4 {
		ln, err := net.Listen("tcp6", net.JoinHostPort("::1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		defer ln.Close()
		held[p] = true
	}
	if len(held) < 1000 {
		t.Skipf("only %d ports could be held on [::1]", len(held))
	}
	for i := 0; i < 30; i++ {
		port, err := LoopbackPort()
		if err != nil {
			t.Fatal(err)
		}
		if held[port] {
			t.Fatalf("port %d is held on [::1] but was given", port)
		}
	}
}
