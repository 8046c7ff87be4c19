package metrics

import (
	"maps"
	"testing"
)

// TestRescueRefusalsAddUp: the heartbeats' counts add up by their rise
// within a boot; a new boot (token), or a count lower than the last,
// adds its counts whole; another node's are its own; a heartbeat with
// none forgets the node's last counts.
func TestRescueRefusalsAddUp(t *testing.T) {
	m := New()
	steps := []struct {
		node, token string
		counts      map[string]int64
		want        map[string]int64
	}{
		{"n1", "t1", map[string]int64{"login-failed": 3}, map[string]int64{"login-failed": 3}},
		{"n1", "t1", map[string]int64{"login-failed": 5, "pending-per-source": 6}, map[string]int64{"login-failed": 5, "pending-per-source": 6}},
		{"n1", "t1", map[string]int64{"login-failed": 5, "pending-per-source": 6}, map[string]int64{"login-failed": 5, "pending-per-source": 6}},
		{"n2", "u1", map[string]int64{"login-failed": 2}, map[string]int64{"login-failed": 7, "pending-per-source": 6}},
		// A new boot of n1: its login starts from nothing.
		{"n1", "t2", map[string]int64{"login-failed": 1}, map[string]int64{"login-failed": 8, "pending-per-source": 6}},
		// Lower than the last: counted whole.
		{"n2", "u1", map[string]int64{"login-failed": 1, "sessions": 1}, map[string]int64{"login-failed": 9, "pending-per-source": 6, "sessions": 1}},
		{"n2", "u1", nil, map[string]int64{"login-failed": 9, "pending-per-source": 6, "sessions": 1}},
		{"n2", "u1", map[string]int64{"sessions": 1}, map[string]int64{"login-failed": 9, "pending-per-source": 6, "sessions": 2}},
	}
	for i, s := range steps {
		m.RescueRefused(s.node, s.token, s.counts)
		if got := m.RescueRefusals(); !maps.Equal(got, s.want) {
			t.Fatalf("step %d (%s %s %v): totals %v, want %v", i+1, s.node, s.token, s.counts, got, s.want)
		}
	}
	var none *Metrics
	none.RescueRefused("n1", "t", map[string]int64{"sessions": 1})
	if none.RescueRefusals() != nil {
		t.Fatal("a nil *Metrics counts")
	}
}
