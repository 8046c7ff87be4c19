package bmc

import (
	"context"
	"sync"
	"time"

	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/protocol"
)

// DefaultSensorInterval is how often a node's sensor readings are sent
// when nothing else changed (Config.SensorInterval).
const DefaultSensorInterval = 10 * time.Minute

// healthSync is what health sync remembers per polled node: what was
// last reported, the event-log entries already seen, and the report
// still in the outbox (not acked), whose events a newer report takes
// over so that a node has at most one report waiting while the WAN is
// down.
type healthSync struct {
	mu    sync.Mutex
	nodes map[string]*healthSeen
	// sem bounds the health readings at once; wg counts those running.
	// They run beside power sync, not in its round: a BMC slow to read
	// its sensors and logs does not delay the site's power readings.
	sem chan struct{}
	wg  sync.WaitGroup
}

type healthSeen struct {
	known      bool
	health     string
	statuses   map[string]string // sensor name → status last sent
	sensorsAt  time.Time         // when sensors were last sent
	readAt     time.Time         // when the BMC was last read
	reading    bool              // a reading runs now
	seen       map[string]bool   // event ids of the last reading's window
	pendingID  string            // the report in the outbox, "" once taken over or unknown
	pendingEvs []protocol.Event
}

func (h *healthSync) get(node string) *healthSeen {
	if h.nodes == nil {
		h.nodes = map[string]*healthSeen{}
	}
	hs := h.nodes[node]
	if hs == nil {
		hs = &healthSeen{}
		h.nodes[node] = hs
	}
	return hs
}

func (h *healthSync) forget(node string) {
	h.mu.Lock()
	delete(h.nodes, node)
	h.mu.Unlock()
}

// syncHealth starts reading a polled node's health after its power
// reading, when its BMC tells health (drivers.HealthReader), no reading
// of it runs, and the last one is older than the health interval; the
// reading runs in the background, at most PowerSyncConcurrency at once,
// and reports what changed.
func (s *Set) syncHealth(ctx context.Context, node string, b drivers.BMC, timeout time.Duration) {
	hr, ok := b.(drivers.HealthReader)
	if !ok {
		return
	}
	now := s.cfg.Clock.Now()
	s.hs.mu.Lock()
	if s.hs.sem == nil {
		s.hs.sem = make(chan struct{}, s.cfg.PowerSyncConcurrency)
	}
	seen := s.hs.get(node)
	due := !seen.reading && (seen.readAt.IsZero() || now.Sub(seen.readAt) >= s.cfg.HealthInterval)
	if due {
		seen.readAt, seen.reading = now, true
		s.hs.wg.Add(1)
	}
	sem := s.hs.sem
	s.hs.mu.Unlock()
	if !due {
		return
	}
	go func() {
		defer s.hs.wg.Done()
		defer func() {
			s.hs.mu.Lock()
			seen.reading = false
			s.hs.mu.Unlock()
		}()
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		defer func() { <-sem }()
		s.readHealth(ctx, node, b, hr, timeout)
	}()
}

// readHealth reads a node's health and reports what changed.
func (s *Set) readHealth(ctx context.Context, node string, b drivers.BMC, hr drivers.HealthReader, timeout time.Duration) {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	rep, err := hr.ReadHealth(rctx)
	cancel()
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		// As Ironic: the health recorded stays; the power reading tells
		// whether the BMC answers at all.
		s.log.Debug("the hardware's health could not be read", "node", node, "err", err)
		return
	}
	s.reportHealth(node, b, rep)
}

// reportHealth sends a health report if the health, a sensor's status
// or the event log changed, or the sensors were last sent longer than
// the sensor interval ago.
func (s *Set) reportHealth(node string, b drivers.BMC, rep *protocol.HealthReport) {
	now := s.cfg.Clock.Now()
	s.mu.Lock()
	current := s.bmcs[node] == b && (s.synce[node] != nil || s.healthOnly[node])
	s.mu.Unlock()
	if !current {
		return
	}
	s.hs.mu.Lock()
	seen := s.hs.get(node)
	var fresh []protocol.Event
	window := make(map[string]bool, len(rep.Events))
	for _, e := range rep.Events {
		window[e.ID] = true
		if !seen.seen[e.ID] {
			fresh = append(fresh, e)
		}
	}
	statuses := make(map[string]string, len(rep.Sensors))
	changedSensors := false
	for _, sn := range rep.Sensors {
		statuses[sn.Name] = sn.Status
		if old, ok := seen.statuses[sn.Name]; !ok || old != sn.Status {
			changedSensors = true
		}
	}
	if len(statuses) != len(seen.statuses) {
		changedSensors = true
	}
	send := !seen.known || seen.health != rep.Health || len(fresh) > 0 || (rep.SensorsRead && changedSensors) ||
		(rep.SensorsRead && now.Sub(seen.sensorsAt) >= s.cfg.SensorInterval)
	seen.seen = window
	if !send {
		s.hs.mu.Unlock()
		return
	}
	// The report still waiting in the outbox is taken back: this one
	// carries its events too (the coordinator drops the ones it has).
	if seen.pendingID != "" && s.cfg.Withdraw != nil && s.cfg.Withdraw(seen.pendingID) {
		fresh = append(append([]protocol.Event(nil), seen.pendingEvs...), fresh...)
	}
	out := *rep
	out.Events = fresh
	if len(out.Events) > protocol.MaxReportEvents {
		out.Events, out.Truncated = out.Events[len(out.Events)-protocol.MaxReportEvents:], true
	}
	msg := &protocol.Message{Kind: protocol.KindHealth, ID: s.cfg.NewID(), Site: s.cfg.Site, Node: node, Sent: now, HealthReport: &out}
	seen.known, seen.health = true, rep.Health
	if rep.SensorsRead {
		seen.statuses, seen.sensorsAt = statuses, now
	}
	seen.pendingID, seen.pendingEvs = msg.ID, out.Events
	s.hs.mu.Unlock()
	s.cfg.Report(msg)
}

// WaitHealth waits for the health readings running now (tests, and a
// stopping agent that wants their reports).
func (s *Set) WaitHealth() { s.hs.wg.Wait() }
