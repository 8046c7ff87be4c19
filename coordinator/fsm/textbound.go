package fsm

import (
	"fmt"
	"unicode/utf8"
)

// MaxText bounds every text that a ramdisk, a BMC (through the edge
// agent) or a site sends once it is stored: a result's error, a
// heartbeat's detail, and what is made of them, a node's last_error,
// maintenance_reason and each history event (docs/security.md, "Text
// from the sites"). A longer text keeps its first bytes and says it was
// cut and how long it was.
const MaxText = 4096

// MaxRemoteText bounds a text as it arrives from a site (a result's
// error, a heartbeat's detail), so that what is made of it with a few
// words around it (last_error: "deploy step … failed on node …: ")
// still fits MaxText and keeps the note of the text's own length.
const MaxRemoteText = MaxText - 512

// BoundText returns s cut to at most max bytes (MaxText when max <= 0)
// at a character's start, ending with a note of what was cut:
// "… [cut: 1048576 bytes, first 4054 kept]". s is returned as it is when
// it fits. Invalid UTF-8 in the part kept is replaced.
func BoundText(s string, max int) string {
	if max <= 0 {
		max = MaxText
	}
	if len(s) <= max {
		return s
	}
	note := func(k int) string { return fmt.Sprintf(" … [cut: %d bytes, first %d kept]", len(s), k) }
	k := max - len(note(max))
	if k < 0 {
		k = 0
	}
	for k > 0 && !utf8.RuneStart(s[k]) {
		k--
	}
	kept := s[:k]
	if !utf8.ValidString(kept) {
		kept = toValidUTF8(kept)
		if len(kept) > k {
			kept = kept[:k]
			for len(kept) > 0 && !utf8.ValidString(kept) {
				kept = kept[:len(kept)-1]
			}
		}
	}
	return kept + note(len(kept))
}

func toValidUTF8(s string) string {
	out := make([]rune, 0, len(s))
	for _, r := range s {
		if r == utf8.RuneError {
			r = '?'
		}
		out = append(out, r)
	}
	return string(out)
}
