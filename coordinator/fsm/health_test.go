package fsm

import (
	"strings"
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

// TestHealthQuarantine: with QuarantineOn Critical, an available node
// whose report says Critical goes into maintenance with a reason naming
// the critical sensors (not the Warning one), a history line after the
// health change, and a deploy is then refused; a node in another state
// is not touched; an operator's unset holds until the health has been
// better; off by default; QuarantineOn Warning takes Warning too.
func TestHealthQuarantine(t *testing.T) {
	reading := func(v float64) *float64 { return &v }
	sensors := []protocol.Sensor{
		{Name: "Fan 1", Kind: protocol.SensorFan, Reading: reading(4200), Units: "RPM", Status: protocol.HealthOK},
		{Name: "PSU 2", Kind: protocol.SensorPowerSupply, Status: protocol.HealthWarning},
		{Name: "Fan 2", Kind: protocol.SensorFan, Reading: reading(0), Units: "RPM", Status: protocol.HealthCritical},
		{Name: "CPU 1", Kind: protocol.SensorTemperature, Reading: reading(80.5), Units: "Cel", Status: protocol.HealthCritical},
	}
	t0 := time.Unix(5000, 0)
	sent := t0
	report := func(m *Machine, n *Node, h string, s []protocol.Sensor) Output {
		sent = sent.Add(time.Second)
		return m.HealthReport(n, &protocol.Message{Kind: protocol.KindHealth, Sent: sent, HealthReport: &protocol.HealthReport{Health: h, Sensors: s, SensorsRead: true}}, t0)
	}
	policy := func(on string) *Machine {
		m := testMachine(t)
		m.cfg.QuarantineOn = on
		return m
	}
	m := policy(protocol.HealthCritical)
	n := &Node{UUID: "u1", Name: "n1", Driver: "fake-hardware", Site: "s1", ProvisionState: Available}
	out := report(m, n, protocol.HealthCritical, sensors)
	if !n.Maintenance || len(out.History) != 2 || out.History[1].EventType != "maintenance" || out.History[0].EventType != "monitoring" {
		t.Fatalf("available node, Critical: maintenance %v, history %+v", n.Maintenance, out.History)
	}
	for _, want := range []string{"quarantined: health Critical", `fan "Fan 2" Critical (reading 0 RPM)`, `temperature "CPU 1" Critical (reading 80.5 Cel)`, "--quarantine-on critical"} {
		if !strings.Contains(n.MaintenanceReason, want) {
			t.Errorf("reason %q lacks %q", n.MaintenanceReason, want)
		}
	}
	if strings.Contains(n.MaintenanceReason, "PSU 2") || strings.Contains(n.MaintenanceReason, "Fan 1") {
		t.Errorf("reason names a sensor below the policy: %q", n.MaintenanceReason)
	}
	if _, ref := m.Verb(n, VerbRequest{Verb: Deploy}, t0); ref == nil || !strings.Contains(ref.Error(), "maintenance") {
		t.Errorf("deploy of the quarantined node: %v; want refused for maintenance", ref)
	}
	// The operator unsets maintenance: the same trouble does not
	// quarantine it again; once the health was better, it does.
	m.SetMaintenance(n, false, "", t0)
	if report(m, n, protocol.HealthCritical, sensors); n.Maintenance {
		t.Errorf("quarantined again after the operator's unset, the trouble unchanged")
	}
	report(m, n, protocol.HealthOK, nil)
	if out := report(m, n, protocol.HealthCritical, nil); !n.Maintenance || !strings.Contains(n.MaintenanceReason, "no sensor is past a threshold") || len(out.History) != 2 {
		t.Errorf("Critical again with no sensor: maintenance %v, reason %q", n.Maintenance, n.MaintenanceReason)
	}

	for _, st := range []State{Manageable, Active, Cleaning, Enroll} {
		o := &Node{UUID: "u2", Driver: "fake-hardware", Site: "s1", ProvisionState: st}
		if report(m, o, protocol.HealthCritical, sensors); o.Maintenance {
			t.Errorf("a %s node was quarantined", st)
		}
	}
	o := &Node{UUID: "u3", Driver: "fake-hardware", Site: "s1", ProvisionState: Available}
	if report(m, o, protocol.HealthWarning, sensors); o.Maintenance {
		t.Errorf("Warning quarantined with --quarantine-on Critical")
	}
	if report(policy(""), o, protocol.HealthCritical, sensors); o.Maintenance {
		t.Errorf("quarantined with the policy off")
	}
	w := &Node{UUID: "u4", Driver: "fake-hardware", Site: "s1", ProvisionState: Available}
	if report(policy(protocol.HealthWarning), w, protocol.HealthWarning, sensors); !w.Maintenance ||
		!strings.Contains(w.MaintenanceReason, `power supply "PSU 2" Warning`) || !strings.Contains(w.MaintenanceReason, `"Fan 2" Critical`) {
		t.Errorf("--quarantine-on Warning: maintenance %v, reason %q", w.Maintenance, w.MaintenanceReason)
	}
}
