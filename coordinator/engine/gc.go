package engine

import (
	"time"

	"github.com/bmedge/bmedge/coordinator/store"
)

// DefaultValueLogGCInterval is how often the engine reclaims stale space
// in the database's value log by default, however little was written.
const DefaultValueLogGCInterval = 5 * time.Minute

// collector reclaims the database's value log until Close: every
// ValueLogGCInterval, sooner each time another value-log file's worth of
// values was written, and once when writing stops after a burst. Every node record is rewritten on each change of
// the node, and most land in the value log, which Badger never shrinks by
// itself: without this the data folder grows by every transition ever
// made (~37 MB a deploy/undeploy cycle of 1000 nodes), and the
// coordinator's RSS with it, as Badger mmaps the files. The volume
// trigger keeps the folder's size independent of how fast nodes move: a
// busy coordinator can write several files between two timed runs. The
// quiet trigger reclaims what the burst left as soon as it ends, so that
// a coordinator at rest does not sit on reclaimable files for minutes.
func (e *Engine) collector() {
	defer e.run.wg.Done()
	check := min(time.Second, e.cfg.ValueLogGCInterval)
	clk := e.cfg.Clock
	tk := clk.NewTicker(check)
	defer tk.Stop()
	last, lastWritten := clk.Now(), e.st.ValueLogWritten()
	prev := lastWritten
	for {
		select {
		case <-e.run.stopped:
			return
		case <-tk.C():
		}
		written := e.st.ValueLogWritten()
		timed := clk.Now().Sub(last) >= e.cfg.ValueLogGCInterval
		volume := written-lastWritten >= store.ValueLogFileSize
		quiet := written == prev && written > lastWritten
		prev = written
		if !timed && !volume && !quiet {
			continue
		}
		last, lastWritten = clk.Now(), written
		n, err := e.st.CollectGarbage()
		switch {
		case err != nil:
			// Fatal: Badger's state after a failed flush or GC round
			// is not sound, and calling it again is what crashed
			// (store/failure.go).
			e.fail(err)
			return
		case n > 0:
			e.cfg.Log.Debug("database value log GC", "files_rewritten", n, "took", clk.Now().Sub(last).Round(time.Millisecond))
		}
	}
}
