package ipmisim

import (
	"fmt"
	"strings"
	"time"
)

// Sensor is a threshold sensor of the simulated BMC: a full sensor
// record in its SDR repository and a sensor whose raw reading and
// thresholds ipmi_sim compares (Get Sensor Reading's threshold state).
// Readings and thresholds are raw bytes; the value is raw × M.
type Sensor struct {
	Number uint8
	Name   string // at most 16 bytes
	// Type is the IPMI sensor type: 0x01 temperature, 0x02 voltage,
	// 0x04 fan, 0x08 power supply.
	Type uint8
	// Unit is the IPMI base unit: 1 degrees C, 4 volts, 18 RPM.
	Unit uint8
	// M is the reading's multiplier (default 1).
	M   uint8
	Raw uint8
	// Thresholds (raw); 0 leaves one out.
	LNR, LCR, LNC, UNC, UCR, UNR uint8
}

// SELEvent is a threshold event in the SEL: a sensor's reading crossed
// one of its thresholds (Offset: 0x00 lower non-critical going low,
// 0x02 lower critical going low, 0x07 upper non-critical going high,
// 0x09 upper critical going high; IPMI 2.0 table 42-2).
type SELEvent struct {
	Time       time.Time
	SensorType uint8
	Sensor     uint8
	Offset     uint8
	Reading    uint8
	Threshold  uint8
}

// emu is the emulation commands of the sensors and SEL of opts.
func (o Options) emu() (string, error) {
	var b strings.Builder
	if len(o.SEL) > 0 || o.SELSize > 0 {
		size := max(o.SELSize, 1000)
		fmt.Fprintf(&b, "sel_enable 0x20 %d 0x0a\n", size)
	}
	for i, s := range o.Sensors {
		if len(s.Name) > 16 || s.Name == "" || strings.ContainsAny(s.Name, " \"\n") {
			return "", fmt.Errorf("ipmisim: sensor name %q: 1 to 16 bytes, no spaces or quotes", s.Name)
		}
		m := s.M
		if m == 0 {
			m = 1
		}
		var mask, readable uint8
		var lowMask, highMask uint8
		for bit, v := range []uint8{s.LNC, s.LCR, s.LNR, s.UNC, s.UCR, s.UNR} {
			if v != 0 {
				readable |= 1 << bit
				mask |= 1 << bit
				if bit < 3 {
					lowMask |= 1 << (4 + bit)
				} else {
					highMask |= 1 << (4 + bit - 3)
				}
			}
		}
		body := []uint8{
			0x20, 0x00, s.Number, // owner, LUN, number
			0x07, 0x01, // entity: system board, instance 1
			0x7f, 0x44, // initialization; capabilities: auto re-arm, thresholds readable
			s.Type, 0x01, // sensor type; event/reading type: threshold
			0x00, lowMask, 0x00, highMask, readable, 0x00, // event and reading masks
			0x00, s.Unit, 0x00, // units: unsigned; base; modifier
			0x00, m, 0x00, 0x00, 0x00, 0x00, 0x00, // linear; M; tolerance; B; accuracy; direction; exponents
			0x00, 0x00, 0x00, 0x00, 0xff, 0x00, // analog flags, nominal, normal max/min, sensor max/min
			s.UNR, s.UCR, s.UNC, s.LNR, s.LCR, s.LNC,
			0x00, 0x00, 0x00, 0x00, 0x00, // hysteresis, reserved, OEM
			0xc0 | uint8(len(s.Name)),
		}
		body = append(body, []byte(s.Name)...)
		rec := append([]uint8{uint8(i + 1), 0x00, 0x51, 0x01, uint8(len(body))}, body...)
		b.WriteString("main_sdr_add 0x20")
		for _, x := range rec {
			fmt.Fprintf(&b, " 0x%02x", x)
		}
		b.WriteString("\n")
		fmt.Fprintf(&b, "sensor_add 0x20 0 %d 0x%02x 0x01\n", s.Number, s.Type)
		bits := ""
		for bit := 5; bit >= 0; bit-- {
			if mask&(1<<bit) != 0 {
				bits += "1"
			} else {
				bits += "0"
			}
		}
		fmt.Fprintf(&b, "sensor_set_threshold 0x20 0 %d settable %s %d %d %d %d %d %d\n", s.Number, bits, s.UNR, s.UCR, s.UNC, s.LNR, s.LCR, s.LNC)
		fmt.Fprintf(&b, "sensor_set_value 0x20 0 %d %d 0\n", s.Number, s.Raw)
	}
	for _, e := range o.SEL {
		ts := uint32(e.Time.Unix())
		data := []uint8{uint8(ts), uint8(ts >> 8), uint8(ts >> 16), uint8(ts >> 24), 0x20, 0x00, 0x04, e.SensorType, e.Sensor, 0x01, 0x50 | e.Offset, e.Reading, e.Threshold}
		b.WriteString("sel_add 0x20 0x02")
		for _, x := range data {
			fmt.Fprintf(&b, " 0x%02x", x)
		}
		b.WriteString("\n")
	}
	return b.String(), nil
}
