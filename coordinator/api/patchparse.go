package api

import (
	"encoding/json"
	"net/http"
	"unicode/utf8"
)

// A JSON Patch at the cap (MaxPatchOps operations, a body of up to
// MaxBodyBytes) costs several passes over its body through
// encoding/json: the depth check, Unmarshal's validation, its decoding
// (which copies every value), and one Unmarshal per operation's value.
// parsePatch reads the common shape in one pass instead: a list of
// objects whose members are exactly "op", "path" and "value", op and
// path plain strings, values any JSON without escaped strings. It gives
// exactly what json.Unmarshal gives for such a body (the values are the
// body's own bytes, as RawMessage would copy them), and declines
// anything else (ok false), which then takes the general path with its
// exact errors (decodeNodePatch); TestParsePatchMatchesUnmarshal compares.

// decodeNodePatch is decode for a node's JSON Patch body.
func decodeNodePatch(w http.ResponseWriter, r *http.Request, ops *[]patchOp) bool {
	body, ok := readBody(w, r)
	if !ok {
		return false
	}
	if p, ok := parsePatch(body); ok {
		*ops = p
		return true
	}
	return decodeBody(w, body, ops)
}

type patchParser struct {
	b     []byte
	i     int
	depth int
}

// parsePatch parses body as a list of patch operations; ok is false when
// the body is not of the shape it reads (see above), valid JSON or not.
func parsePatch(body []byte) (ops []patchOp, ok bool) {
	p := &patchParser{b: body}
	p.ws()
	if !p.eat('[') {
		return nil, false
	}
	p.depth = 1
	ops = []patchOp{}
	p.ws()
	if p.eat(']') {
		p.ws()
		return ops, p.i == len(p.b)
	}
	for {
		op, ok := p.op()
		if !ok {
			return nil, false
		}
		ops = append(ops, op)
		p.ws()
		if p.eat(',') {
			p.ws()
			continue
		}
		if !p.eat(']') {
			return nil, false
		}
		p.ws()
		return ops, p.i == len(p.b)
	}
}

func (p *patchParser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *patchParser) eat(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// op reads one operation object.
func (p *patchParser) op() (op patchOp, ok bool) {
	if !p.eat('{') {
		return op, false
	}
	p.depth++
	if p.depth > MaxJSONDepth {
		return op, false
	}
	p.ws()
	if p.eat('}') {
		p.depth--
		return op, true
	}
	for {
		key, ok := p.str()
		if !ok {
			return op, false
		}
		p.ws()
		if !p.eat(':') {
			return op, false
		}
		p.ws()
		switch string(key) {
		case "op", "path":
			s, ok := p.str()
			if !ok || !utf8.Valid(s) {
				return op, false
			}
			if string(key) == "op" {
				op.Op = string(s)
			} else {
				op.Path = string(s)
			}
		case "value":
			start := p.i
			if !p.value() {
				return op, false
			}
			op.Value = json.RawMessage(p.b[start:p.i:p.i])
		default:
			return op, false
		}
		p.ws()
		if p.eat(',') {
			p.ws()
			continue
		}
		if !p.eat('}') {
			return op, false
		}
		p.depth--
		return op, true
	}
}

// str reads a string without escapes and returns what is between its
// quotes.
func (p *patchParser) str() ([]byte, bool) {
	if !p.eat('"') {
		return nil, false
	}
	start := p.i
	p.i = scanPlain(p.b, p.i)
	if p.i == len(p.b) || p.b[p.i] != '"' {
		return nil, false
	}
	s := p.b[start:p.i]
	p.i++
	return s, true
}

// value reads one JSON value (strings without escapes).
func (p *patchParser) value() bool {
	if p.i >= len(p.b) {
		return false
	}
	switch c := p.b[p.i]; {
	case c == '"':
		_, ok := p.str()
		return ok
	case c == '{':
		p.i++
		p.depth++
		if p.depth > MaxJSONDepth {
			return false
		}
		p.ws()
		if p.eat('}') {
			p.depth--
			return true
		}
		for {
			if _, ok := p.str(); !ok {
				return false
			}
			p.ws()
			if !p.eat(':') {
				return false
			}
			p.ws()
			if !p.value() {
				return false
			}
			p.ws()
			if p.eat(',') {
				p.ws()
				continue
			}
			if !p.eat('}') {
				return false
			}
			p.depth--
			return true
		}
	case c == '[':
		p.i++
		p.depth++
		if p.depth > MaxJSONDepth {
			return false
		}
		p.ws()
		if p.eat(']') {
			p.depth--
			return true
		}
		for {
			if !p.value() {
				return false
			}
			p.ws()
			if p.eat(',') {
				p.ws()
				continue
			}
			if !p.eat(']') {
				return false
			}
			p.depth--
			return true
		}
	case c == 't':
		return p.lit("true")
	case c == 'f':
		return p.lit("false")
	case c == 'n':
		return p.lit("null")
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	}
	return false
}

func (p *patchParser) lit(s string) bool {
	if len(p.b)-p.i >= len(s) && string(p.b[p.i:p.i+len(s)]) == s {
		p.i += len(s)
		return true
	}
	return false
}

// number reads a JSON number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (p *patchParser) number() bool {
	p.eat('-')
	digits := func() int {
		n := 0
		for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
			p.i++
			n++
		}
		return n
	}
	switch {
	case p.eat('0'):
	case p.i < len(p.b) && p.b[p.i] >= '1' && p.b[p.i] <= '9':
		digits()
	default:
		return false
	}
	if p.eat('.') && digits() == 0 {
		return false
	}
	if p.eat('e') || p.eat('E') {
		if !p.eat('+') {
			p.eat('-')
		}
		if digits() == 0 {
			return false
		}
	}
	return true
}

// patchValue decodes an operation's value as json.Unmarshal into any
// does; a plain string (no escapes, valid UTF-8) and the literals are
// read directly.
func patchValue(raw json.RawMessage, v *any) error {
	if n := len(raw); n >= 2 && raw[0] == '"' && raw[n-1] == '"' {
		s := raw[1 : n-1]
		if scanPlain(s, 0) == len(s) && utf8.Valid(s) {
			*v = string(s)
			return nil
		}
	}
	switch string(raw) {
	case "true":
		*v = true
		return nil
	case "false":
		*v = false
		return nil
	case "null":
		*v = nil
		return nil
	}
	return json.Unmarshal(raw, v)
}
