package sim

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"strings"
	"time"

	"github.com/bmedge/bmedge/drivers/fake"
	"github.com/bmedge/bmedge/protocol"
)

// Per-node driver_info knobs of the simulated hardware's health
// (Options.Health):
//
//   - fake_fail_sensor: the name of a simulated sensor that fails, e.g.
//     "Fan 2" (its reading drops under the lower critical threshold),
//     "CPU 1 Temp" (over the upper critical one), "PSU 2" (no output)
//     or "12V" (under its lower critical); it is then Critical, so is
//     the node's health, and the event log holds an entry saying so.
//     An unknown name is a failed component of that name: the node is
//     Critical, no sensor says why (as a BMC that rolls up a disk);
//     "none" or "" is no failure.
//   - fake_health: OK, Warning or Critical, the system's own health (the
//     worse of it and the sensors' is the node's); none: the BMC says
//     nothing (Ironic's null).
const (
	infoFailSensor = "fake_fail_sensor"
	infoHealth     = "fake_health"
)

// simSensor is one simulated sensor: a reading wobbling around base,
// and its thresholds.
type simSensor struct {
	name, kind, units string
	base, wobble      float64
	lc, lw, uw, uc    *float64
	failed            float64 // its reading when it fails
}

func f(v float64) *float64 { return &v }

// simSensors are a small 1U server's, in the shape of a Redfish BMC's
// Thermal and Power.
var simSensors = []simSensor{
	{name: "Inlet Temp", kind: protocol.SensorTemperature, units: "Cel", base: 22, wobble: 1.5, uw: f(40), uc: f(45), failed: 52},
	{name: "CPU 1 Temp", kind: protocol.SensorTemperature, units: "Cel", base: 48, wobble: 6, uw: f(85), uc: f(95), failed: 101},
	{name: "CPU 2 Temp", kind: protocol.SensorTemperature, units: "Cel", base: 46, wobble: 6, uw: f(85), uc: f(95), failed: 101},
	{name: "DIMM Temp", kind: protocol.SensorTemperature, units: "Cel", base: 36, wobble: 3, uw: f(80), uc: f(90), failed: 94},
	{name: "Fan 1", kind: protocol.SensorFan, units: "RPM", base: 6200, wobble: 300, lc: f(600), lw: f(1200), failed: 0},
	{name: "Fan 2", kind: protocol.SensorFan, units: "RPM", base: 6100, wobble: 300, lc: f(600), lw: f(1200), failed: 0},
	{name: "Fan 3", kind: protocol.SensorFan, units: "RPM", base: 6300, wobble: 300, lc: f(600), lw: f(1200), failed: 0},
	{name: "Fan 4", kind: protocol.SensorFan, units: "RPM", base: 6150, wobble: 300, lc: f(600), lw: f(1200), failed: 0},
	{name: "PSU 1", kind: protocol.SensorPowerSupply, units: "W", base: 180, wobble: 25, failed: 0},
	{name: "PSU 2", kind: protocol.SensorPowerSupply, units: "W", base: 175, wobble: 25, failed: 0},
	{name: "12V", kind: protocol.SensorVoltage, units: "V", base: 12.05, wobble: 0.08, lc: f(10.8), lw: f(11.4), uw: f(12.6), uc: f(13.2), failed: 9.6},
	{name: "5V", kind: protocol.SensorVoltage, units: "V", base: 5.02, wobble: 0.04, lc: f(4.5), lw: f(4.75), uw: f(5.25), uc: f(5.5), failed: 4.1},
	{name: "3.3V", kind: protocol.SensorVoltage, units: "V", base: 3.31, wobble: 0.03, lc: f(2.97), lw: f(3.13), uw: f(3.47), uc: f(3.63), failed: 2.6},
	{name: "System Power", kind: protocol.SensorPower, units: "W", base: 310, wobble: 40, failed: 310},
}

// simBMC is a simulated BMC that tells its health (drivers.HealthReader).
type simBMC struct {
	*fake.BMC
	s    *Sim
	node string
}

// ReadHealth reads the simulated hardware: plausible readings that move
// a little from one reading to the next, all within their thresholds
// unless the node's driver_info fails one (fake_fail_sensor).
func (b *simBMC) ReadHealth(ctx context.Context) (*protocol.HealthReport, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	info := b.s.cfg.Info(b.node)
	fail, _ := info[infoFailSensor].(string)
	if strings.EqualFold(fail, "none") {
		fail = "" // the key cannot be removed at the site: driver_info {} is not sent
	}
	system, _ := info[infoHealth].(string)
	switch strings.ToLower(system) {
	case "", "ok":
		system = protocol.HealthOK
	case "warning":
		system = protocol.HealthWarning
	case "critical":
		system = protocol.HealthCritical
	case "none":
		system = ""
	default:
		return nil, fmt.Errorf("driver_info %s %q: give OK, Warning, Critical or none", infoHealth, system)
	}
	now := b.s.cfg.Clock.Now()
	rep := &protocol.HealthReport{SensorsRead: true, Health: system}
	found := fail == ""
	for i, x := range simSensors {
		v := x.base + x.wobble*wobble(b.node, i, now)
		status, state := protocol.HealthOK, "Enabled"
		if x.name == fail {
			found = true
			v = x.failed
			if x.lc == nil && x.uc == nil {
				status = protocol.HealthCritical // a power supply without output
			}
		}
		if x.lc != nil && v < *x.lc || x.uc != nil && v > *x.uc {
			status = protocol.HealthCritical
		} else if x.lw != nil && v < *x.lw || x.uw != nil && v > *x.uw {
			status = protocol.WorseHealth(status, protocol.HealthWarning)
		}
		if x.units == "RPM" || x.units == "W" {
			v = math.Round(v)
		} else {
			v = math.Round(v*100) / 100
		}
		rep.Sensors = append(rep.Sensors, protocol.Sensor{Name: x.name, Kind: x.kind, Reading: f(v), Units: x.units, Status: status, State: state,
			LowerCritical: x.lc, LowerWarning: x.lw, UpperWarning: x.uw, UpperCritical: x.uc})
		if status != protocol.HealthOK && rep.Health != "" {
			rep.Health = protocol.WorseHealth(rep.Health, status)
		}
	}
	if !found && rep.Health != "" {
		rep.Health = protocol.HealthCritical // a component of that name, no sensor
	}
	if since := b.s.failedSince(b.node, fail, now); fail != "" {
		rep.Events = append(rep.Events, protocol.Event{ID: fmt.Sprintf("SEL/%s-%d", eventID(fail), since.Unix()), Time: since, Severity: protocol.HealthCritical, Log: "SEL",
			Message: protocol.CutText(fmt.Sprintf("%s: failure asserted (simulated, driver_info %s)", fail, infoFailSensor), protocol.MaxHealthText)})
	}
	return rep, nil
}

// wobble is a reading's move from its base, in [-1, 1], changing slowly
// (over minutes) and different for each node and sensor.
func wobble(node string, i int, now time.Time) float64 {
	h := fnv.New32a()
	fmt.Fprintf(h, "%s/%d/%d", node, i, now.Unix()/300)
	return float64(h.Sum32()%2001)/1000 - 1
}

func eventID(name string) string {
	h := fnv.New32a()
	h.Write([]byte(name))
	return fmt.Sprintf("%08x", h.Sum32())
}

// failedSince is when the node's failed sensor first read failed (the
// event's time, the same at every reading while it stays failed; a new
// failure is a new entry). sensor "" forgets it.
func (s *Sim) failedSince(node, sensor string, now time.Time) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sensor == "" {
		delete(s.failed, node)
		return time.Time{}
	}
	if s.failed == nil {
		s.failed = map[string]failure{}
	}
	f, ok := s.failed[node]
	if !ok || f.sensor != sensor {
		f = failure{sensor: sensor, since: now.UTC().Truncate(time.Second)}
		s.failed[node] = f
	}
	return f.since
}

// failure is a node's failed sensor and since when.
type failure struct {
	sensor string
	since  time.Time
}
