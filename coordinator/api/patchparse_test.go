package api

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"reflect"
	"strings"
	"testing"
)

var patchBodies = []string{
	`[]`, ` [ ] `, `[{}]`, `[{"op":"add","path":"/extra/a","value":"x"}]`,
	"\t[\n{ \"op\" : \"replace\" ,\r\"path\":\"/name\", \"value\" : null } ]\n",
	`[{"op":"add","path":"/extra/a","value":{"k":[1,-2.5e3,0,true,false,null,{"a":{}},[]]}}]`,
	`[{"op":"remove","path":"/extra/a"},{"path":"/x","op":"add","value":[]}]`,
	`[{"op":"add","op":"remove","path":"/a","value":1,"value":2}]`,
	`[{"op":"add","path":"/extra/é","value":"ü"}]`,
	`[{"op":"add","path":"/extra/a","value":"\u00e9"}]`, `[{"op":"add","path":"/extra/a","value":"a\"b"}]`,
	`[{"OP":"add","path":"/a","value":1}]`, `[{"op":"add","Path":"/a","value":1}]`, `[{"op":"add","path":"/a","other":1}]`,
	`[{"op":null,"path":"/a","value":1}]`, `[{"op":1,"path":"/a"}]`, `null`, `{}`, `[1]`, `["x"]`, `[{"op":"add"}] x`,
	`[{"op":"add","path":"/a","value":01}]`, `[{"op":"add","path":"/a","value":1.}]`, `[{"op":"add","path":"/a","value":-}]`,
	`[{"op":"add","path":"/a","value":1e}]`, `[{"op":"add","path":"/a","value":1E+2}]`, `[{"op":"add","path":"/a","value":tru}]`,
	`[{"op":"add","path":"/a","value":"x\xffy"}]`, "[{\"op\":\"add\",\"path\":\"/a\xff\",\"value\":1}]",
	"[{\"op\":\"add\",\"path\":\"/a\",\"value\":\"a\tb\"}]", `[{"op":"add","path":"/a","value":[1,]}]`,
	`[{"op":"add","path":"/a","value":{"a":1,}}]`, `[{"op":"add","path":"/a","value":{"a" 1}}]`, `[{"op":"add","path":"/a",}]`,
	`[{"op":"add","path":"/a","value":1},]`, `[{"op":"add","path":"/a","value":1}`, `[`, ``, `   `,
	`[{"op":"add","path":"/a","value":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}]`,
	`[{"op":"add","path":"/a","value":` + strings.Repeat("[", 29) + strings.Repeat("]", 29) + `}]`,
	`[{"op":"add","path":"/a","value":` + strings.Repeat("[", 30) + strings.Repeat("]", 30) + `}]`,
	`[{"op":"add","path":"/a","value":` + strings.Repeat("[", 31) + strings.Repeat("]", 31) + `}]`,
}

// checkParsePatch compares parsePatch with the general path on body.
func checkParsePatch(t *testing.T, body string) {
	t.Helper()
	got, ok := parsePatch([]byte(body))
	if !ok {
		return
	}
	if d := jsonDepth([]byte(body), MaxJSONDepth); d > MaxJSONDepth {
		t.Errorf("%q: parsed, but nested %d deep", body, d)
	}
	var want []patchOp
	if err := json.Unmarshal([]byte(body), &want); err != nil {
		t.Errorf("%q: parsed, but Unmarshal says %v", body, err)
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%q: parsed %#v, Unmarshal gives %#v", body, got, want)
	}
}

func TestParsePatchMatchesUnmarshal(t *testing.T) {
	parsed := 0
	for _, b := range patchBodies {
		checkParsePatch(t, b)
		if _, ok := parsePatch([]byte(b)); ok {
			parsed++
		}
	}
	if parsed < 8 {
		t.Errorf("only %d bodies took the direct path", parsed)
	}
	// Every cut and every one-byte change of the bodies.
	rnd := rand.New(rand.NewSource(1))
	alphabet := []byte(`[]{}",:. -+0123456789eEtrufalsn\x` + "\t\n\xff")
	for _, b := range patchBodies {
		for i := 0; i <= len(b); i++ {
			checkParsePatch(t, b[:i])
			if i < len(b) {
				m := []byte(b)
				m[i] = alphabet[rnd.Intn(len(alphabet))]
				checkParsePatch(t, string(m))
			}
		}
	}
	// The bench's hostile patches.
	for _, size := range []int{40, 990} {
		var ops []map[string]any
		for i := 0; i < MaxPatchOps; i++ {
			ops = append(ops, map[string]any{"op": "add", "path": fmt.Sprintf("/extra/h%04d", i), "value": strings.Repeat("x", size)})
		}
		b, _ := json.Marshal(ops)
		if _, ok := parsePatch(b); !ok {
			t.Errorf("the hostile patch of %d-byte values did not take the direct path", size)
		}
		checkParsePatch(t, string(b))
	}
}

func TestPatchValueMatchesUnmarshal(t *testing.T) {
	for _, raw := range []string{`"x"`, `""`, `"é"`, `"a\"b"`, `"a\\b"`, `"\u00e9"`, "\"a\xffb\"", "\"a\tb\"", `true`, `false`, `null`,
		`1`, `-2.5e3`, `1e999`, `{"a":[1,"b"]}`, `[]`, `"`, `"a""`} {
		var got, want any
		gerr := patchValue(json.RawMessage(raw), &got)
		werr := json.Unmarshal([]byte(raw), &want)
		if (gerr == nil) != (werr == nil) || (gerr != nil && gerr.Error() != werr.Error()) {
			t.Errorf("%q: error %v, Unmarshal's %v", raw, gerr, werr)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%q: %#v, Unmarshal gives %#v", raw, got, want)
		}
	}
}
