package api

import (
	"math/rand"
	"testing"
)

func TestScansMatchBytewise(t *testing.T) {
	rnd := rand.New(rand.NewSource(3))
	special := []byte{'"', '\\', '<', '>', '&', 0, 0x1f, 0x20, 0x7f, 0x80, 0xff, 'x', 'a'}
	for n := 0; n < 3000; n++ {
		b := make([]byte, rnd.Intn(40))
		for i := range b {
			if rnd.Intn(4) == 0 {
				b[i] = special[rnd.Intn(len(special))]
			} else {
				b[i] = byte(0x20 + rnd.Intn(0x5f))
			}
		}
		from := 0
		if len(b) > 0 {
			from = rnd.Intn(len(b))
		}
		want := len(b)
		for i := from; i < len(b); i++ {
			if c := b[i]; c == '"' || c == '\\' || c < 0x20 {
				want = i
				break
			}
		}
		if got := scanPlain(b, from); got != want {
			t.Fatalf("scanPlain(%q, %d) = %d, want %d", b, from, got, want)
		}
		safe := 0
		for safe < len(b) {
			c := b[safe]
			if c >= 0x80 || c < 0x20 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
				break
			}
			safe++
		}
		got := htmlSafePrefix(string(b))
		if got > safe || (got != len(b) && got%8 != 0) || safe-got >= 8 && got != len(b) {
			t.Fatalf("htmlSafePrefix(%q) = %d, the safe prefix is %d bytes", b, got, safe)
		}
	}
}
