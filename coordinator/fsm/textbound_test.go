package fsm

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestBoundText: a text within the bound is kept as it is; a longer one
// (ASCII, multi-byte, invalid UTF-8) is cut to at most the bound at a
// character's start, valid UTF-8, saying how long it was and how much
// was kept.
func TestBoundText(t *testing.T) {
	if got := BoundText("short", 0); got != "short" {
		t.Errorf("short text changed: %q", got)
	}
	exact := strings.Repeat("a", MaxText)
	if got := BoundText(exact, 0); got != exact {
		t.Errorf("a text of exactly MaxText bytes was cut")
	}
	for name, s := range map[string]string{
		"ascii":     strings.Repeat("x", 1<<20),
		"multibyte": strings.Repeat("é€😀", 1<<17),
		"invalid":   strings.Repeat("ab\xff\xfe", 1<<18),
	} {
		got := BoundText(s, 0)
		if len(got) > MaxText || !utf8.ValidString(got) || !strings.Contains(got, "[cut: ") ||
			!strings.Contains(got, " bytes, first ") {
			t.Errorf("%s: %d bytes, valid %v, tail %q", name, len(got), utf8.ValidString(got), got[max(0, len(got)-60):])
		}
		if !strings.Contains(got, "[cut: "+itoa(len(s))+" bytes") {
			t.Errorf("%s: does not say the text had %d bytes: %q", name, len(s), got[len(got)-60:])
		}
	}
	if got := BoundText(strings.Repeat("y", 300), 100); len(got) > 100 || !strings.HasPrefix(got, "yyy") {
		t.Errorf("bound 100: %d bytes %q", len(got), got)
	}
}

func itoa(n int) string {
	var b []byte
	for n > 0 {
		b = append([]byte{byte('0' + n%10)}, b...)
		n /= 10
	}
	return string(b)
}
