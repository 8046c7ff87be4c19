package agent

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/lib/netbudget"
)

// An agent refuses --metrics-listen on anything but loopback, before it
// binds or connects, unless --metrics-listen-any.
func TestMetricsListenLoopbackOnly(t *testing.T) {
	for _, addr := range []string{":0", "0.0.0.0:0", "192.0.2.1:0", "[::]:0", "example.com:0", "nonsense"} {
		a := New(Config{Site: "s1", BrokerURL: "mqtt://127.0.0.1:1", MetricsListen: addr})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := a.Run(ctx)
		cancel()
		if err == nil || !strings.Contains(err.Error(), "--metrics-listen-any") {
			t.Errorf("--metrics-listen %s: %v, want a refusal naming --metrics-listen-any", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:9101", "[::1]:9101", "localhost:9101", "LocalHost:0"} {
		if !netbudget.LoopbackAddr(addr) {
			t.Errorf("%s is loopback", addr)
		}
	}
}

// The metrics handler serves the text format; the gauges and counters
// without labels are there before any activity.
func TestMetricsHandler(t *testing.T) {
	a := New(Config{Site: "s1"})
	a.observePowerRead(nil)
	rec := httptest.NewRecorder()
	a.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	if rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/plain") {
		t.Fatalf("GET /metrics: %d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	for _, want := range []string{
		"bmedge_agent_outbox_depth 0",
		"bmedge_agent_results_resent_total 0",
		`bmedge_agent_power_sync_reads_total{outcome="ok"} 1`,
		`bmedge_agent_power_sync_reads_total{outcome="error"} 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}
