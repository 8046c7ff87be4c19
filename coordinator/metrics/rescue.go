package metrics

import (
	"maps"
	"slices"

	"github.com/bmedge/bmedge/protocol"
)

// rescueRefusals adds up the rescue logins' refusals the ramdisks'
// heartbeats count (protocol.Message.RescueRefused): each heartbeat
// carries what its boot's rescue logins refused so far, so what it adds
// is the rise since the node's last one of the same boot (its agent
// token); a new boot, or a count lower than the last, adds its counts
// whole.
type rescueRefusals struct {
	// last is each node's last counts, while its heartbeats carry some.
	last   map[string]rescueLast
	totals map[string]int64
}

type rescueLast struct {
	token  string
	counts map[string]int64
}

// RescueRefused takes the rescue refusals of a heartbeat of node that
// the engine accepted (token is its agent token).
func (m *Metrics) RescueRefused(node, token string, counts map[string]int64) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r := &m.rescue
	if len(counts) == 0 {
		delete(r.last, node)
		return
	}
	last := r.last[node]
	if last.token != token {
		last = rescueLast{}
	}
	for kind, n := range counts {
		if !slices.Contains(protocol.RescueRefusalKinds, kind) || n < 0 {
			continue // protocol.Decode refuses these already
		}
		if before := last.counts[kind]; n >= before {
			r.totals[kind] += n - before
		} else {
			r.totals[kind] += n
		}
	}
	r.last[node] = rescueLast{token: token, counts: maps.Clone(counts)}
}

// RescueRefusals are the rescue logins' refusals the heartbeats counted
// since the coordinator started, by kind (/metrics: listener_refused_total
// with listener rescue-ssh).
func (m *Metrics) RescueRefusals() map[string]int64 {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.rescue.totals)
}
