package metrics

import (
	"cmp"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/protocol"
)

// MaxSensorSeries bounds the sensors of one node that get a reading
// series (bmedge_node_sensor_reading): only sensors whose status is
// Warning or Critical and that have a reading, the worst first (then by
// name), at most this many. Every sensor is counted in
// bmedge_node_sensors, by kind and status.
const MaxSensorSeries = 8

// sensorSummary is what /metrics tells of one node's sensors: how many
// by kind and status, and the readings of the worst ones.
type sensorSummary struct {
	counts map[[2]string]int // kind, status
	bad    []protocol.Sensor // at most MaxSensorSeries
}

// healthValue is bmedge_node_health's value of a health.
func healthValue(h string) (float64, bool) {
	switch h {
	case protocol.HealthOK:
		return 0, true
	case protocol.HealthWarning:
		return 1, true
	case protocol.HealthCritical:
		return 2, true
	}
	return 0, false
}

// sensorKind bounds the kind label to the protocol's kinds.
func sensorKind(k string) string {
	switch k {
	case protocol.SensorTemperature, protocol.SensorFan, protocol.SensorPowerSupply, protocol.SensorVoltage,
		protocol.SensorPower, protocol.SensorCurrent:
		return k
	}
	return protocol.SensorOther
}

// sensorStatus bounds the status label ("unknown" when the BMC says
// nothing and no threshold was crossed).
func sensorStatus(s string) string {
	if s == "" || !protocol.ValidHealth(s) {
		return "unknown"
	}
	return s
}

func healthRank(h string) int {
	switch h {
	case protocol.HealthCritical:
		return 2
	case protocol.HealthWarning:
		return 1
	}
	return 0
}

// Sensors notes a node's sensors as last read (a health report applied,
// or the node's kept readings at start); nil forgets them.
func (m *Metrics) Sensors(node string, sensors []protocol.Sensor) {
	if m == nil {
		return
	}
	var s *sensorSummary
	if sensors != nil {
		s = &sensorSummary{counts: map[[2]string]int{}}
		for _, x := range sensors {
			s.counts[[2]string{sensorKind(x.Kind), sensorStatus(x.Status)}]++
			if x.Reading != nil && healthRank(x.Status) > 0 {
				s.bad = append(s.bad, x)
			}
		}
		slices.SortStableFunc(s.bad, func(a, b protocol.Sensor) int {
			if c := cmp.Compare(healthRank(b.Status), healthRank(a.Status)); c != 0 {
				return c
			}
			return cmp.Compare(a.Name, b.Name)
		})
		// Two sensors of one name, kind and units would be one series:
		// the worse is kept.
		seen := map[[3]string]bool{}
		kept := s.bad[:0]
		for _, x := range s.bad {
			k := [3]string{x.Name, sensorKind(x.Kind), x.Units}
			if !seen[k] && len(kept) < MaxSensorSeries {
				seen[k] = true
				kept = append(kept, x)
			}
		}
		s.bad = slices.Clip(kept)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if s == nil {
		delete(m.sensors, node)
		return
	}
	m.sensors[node] = s
}

// healthDescs are the per-node health series (see docs/architecture.md,
// "Metrics", for their cardinality).
type healthDescs struct {
	nodeHealth, nodesHealth, sensors, reading *prometheus.Desc
}

func newHealthDescs() healthDescs {
	return healthDescs{
		nodeHealth: prometheus.NewDesc(Namespace+"_node_health",
			"A node's health as its BMC last told it (the node's health field, API 1.109): 0 OK, 1 Warning, 2 Critical; no series while the BMC says nothing. One series per node with a health.",
			[]string{"node", "name", "site"}, nil),
		nodesHealth: prometheus.NewDesc(Namespace+"_nodes_health",
			"Nodes by site and health (OK, Warning, Critical, or none when the BMC does not say), now.",
			[]string{"site", "health"}, nil),
		sensors: prometheus.NewDesc(Namespace+"_node_sensors",
			"A node's sensors as last read, counted by kind (temperature, fan, power_supply, voltage, power, current, other) and status (OK, Warning, Critical, unknown).",
			[]string{"node", "site", "kind", "status"}, nil),
		reading: prometheus.NewDesc(Namespace+"_node_sensor_reading",
			"The reading of a sensor in Warning or Critical, in its units: at most 8 per node, the worst first.",
			[]string{"node", "site", "sensor", "kind", "units", "status"}, nil),
	}
}

func (d healthDescs) describe(ch chan<- *prometheus.Desc) {
	ch <- d.nodeHealth
	ch <- d.nodesHealth
	ch <- d.sensors
	ch <- d.reading
}

// collectHealth sends n's health and sensor series; counts gathers the
// per-site health census. Label values come from BMCs: a value
// Prometheus refuses (not UTF-8) drops its series, not the scrape.
func (c *census) collectHealth(ch chan<- prometheus.Metric, n *fsm.Node, s *sensorSummary, seen map[string]bool, counts map[[2]string]int) {
	d := c.health
	h := n.Health
	if h == "" {
		h = "none"
	}
	counts[[2]string{n.Site, h}]++
	send := func(desc *prometheus.Desc, v float64, labels ...string) {
		if mt, err := prometheus.NewConstMetric(desc, prometheus.GaugeValue, v, labels...); err == nil {
			ch <- mt
		}
	}
	if v, ok := healthValue(n.Health); ok {
		send(d.nodeHealth, v, n.UUID, n.Name, n.Site)
	}
	if s == nil {
		return
	}
	seen[n.UUID] = true
	for k, v := range s.counts {
		send(d.sensors, float64(v), n.UUID, n.Site, k[0], k[1])
	}
	for _, x := range s.bad {
		send(d.reading, *x.Reading, n.UUID, n.Site, x.Name, sensorKind(x.Kind), x.Units, x.Status)
	}
}
