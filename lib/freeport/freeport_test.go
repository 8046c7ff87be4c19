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
