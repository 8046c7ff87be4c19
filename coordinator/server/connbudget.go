package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bmedge/bmedge/coordinator/metrics"
	"github.com/bmedge/bmedge/lib/mqttbroker"
	"github.com/bmedge/bmedge/lib/netbudget"
)

// connCollector shows the connection budgets of the coordinator's
// listeners at GET /metrics: connections held and refused at accept, by
// listener and kind of refusal; and the refusals of the nodes' rescue
// logins that their heartbeats counted (listener rescue-ssh).
type connCollector struct {
	pool   *netbudget.Pool
	rescue func() map[string]int64
}

var (
	connOpenDesc = prometheus.NewDesc(metrics.Namespace+"_listener_connections",
		"Connections held now by a listener of the coordinator (state: open, of which pending: before the first request header or the whole CONNECT).",
		[]string{"listener", "state"}, nil)
	connRefusedDesc = prometheus.NewDesc(metrics.Namespace+"_listener_refused_total",
		"Connections closed at accept, before TLS or any read, because a budget was full, or closed while pending to make room for a source that held fewer (kind: total, per-source, pending, pending-per-source, evicted, fd-pool, fd-reserve), "+
			"by the coordinator's listeners and the nodes' rescue logins (listener rescue-ssh, as their ramdisks' heartbeats count them); and the rescue logins' refused logins and sessions "+
			"(kind: login-budget, a try refused unchecked with its source's failure budget spent; login-failed, a wrong user or password; sessions, a session over the session budget).",
		[]string{"listener", "kind"}, nil)
	fdPoolDesc = prometheus.NewDesc(metrics.Namespace+"_listener_fd_pool",
		"The file descriptors the coordinator's listeners may hold together (NOFILE less --fd-reserve), and how many they hold.",
		[]string{"what"}, nil)
)

func (c connCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- connOpenDesc
	ch <- connRefusedDesc
	ch <- fdPoolDesc
}

func (c connCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(fdPoolDesc, prometheus.GaugeValue, float64(c.pool.Cap()), "capacity")
	ch <- prometheus.MustNewConstMetric(fdPoolDesc, prometheus.GaugeValue, float64(c.pool.InUse()), "in_use")
	for _, st := range c.pool.Stats() {
		ch <- prometheus.MustNewConstMetric(connOpenDesc, prometheus.GaugeValue, float64(st.Open), st.Name, "open")
		ch <- prometheus.MustNewConstMetric(connOpenDesc, prometheus.GaugeValue, float64(st.Pending), st.Name, "pending")
		for kind, n := range st.Refused {
			ch <- prometheus.MustNewConstMetric(connRefusedDesc, prometheus.CounterValue, float64(n), st.Name, kind)
		}
	}
	for kind, n := range c.rescue() {
		ch <- prometheus.MustNewConstMetric(connRefusedDesc, prometheus.CounterValue, float64(n), "rescue-ssh", kind)
	}
}

// publishRefusedCollector shows the publishes of authenticated clients
// the embedded broker refused, by kind: on a command topic by anybody
// but the coordinator (command-topic), a site's presence by another
// client than its agent (presence).
type publishRefusedCollector struct{ b *mqttbroker.Broker }

var publishRefusedDesc = prometheus.NewDesc(metrics.Namespace+"_mqtt_publish_refused_total",
	"Publishes (and last wills) of logged-in clients the embedded broker refused (kind: command-topic, a publish on a command topic by anybody but the coordinator; "+
		"presence, a site's presence said by another client than its edge agent; topic, a topic outside the client's own).", []string{"kind"}, nil)

func (c publishRefusedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- publishRefusedDesc }

func (c publishRefusedCollector) Collect(ch chan<- prometheus.Metric) {
	for kind, n := range c.b.PublishRefused() {
		ch <- prometheus.MustNewConstMetric(publishRefusedDesc, prometheus.CounterValue, float64(n), kind)
	}
}
