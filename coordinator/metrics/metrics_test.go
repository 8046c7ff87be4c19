package metrics

import (
	"errors"
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
	m.Committed(time.Millisecond)
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
	m.Committed(0)
	m.Loaded(&fsm.Node{})
	m.Node(&fsm.Node{}, time.Now())
}
