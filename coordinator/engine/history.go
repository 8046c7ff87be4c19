package engine

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/coordinator/store"
)

// DefaultHistoryMaxEntries is how many history entries a node keeps by
// default, as Ironic's [conductor]node_history_max_entries.
const DefaultHistoryMaxEntries = 300

// histReadAhead is how many of a node's oldest history keys one read of
// the store fetches for trimming: a node at its cap loses one entry per
// new one, and reading them in groups keeps the store out of the engine
// loop for all but one in histReadAhead entries, for ~0.5 KB per node.
const histReadAhead = 16

// histState is what the engine knows of one node's history in the store,
// so that it can keep the history under the cap without reading it for
// every new entry. History keys are HistoryPrefix + uuid + "/" + time +
// "-" + seq, so they sort oldest first.
type histState struct {
	// count is the node's entries in the store and in the batch being
	// built.
	count int
	// floor is the newest key trimmed so far: every older key is gone,
	// and reads for the next oldest start after it (a seek that skips
	// the deleted keys without visiting them).
	floor string
	// next are the oldest keys after floor, read ahead of need, without
	// the node's prefix (HistoryPrefix + uuid + "/") to save memory.
	next []string
}

func historyKey(nodeUUID string, h fsm.HistoryEntry, seq uint64) string {
	return fmt.Sprintf("%s%s/%020d-%08d", store.HistoryPrefix, nodeUUID, h.Time.UnixNano(), seq%100000000)
}

// addHistory writes one history entry of n and, when the node passes
// its cap, deletes its oldest entries in the same batch.
func (t *tx) addHistory(n *fsm.Node, h fsm.HistoryEntry) {
	e := t.e
	e.reg.histSeq++
	key := historyKey(n.UUID, h, e.reg.histSeq)
	b, _ := json.Marshal(h)
	t.batch.Set(key, b)
	hs := e.reg.hist[n.UUID]
	if hs == nil {
		hs = &histState{}
		e.reg.hist[n.UUID] = hs
	}
	hs.count++
	if t.histNew == nil {
		t.histNew = map[string][]string{}
	}
	t.histNew[n.UUID] = append(t.histNew[n.UUID], key)
	for hs.count > e.cfg.HistoryMaxEntries {
		old, ok := t.oldestHistory(n.UUID, hs)
		if !ok {
			// Nothing older is left: the count had drifted (it cannot,
			// unless the store was changed under the engine). Believe
			// the store.
			hs.count = e.cfg.HistoryMaxEntries
			break
		}
		t.batch.Delete(old)
		hs.count--
	}
}

// oldestHistory picks the node's oldest remaining history key and moves
// the floor past it.
func (t *tx) oldestHistory(nodeUUID string, hs *histState) (string, bool) {
	prefix := store.HistoryPrefix + nodeUUID + "/"
	if len(hs.next) == 0 {
		hs.next = make([]string, 0, histReadAhead)
		err := t.e.st.Keys(prefix, hs.floor, func(k string) bool {
			hs.next = append(hs.next, strings.TrimPrefix(k, prefix))
			return len(hs.next) < histReadAhead
		})
		if err != nil {
			// Keeping the entry is harmless; the next one tries again.
			t.e.cfg.Log.Warn("cannot read a node's history to trim it", "node", nodeUUID, "err", err)
			return "", false
		}
	}
	var k string
	switch {
	case len(hs.next) > 0:
		k, hs.next = prefix+hs.next[0], hs.next[1:]
	case len(t.histNew[nodeUUID]) > 0:
		// Every committed entry is gone: the oldest are this batch's own
		// (a cap smaller than one batch's entries for the node).
		k = t.histNew[nodeUUID][0]
		t.histNew[nodeUUID] = t.histNew[nodeUUID][1:]
	default:
		return "", false
	}
	hs.floor = k
	return k, true
}

// loadHistory counts every node's history entries and trims what is over
// the cap (the cap may have been lowered since the entries were written).
// History left behind by a deleted node (a crash between the node's
// deletion and its history's) is deleted.
func (e *Engine) loadHistory() error {
	var del store.Batch
	var cur string
	var keys []string
	flush := func() {
		if cur == "" {
			return
		}
		if _, ok := e.reg.nodes[cur]; !ok {
			for _, k := range keys {
				del.Delete(k)
			}
			return
		}
		hs := &histState{count: len(keys)}
		if over := len(keys) - e.cfg.HistoryMaxEntries; over > 0 {
			for _, k := range keys[:over] {
				del.Delete(k)
			}
			hs.count, hs.floor = e.cfg.HistoryMaxEntries, keys[over-1]
		}
		e.reg.hist[cur] = hs
	}
	err := e.st.Keys(store.HistoryPrefix, "", func(k string) bool {
		rest := strings.TrimPrefix(k, store.HistoryPrefix)
		id, _, _ := strings.Cut(rest, "/")
		if id != cur {
			flush()
			cur, keys = id, keys[:0]
		}
		keys = append(keys, k)
		return true
	})
	if err != nil {
		return fmt.Errorf("read node history: %w", err)
	}
	flush()
	if del.Len() > 0 {
		e.cfg.Log.Info("trimming node history to the cap", "entries", del.Len(), "history_max_entries", e.cfg.HistoryMaxEntries)
		if err := e.write(&del); err != nil {
			return fmt.Errorf("trim node history: %w", err)
		}
	}
	return nil
}
