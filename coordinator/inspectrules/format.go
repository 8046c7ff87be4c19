package inspectrules

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
)

// Interpolation: a string argument may name values of the inspection
// as Python's str.format does in Ironic's rules: {inventory[cpu][count]},
// {node.driver_info[redfish_address]}, {plugin_data[...]} and, in a
// loop, {item} or {item[key]}; {{ and }} are literal braces. A key is
// reached by [key] or .key alike, a list's element by [0]. A string that
// is one replacement field and nothing else is the value itself (a
// number stays a number, a list a list); Ironic's is always its text,
// so that "values": ["{inventory[memory][physical_mb]}", 65536] compares
// numbers here. A field that names nothing leaves the string as it is
// (Ironic's too), or, for is-empty, is null.

// errMissing is a replacement field that names nothing.
var errMissing = errors.New("missing field")

// segment is one piece of a format string: literal text, or a field.
type segment struct {
	text  string
	field string
	isFld bool
}

// parseFormat splits s into its segments; ok is false when s is not a
// well-formed format string (a lone brace, a conversion or format spec).
func parseFormat(s string) ([]segment, bool) {
	var out []segment
	var lit strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '{' && i+1 < len(s) && s[i+1] == '{':
			lit.WriteByte('{')
			i++
		case c == '}' && i+1 < len(s) && s[i+1] == '}':
			lit.WriteByte('}')
			i++
		case c == '}':
			return nil, false
		case c == '{':
			depth, j := 0, i+1
			for ; j < len(s); j++ {
				if s[j] == '[' {
					depth++
				} else if s[j] == ']' && depth > 0 {
					depth--
				} else if depth == 0 && (s[j] == '}' || s[j] == '!' || s[j] == ':' || s[j] == '{') {
					break
				}
			}
			if j >= len(s) || s[j] != '}' || j == i+1 {
				return nil, false
			}
			if lit.Len() > 0 {
				out = append(out, segment{text: lit.String()})
				lit.Reset()
			}
			out = append(out, segment{field: s[i+1 : j], isFld: true})
			i = j
		default:
			lit.WriteByte(c)
		}
	}
	if lit.Len() > 0 {
		out = append(out, segment{text: lit.String()})
	}
	return out, true
}

// singleField is the field of s when s is one replacement field and
// nothing else.
func singleField(s string) (string, bool) {
	segs, ok := parseFormat(s)
	if !ok || len(segs) != 1 || !segs[0].isFld {
		return "", false
	}
	return segs[0].field, true
}

// resolve finds what field names in ctx.
func resolve(ctx map[string]any, field string) (any, error) {
	i := strings.IndexAny(field, ".[")
	if i < 0 {
		i = len(field)
	}
	cur, ok := ctx[field[:i]]
	if !ok {
		return nil, errMissing
	}
	rest := field[i:]
	for rest != "" {
		var key string
		switch rest[0] {
		case '.':
			j := strings.IndexAny(rest[1:], ".[")
			if j < 0 {
				j = len(rest) - 1
			}
			key, rest = rest[1:1+j], rest[1+j:]
		case '[':
			j := strings.IndexByte(rest, ']')
			if j < 0 {
				return nil, errMissing
			}
			key, rest = rest[1:j], rest[j+1:]
		default:
			return nil, errMissing
		}
		if key == "" {
			return nil, errMissing
		}
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[key]
			if !ok {
				return nil, errMissing
			}
			cur = v
		case []any:
			n, err := strconv.Atoi(key)
			if err != nil || n < 0 || n >= len(c) {
				return nil, errMissing
			}
			cur = c[n]
		default:
			return nil, errMissing
		}
	}
	return cur, nil
}

// formatString interpolates s; ok is false when a field named nothing.
func formatString(s string, ctx map[string]any) (any, bool) {
	if !strings.ContainsAny(s, "{}") {
		return s, true
	}
	segs, ok := parseFormat(s)
	if !ok {
		return s, false
	}
	if len(segs) == 1 && segs[0].isFld {
		v, err := resolve(ctx, segs[0].field)
		if err != nil {
			return s, false
		}
		return v, true
	}
	var b strings.Builder
	for _, sg := range segs {
		if !sg.isFld {
			b.WriteString(sg.text)
			continue
		}
		v, err := resolve(ctx, sg.field)
		if err != nil {
			return s, false
		}
		b.WriteString(text(v))
	}
	return b.String(), true
}

// interpolate formats every string in v (keys too), as Ironic's
// interpolate_variables; isEmpty makes a field that names nothing null.
func interpolate(v any, ctx map[string]any, isEmpty bool) any {
	switch x := v.(type) {
	case string:
		out, ok := formatString(x, ctx)
		if !ok && isEmpty {
			return nil
		}
		return out
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			ks, _ := formatString(k, ctx)
			m[text(ks)] = interpolate(e, ctx, isEmpty)
		}
		return m
	case []any:
		l := make([]any, len(x))
		for i, e := range x {
			l[i] = interpolate(e, ctx, isEmpty)
		}
		return l
	}
	return v
}

// text is v as Python's str() writes it, lists and objects as JSON.
func text(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case string:
		return x
	case bool:
		if x {
			return "True"
		}
		return "False"
	case float64:
		if x == float64(int64(x)) && x < 1e18 && x > -1e18 {
			return strconv.FormatInt(int64(x), 10)
		}
		return strconv.FormatFloat(x, 'f', -1, 64)
	case int:
		return strconv.Itoa(x)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(b)
}
