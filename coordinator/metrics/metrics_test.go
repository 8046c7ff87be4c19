package metrics

import (
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/protocol"
)

func text(t *testing.T, m *Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler(nil).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("GET /metrics: %d", rec.Code)
	}
	return rec.Body.String()
}

func stepNode(uuid string, start time.Time, index int, state fsm.State) *fsm.Node {
	plan := []fsm.Action{
		{Kind: fsm.ActOOB, Action: protocol.ActionPower},
		{Kind: fsm.ActStep, Step: &fsm.StepRun{Interface: "deploy", Step: "erase_devices"}},
		{Kind: fsm.ActStep, Step: &fsm.StepRun{Interface: "deploy", Step: "write_image"}},
	}
	return &fsm.Node{UUID: uuid, ProvisionState: state, Op: &fsm.Operation{Plan: plan, Index: index, StartedAt: start}}
}

// A step is timed from the event that made it current to the one that
// ended it; one running when the coordinator started is not timed.
func TestStepDurations(t *testing.T) {
	m := New()
	t0 := time.Unix(1000, 0)
	op := t0.Add(-time.Minute)
	m.Loaded(stepNode("a", op, 1, fsm.CleanWait))
	m.Node(stepNode("a", op, 2, fsm.Cleaning), t0)                   // a's erase began before start: not timed
	m.Node(stepNode("a", op, 2, fsm.CleanWait), t0.Add(time.Second)) // same step
	a := stepNode("a", op, 0, fsm.CleanFailed)
	a.Op = nil
	m.Node(a, t0.Add(3*time.Second)) // write_image failed after 3 s

	m.Node(stepNode("b", op, 0, fsm.Cleaning), t0)
	m.Node(stepNode("b", op, 1, fsm.Cleaning), t0)
	m.Node(stepNode("b", op, 2, fsm.Cleaning), t0.Add(2*time.Second)) // erase: 2 s
	out := text(t, m)
	for _, want := range []string{
		`bmedge_step_duration_seconds_count{outcome="done",step="deploy.erase_devices"} 1`,
		`bmedge_step_duration_seconds_sum{outcome="done",step="deploy.erase_devices"} 2`,
		`bmedge_step_duration_seconds_count{outcome="failed",step="deploy.write_image"} 1`,
		`bmedge_step_duration_seconds_sum{outcome="failed",step="deploy.write_image"} 3`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if len(m.steps) != 1 {
		t.Errorf("%d running steps remembered, want 1 (b's write_image)", len(m.steps))
	}
}

func TestVerbsAndCounters(t *testing.T) {
	m := New()
	m.Verb("manage", "accepted", time.Millisecond)
	m.Verb("provide", "conflict", time.Millisecond)
	m.Verb("provide", "unavailable", time.Millisecond)
	m.Verb("nonsense-"+strings.Repeat("x", 10), "invalid", time.Millisecond)
	m.History(fsm.HistoryEntry{From: fsm.Enroll, To: fsm.Verifying})
	m.History(fsm.HistoryEntry{Event: "an error, no transition"})
	m.Published(&protocol.Message{Kind: protocol.KindCommand}, nil)
	m.Published(&protocol.Message{Kind: protocol.KindAck}, nil)
	m.Published(&protocol.Message{Kind: protocol.KindCommand}, errors.New("broker gone"))
	m.Resent(2)
	m.Acked()
	m.Committed(time.Millisecond, 1234)
	m.Census(func(f func(*fsm.Node) bool) {
		f(&fsm.Node{ProvisionState: fsm.Available, Site: "s1"})
		f(&fsm.Node{ProvisionState: fsm.Available, Site: "s1", Maintenance: true})
	}, func() map[string]bool { return map[string]bool{"s1": true, "s2": false} })
	out := text(t, m)
	for _, want := range []string{
		`bmedge_verb_requests_total{outcome="accepted",verb="manage"} 1`,
		`bmedge_verb_requests_total{outcome="conflict",verb="provide"} 1`,
		`bmedge_verb_requests_total{outcome="unavailable",verb="provide"} 1`,
		`bmedge_verb_requests_total{outcome="invalid",verb="other"} 1`,
		`bmedge_transitions_total{from="enroll",to="verifying"} 1`,
		"bmedge_commands_sent_total 1",
		"bmedge_commands_resent_total 2",
		"bmedge_commands_acked_total 1",
		"bmedge_store_commit_duration_seconds_count 1",
		"bmedge_store_committed_bytes_total 1234",
		`bmedge_nodes{provision_state="available",site="s1"} 2`,
		`bmedge_nodes_maintenance{site="s1"} 1`,
		`bmedge_site_online{site="s1"} 1`,
		`bmedge_site_online{site="s2"} 0`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if strings.Count(out, "bmedge_transitions_total{") != 1 {
		t.Errorf("an entry without a transition was counted:\n%s", out)
	}
}

// The engine calls the hooks on a nil *Metrics when it has none.
func TestNilMetrics(t *testing.T) {
	var m *Metrics
	m.Verb("manage", "accepted", 0)
	m.History(fsm.HistoryEntry{From: fsm.Enroll, To: fsm.Verifying})
	m.Published(&protocol.Message{Kind: protocol.KindCommand}, nil)
	m.Resent(1)
	m.Acked()
	m.Committed(0, 0)
	m.Loaded(&fsm.Node{})
	m.Node(&fsm.Node{}, time.Now())
}

// Health series: a node's health as a number, its sensors counted by
// kind and status (an unknown kind as other), the readings of at most
// MaxSensorSeries sensors in Warning or Critical (the worst first); a
// deleted node's series go with it.
func TestHealthSeries(t *testing.T) {
	m := New()
	nodes := []*fsm.Node{
		{UUID: "u1", Name: "n1", Site: "s1", Health: protocol.HealthCritical},
		{UUID: "u2", Site: "s1", Health: protocol.HealthOK},
		{UUID: "u3", Site: "s2"},
	}
	m.Census(func(f func(*fsm.Node) bool) {
		for _, n := range nodes {
			if !f(n) {
				return
			}
		}
	}, func() map[string]bool { return map[string]bool{"s1": true, "s2": true} })
	r := func(v float64) *float64 { return &v }
	var sensors []protocol.Sensor
	for i := range 12 {
		sensors = append(sensors, protocol.Sensor{Name: fmt.Sprintf("Fan %02d", i), Kind: protocol.SensorFan, Reading: r(float64(i)), Units: "RPM", Status: protocol.HealthWarning})
	}
	sensors = append(sensors,
		protocol.Sensor{Name: "CPU 1", Kind: protocol.SensorTemperature, Reading: r(80), Units: "Cel", Status: protocol.HealthCritical},
		protocol.Sensor{Name: "Inlet", Kind: protocol.SensorTemperature, Reading: r(20), Units: "Cel", Status: protocol.HealthOK},
		protocol.Sensor{Name: "Odd", Kind: "weird", Reading: r(1), Status: protocol.HealthCritical},
		protocol.Sensor{Name: "Odd", Kind: "weird", Reading: r(2), Status: protocol.HealthCritical},
		protocol.Sensor{Name: "Slot", Kind: protocol.SensorFan})
	m.Sensors("u1", sensors)
	m.Sensors("u2", []protocol.Sensor{})
	out := text(t, m)
	for _, want := range []string{
		`bmedge_node_health{name="n1",node="u1",site="s1"} 2`,
		`bmedge_node_health{name="",node="u2",site="s1"} 0`,
		`bmedge_nodes_health{health="Critical",site="s1"} 1`,
		`bmedge_nodes_health{health="OK",site="s1"} 1`,
		`bmedge_nodes_health{health="none",site="s2"} 1`,
		`bmedge_node_sensors{kind="fan",node="u1",site="s1",status="Warning"} 12`,
		`bmedge_node_sensors{kind="fan",node="u1",site="s1",status="unknown"} 1`,
		`bmedge_node_sensors{kind="other",node="u1",site="s1",status="Critical"} 2`,
		`bmedge_node_sensors{kind="temperature",node="u1",site="s1",status="OK"} 1`,
		`bmedge_node_sensor_reading{kind="temperature",node="u1",sensor="CPU 1",site="s1",status="Critical",units="Cel"} 80`,
		`bmedge_node_sensor_reading{kind="other",node="u1",sensor="Odd",site="s1",status="Critical",units=""} 1`,
		`bmedge_node_sensor_reading{kind="fan",node="u1",sensor="Fan 00",site="s1",status="Warning",units="RPM"} 0`,
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("metrics lack %q", want)
		}
	}
	if n := strings.Count(out, "\nbmedge_node_sensor_reading{"); n != 8 {
		t.Errorf("%d reading series; want %d (the bound; two sensors of one name are one)", n, MaxSensorSeries)
	}
	if strings.Contains(out, `sensor="Fan 06"`) || strings.Contains(out, `sensor="Inlet"`) || strings.Contains(out, `node="u3"`) {
		t.Errorf("a reading past the bound, of an OK sensor, or a node without health or sensors:\n%s", out)
	}
	nodes = nodes[1:]
	out = text(t, m)
	if strings.Contains(out, `node="u1"`) || len(m.sensors) != 1 {
		t.Errorf("the deleted node's series stay (%d summaries):\n%s", len(m.sensors), out)
	}
}
