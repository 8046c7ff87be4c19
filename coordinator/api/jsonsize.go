package api

import (
	"math"
	"strconv"
	"unicode/utf8"
)

// jsonSize is len(json.Marshal(v)) for a value of JSON's types (as
// encoding/json decodes into any: maps of string keys, lists, strings,
// float64, bool, nil), without making the JSON; ok is false for any other
// value, and for NaN and infinities (which Marshal refuses), so that the
// caller marshals instead. checkMapSize bounds a node's fields by their
// JSON's size: a field at the cap is 64 KiB of JSON, and a patch refused
// for one over it made all of that JSON only to measure it.
func jsonSize(v any) (n int, ok bool) {
	switch x := v.(type) {
	case nil:
		return 4, true
	case bool:
		if x {
			return 4, true
		}
		return 5, true
	case string:
		return stringSize(x), true
	case float64:
		return floatSize(x)
	case map[string]any:
		if x == nil {
			return 4, true
		}
		n = 2 + max(len(x)-1, 0) // {} and the commas
		for k, e := range x {
			s, ok := jsonSize(e)
			if !ok {
				return 0, false
			}
			n += stringSize(k) + 1 + s // "key":value
		}
		return n, true
	case []any:
		if x == nil {
			return 4, true
		}
		n = 2 + max(len(x)-1, 0)
		for _, e := range x {
			s, ok := jsonSize(e)
			if !ok {
				return 0, false
			}
			n += s
		}
		return n, true
	}
	return 0, false
}

// stringSize is the size of s as encoding/json writes it (HTML
// characters escaped, invalid UTF-8 as \ufffd, U+2028 and U+2029
// escaped), quotes included.
func stringSize(s string) int {
	i := htmlSafePrefix(s)
	n := 2 + i
	for i < len(s) {
		if b := s[i]; b < utf8.RuneSelf {
			switch {
			case b == '\\' || b == '"' || b == '\b' || b == '\f' || b == '\n' || b == '\r' || b == '\t':
				n += 2
			case b < 0x20 || b == '<' || b == '>' || b == '&':
				n += 6
			default:
				n++
			}
			i++
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case c == utf8.RuneError && size == 1, c == '\u2028', c == '\u2029':
			n += 6
		default:
			n += size
		}
		i += size
	}
	return n
}

// floatSize is the size of f as encoding/json writes a float64.
func floatSize(f float64) (int, bool) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, false
	}
	var buf [32]byte
	abs := math.Abs(f)
	fmt := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		fmt = 'e'
	}
	b := strconv.AppendFloat(buf[:0], f, fmt, -1, 64)
	n := len(b)
	if fmt == 'e' && n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
		n--
	}
	return n, true
}
