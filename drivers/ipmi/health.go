package ipmi

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/bougou/go-ipmi/pkg/client"
	"github.com/bougou/go-ipmi/pkg/command/storage"
	"github.com/bougou/go-ipmi/pkg/types"

	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/protocol"
)

var _ drivers.HealthReader = (*BMC)(nil)

// maxSELWalk bounds the SEL entries one reading walks through (a SEL
// holds at most a few thousand: 16 bytes each in a BMC's 64 KiB).
const maxSELWalk = 4096

// selWindow is what the BMC remembers of its SEL between readings, so
// that a reading whose SEL did not change costs one exchange, and one
// that did walks only the new entries.
type selWindow struct {
	added, erased time.Time // the SEL's last addition and erase, as read
	entries       uint16
	lastID        uint16 // the last record read (0: none)
	events        []protocol.Event
	read          bool
}

// ReadHealth implements drivers.HealthReader: the sensors of the SDR
// repository (full and compact records) with their readings and
// thresholds, the health they give (the worst threshold crossed:
// non-critical is Warning, critical and non-recoverable are Critical; no
// threshold sensor with a reading: none), and the newest SEL entries.
// A SEL entry does not change the health: it tells what happened, the
// sensors tell how the hardware is now.
func (b *BMC) ReadHealth(ctx context.Context) (*protocol.HealthReport, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	rep := &protocol.HealthReport{}
	var problems []string
	var sensors []*types.Sensor
	err := b.do(ctx, "read the sensors (SDR)", b.opts.Retries, func(ctx context.Context, c *client.Client) error {
		var err error
		sensors, err = c.GetSensors(ctx)
		return err
	})
	if err != nil {
		problems = append(problems, err.Error())
	} else {
		rep.SensorsRead = true
		for _, s := range sensors {
			if len(rep.Sensors) == protocol.MaxSensors {
				rep.Truncated = true
				break
			}
			ps, status := sensorOf(s)
			rep.Sensors = append(rep.Sensors, ps)
			if status != "" {
				rep.Health = protocol.WorseHealth(rep.Health, status)
			}
		}
	}
	if err := b.readSEL(ctx, rep); err != nil {
		problems = append(problems, err.Error())
	}
	if len(problems) == 2 {
		return nil, fmt.Errorf("%s", strings.Join(problems, "; "))
	}
	rep.Error = protocol.CutText(strings.Join(problems, "; "), protocol.MaxHealthError)
	return rep, nil
}

// sensorOf maps a go-ipmi sensor; status is the health its threshold
// state gives ("" for a discrete sensor or one without a reading).
func sensorOf(s *types.Sensor) (protocol.Sensor, string) {
	ps := protocol.Sensor{Name: protocol.CutText(strings.TrimSpace(s.Name), protocol.MaxHealthText), Kind: sensorKind(s.SensorType)}
	if ps.Name == "" {
		ps.Name = fmt.Sprintf("sensor %d", s.Number)
	}
	switch {
	case s.NotPresent:
		ps.State = "Absent"
	case s.ScanningDisabled:
		ps.State = "Disabled"
	default:
		ps.State = "Enabled"
	}
	if !s.IsThreshold() || !s.IsReadingValid() || s.NotPresent || s.ScanningDisabled {
		return ps, ""
	}
	v := s.Value
	ps.Reading = &v
	ps.Units = protocol.CutText(s.SensorUnit.BaseUnit.String(), 64)
	th := func(t types.SensorThresholdType, val float64) *float64 {
		if !s.IsThresholdReadable(t) {
			return nil
		}
		return &val
	}
	ps.LowerWarning = th(types.SensorThresholdType_LNC, s.Threshold.LNC)
	ps.UpperWarning = th(types.SensorThresholdType_UNC, s.Threshold.UNC)
	ps.LowerCritical = th(types.SensorThresholdType_LCR, s.Threshold.LCR)
	if ps.LowerCritical == nil {
		ps.LowerCritical = th(types.SensorThresholdType_LNR, s.Threshold.LNR)
	}
	ps.UpperCritical = th(types.SensorThresholdType_UCR, s.Threshold.UCR)
	if ps.UpperCritical == nil {
		ps.UpperCritical = th(types.SensorThresholdType_UNR, s.Threshold.UNR)
	}
	switch s.Threshold.ThresholdStatus {
	case types.SensorThresholdStatus_OK:
		ps.Status = protocol.HealthOK
	case types.SensorThresholdStatus_LNC, types.SensorThresholdStatus_UNC:
		ps.Status = protocol.HealthWarning
	case types.SensorThresholdStatus_LCR, types.SensorThresholdStatus_UCR, types.SensorThresholdStatus_LNR, types.SensorThresholdStatus_UNR:
		ps.Status = protocol.HealthCritical
	}
	return ps, ps.Status
}

func sensorKind(t types.SensorType) string {
	switch t {
	case types.SensorTypeTemperature:
		return protocol.SensorTemperature
	case types.SensorTypeFan:
		return protocol.SensorFan
	case types.SensorTypeVoltage:
		return protocol.SensorVoltage
	case types.SensorTypeCurrent:
		return protocol.SensorCurrent
	case types.SensorTypePowerSupply:
		return protocol.SensorPowerSupply
	}
	return protocol.SensorOther
}

// readSEL puts the newest SEL entries (at most protocol.MaxReportEvents)
// into rep. The caller holds b.mu.
func (b *BMC) readSEL(ctx context.Context, rep *protocol.HealthReport) error {
	w := &b.sel
	return b.do(ctx, "read the system event log (SEL)", b.opts.Retries, func(ctx context.Context, c *client.Client) error {
		info := &storage.GetSELInfoResponse{}
		if err := c.Exchange(ctx, &storage.GetSELInfoRequest{}, info); err != nil {
			return err
		}
		if info.Entries == 0 {
			*w = selWindow{read: true, added: info.RecentAdditionTime, erased: info.RecentEraseTime}
			return nil
		}
		if w.read && info.Entries == w.entries && info.RecentAdditionTime.Equal(w.added) && info.RecentEraseTime.Equal(w.erased) {
			rep.Events = append([]protocol.Event(nil), w.events...)
			return nil
		}
		// Walk on from the last entry read, or from the first after an
		// erase (record ids are handles, reused after a clear).
		events := w.events
		next := uint16(0)
		if w.read && w.lastID != 0 && info.RecentEraseTime.Equal(w.erased) {
			resp := &storage.GetSELEntryResponse{}
			if err := c.Exchange(ctx, &storage.GetSELEntryRequest{RecordID: w.lastID, ReadBytes: 0xff}, resp); err == nil {
				next = resp.NextRecordID
			} else {
				events = nil
			}
		} else {
			events = nil
		}
		last := w.lastID
		for n := 0; next != 0xffff && n < maxSELWalk; n++ {
			resp := &storage.GetSELEntryResponse{}
			if err := c.Exchange(ctx, &storage.GetSELEntryRequest{RecordID: next, ReadBytes: 0xff}, resp); err != nil {
				return err
			}
			sel, err := types.ParseSEL(resp.Data)
			if err == nil {
				events = append(events, selEvent(sel))
				last = sel.RecordID
			}
			if resp.NextRecordID == next {
				break
			}
			next = resp.NextRecordID
			if len(events) > 2*protocol.MaxReportEvents {
				events = append(events[:0:0], events[len(events)-protocol.MaxReportEvents:]...)
			}
		}
		if next != 0xffff {
			rep.Truncated = true
		}
		if len(events) > protocol.MaxReportEvents {
			events = append(events[:0:0], events[len(events)-protocol.MaxReportEvents:]...)
		}
		*w = selWindow{read: true, added: info.RecentAdditionTime, erased: info.RecentEraseTime, entries: info.Entries, lastID: last, events: events}
		rep.Events = append([]protocol.Event(nil), events...)
		return nil
	})
}

// selEvent describes a SEL record as ipmitool's sel list does.
func selEvent(sel *types.SEL) protocol.Event {
	ev := protocol.Event{Log: "SEL"}
	var ts time.Time
	switch {
	case sel.Standard != nil:
		s := sel.Standard
		ts = s.Timestamp
		dir := "Asserted"
		if s.EventDir {
			dir = "Deasserted"
		}
		ev.Message = fmt.Sprintf("%s #0x%02x | %s | %s", s.SensorType, uint8(s.SensorNumber), s.EventString(), dir)
		switch s.EventSeverity() {
		case types.EventSeverityOK, types.EventSeverityInfo:
			ev.Severity = protocol.HealthOK
		case types.EventSeverityWarning, types.EventSeverityDegraded, types.EventSeverityNonFatal:
			ev.Severity = protocol.HealthWarning
		case types.EventSeverityCritical:
			ev.Severity = protocol.HealthCritical
		}
	case sel.OEMTimestamped != nil:
		ts = sel.OEMTimestamped.Timestamp
		ev.Message = fmt.Sprintf("OEM record 0x%02x (timestamped)", uint8(sel.RecordType))
	default:
		ev.Message = fmt.Sprintf("OEM record 0x%02x", uint8(sel.RecordType))
	}
	if !ts.IsZero() && ts.Unix() > 0x20000000 {
		// Below 0x20000000 the timestamp counts from the BMC's start,
		// not from the epoch (IPMI 2.0, 37.1).
		ev.Time = ts.UTC()
	}
	ev.ID = fmt.Sprintf("SEL/%d-%d", sel.RecordID, ts.Unix())
	ev.Message = protocol.CutText(ev.Message, protocol.MaxHealthText)
	return ev
}
