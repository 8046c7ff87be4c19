package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// The bench reads the agent's uplink histogram as the agent writes it,
// and the difference of two readings says what the publishes between
// them did.
func TestUplinkHistSince(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "bmedge_agent_uplink_seconds", Help: "h",
		Buckets: []float64{0.025, 0.25, 1}}, []string{"stage"})
	reg.MustRegister(h)
	read := func() uplinkHist {
		t.Helper()
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		for _, f := range fams {
			if _, err := expfmt.MetricFamilyToText(&buf, f); err != nil {
				t.Fatal(err)
			}
		}
		u, err := parseUplinkHist(buf.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	h.WithLabelValues("waiting").Observe(5) // before: not counted
	h.WithLabelValues("acknowledged").Observe(5)
	before := read()
	for _, v := range []float64{0.01, 0.01, 0.01, 0.5} {
		h.WithLabelValues("waiting").Observe(v)
	}
	h.WithLabelValues("acknowledged").Observe(0.6)
	got := read().since(before)
	for _, want := range []string{"waiting: 4, p50 ≤ 0.025 s, p95 ≤ 1 s, 25.0 % over 0.25 s", "acknowledged: 1, p50 ≤ 1 s, p95 ≤ 1 s, 100.0 % over 0.25 s"} {
		if !strings.Contains(got, want) {
			t.Errorf("since: %q, want it to hold %q", got, want)
		}
	}
	if _, err := parseUplinkHist([]byte("other_metric 1\n")); err == nil {
		t.Error("metrics without the histogram read without an error")
	}
}
