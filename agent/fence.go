package agent

import (
	"sync/atomic"

	"github.com/bmedge/bmedge/protocol"
)

// refusedOlderTerm: what a coordinator cluster's leader sent with a term
// older than the highest the agent has seen (a deposed leader).
const refusedOlderTerm = "older-term"

// term fences a coordinator cluster's deposed leader: the highest leader
// term the agent has seen (kept in the state folder).
type term struct{ highest atomic.Uint64 }

// fenced tells whether m comes from a deposed leader and is to be
// dropped: its term is older than one seen before. A message without a
// term (a coordinator that is no cluster member) is never fenced. A
// newer term is kept, in memory at once and in the state folder with the
// next group commit.
func (a *Agent) fenced(m *protocol.Message) bool {
	if m.Term == 0 {
		return false
	}
	for {
		cur := a.term.highest.Load()
		if m.Term == cur {
			return false
		}
		if m.Term < cur {
			a.metrics.refused.WithLabelValues(refusedOlderTerm).Inc()
			a.warn.Warn("older term", "message of a deposed coordinator leader dropped", "term", m.Term, "current_term", cur,
				"kind", m.Kind, "action", m.Action, "node", m.Node)
			return true
		}
		if a.term.highest.CompareAndSwap(cur, m.Term) {
			if cur != 0 {
				a.log.Info("coordinator leader of a newer term", "term", m.Term, "previous", cur)
			}
			a.ob.Store().PutTerm(m.Term)
			return false
		}
	}
}
