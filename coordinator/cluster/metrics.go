package cluster

import (
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
)

// The member's figures in /metrics (the leader's /metrics also has the
// engine's; a follower's has these alone).
var (
	roleDesc = prometheus.NewDesc("bmedge_cluster_role", "1 for this member's role (leader, follower, candidate), 0 for the others.",
		[]string{"member", "role"}, nil)
	termDesc  = prometheus.NewDesc("bmedge_cluster_term", "The member's current raft term.", []string{"member"}, nil)
	indexDesc = prometheus.NewDesc("bmedge_cluster_index", "The member's replicated log: last entry (last), last committed (commit), last applied to its store (applied), last snapshot (snapshot).",
		[]string{"member", "index"}, nil)
	logSizeDesc = prometheus.NewDesc("bmedge_cluster_log_entries", "Entries in the member's log (last index less first, plus one).", []string{"member"}, nil)
	snapAgeDesc = prometheus.NewDesc("bmedge_cluster_snapshot_age_seconds", "Seconds since the member's last snapshot was taken or restored (absent before the first).",
		[]string{"member"}, nil)
	changesDesc = prometheus.NewDesc("bmedge_cluster_leader_changes_total", "Changes of leader this member observed since it started.", []string{"member"}, nil)
)

// memberStats is the member's counters for its collector.
type memberStats struct {
	leaderChanges atomic.Int64
	snapshotAt    atomic.Int64 // UnixNano, 0 before the first
}

// observe counts leader changes (raft's observations).
func (m *Member) observe() {
	ch := make(chan raft.Observation, 16)
	obs := raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	m.raft.RegisterObserver(obs)
	go func() {
		defer m.raft.DeregisterObserver(obs)
		for {
			select {
			case <-m.stopped:
				return
			case <-ch:
				m.stats.leaderChanges.Add(1)
			}
		}
	}()
}

// Collector is the member's figures for a prometheus registry.
func (m *Member) Collector() prometheus.Collector { return collector{m} }

type collector struct{ m *Member }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{roleDesc, termDesc, indexDesc, logSizeDesc, snapAgeDesc, changesDesc} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	m := c.m
	name := m.cfg.Name
	state := strings.ToLower(m.raft.State().String())
	for _, r := range []string{"leader", "follower", "candidate"} {
		v := 0.0
		if r == state {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(roleDesc, prometheus.GaugeValue, v, name, r)
	}
	ch <- prometheus.MustNewConstMetric(termDesc, prometheus.GaugeValue, float64(m.raft.CurrentTerm()), name)
	snapIdx := uint64(0)
	if snaps, err := m.snaps.List(); err == nil && len(snaps) > 0 {
		snapIdx = snaps[0].Index
	}
	for k, v := range map[string]uint64{"last": m.raft.LastIndex(), "commit": m.raft.CommitIndex(), "applied": m.raft.AppliedIndex(), "snapshot": snapIdx} {
		ch <- prometheus.MustNewConstMetric(indexDesc, prometheus.GaugeValue, float64(v), name, k)
	}
	first, err1 := m.logs.FirstIndex()
	last, err2 := m.logs.LastIndex()
	if err1 == nil && err2 == nil {
		n := 0.0
		if last >= first && last > 0 {
			n = float64(last - first + 1)
		}
		ch <- prometheus.MustNewConstMetric(logSizeDesc, prometheus.GaugeValue, n, name)
	}
	if at := m.stats.snapshotAt.Load(); at > 0 {
		ch <- prometheus.MustNewConstMetric(snapAgeDesc, prometheus.GaugeValue, time.Since(time.Unix(0, at)).Seconds(), name)
	}
	ch <- prometheus.MustNewConstMetric(changesDesc, prometheus.CounterValue, float64(m.stats.leaderChanges.Load()), name)
}
