package api

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"reflect"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"

	"github.com/bmedge/bmedge/coordinator/fsm"
)

// libraryPatchBelow is how one operation below a map field was applied
// before patchIn: the whole field re-encoded, patched by the JSON Patch
// library, decoded again (with the same one exception for replace). It is
// the reference patchIn must match.
func libraryPatchBelow(m map[string]any, field, op, sub string, value json.RawMessage) (map[string]any, error) {
	if op == "replace" && !strings.Contains(sub, "/") {
		if _, ok := m[strings.ReplaceAll(strings.ReplaceAll(sub, "~1", "/"), "~0", "~")]; !ok {
			op = "add"
		}
	}
	one := map[string]any{"op": op, "path": "/" + field + "/" + sub}
	if op != "remove" {
		one["value"] = value
	}
	pb, err := json.Marshal([]any{one})
	if err != nil {
		return nil, err
	}
	p, err := jsonpatch.DecodePatch(pb)
	if err != nil {
		return nil, err
	}
	doc, err := json.Marshal(map[string]any{field: m})
	if err != nil {
		return nil, err
	}
	opts := jsonpatch.NewApplyOptions()
	opts.SupportNegativeIndices = false
	opts.EscapeHTML = false
	out, err := p.ApplyWithOptions(doc, opts)
	if err != nil {
		return nil, err
	}
	var res map[string]map[string]any
	if err := json.Unmarshal(out, &res); err != nil {
		return nil, err
	}
	if res[field] == nil {
		return map[string]any{}, nil
	}
	return res[field], nil
}

// patchGen makes random documents and operations on them, with the
// awkward cases in: escaped and empty keys, "-", leading zeros and signs
// in indexes, nulls and scalars on the way.
type patchGen struct{ r *rand.Rand }

var genKeys = []string{"a", "b", "c", "", "a/b", "x~y", "~", "0", "1"}

func (g patchGen) value(depth int) any {
	switch k := g.r.Intn(8); {
	case depth > 2 || k < 3:
		return []any{nil, true, 1.0, "s", 2.5}[g.r.Intn(5)]
	case k < 6:
		m := map[string]any{}
		for i := g.r.Intn(4); i > 0; i-- {
			m[genKeys[g.r.Intn(len(genKeys))]] = g.value(depth + 1)
		}
		return m
	default:
		l := []any{}
		for i := g.r.Intn(4); i > 0; i-- {
			l = append(l, g.value(depth+1))
		}
		return l
	}
}

func escapeToken(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// path picks a pointer below doc: mostly along what exists, sometimes
// off it.
func (g patchGen) path(doc any) string {
	var toks []string
	cur := doc
	for {
		var tok string
		switch c := cur.(type) {
		case map[string]any:
			if len(c) > 0 && g.r.Intn(4) > 0 {
				for k := range c {
					tok = k
					break
				}
				cur = c[tok]
			} else {
				tok, cur = genKeys[g.r.Intn(len(genKeys))], nil
			}
			tok = escapeToken(tok)
			if g.r.Intn(10) == 0 {
				tok = tok + "~" // a bad escape
			}
		case []any:
			i := g.r.Intn(len(c) + 2)
			tok = fmt.Sprint(i)
			if i < len(c) {
				cur = c[i]
			} else {
				cur = nil
			}
			switch g.r.Intn(8) {
			case 0:
				tok = "-"
			case 1:
				tok = "0" + tok
			case 2:
				tok = "+" + tok
			case 3:
				tok = "-1"
			case 4:
				tok = ""
			}
		default:
			tok = genKeys[g.r.Intn(len(genKeys))]
			cur = nil
		}
		toks = append(toks, tok)
		if cur == nil || g.r.Intn(3) == 0 {
			return strings.Join(toks, "/")
		}
	}
}

func (g patchGen) op() string { return []string{"add", "replace", "remove"}[g.r.Intn(3)] }

// TestPatchInMatchesLibrary: one operation below a map field gives what
// the JSON Patch library gave (the same document, or an error where it
// failed), on many random documents and operations.
func TestPatchInMatchesLibrary(t *testing.T) {
	g := patchGen{rand.New(rand.NewSource(17))}
	errs := 0
	for i := 0; i < 20000; i++ {
		m, _ := g.value(0).(map[string]any)
		if m == nil {
			m = map[string]any{"a": []any{1.0, map[string]any{"b": "c"}}, "": map[string]any{}}
		}
		op, sub := g.op(), g.path(m)
		val, _ := json.Marshal(g.value(1))
		want, werr := libraryPatchBelow(m, "extra", op, sub, val)
		got, gerr := patchBelow(m, "extra", op, sub, val)
		mb, _ := json.Marshal(m)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("%s %q %s on %s: error %v, the library's %v", op, sub, val, mb, gerr, werr)
		}
		if werr != nil {
			errs++
			continue
		}
		if !reflect.DeepEqual(got, want) {
			gb, _ := json.Marshal(got)
			wb, _ := json.Marshal(want)
			t.Fatalf("%s %q %s on %s: %s, the library's %s", op, sub, val, mb, gb, wb)
		}
	}
	if errs < 1000 || errs > 19000 {
		t.Fatalf("%d of 20000 random operations failed: the generator does not test both sides", errs)
	}
}

// TestApplyPatchMatchesLibrary: whole patches (many operations on the
// same fields, in one pass over decoded fields) leave the node the
// operation-by-operation library application left, or fail where it
// failed.
func TestApplyPatchMatchesLibrary(t *testing.T) {
	g := patchGen{rand.New(rand.NewSource(23))}
	for i := 0; i < 2000; i++ {
		base := &fsm.Node{UUID: "6f0c1c8e-1a2b-4c3d-8e9f-0a1b2c3d4e5f", Name: "n1", Driver: "fake", Site: "s1", ProvisionState: fsm.Manageable}
		base.Extra, _ = g.value(0).(map[string]any)
		base.Properties, _ = g.value(0).(map[string]any)
		var ops []patchOp
		for j := g.r.Intn(30) + 1; j > 0; j-- {
			field := []string{"extra", "properties"}[g.r.Intn(2)]
			var doc any = base.Extra
			if field == "properties" {
				doc = base.Properties
			}
			op := patchOp{Op: g.op(), Path: "/" + field + "/" + g.path(doc)}
			if g.r.Intn(20) == 0 {
				op.Path = "/" + field
			}
			if op.Op != "remove" {
				v := g.value(1)
				if op.Path == "/"+field {
					v = map[string]any{"k": v}
				}
				op.Value, _ = json.Marshal(v)
			}
			ops = append(ops, op)
		}
		// The reference: each operation on the node as the last one
		// left it, through the library.
		want := clone(base)
		var werr error
		for _, op := range ops {
			parts := strings.SplitN(op.Path[1:], "/", 2)
			m := fieldMap(want, parts[0])
			if len(parts) == 1 {
				if op.Op == "remove" {
					*m = map[string]any{}
				} else {
					var v map[string]any
					_ = json.Unmarshal(op.Value, &v)
					*m = v
				}
				continue
			}
			if *m == nil {
				*m = map[string]any{}
			}
			out, err := libraryPatchBelow(*m, parts[0], op.Op, parts[1], op.Value)
			if err != nil {
				werr = err
				break
			}
			*m = out
		}
		got := clone(base)
		gerr := applyPatch(got, ops)
		body, _ := json.Marshal(ops)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("patch %s: error %v, the library's %v", body, gerr, werr)
		}
		if werr != nil {
			continue
		}
		if !reflect.DeepEqual(orNil(got.Extra), orNil(want.Extra)) || !reflect.DeepEqual(orNil(got.Properties), orNil(want.Properties)) {
			gb, _ := json.Marshal(got)
			wb, _ := json.Marshal(want)
			t.Fatalf("patch %s:\n got %s\nwant %s", body, gb, wb)
		}
	}
}

func clone(n *fsm.Node) *fsm.Node {
	b, _ := json.Marshal(n)
	var c fsm.Node
	_ = json.Unmarshal(b, &c)
	return &c
}

// orNil makes an empty map nil: an empty field is stored as absent.
func orNil(m map[string]any) map[string]any {
	if len(m) == 0 {
		return nil
	}
	return m
}
