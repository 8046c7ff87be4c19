package api

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// TestPatchBelow: operations below a map field, through the JSON Patch
// library, with this API's one exception (replace of a missing member
// directly under the field adds it).
func TestPatchBelow(t *testing.T) {
	base := func() map[string]any {
		return map[string]any{"root_device": map[string]any{"name": "/dev/sda"}, "tags": []any{"a", "b"}, "a/b": "x"}
	}
	cases := []struct {
		op, sub, value string
		want           string // JSON of the result, or "error: part"
	}{
		{"replace", "root_device/name", `"/dev/sdb"`, `{"root_device":{"name":"/dev/sdb"},"tags":["a","b"],"a/b":"x"}`},
		{"add", "root_device/size", `100`, `{"root_device":{"name":"/dev/sda","size":100},"tags":["a","b"],"a/b":"x"}`},
		{"add", "tags/-", `"c"`, `{"root_device":{"name":"/dev/sda"},"tags":["a","b","c"],"a/b":"x"}`},
		{"add", "tags/0", `"z"`, `{"root_device":{"name":"/dev/sda"},"tags":["z","a","b"],"a/b":"x"}`},
		{"remove", "tags/1", ``, `{"root_device":{"name":"/dev/sda"},"tags":["a"],"a/b":"x"}`},
		{"remove", "a~1b", ``, `{"root_device":{"name":"/dev/sda"},"tags":["a","b"]}`},
		{"replace", "new", `1`, `{"root_device":{"name":"/dev/sda"},"tags":["a","b"],"a/b":"x","new":1}`},
		{"replace", "root_device/missing", `1`, "error: "},
		{"remove", "missing", ``, "error: "},
		{"add", "nothere/x", `1`, "error: "},
		{"remove", "tags/-1", ``, "error: "},
		{"add", "tags/5", `"q"`, "error: "},
	}
	for _, c := range cases {
		in := base()
		got, err := patchBelow(in, "properties", c.op, c.sub, json.RawMessage(c.value))
		if strings.HasPrefix(c.want, "error: ") {
			if err == nil {
				t.Errorf("%s %s: no error; got %v", c.op, c.sub, got)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s %s: %v", c.op, c.sub, err)
			continue
		}
		var want map[string]any
		_ = json.Unmarshal([]byte(c.want), &want)
		if !reflect.DeepEqual(got, want) {
			b, _ := json.Marshal(got)
			t.Errorf("%s %s %s: %s; want %s", c.op, c.sub, c.value, b, c.want)
		}
		if !reflect.DeepEqual(in, base()) {
			t.Errorf("%s %s: the input map was changed", c.op, c.sub)
		}
	}
}
