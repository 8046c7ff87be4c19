package bmc

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/lib/clock"
	"github.com/bmedge/bmedge/protocol"
)

// healthStub is a BMC that tells health (drivers.HealthReader).
type healthStub struct {
	stubBMC
	hmu sync.Mutex
	rep protocol.HealthReport
}

func (b *healthStub) ReadHealth(context.Context) (*protocol.HealthReport, error) {
	b.hmu.Lock()
	defer b.hmu.Unlock()
	r := b.rep
	r.Events = append([]protocol.Event(nil), b.rep.Events...)
	r.Sensors = append([]protocol.Sensor(nil), b.rep.Sensors...)
	return &r, nil
}

func (b *healthStub) setHealth(f func(r *protocol.HealthReport)) {
	b.hmu.Lock()
	f(&b.rep)
	b.hmu.Unlock()
}

// TestHealthSyncReportsChanges: health sync reads a polled BMC that
// tells health with its power reading and sends a report only when the
// health, a sensor's status or the event log changed, or the sensor
// interval passed; a report still in the outbox is taken back and its
// events ride in the next one, so a node has one report waiting.
func TestHealthSyncReportsChanges(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var sent []*protocol.Message
	outbox := map[string]bool{}
	stub := &healthStub{stubBMC: stubBMC{state: protocol.PowerOff}}
	stub.rep = protocol.HealthReport{Health: protocol.HealthOK, SensorsRead: true,
		Sensors: []protocol.Sensor{{Name: "Fan 1", Kind: protocol.SensorFan, Status: protocol.HealthOK}},
		Events:  []protocol.Event{{ID: "SEL/1", Message: "one"}}}
	s := New(Config{Site: "s1", Log: slog.New(slog.DiscardHandler), PowerSyncInterval: time.Second, SensorInterval: time.Minute, Clock: clk,
		Builders: map[string]Builder{"ipmi": {New: func(string, map[string]any, int) (drivers.BMC, error) { return stub, nil }}},
		Report: func(m *protocol.Message) {
			if m.Kind == protocol.KindHealth {
				sent = append(sent, m)
				outbox[m.ID] = true
			}
		},
		Withdraw: func(id string) bool { ok := outbox[id]; delete(outbox, id); return ok }})
	if _, err := s.Get("n1", "ipmi", map[string]any{}); err != nil {
		t.Fatal(err)
	}
	s.CommandDone(&protocol.Message{Node: "n1", Driver: "ipmi", Action: protocol.ActionPower, Args: map[string]any{"state": protocol.PowerOff}})
	round := func() string {
		sent = nil
		clk.Advance(time.Second)
		s.PowerSyncRound(context.Background())
		s.WaitHealth()
		var b []string
		for _, m := range sent {
			r := m.HealthReport
			var ev []string
			for _, e := range r.Events {
				ev = append(ev, e.ID)
			}
			b = append(b, fmt.Sprintf("%s sensors=%d events=%s", r.Health, len(r.Sensors), strings.Join(ev, ",")))
		}
		return strings.Join(b, "; ")
	}
	if got := round(); got != "OK sensors=1 events=SEL/1" {
		t.Fatalf("first reading: %q", got)
	}
	if got := round(); got != "" {
		t.Fatalf("nothing changed: %q; want no report", got)
	}
	// The first report was acked (out of the outbox); a new entry.
	outbox = map[string]bool{}
	stub.setHealth(func(r *protocol.HealthReport) { r.Events = append(r.Events, protocol.Event{ID: "SEL/2"}) })
	if got := round(); got != "OK sensors=1 events=SEL/2" {
		t.Fatalf("a new entry: %q; want SEL/2 alone", got)
	}
	// Not acked (the WAN is down): the next report takes SEL/2 back.
	stub.setHealth(func(r *protocol.HealthReport) {
		r.Health = protocol.HealthCritical
		r.Sensors[0].Status = protocol.HealthCritical
		r.Events = append(r.Events, protocol.Event{ID: "SEL/3"})
	})
	if got := round(); got != "Critical sensors=1 events=SEL/2,SEL/3" {
		t.Fatalf("while the last report waits: %q; want it taken over", got)
	}
	if len(outbox) != 1 {
		t.Errorf("%d health reports wait in the outbox; want 1", len(outbox))
	}
	// A sensor's status alone is a change; the sensor interval resends.
	stub.setHealth(func(r *protocol.HealthReport) { r.Sensors[0].Status = protocol.HealthOK })
	if got := round(); got != "Critical sensors=1 events=SEL/2,SEL/3" {
		t.Fatalf("a sensor's status changed: %q", got)
	}
	outbox = map[string]bool{}
	clk.Advance(time.Minute)
	if got := round(); got != "Critical sensors=1 events=" {
		t.Fatalf("after the sensor interval: %q; want the sensors again, no event", got)
	}
	s.Forget("n1")
	if got := round(); got != "" {
		t.Fatalf("forgotten: %q", got)
	}
}
