package sim

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/lib/clock"
	"github.com/bmedge/bmedge/protocol"
)

// TestSimHealth: with Options.Health a simulated BMC tells its health:
// OK, with plausible sensors of every kind inside their thresholds;
// driver_info fake_fail_sensor fails the named one (Critical, past its
// threshold, the node Critical, one event-log entry that stays the same
// at every reading); an unknown name is a failed component without a
// sensor; fake_health sets the system's; without Options.Health the
// BMC tells nothing.
func TestSimHealth(t *testing.T) {
	info := map[string]any{}
	clk := clock.NewFake(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	s := New(Config{Site: "s1", Opts: Options{Nodes: 2, Health: true}, Clock: clk, Info: func(string) map[string]any { return info }})
	b, err := s.NewBMC("n1", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	hr, ok := b.(drivers.HealthReader)
	if !ok {
		t.Fatalf("a simulated BMC with Health is no HealthReader: %T", b)
	}
	read := func() *protocol.HealthReport {
		t.Helper()
		r, err := hr.ReadHealth(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := read()
	kinds := map[string]int{}
	for _, x := range r.Sensors {
		kinds[x.Kind]++
		if x.Status != protocol.HealthOK || x.Reading == nil ||
			(x.LowerWarning != nil && *x.Reading < *x.LowerWarning) || (x.UpperWarning != nil && *x.Reading > *x.UpperWarning) {
			t.Errorf("healthy sensor %+v", x)
		}
	}
	if r.Health != protocol.HealthOK || !r.SensorsRead || len(r.Events) != 0 || kinds[protocol.SensorTemperature] < 3 || kinds[protocol.SensorFan] < 2 ||
		kinds[protocol.SensorPowerSupply] < 2 || kinds[protocol.SensorVoltage] < 2 {
		t.Fatalf("healthy reading: %q, kinds %v, events %v", r.Health, kinds, r.Events)
	}
	for _, x := range r.Sensors {
		if x.Name == "CPU 1 Temp" && (*x.Reading < 30 || *x.Reading > 70) {
			t.Errorf("CPU 1 at %v °C", *x.Reading)
		}
	}
	if err := (&protocol.Message{V: protocol.Version, Kind: protocol.KindHealth, ID: "h1", Site: "s1", Node: "n1", Sent: clk.Now(), HealthReport: r}).Validate(); err != nil {
		t.Errorf("the reading is no valid report: %v", err)
	}

	for name, want := range map[string]string{"Fan 2": "fan 0", "CPU 1 Temp": "temperature 101", "PSU 2": "power_supply 0", "12V": "voltage 9.6"} {
		info = map[string]any{"fake_fail_sensor": name}
		r := read()
		clk.Advance(time.Minute)
		again := read()
		var got string
		for _, x := range r.Sensors {
			if x.Status != protocol.HealthOK {
				got += x.Name + " " + x.Kind + " " + strconv.FormatFloat(*x.Reading, 'f', -1, 64) + " " + x.Status + ";"
			}
		}
		if r.Health != protocol.HealthCritical || got != name+" "+want+" Critical;" {
			t.Errorf("fake_fail_sensor %q: health %q, sensors not OK %q; want %q", name, r.Health, got, name+" "+want+" Critical;")
		}
		if len(r.Events) != 1 || !strings.Contains(r.Events[0].Message, name) || r.Events[0].Severity != protocol.HealthCritical ||
			len(again.Events) != 1 || again.Events[0].ID != r.Events[0].ID || !again.Events[0].Time.Equal(r.Events[0].Time) {
			t.Errorf("fake_fail_sensor %q: events %+v then %+v; want one entry, the same", name, r.Events, again.Events)
		}
	}
	info = map[string]any{"fake_fail_sensor": "none"}
	if r := read(); r.Health != protocol.HealthOK || len(r.Events) != 0 {
		t.Errorf("fake_fail_sensor none: %q %v; want OK", r.Health, r.Events)
	}
	info = map[string]any{"fake_fail_sensor": "Disk 3"}
	if r := read(); r.Health != protocol.HealthCritical || len(r.Events) != 1 {
		t.Errorf("a failed component without a sensor: %q %v", r.Health, r.Events)
	}
	for v, want := range map[string]string{"Warning": protocol.HealthWarning, "critical": protocol.HealthCritical, "none": "", "OK": protocol.HealthOK} {
		info = map[string]any{"fake_health": v}
		if r := read(); r.Health != want || len(r.Events) != 0 {
			t.Errorf("fake_health %s: %q %v; want %q", v, r.Health, r.Events, want)
		}
	}
	info = map[string]any{"fake_health": "Broken"}
	if _, err := hr.ReadHealth(context.Background()); err == nil || !strings.Contains(err.Error(), "fake_health") {
		t.Errorf("fake_health Broken: %v; want an error naming it", err)
	}

	plain := New(Config{Site: "s1", Opts: Options{Nodes: 1}})
	pb, _ := plain.NewBMC("n1", nil, 0)
	if _, ok := pb.(drivers.HealthReader); ok {
		t.Error("a simulated BMC without Health tells health")
	}
}
