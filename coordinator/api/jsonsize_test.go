package api

import (
	"encoding/json"
	"math"
	"math/rand"
	"strings"
	"testing"
)

func TestJSONSizeMatchesMarshal(t *testing.T) {
	values := []any{nil, true, false, "", "x", "<a&b>", "\"\\\b\f\n\r\t\x00\x1f\x7f", "é\u2028\u2029\xff\xfe ok", "日本語",
		0.0, math.Copysign(0, -1), 1.0, -1.5, 1e20, 1e21, 123456789e15, 1e-6, 1e-7, 1.5e-9, 5e-324, math.MaxFloat64, -2.5e-300, 0.1,
		map[string]any{}, []any{}, map[string]any(nil), []any(nil),
		map[string]any{"a": 1.0, "<k>": []any{"x", nil, map[string]any{"b": false}}, "\xff": "v", "e": map[string]any{}},
		[]any{[]any{}, []any{1.0, 2.0}, "z"}}
	rnd := rand.New(rand.NewSource(2))
	for i := 0; i < 300; i++ {
		values = append(values, rnd.NormFloat64()*math.Pow(10, float64(rnd.Intn(60)-30)))
		var sb strings.Builder
		for j := rnd.Intn(20); j > 0; j-- {
			sb.WriteByte(byte(rnd.Intn(256)))
		}
		values = append(values, sb.String(), map[string]any{sb.String(): values[len(values)-2]})
	}
	for _, v := range values {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("%#v: %v", v, err)
		}
		n, ok := jsonSize(v)
		if !ok || n != len(b) {
			t.Errorf("%#v: size %d (ok %v), Marshal writes %d bytes: %s", v, n, ok, len(b), b)
		}
	}
	for _, v := range []any{math.NaN(), math.Inf(1), 1, int64(2), []string{"a"}, map[string]string{}, map[string]any{"a": math.Inf(-1)}, []any{1}} {
		if _, ok := jsonSize(v); ok {
			t.Errorf("%#v: sized, want the caller to marshal", v)
		}
	}
}
