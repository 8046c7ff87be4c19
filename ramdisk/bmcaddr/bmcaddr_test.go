package bmcaddr

import "testing"

func TestParseIP(t *testing.T) {
	for _, c := range []struct {
		resp []byte
		want string
		ok   bool
	}{
		{[]byte{0, 0x11, 10, 254, 0, 9}, "10.254.0.9", true},
		{[]byte{0, 0x11, 0, 0, 0, 0}, "", false},
		{[]byte{0xcc, 0x11, 10, 254, 0, 9}, "", false},
		{[]byte{0, 0x11, 10}, "", false},
	} {
		if got, ok := parseIP(c.resp); got != c.want || ok != c.ok {
			t.Errorf("parseIP(%v) = %q %v, want %q %v", c.resp, got, ok, c.want, c.ok)
		}
	}
}
