package redfish

import (
	"context"
	"encoding/json"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/stmcginnis/gofish"

	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/protocol"
)

var _ drivers.HealthReader = (*BMC)(nil)

// Bounds of one health reading: the chassis and log services looked at,
// and the event-log members read one by one when a collection does not
// carry them inline.
const (
	maxHealthChassis  = 4
	maxLogServices    = 4
	maxEntryLinksRead = 50
)

type healthStatusDoc struct {
	State        string `json:"State"`
	Health       string `json:"Health"`
	HealthRollup string `json:"HealthRollup"`
}

type healthSystemDoc struct {
	Status      healthStatusDoc `json:"Status"`
	LogServices link            `json:"LogServices"`
	Links       struct {
		Chassis   []link `json:"Chassis"`
		ManagedBy []link `json:"ManagedBy"`
	} `json:"Links"`
}

type healthManagerDoc struct {
	LogServices link `json:"LogServices"`
}

type healthChassisDoc struct {
	Thermal link `json:"Thermal"`
	Power   link `json:"Power"`
	Sensors link `json:"Sensors"`
}

// thresholdsDoc are the flat thresholds of Thermal and Power (schema
// Thermal.v1 and Power.v1).
type thresholdsDoc struct {
	UpperThresholdNonCritical *float64 `json:"UpperThresholdNonCritical"`
	UpperThresholdCritical    *float64 `json:"UpperThresholdCritical"`
	UpperThresholdFatal       *float64 `json:"UpperThresholdFatal"`
	LowerThresholdNonCritical *float64 `json:"LowerThresholdNonCritical"`
	LowerThresholdCritical    *float64 `json:"LowerThresholdCritical"`
	LowerThresholdFatal       *float64 `json:"LowerThresholdFatal"`
}

type thermalDoc struct {
	Temperatures []struct {
		Name           string          `json:"Name"`
		ReadingCelsius *float64        `json:"ReadingCelsius"`
		Status         healthStatusDoc `json:"Status"`
		thresholdsDoc
	} `json:"Temperatures"`
	Fans []struct {
		Name         string          `json:"Name"`
		FanName      string          `json:"FanName"`
		Reading      *float64        `json:"Reading"`
		ReadingUnits string          `json:"ReadingUnits"`
		Status       healthStatusDoc `json:"Status"`
		thresholdsDoc
	} `json:"Fans"`
}

type powerDoc struct {
	PowerSupplies []struct {
		Name                 string          `json:"Name"`
		LastPowerOutputWatts *float64        `json:"LastPowerOutputWatts"`
		Status               healthStatusDoc `json:"Status"`
	} `json:"PowerSupplies"`
	Voltages []struct {
		Name         string          `json:"Name"`
		ReadingVolts *float64        `json:"ReadingVolts"`
		Status       healthStatusDoc `json:"Status"`
		thresholdsDoc
	} `json:"Voltages"`
}

type sensorThresholdDoc struct {
	Reading *float64 `json:"Reading"`
}

type sensorDoc struct {
	Name         string          `json:"Name"`
	Reading      *float64        `json:"Reading"`
	ReadingUnits string          `json:"ReadingUnits"`
	ReadingType  string          `json:"ReadingType"`
	Status       healthStatusDoc `json:"Status"`
	Thresholds   struct {
		LowerCaution  *sensorThresholdDoc `json:"LowerCaution"`
		LowerCritical *sensorThresholdDoc `json:"LowerCritical"`
		LowerFatal    *sensorThresholdDoc `json:"LowerFatal"`
		UpperCaution  *sensorThresholdDoc `json:"UpperCaution"`
		UpperCritical *sensorThresholdDoc `json:"UpperCritical"`
		UpperFatal    *sensorThresholdDoc `json:"UpperFatal"`
	} `json:"Thresholds"`
}

type logServiceDoc struct {
	ID      string `json:"Id"`
	Entries link   `json:"Entries"`
}

type logEntryDoc struct {
	ODataID  string `json:"@odata.id"`
	ID       string `json:"Id"`
	Name     string `json:"Name"`
	Created  string `json:"Created"`
	Severity string `json:"Severity"`
	Message  string `json:"Message"`
}

type entriesDoc struct {
	Members []json.RawMessage `json:"Members"`
}

// ReadHealth implements drivers.HealthReader: the system's Status.Health
// and HealthRollup (the worse of the two), the sensors of the system's
// chassis (Thermal and Power, or the Sensors collection when the chassis
// has neither), and the newest entries of the system's log services.
func (b *BMC) ReadHealth(ctx context.Context) (*protocol.HealthReport, error) {
	ctx, cancel := reserve(reading(ctx))
	defer cancel()
	if err := b.lock(ctx); err != nil {
		return nil, err
	}
	defer b.unlock()
	var rep *protocol.HealthReport
	err := b.do(ctx, "read the hardware's health", func(c *gofish.APIClient) error {
		uri, err := b.findSystem(c)
		if err != nil {
			return err
		}
		var sys healthSystemDoc
		if err := getJSON(c, uri, &sys); err != nil {
			return err
		}
		in := &inspection{b: b, c: c}
		rep = in.health(&sys)
		return in.fatal
	})
	return rep, err
}

func (in *inspection) health(sys *healthSystemDoc) *protocol.HealthReport {
	rep := &protocol.HealthReport{Health: protocol.WorseHealth(healthOf(sys.Status.Health), healthOf(sys.Status.HealthRollup))}
	chassis := sys.Links.Chassis
	if len(chassis) > maxHealthChassis {
		chassis = chassis[:maxHealthChassis]
	}
	var events []protocol.Event
	parallel(
		func() {
			for _, ch := range chassis {
				if ch.ID == "" {
					continue
				}
				var doc healthChassisDoc
				if in.get("read the chassis", ch.ID, &doc) {
					s, read := in.chassisSensors(&doc)
					rep.Sensors = append(rep.Sensors, s...)
					rep.SensorsRead = rep.SensorsRead || read
				}
			}
		},
		func() {
			switch {
			case sys.LogServices.ID != "":
				events = in.events(sys.LogServices.ID, nil)
			case len(sys.Links.ManagedBy) > 0 && sys.Links.ManagedBy[0].ID != "":
				// A system without logs of its own (iDRAC): its manager's
				// SEL, not the manager's own logs (configuration,
				// sessions).
				var m healthManagerDoc
				if in.get("read the system's manager", sys.Links.ManagedBy[0].ID, &m) && m.LogServices.ID != "" {
					events = in.events(m.LogServices.ID, isSEL)
				}
			}
		},
	)
	if len(rep.Sensors) > protocol.MaxSensors {
		rep.Sensors, rep.Truncated = rep.Sensors[:protocol.MaxSensors], true
	}
	if len(events) > protocol.MaxReportEvents {
		events, rep.Truncated = events[len(events)-protocol.MaxReportEvents:], true
	}
	rep.Events = events
	if len(in.warnings) > 0 {
		rep.Error = protocol.CutText(strings.Join(in.warnings, "; "), protocol.MaxHealthError)
	}
	return rep
}

// healthOf maps a Redfish Health (OK, Warning, Critical) to the node's.
func healthOf(h string) string {
	switch h {
	case "OK":
		return protocol.HealthOK
	case "Warning":
		return protocol.HealthWarning
	case "Critical":
		return protocol.HealthCritical
	}
	return ""
}

func (in *inspection) chassisSensors(doc *healthChassisDoc) ([]protocol.Sensor, bool) {
	var out []protocol.Sensor
	read := false
	if doc.Thermal.ID != "" {
		var th thermalDoc
		if in.get("read the chassis' Thermal", doc.Thermal.ID, &th) {
			read = true
			for _, t := range th.Temperatures {
				out = append(out, sensorOf(t.Name, protocol.SensorTemperature, t.ReadingCelsius, "Cel", t.Status, t.thresholdsDoc))
			}
			for _, f := range th.Fans {
				name := f.Name
				if name == "" {
					name = f.FanName
				}
				units := "RPM"
				if f.ReadingUnits == "Percent" {
					units = "%"
				}
				out = append(out, sensorOf(name, protocol.SensorFan, f.Reading, units, f.Status, f.thresholdsDoc))
			}
		}
	}
	if doc.Power.ID != "" {
		var pw powerDoc
		if in.get("read the chassis' Power", doc.Power.ID, &pw) {
			read = true
			for _, p := range pw.PowerSupplies {
				out = append(out, sensorOf(p.Name, protocol.SensorPowerSupply, p.LastPowerOutputWatts, "W", p.Status, thresholdsDoc{}))
			}
			for _, v := range pw.Voltages {
				out = append(out, sensorOf(v.Name, protocol.SensorVoltage, v.ReadingVolts, "V", v.Status, v.thresholdsDoc))
			}
		}
	}
	if !read && doc.Sensors.ID != "" {
		var s []protocol.Sensor
		n := in.members("read the chassis' Sensors", doc.Sensors.ID, func(i int, uri string) {
			var sd sensorDoc
			if !in.get("read a sensor", uri, &sd) {
				return
			}
			th := thresholdsDoc{
				UpperThresholdNonCritical: thresholdReading(sd.Thresholds.UpperCaution), UpperThresholdCritical: thresholdReading(sd.Thresholds.UpperCritical),
				UpperThresholdFatal: thresholdReading(sd.Thresholds.UpperFatal), LowerThresholdNonCritical: thresholdReading(sd.Thresholds.LowerCaution),
				LowerThresholdCritical: thresholdReading(sd.Thresholds.LowerCritical), LowerThresholdFatal: thresholdReading(sd.Thresholds.LowerFatal),
			}
			in.mu.Lock()
			s = append(s, sensorOf(sd.Name, sensorKind(sd.ReadingType), sd.Reading, sd.ReadingUnits, sd.Status, th))
			in.mu.Unlock()
		})
		sort.Slice(s, func(i, j int) bool { return s[i].Name < s[j].Name })
		out, read = append(out, s...), n > 0 || len(s) > 0
	}
	return out, read
}

func thresholdReading(t *sensorThresholdDoc) *float64 {
	if t == nil {
		return nil
	}
	return t.Reading
}

// sensorKind maps a Sensor's ReadingType.
func sensorKind(t string) string {
	switch t {
	case "Temperature":
		return protocol.SensorTemperature
	case "Rotational":
		return protocol.SensorFan
	case "Voltage":
		return protocol.SensorVoltage
	case "Power":
		return protocol.SensorPower
	case "Current":
		return protocol.SensorCurrent
	}
	return protocol.SensorOther
}

// sensorOf builds a sensor: its status is the worse of the BMC's
// Status.Health and what its reading says against its thresholds.
func sensorOf(name, kind string, reading *float64, units string, st healthStatusDoc, th thresholdsDoc) protocol.Sensor {
	if name == "" {
		name = kind
	}
	s := protocol.Sensor{Name: protocol.CutText(name, protocol.MaxHealthText), Kind: kind, Reading: reading, Units: protocol.CutText(units, 64),
		State: protocol.CutText(st.State, 64), Status: healthOf(st.Health)}
	if st.State == "Absent" {
		// An empty slot: its reading (often 0) is no reading.
		s.Reading, s.Status, s.Units = nil, "", ""
		return s
	}
	s.UpperWarning, s.LowerWarning = th.UpperThresholdNonCritical, th.LowerThresholdNonCritical
	s.UpperCritical, s.LowerCritical = th.UpperThresholdCritical, th.LowerThresholdCritical
	if s.UpperCritical == nil {
		s.UpperCritical = th.UpperThresholdFatal
	}
	if s.LowerCritical == nil {
		s.LowerCritical = th.LowerThresholdFatal
	}
	s.Status = protocol.WorseHealth(s.Status, ThresholdStatus(s))
	return s
}

// ThresholdStatus is what a sensor's reading says against its
// thresholds: "" without a reading.
func ThresholdStatus(s protocol.Sensor) string {
	if s.Reading == nil {
		return ""
	}
	r := *s.Reading
	switch {
	case s.UpperCritical != nil && r >= *s.UpperCritical, s.LowerCritical != nil && r <= *s.LowerCritical:
		return protocol.HealthCritical
	case s.UpperWarning != nil && r >= *s.UpperWarning, s.LowerWarning != nil && r <= *s.LowerWarning:
		return protocol.HealthWarning
	}
	return protocol.HealthOK
}

// isSEL tells a manager's log service that holds the system's hardware
// events (iDRAC's "Sel", OpenBMC's and AMI's "SEL" or "IPMI SEL").
func isSEL(id string) bool {
	id = strings.ToLower(strings.TrimSpace(id))
	return id == "sel" || strings.HasSuffix(id, " sel") || strings.HasSuffix(id, "-sel") || strings.HasSuffix(id, "_sel")
}

// events reads the newest entries of the log services at uri (those
// whose Id take says, when take is set).
func (in *inspection) events(uri string, take func(id string) bool) []protocol.Event {
	var col collectionDoc
	if !in.get("read the system's LogServices", uri, &col) {
		return nil
	}
	members := col.Members
	if take != nil {
		// By the link's last segment, which is the service's Id in
		// every tree seen; the Id read is checked again below.
		var keep []link
		for _, m := range members {
			if take(path.Base(m.ID)) {
				keep = append(keep, m)
			}
		}
		members = keep
	}
	if len(members) > maxLogServices {
		members = members[:maxLogServices]
	}
	var out []protocol.Event
	for _, m := range members {
		var ls logServiceDoc
		if m.ID == "" || !in.get("read a log service", m.ID, &ls) || ls.Entries.ID == "" || (take != nil && !take(ls.ID)) {
			continue
		}
		out = append(out, in.logEntries(ls)...)
	}
	sortEvents(out)
	return out
}

func (in *inspection) logEntries(ls logServiceDoc) []protocol.Event {
	var col entriesDoc
	if !in.get("read the entries of log service "+ls.ID, ls.Entries.ID, &col) {
		return nil
	}
	var entries []logEntryDoc
	var links []string
	for _, raw := range col.Members {
		var e logEntryDoc
		if json.Unmarshal(raw, &e) != nil {
			continue
		}
		if e.ID == "" && e.Message == "" && e.Created == "" {
			// A link only: read below.
			links = append(links, e.ODataID)
			continue
		}
		entries = append(entries, e)
	}
	if len(links) > maxEntryLinksRead {
		// Collections list their entries oldest first: the last ones are
		// the newest (sorted by time again below).
		links = links[len(links)-maxEntryLinksRead:]
	}
	for _, l := range links {
		var e logEntryDoc
		if l != "" && in.get("read a log entry", l, &e) {
			entries = append(entries, e)
		}
	}
	out := make([]protocol.Event, 0, len(entries))
	for _, e := range entries {
		id := e.ID
		if id == "" {
			id = e.ODataID
		}
		if id == "" {
			continue
		}
		ev := protocol.Event{ID: protocol.CutText(ls.ID+"/"+id, 128), Log: protocol.CutText(ls.ID, 128), Severity: healthOf(e.Severity)}
		ev.Message = e.Message
		if ev.Message == "" {
			ev.Message = e.Name
		}
		ev.Message = protocol.CutText(ev.Message, protocol.MaxHealthText)
		if t, err := time.Parse(time.RFC3339, e.Created); err == nil {
			ev.Time = t.UTC()
		}
		out = append(out, ev)
	}
	return out
}

// sortEvents orders events oldest first: by time, then by the number in
// their id (SEL and most logs number their entries), then by id.
func sortEvents(ev []protocol.Event) {
	num := func(id string) (int64, bool) {
		i := strings.LastIndexByte(id, '/')
		n, err := strconv.ParseInt(id[i+1:], 10, 64)
		return n, err == nil
	}
	sort.SliceStable(ev, func(i, j int) bool {
		a, b := ev[i], ev[j]
		if !a.Time.Equal(b.Time) {
			return a.Time.Before(b.Time)
		}
		na, oka := num(a.ID)
		nb, okb := num(b.ID)
		if oka && okb && na != nb {
			return na < nb
		}
		return a.ID < b.ID
	})
}
