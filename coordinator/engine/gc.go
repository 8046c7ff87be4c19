package engine

import (
	"time"
)

// DefaultValueLogGCInterval is how often the engine reclaims stale space
// in the database's value log by default.
const DefaultValueLogGCInterval = 5 * time.Minute

// collector reclaims the value log every ValueLogGCInterval until Close.
// Every node record is rewritten on each change of the node, and those
// above Badger's value threshold land in the value log, which Badger
// never shrinks by itself: without this the data folder grows by every
// transition ever made.
func (e *Engine) collector() {
	defer e.wg.Done()
	tk := time.NewTicker(e.cfg.ValueLogGCInterval)
	defer tk.Stop()
	for {
		select {
		case <-e.stopped:
			return
		case <-tk.C:
		}
		start := time.Now()
		n, err := e.st.CollectGarbage()
		switch {
		case err != nil:
			e.log.Warn("database value log GC failed; it is tried again later", "err", err)
		case n > 0:
			e.log.Info("database value log GC", "files_rewritten", n, "took", time.Since(start).Round(time.Millisecond))
		}
	}
}
