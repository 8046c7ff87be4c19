package engine

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/coordinator/metrics"
)

// TestLoopHoldMeasured: how long one request holds the engine loop is
// recorded, and the longest hold is on /metrics
// (bmedge_engine_loop_hold_max_seconds) with the histogram of all
// holds.
func TestLoopHoldMeasured(t *testing.T) {
	m := metrics.New()
	clk := &testClock{}
	clk.set(time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC))
	e, _ := newEngine(t, Config{Metrics: m, Clock: clk})
	const hold = 50 * time.Millisecond
	// The request holds the loop for 50 ms of the engine's clock.
	if err := e.do(func(*tx) error { clk.add(hold); return nil }); err != nil {
		t.Fatal(err)
	}
	if got := m.MaxLoopHold(); got < hold {
		t.Fatalf("longest loop hold recorded %v, but one request held the loop for %v", got, hold)
	}
	rec := httptest.NewRecorder()
	m.Handler(nil).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{"bmedge_engine_loop_hold_max_seconds 0.0", "bmedge_engine_loop_hold_seconds_count"} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Fatalf("/metrics has no %q:\n%s", want, rec.Body.String())
		}
	}
}
