package api

import "encoding/binary"

// Word-at-a-time scans of JSON text (8 bytes a step). Each test below is
// exact as a yes or no for the whole word: it may mark a wrong byte of
// the word, never a word without the byte it looks for, so a word it
// passes has none; a word it stops at is then read byte by byte.

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// hasZero: some byte of w is 0.
func hasZero(w uint64) bool { return (w-ones)&^w&highs != 0 }

// hasByte: some byte of w is c.
func hasByte(w uint64, c byte) bool { return hasZero(w ^ (ones * uint64(c))) }

// hasLess: some byte of w is below n (n at most 128).
func hasLess(w uint64, n byte) bool { return (w-ones*uint64(n))&^w&highs != 0 }

// scanPlain returns the index of the first byte of b from i on that ends
// or escapes a JSON string or cannot be in one as it is ('"', '\\' or a
// control character), len(b) if none.
func scanPlain(b []byte, i int) int {
	for ; i+8 <= len(b); i += 8 {
		w := binary.LittleEndian.Uint64(b[i:])
		if hasLess(w, 0x20) || hasByte(w, '"') || hasByte(w, '\\') {
			break
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c == '"' || c == '\\' || c < 0x20 {
			return i
		}
	}
	return i
}

// htmlSafePrefix returns how many of s's first bytes encoding/json
// writes as they are (printable ASCII but '"', '\\', '<', '>' and '&'),
// a multiple of 8 or all of s.
func htmlSafePrefix(s string) int {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		w := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
			uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
		if w&highs != 0 || hasLess(w, 0x20) || hasByte(w, '"') || hasByte(w, '\\') || hasByte(w, '<') || hasByte(w, '>') || hasByte(w, '&') {
			return i
		}
	}
	return i
}
