package engine

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/coordinator/metrics"
	"github.com/bmedge/bmedge/protocol"
)

// TestHealthMetricsAfterRestart: a health report's failing sensor is on
// /metrics at once, and again after a restart, from the readings kept
// in the database (before the node's next report).
func TestHealthMetricsAfterRestart(t *testing.T) {
	dir := t.TempDir()
	scrape := func(e *Engine, m *metrics.Metrics) string {
		rec := httptest.NewRecorder()
		m.Handler(nil).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		return rec.Body.String()
	}
	open := func() (*Engine, *metrics.Metrics) {
		m := metrics.New()
		e, err := New(Config{DataDir: dir, Metrics: m, TickInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		m.Census(e.Each, func() map[string]bool { return nil })
		if err := e.Start(&recorder{}); err != nil {
			t.Fatal(err)
		}
		return e, m
	}
	e, m := open()
	if _, _, err := e.AddSite("s1"); err != nil {
		t.Fatal(err)
	}
	n, err := e.CreateNode(NodeSpec{Name: "h1", Driver: "fake", Site: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	hot := 97.0
	e.HandleMessage(protocol.BMCEvtTopic("s1"), mustJSON(&protocol.Message{Kind: protocol.KindHealth, ID: "h1", Site: "s1", Node: n.UUID, HealthReport: &protocol.HealthReport{
		Health: protocol.HealthCritical, SensorsRead: true,
		Sensors: []protocol.Sensor{{Name: "CPU 1", Kind: protocol.SensorTemperature, Reading: &hot, Units: "Cel", Status: protocol.HealthCritical}}}}))
	want := `bmedge_node_sensor_reading{kind="temperature",node="` + n.UUID + `",sensor="CPU 1",site="s1",status="Critical",units="Cel"} 97`
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(scrape(e, m), want) {
		if time.Now().After(deadline) {
			t.Fatalf("/metrics lacks %s:\n%s", want, scrape(e, m))
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.Close()
	e2, m2 := open()
	defer e2.Close()
	out := scrape(e2, m2)
	if !strings.Contains(out, want) || !strings.Contains(out, `bmedge_node_health{name="h1",node="`+n.UUID+`",site="s1"} 2`) {
		t.Errorf("after a restart /metrics lacks the kept readings:\n%s", out)
	}
}
