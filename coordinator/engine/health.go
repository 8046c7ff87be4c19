package engine

import (
	"encoding/json"
	"time"

	"github.com/bmedge/bmedge/coordinator/engine/readings"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/coordinator/store"
	"github.com/bmedge/bmedge/protocol"
)

// keepHealth writes a health report's sensors (replacing the node's
// last readings) when it is newer than the last one applied, and adds
// its event-log entries to those kept in any case: an entry is kept once
// by its id, whatever order the reports come in.
func (t *tx) keepHealth(n *fsm.Node, r *protocol.HealthReport, readAt time.Time, newer bool) {
	if r == nil {
		return
	}
	if r.SensorsRead && newer {
		s := readings.Sensors{ReadAt: readAt.UTC(), Sensors: append([]protocol.Sensor{}, r.Sensors...), Error: r.Error}
		readings.SortSensors(s.Sensors)
		if b, err := json.Marshal(s); err == nil {
			t.batch.Set(store.SensorsPrefix+n.UUID, b)
		}
		t.e.cfg.Metrics.Sensors(n.UUID, s.Sensors)
	}
	if len(r.Events) == 0 {
		return
	}
	old, ok := t.events[n.UUID]
	if !ok {
		var err error
		if old, err = readings.LoadEvents(t.e.st, n.UUID); err != nil {
			t.e.cfg.Log.Warn("the node's kept BMC events could not be read; they are started again", "node", n.UUID, "err", err)
		}
	}
	merged, added := readings.MergeEvents(old, r.Events, t.now)
	if added == 0 {
		return
	}
	if t.events == nil {
		t.events = map[string]readings.Events{}
	}
	t.events[n.UUID] = merged
	if b, err := json.Marshal(merged); err == nil {
		t.batch.Set(store.EventsPrefix+n.UUID, b)
	}
}

// Sensors returns a node's latest sensor readings (nil until its BMC
// reported them) and its health and UUID.
func (e *Engine) Sensors(ident string) (*readings.Sensors, string, string, error) {
	var id, health string
	if err := e.View(ident, func(n *fsm.Node, _ bool) error { id, health = n.UUID, n.Health; return nil }); err != nil {
		return nil, "", "", err
	}
	s, err := readings.LoadSensors(e.st, id)
	return s, health, id, err
}

// Events returns the entries kept of a node's BMC event log with a Seq
// above since, at most limit (the oldest first), and its UUID.
func (e *Engine) Events(ident string, since uint64, limit int) (readings.Events, string, error) {
	var id string
	if err := e.View(ident, func(n *fsm.Node, _ bool) error { id = n.UUID; return nil }); err != nil {
		return readings.Events{}, "", err
	}
	ev, err := readings.LoadEvents(e.st, id)
	if err != nil {
		return readings.Events{}, id, err
	}
	out := ev.Events[:0:0]
	for _, x := range ev.Events {
		if x.Seq > since && (limit <= 0 || len(out) < limit) {
			out = append(out, x)
		}
	}
	ev.Events = out
	return ev, id, nil
}
