package protocol

import (
	"fmt"
	"time"
	"unicode/utf8"
)

// KindHealth is an edge agent's health report on its site's bmc/evt
// topic: what a node's BMC says of the hardware (HealthReport): its
// health (Ironic's node health, API 1.109), its sensors, and the entries
// of its event log that are new since the last report. Read with power
// sync and sent only when something changed (or the sensors' readings
// are older than the agent's sensor interval); like a power report it
// sits in the agent's durable outbox until the coordinator acks it, so a
// report made while the WAN is down arrives when it returns.
const KindHealth = "health"

// Health values, as Ironic spells them (ironic.common.health_states).
const (
	HealthOK       = "OK"
	HealthWarning  = "Warning"
	HealthCritical = "Critical"
)

// Sensor kinds.
const (
	SensorTemperature = "temperature"
	SensorFan         = "fan"
	SensorPowerSupply = "power_supply"
	SensorVoltage     = "voltage"
	SensorPower       = "power"
	SensorCurrent     = "current"
	SensorOther       = "other"
)

// Bounds of a health report. A BMC that offers more is cut to them at
// the site (the newest events, the first sensors), and the report says
// so in Truncated.
const (
	// MaxSensors bounds the sensors of one node.
	MaxSensors = 256
	// MaxReportEvents bounds the event-log entries of one report (and of
	// one reading: on its first reading, or after more than this many new
	// entries, only the newest are taken).
	MaxReportEvents = 200
	// MaxHealthText bounds a sensor's name and an event's message, in
	// bytes; longer texts are cut at the site.
	MaxHealthText = 512
	// MaxHealthError bounds a report's error text.
	MaxHealthError = 1024
)

// HealthReport is what a KindHealth message carries.
type HealthReport struct {
	// Health is the worse of the system's Status.Health and HealthRollup
	// (Redfish) or of the sensors' threshold states (IPMI): HealthOK,
	// HealthWarning, HealthCritical, or "" when the BMC does not say
	// (Ironic's null).
	Health string `json:"health,omitempty"`
	// Sensors are the node's sensors as read now; SensorsRead says they
	// were read (an empty list then means the BMC has none).
	Sensors     []Sensor `json:"sensors,omitempty"`
	SensorsRead bool     `json:"sensors_read,omitempty"`
	// Events are the event-log entries new since the previous report,
	// oldest first.
	Events []Event `json:"events,omitempty"`
	// Truncated says that a bound cut what the BMC offered.
	Truncated bool `json:"truncated,omitempty"`
	// Error says what could not be read (the rest of the report holds).
	Error string `json:"error,omitempty"`
}

// Sensor is one sensor reading with its thresholds. Status is HealthOK,
// HealthWarning (past a non-critical threshold) or HealthCritical (past
// a critical or non-recoverable one), "" when unknown.
type Sensor struct {
	Name          string   `json:"name"`
	Kind          string   `json:"kind"`
	Reading       *float64 `json:"reading"`
	Units         string   `json:"units,omitempty"`
	Status        string   `json:"status,omitempty"`
	State         string   `json:"state,omitempty"`
	LowerCritical *float64 `json:"lower_critical,omitempty"`
	LowerWarning  *float64 `json:"lower_warning,omitempty"`
	UpperWarning  *float64 `json:"upper_warning,omitempty"`
	UpperCritical *float64 `json:"upper_critical,omitempty"`
}

// Event is one entry of the BMC's event log (IPMI SEL, Redfish
// LogServices). ID is unique within the node's logs.
type Event struct {
	ID       string    `json:"id"`
	Time     time.Time `json:"time,omitzero"`
	Severity string    `json:"severity,omitempty"`
	Message  string    `json:"message"`
	Log      string    `json:"log,omitempty"`
}

// ValidHealth tells whether h is a health value ("" is none).
func ValidHealth(h string) bool {
	return h == "" || h == HealthOK || h == HealthWarning || h == HealthCritical
}

// WorseHealth is the worse of two health values ("" is the best).
func WorseHealth(a, b string) string {
	rank := func(h string) int {
		switch h {
		case HealthOK:
			return 1
		case HealthWarning:
			return 2
		case HealthCritical:
			return 3
		}
		return 0
	}
	if rank(b) > rank(a) {
		return b
	}
	return a
}

// CutText cuts s to at most n bytes on a rune boundary.
func CutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

func checkHealthReport(m *Message) error {
	if err := m.needAll(need{m.Node != "", "node"}, need{!m.Sent.IsZero(), "sent"}, need{m.HealthReport != nil, "health_report"}); err != nil {
		return err
	}
	r := m.HealthReport
	if !ValidHealth(r.Health) {
		return fmt.Errorf("health report %q has health %q; want %q, %q, %q or none", m.ID, r.Health, HealthOK, HealthWarning, HealthCritical)
	}
	if len(r.Sensors) > MaxSensors || len(r.Events) > MaxReportEvents {
		return fmt.Errorf("health report %q has %d sensors and %d events; at most %d and %d", m.ID, len(r.Sensors), len(r.Events), MaxSensors, MaxReportEvents)
	}
	if len(r.Error) > MaxHealthError {
		return fmt.Errorf("health report %q has an error text of %d bytes; at most %d", m.ID, len(r.Error), MaxHealthError)
	}
	for _, s := range r.Sensors {
		if s.Name == "" || len(s.Name) > MaxHealthText || len(s.Units) > 64 || len(s.State) > 64 || len(s.Kind) > 64 || !ValidHealth(s.Status) {
			return fmt.Errorf("health report %q has a sensor without a name, with a name or unit too long (%d bytes at most), or with status %q", m.ID, MaxHealthText, s.Status)
		}
	}
	for _, e := range r.Events {
		if e.ID == "" || len(e.ID) > 128 || len(e.Message) > MaxHealthText || len(e.Log) > 128 || !ValidHealth(e.Severity) {
			return fmt.Errorf("health report %q has an event without an id, with an id or message too long (%d bytes at most), or with severity %q", m.ID, MaxHealthText, e.Severity)
		}
	}
	return nil
}
