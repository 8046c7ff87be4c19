package cli

import "testing"

func TestConsoleEscape(t *testing.T) {
	for _, tc := range []struct {
		in, send string
		leave    bool
	}{
		{"ls\r", "ls\r", false},
		{"~.", "", true},
		{"a~.", "a~.", false},
		{"ls\r~.", "ls\r", true},
		{"x\n~~.", "x\n~.", false},
		{"\r~x", "\r~x", false},
	} {
		e := &escaper{line: true}
		send, leave := e.feed([]byte(tc.in))
		if string(send) != tc.send || leave != tc.leave {
			t.Errorf("feed(%q) = %q, %v; want %q, %v", tc.in, send, leave, tc.send, tc.leave)
		}
	}
	// Split across reads.
	e := &escaper{line: true}
	if s, l := e.feed([]byte("~")); len(s) != 0 || l {
		t.Fatalf("a lone ~ at a line start was sent: %q", s)
	}
	if _, l := e.feed([]byte(".")); !l {
		t.Fatal("~ then . in two reads did not leave")
	}
}
