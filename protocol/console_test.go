package protocol

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestConsoleMessages(t *testing.T) {
	now := time.Now()
	ok := []*Message{
		{Kind: KindConsole, ID: "1", Node: "n", Sent: now, Action: ConsoleEnable, Driver: "fake"},
		{Kind: KindConsole, ID: "2", Node: "n", Sent: now, Action: ConsoleInput, Console: &ConsoleData{Input: []byte("ls\r")}},
		{Kind: KindConsoleOutput, ID: "3", Node: "n", Sent: now, Console: &ConsoleData{Output: DeflateConsole([]byte("hi")), Offset: 7, Lost: 7}},
	}
	for _, m := range ok {
		if _, err := Encode(m); err != nil {
			t.Errorf("%s %s: %v", m.Kind, m.Action, err)
		}
	}
	bad := []struct {
		m    *Message
		want string
	}{
		{&Message{Kind: KindConsole, ID: "1", Sent: now, Action: ConsoleEnable, Driver: "fake"}, "node"},
		{&Message{Kind: KindConsole, ID: "1", Node: "n", Sent: now, Action: ConsoleEnable}, "driver"},
		{&Message{Kind: KindConsole, ID: "1", Node: "n", Sent: now, Action: "reboot"}, "unknown action"},
		{&Message{Kind: KindConsole, ID: "1", Node: "n", Sent: now, Action: ConsoleInput}, "console.input"},
		{&Message{Kind: KindConsole, ID: "1", Node: "n", Sent: now, Action: ConsoleInput, Console: &ConsoleData{Input: bytes.Repeat([]byte("a"), MaxConsoleInput+1)}}, "over the limit"},
		{&Message{Kind: KindConsoleOutput, ID: "1", Node: "n", Sent: now, Console: &ConsoleData{Input: []byte("x")}}, "only the coordinator"},
		{&Message{Kind: KindConsoleOutput, ID: "1", Node: "n", Sent: now, Console: &ConsoleData{Output: make([]byte, MaxConsoleChunk*2)}}, "over the limit"},
		{&Message{Kind: KindConsoleOutput, ID: "1", Node: "n", Sent: now, Console: &ConsoleData{Offset: 5, Lost: 6}}, "lost 6 bytes before offset 5"},
	}
	for _, b := range bad {
		if _, err := Encode(b.m); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%+v: %v, want an error with %q", b.m, err, b.want)
		}
	}
	// A chunk that inflates past the bound is refused.
	if _, err := InflateConsole(DeflateConsole(make([]byte, MaxConsoleChunk+1))); err == nil {
		t.Error("a chunk inflating past MaxConsoleChunk was taken")
	}
	if out, err := InflateConsole(DeflateConsole([]byte("boot"))); err != nil || string(out) != "boot" {
		t.Errorf("round trip: %q %v", out, err)
	}
	if s, _, l, err := ParseTopic(ConsoleCmdTopic("s1")); err != nil || s != "s1" || l != "console/cmd" {
		t.Errorf("ParseTopic(console/cmd): %q %q %v", s, l, err)
	}
}
