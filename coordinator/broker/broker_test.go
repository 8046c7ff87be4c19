package broker

import "testing"

func TestAllowed(t *testing.T) {
	p := "bm/v1/site/s1/node/n1/"
	for topic, want := range map[string]bool{
		"bm/v1/site/s1/node/n1/evt":  true,
		"bm/v1/site/s1/node/n1/#":    true,
		"bm/v1/site/s1/node/n2/evt":  false,
		"bm/v1/site/s1/node/n10/evt": false,
		"bm/v1/site/s1/node/+/cmd":   false,
		"bm/#":                       false,
		"#":                          false,
	} {
		if got := Allowed(p, topic); got != want {
			t.Errorf("Allowed(%q, %q) = %v, want %v", p, topic, got, want)
		}
	}
	if !Allowed("", "anything/at/all") {
		t.Error("empty prefix must allow everything")
	}
}
