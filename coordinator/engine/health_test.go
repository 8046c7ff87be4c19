package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/bmedge/bmedge/coordinator/engine/readings"
	"github.com/bmedge/bmedge/protocol"
)

// TestHealthReportsKept: health reports from the site's edge agent set
// the node's health and sensors from the newest one read, keep every
// event once whatever order the reports arrive in (an overtaken report's
// events too), keep at most readings.MaxEventsKept, are acked, and go
// with the node.
func TestHealthReportsKept(t *testing.T) {
	e, rec := newEngine(t, Config{})
	n, err := e.CreateNode(NodeSpec{Name: "h1", Driver: "fake", Site: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	events := func(from, to int) []protocol.Event {
		var out []protocol.Event
		for i := from; i <= to; i++ {
			out = append(out, protocol.Event{ID: fmt.Sprintf("SEL/%d", i), Message: "m"})
		}
		return out
	}
	send := func(id string, sent time.Time, r protocol.HealthReport) {
		e.HandleMessage(protocol.BMCEvtTopic("s1"), mustJSON(&protocol.Message{Kind: protocol.KindHealth, ID: id, Site: "s1", Node: n.UUID, Sent: sent, HealthReport: &r}))
	}
	fan := func(status string) []protocol.Sensor {
		return []protocol.Sensor{{Name: "Fan 1", Kind: protocol.SensorFan, Status: status}}
	}
	send("h-new", t0.Add(2*time.Second), protocol.HealthReport{Health: protocol.HealthCritical, SensorsRead: true, Sensors: fan(protocol.HealthCritical), Events: events(1, 2)})
	send("h-old", t0.Add(time.Second), protocol.HealthReport{Health: protocol.HealthOK, SensorsRead: true, Sensors: fan(protocol.HealthOK), Events: events(3, 3)})
	send("h-new", t0.Add(2*time.Second), protocol.HealthReport{Health: protocol.HealthCritical, SensorsRead: true, Sensors: fan(protocol.HealthCritical), Events: events(1, 2)})
	wait := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 5 s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	wait("three events", func() bool {
		ev, _, err := e.Events(n.UUID, 0, 0)
		return err == nil && len(ev.Events) == 3
	})
	s, health, _, err := e.Sensors(n.UUID)
	if err != nil || health != protocol.HealthCritical || s == nil || len(s.Sensors) != 1 || s.Sensors[0].Status != protocol.HealthCritical {
		t.Fatalf("after an overtaken report: health %q, sensors %+v, %v; want the newest report's", health, s, err)
	}
	ev, _, _ := e.Events(n.UUID, 0, 0)
	if ev.Events[2].ID != "SEL/3" || ev.LastSeq != 3 {
		t.Errorf("events %+v; want SEL/1, SEL/2, then the overtaken report's SEL/3, once each", ev.Events)
	}
	if ev, _, _ := e.Events(n.UUID, 2, 0); len(ev.Events) != 1 || ev.Events[0].Seq != 3 {
		t.Errorf("events since 2: %+v", ev.Events)
	}
	acked := func(id string) bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		for _, m := range rec.msgs {
			for _, a := range m.AckIDs {
				if a == id {
					return true
				}
			}
		}
		return false
	}
	wait("acks", func() bool { return acked("h-new") && acked("h-old") })

	send("h-many", t0.Add(3*time.Second), protocol.HealthReport{Health: protocol.HealthCritical, Events: events(4, 203)})
	send("h-more", t0.Add(4*time.Second), protocol.HealthReport{Health: protocol.HealthCritical, Events: events(204, 403)})
	send("h-most", t0.Add(5*time.Second), protocol.HealthReport{Health: protocol.HealthCritical, Events: events(404, 603)})
	wait("603 events received", func() bool {
		ev, _, _ := e.Events(n.UUID, 0, 0)
		return ev.LastSeq == 603
	})
	ev, _, _ = e.Events(n.UUID, 0, 0)
	if len(ev.Events) != readings.MaxEventsKept || ev.Dropped != 103 || ev.Events[0].ID != "SEL/104" {
		t.Errorf("kept %d from %s, dropped %d; want %d from SEL/104, 103 dropped", len(ev.Events), ev.Events[0].ID, ev.Dropped, readings.MaxEventsKept)
	}
	if s, _, _, _ := e.Sensors(n.UUID); s == nil || s.Sensors[0].Status != protocol.HealthCritical {
		t.Errorf("reports without sensors changed the sensors: %+v", s)
	}

	if err := e.DeleteNode(n.UUID); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"hsensors/", "hevents/"} {
		if _, found, _ := e.st.Get(k + n.UUID); found {
			t.Errorf("%s%s is kept after the node was deleted", k, n.UUID)
		}
	}
}
