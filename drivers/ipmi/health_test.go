package ipmi

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/drivers/ipmi/ipmisim"
	"github.com/bmedge/bmedge/protocol"
)

// healthSim is a BMC with a CPU temperature sensor and a fan whose raw
// reading is fanRaw (× 100 RPM; lower thresholds 2000, 1000 and 500
// RPM), and a SEL holding one "fan below lower critical" entry when sel.
func healthSim(t *testing.T, fanRaw uint8, sel bool) *ipmisim.Sim {
	opts := ipmisim.Options{Sensors: []ipmisim.Sensor{
		{Number: 1, Name: "CPU_Temp", Type: 0x01, Unit: 1, Raw: 45, UNC: 80, UCR: 90, UNR: 95},
		{Number: 2, Name: "FAN1", Type: 0x04, Unit: 18, M: 100, Raw: fanRaw, LNR: 5, LCR: 10, LNC: 20},
	}}
	if sel {
		opts.SEL = []ipmisim.SELEvent{{Time: time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC), SensorType: 0x04, Sensor: 2, Offset: 0x02, Reading: fanRaw, Threshold: 10}}
	}
	return ipmisim.StartTest(t, opts)
}

// TestReadHealthIPMI: ipmi_sim with a failed fan (300 RPM, below its
// non-recoverable threshold) and a SEL entry: the node's health is
// Critical, the fan's status says so with its reading and thresholds,
// the SEL entry is an event; the same BMC with a turning fan is OK.
// ipmitool, an independent client, sees the same SDR.
func TestReadHealthIPMI(t *testing.T) {
	t.Parallel()
	sim := healthSim(t, 3, true)
	b := newBMC(t, sim, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := b.ReadHealth(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Error != "" {
		t.Errorf("reading error: %s", rep.Error)
	}
	if rep.Health != protocol.HealthCritical {
		t.Errorf("health %q; want Critical (a fan below its thresholds)", rep.Health)
	}
	byName := map[string]protocol.Sensor{}
	for _, s := range rep.Sensors {
		byName[s.Name] = s
	}
	fan, temp := byName["FAN1"], byName["CPU_Temp"]
	if fan.Status != protocol.HealthCritical || fan.Kind != protocol.SensorFan || fan.Reading == nil || *fan.Reading != 300 {
		t.Errorf("fan: %+v; want Critical fan reading 300", fan)
	}
	if fan.LowerCritical == nil || *fan.LowerCritical != 1000 || fan.LowerWarning == nil || *fan.LowerWarning != 2000 {
		t.Errorf("fan thresholds: lower critical %v, lower warning %v; want 1000 and 2000", fan.LowerCritical, fan.LowerWarning)
	}
	if temp.Status != protocol.HealthOK || temp.Kind != protocol.SensorTemperature || temp.Reading == nil || *temp.Reading != 45 || temp.UpperCritical == nil || *temp.UpperCritical != 90 {
		t.Errorf("temperature: %+v; want OK at 45 with upper critical 90", temp)
	}
	if len(rep.Events) != 1 {
		t.Fatalf("events %+v; want the one SEL entry", rep.Events)
	}
	ev := rep.Events[0]
	// ipmi_sim stamps an entry with its own clock (seconds since its
	// start, which the driver leaves out as IPMI says).
	if !strings.Contains(ev.Message, "Fan #0x02 | Lower Critical - going low | Asserted") || ev.Severity != protocol.HealthCritical || ev.Log != "SEL" {
		t.Errorf("event %+v; want the fan's SEL entry, Critical", ev)
	}
	// A second reading of an unchanged SEL gives the same window.
	again, err := b.ReadHealth(ctx)
	if err != nil || len(again.Events) != 1 || again.Events[0].ID != ev.ID {
		t.Errorf("second reading: %+v, %v; want the same event", again, err)
	}
	out, err := sim.Ipmitool("sdr", "list")
	if err != nil || !strings.Contains(out, "FAN1") || !strings.Contains(out, "300 RPM") {
		t.Errorf("ipmitool sdr list: %v\n%s", err, out)
	}

	ok := healthSim(t, 50, false)
	rep, err = newBMC(t, ok, nil).ReadHealth(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Health != protocol.HealthOK || len(rep.Events) != 0 || len(rep.Sensors) != 2 {
		t.Errorf("a turning fan: health %q, %d sensors, events %+v; want OK, 2, none", rep.Health, len(rep.Sensors), rep.Events)
	}
}
