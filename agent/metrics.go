package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/bmedge/bmedge/lib/netbudget"
	"github.com/bmedge/bmedge/protocol"
)

// metricsNamespace prefixes the edge agent's metrics.
const metricsNamespace = "bmedge_agent"

// agentMetrics are one agent's Prometheus metrics, in a registry of its
// own (several agents run in one test process). No series is labelled
// with a node: drivers, actions and outcomes are bounded sets.
type agentMetrics struct {
	reg        *prometheus.Registry
	bmcOps     *prometheus.CounterVec
	bmcSeconds *prometheus.HistogramVec
	resent     prometheus.Counter
	stale      prometheus.Counter
	powerReads *prometheus.CounterVec
	planSteps  *prometheus.CounterVec
	refused    *prometheus.CounterVec
	discovery  *prometheus.CounterVec
	uplink     *prometheus.HistogramVec
}

func newAgentMetrics(a *Agent) *agentMetrics {
	m := &agentMetrics{reg: prometheus.NewRegistry()}
	m.bmcOps = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metricsNamespace, Name: "bmc_operations_total",
		Help: "BMC commands run for the coordinator, by driver, action (validate, power, boot_device, oob_step) and outcome (ok, error, timeout)."},
		[]string{"driver", "action", "outcome"})
	m.bmcSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: metricsNamespace, Name: "bmc_operation_duration_seconds",
		Help:    "Duration of BMC commands run for the coordinator (not counting the wait for a BMC slot), by driver and action.",
		Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}}, []string{"driver", "action"})
	m.resent = prometheus.NewCounter(prometheus.CounterOpts{Namespace: metricsNamespace, Name: "results_resent_total",
		Help: "Results and power reports sent again because the coordinator had not acknowledged them (resend interval or reconnection)."})
	m.stale = prometheus.NewCounter(prometheus.CounterOpts{Namespace: metricsNamespace, Name: "stale_commands_total",
		Help: "BMC commands not run because a newer command of the same node had already started (a late copy: broker redelivery or resend)."})
	m.powerReads = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metricsNamespace, Name: "power_sync_reads_total",
		Help: "Power-state reads of the site's real BMCs by power sync, by outcome (ok, error)."}, []string{"outcome"})
	m.planSteps = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metricsNamespace, Name: "plan_steps_total",
		Help: "Steps the site's plans started on their own (run_plan), by where they run: inband (the ramdisk) or oob (the BMC)."}, []string{"where"})
	m.refused = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metricsNamespace, Name: "commands_refused_total",
		Help: "Commands the agent refused as not the coordinator's or no longer standing (kind: unsequenced, a node's command without a seq once the site has had sequenced ones; " +
			"plan-ended, a run_plan of a plan that ended; plan-past-deadline, a run_plan past its deadline; " +
			"older-term, anything a coordinator cluster's leader sent with a term older than one seen before: a deposed leader)."}, []string{"kind"})
	for _, k := range []string{refusedUnsequenced, refusedPlanEnded, refusedPlanExpired, refusedOlderTerm} {
		m.refused.WithLabelValues(k)
	}
	m.discovery = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metricsNamespace, Name: "discovery_total",
		Help: "Machines that belong to no node, by outcome: booted (their network boot answered in discovery mode), reported (their inventory kept for the coordinator), " +
			"or why not: discovery_off, cap (the site's remaining discoveries are taken), rate (the site's rate per minute), report_refused (a second report, or one of a boot not answered)."}, []string{"outcome"})
	for _, k := range []string{"booted", "reported", "discovery_off", "cap", "rate", "report_refused"} {
		m.discovery.WithLabelValues(k)
	}
	m.uplink = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: metricsNamespace, Name: "uplink_seconds",
		Help: "Publishes to the coordinator (results, reports, relayed hellos and heartbeats, summaries; one bundle or one large message each), by stage: " +
			"waiting, from the queueing of its oldest message to its publish (gathering, a place among the bundles in flight, the same nodes' bundles before it); " +
			"acknowledged, from its publish to the broker's ack (the WAN's round trip and what is ahead of it).",
		Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2.5, 5, 10}}, []string{"stage"})
	plans := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: metricsNamespace, Name: "plans_running",
		Help: "Plans the agent holds now (one per node at most), paused ones included."}, func() float64 { return float64(a.plans.Len()) })
	outbox := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: metricsNamespace, Name: "outbox_depth",
		Help: "Results and power reports waiting for the coordinator's acknowledgement, now."}, func() float64 { return float64(a.Outbox()) })
	kept := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: metricsNamespace, Name: "outbox_kept",
		Help: "Of the outbox, the messages kept in the state folder (results and reports, not the heartbeat summaries): what a restart of the agent sends again."},
		func() float64 { return float64(a.ob.Kept()) })
	// Both outcomes exist from the start, at 0.
	m.powerReads.WithLabelValues("ok")
	m.powerReads.WithLabelValues("error")
	m.planSteps.WithLabelValues("inband")
	m.planSteps.WithLabelValues("oob")
	m.reg.MustRegister(m.uplink, m.discovery, m.bmcOps, m.bmcSeconds, m.resent, m.stale, m.powerReads, m.planSteps, m.refused, plans, outbox, kept, siteBrokerCollector{a},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// siteBrokerCollector shows the site broker's connection budget: the
// connections it holds and those refused at accept, by kind
// (netbudget's: total, per-source, pending, pending-per-source, evicted,
// fd-pool, fd-reserve), nothing of it without a site broker; and the
// refusals of the simulated nodes' rescue logins (lib/rescuessh's kinds),
// as listener rescue-ssh.
type siteBrokerCollector struct{ a *Agent }

var (
	listenerConnsDesc = prometheus.NewDesc(metricsNamespace+"_listener_connections",
		"Connections held now by the site broker (state: open, of which pending: before their whole CONNECT).", []string{"listener", "state"}, nil)
	listenerRefusedDesc = prometheus.NewDesc(metricsNamespace+"_listener_refused_total",
		"Connections the site broker (listener site-broker) or the simulated nodes' rescue logins (rescue-ssh) closed at accept, before TLS or any read, "+
			"because a budget was full, or closed while pending to make room for a source that held fewer (kind: total, per-source, pending, "+
			"pending-per-source, evicted, fd-pool, fd-reserve); and the rescue logins' refused logins and sessions (kind: login-budget, a try refused "+
			"unchecked with its source's failure budget spent; login-failed, a wrong user or password; sessions, a session over the session budget).",
		[]string{"listener", "kind"}, nil)
	publishRefusedDesc = prometheus.NewDesc(metricsNamespace+"_mqtt_publish_refused_total",
		"Publishes (and last wills) of logged-in clients the site broker refused (kind: topic, a topic outside the client's own, such as a ramdisk's on another node's topics; "+
			"command-topic, a publish on a command topic; presence, a presence said by another client than its owner).", []string{"kind"}, nil)
)

func (c siteBrokerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- listenerConnsDesc
	ch <- listenerRefusedDesc
	ch <- publishRefusedDesc
}

func (c siteBrokerCollector) Collect(ch chan<- prometheus.Metric) {
	for kind, n := range c.a.sim.RescueRefused() {
		ch <- prometheus.MustNewConstMetric(listenerRefusedDesc, prometheus.CounterValue, float64(n), "rescue-ssh", kind)
	}
	if c.a.relay == nil {
		return
	}
	if refused, ok := c.a.relay.PublishRefused(); ok {
		for kind, n := range refused {
			ch <- prometheus.MustNewConstMetric(publishRefusedDesc, prometheus.CounterValue, float64(n), kind)
		}
	}
	st, ok := c.a.relay.ConnStats()
	if !ok {
		return
	}
	ch <- prometheus.MustNewConstMetric(listenerConnsDesc, prometheus.GaugeValue, float64(st.Open), st.Name, "open")
	ch <- prometheus.MustNewConstMetric(listenerConnsDesc, prometheus.GaugeValue, float64(st.Pending), st.Name, "pending")
	for kind, n := range st.Refused {
		ch <- prometheus.MustNewConstMetric(listenerRefusedDesc, prometheus.CounterValue, float64(n), st.Name, kind)
	}
}

// label keeps a label's value within the known ones.
func label(v string, known ...string) string {
	for _, k := range known {
		if v == k {
			return v
		}
	}
	return "other"
}

// observeBMC records a BMC command that began at start; *err is its
// outcome, read when the command returns (execBMC defers it).
func (a *Agent) observeBMC(m *protocol.Message, start time.Time, err *error) {
	driver := label(a.bmcs.DriverOf(m.Driver), a.bmcs.Drivers()...) // the registry's, as the BMC part builds them (idrac: redfish)
	action := label(m.Action, protocol.ActionValidate, protocol.ActionPower, protocol.ActionBootDev, protocol.ActionOOBStep, protocol.ActionVMedia)
	outcome := "ok"
	switch {
	case *err == nil:
	case errors.Is(*err, context.DeadlineExceeded):
		outcome = "timeout"
	default:
		outcome = "error"
	}
	a.metrics.bmcOps.WithLabelValues(driver, action, outcome).Inc()
	a.metrics.bmcSeconds.WithLabelValues(driver, action).Observe(time.Since(start).Seconds())
}

// observePowerRead counts one power-sync read.
func (a *Agent) observePowerRead(err error) {
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	a.metrics.powerReads.WithLabelValues(outcome).Inc()
}

// MetricsHandler serves the agent's metrics in Prometheus' text format.
func (a *Agent) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(a.metrics.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// MetricsAddr is the address the metrics listener bound ("" without
// Config.MetricsListen); set once AwaitUp returns.
func (a *Agent) MetricsAddr() string { return a.metricsAddr }

// serveMetrics serves GET /metrics on Config.MetricsListen until ctx
// ends. The metrics carry no authentication, so the address must be on
// loopback unless Config.MetricsListenAny says otherwise.
func (a *Agent) serveMetrics(ctx context.Context) error {
	if a.cfg.MetricsListen == "" {
		return nil
	}
	refuse := func() error {
		return fmt.Errorf("refusing to serve metrics on %s: it is not a loopback address (127.0.0.1, ::1, localhost) and the metrics have no authentication; "+
			"use --metrics-listen 127.0.0.1:PORT and scrape from this machine, or add --metrics-listen-any to serve them to whoever reaches the address",
			a.cfg.MetricsListen)
	}
	if !a.cfg.MetricsListenAny && !netbudget.LoopbackAddr(a.cfg.MetricsListen) {
		return refuse()
	}
	ln, err := net.Listen("tcp", a.cfg.MetricsListen)
	if err != nil {
		return fmt.Errorf("--metrics-listen %s: %w", a.cfg.MetricsListen, err)
	}
	// The address bound counts too, in case localhost resolved to
	// something else.
	if ip := ln.Addr().(*net.TCPAddr).IP; !ip.IsLoopback() && !a.cfg.MetricsListenAny {
		ln.Close()
		return refuse()
	}
	a.metricsAddr = ln.Addr().String()
	ln = budgeted(ln, "metrics", a.cfg.MetricsConns, DefaultMetricsConns, a.log)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", a.MetricsHandler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute, ConnState: netbudget.ConnState(nil)}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("metrics listener stopped", "err", err)
		}
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	a.log.Info("metrics served", "url", "http://"+a.metricsAddr+"/metrics")
	return nil
}
