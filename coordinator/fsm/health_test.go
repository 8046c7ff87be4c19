package fsm

import (
	"testing"
	"time"

	"github.com/bmedge/bmedge/protocol"
)

// TestHealthReport: a report sets the node's health and a change enters
// the history with Ironic's words; the same health again, or a report
// read before the last one applied (a resend, an older copy), adds no
// history line; health is taken under an operation too.
func TestHealthReport(t *testing.T) {
	m := testMachine(t)
	t0 := time.Unix(5000, 0)
	n := &Node{UUID: "u1", Name: "n1", Driver: "redfish", Site: "s1", ProvisionState: Cleaning,
		Op: &Operation{Verb: Clean, Phase: "clean"}, Reservation: "coordinator"}
	report := func(h string, sent time.Time) Output {
		return m.HealthReport(n, &protocol.Message{Kind: protocol.KindHealth, Sent: sent, HealthReport: &protocol.HealthReport{Health: h}}, t0)
	}
	out := report(protocol.HealthCritical, t0.Add(time.Second))
	if n.Health != protocol.HealthCritical || !out.Changed || len(out.History) != 1 ||
		out.History[0].Event != "Node health status changed: health='Critical' (previously 'None')" || out.History[0].EventType != "monitoring" {
		t.Fatalf("first report: health %q, %+v", n.Health, out)
	}
	if out := report(protocol.HealthCritical, t0.Add(2*time.Second)); len(out.History) != 0 {
		t.Errorf("the same health again: %+v; want no history", out.History)
	}
	if out := report(protocol.HealthOK, t0.Add(time.Second)); out.Changed || n.Health != protocol.HealthCritical {
		t.Errorf("an older report: changed %v, health %q; want nothing applied", out.Changed, n.Health)
	}
	if out := report("", t0.Add(3*time.Second)); n.Health != "" || len(out.History) != 1 ||
		out.History[0].Event != "Node health status changed: health='None' (previously 'Critical')" {
		t.Errorf("health gone: %q, %+v", n.Health, out.History)
	}
	if out := report("Broken", t0.Add(4*time.Second)); out.Changed {
		t.Errorf("an invalid health was applied: %+v", out)
	}
}
