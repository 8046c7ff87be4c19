package engine

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bmedge/bmedge/coordinator/fsm"
)

// BenchmarkCommittedChange measures what an API caller of a committed
// change waits for (here a maintenance toggle: one node changed, one
// synced commit) with 32 callers at once, as the API bench's provision
// PUTs do, with and without a reader walking every node meanwhile (as a
// detail list does). It reports p50 and p95 of the callers' latency; the
// benchmark measures, no test asserts on time.
func BenchmarkCommittedChange(b *testing.B) {
	for _, readers := range []int{0, 1} {
		b.Run(fmt.Sprintf("readers=%d", readers), func(b *testing.B) {
			e, _ := newBenchEngine(b)
			ids := make([]string, 1000)
			for i := range ids {
				n, err := e.CreateNode(NodeSpec{Driver: "fake", Site: "s1"})
				if err != nil {
					b.Fatal(err)
				}
				ids[i] = n.UUID
			}
			stop := make(chan struct{})
			var rwg sync.WaitGroup
			for r := 0; r < readers; r++ {
				rwg.Add(1)
				go func() {
					defer rwg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						e.Each(func(n *fsm.Node) bool { _ = clone(n); return true })
					}
				}()
			}
			var next atomic.Int64
			var mu sync.Mutex
			var lat []time.Duration
			b.ResetTimer()
			var wg sync.WaitGroup
			for c := 0; c < 32; c++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var mine []time.Duration
					for {
						i := int(next.Add(1)) - 1
						if i >= b.N {
							break
						}
						t0 := time.Now()
						if err := e.SetMaintenance(ids[i%len(ids)], (i/len(ids))%2 == 0, ""); err != nil {
							b.Error(err)
							return
						}
						mine = append(mine, time.Since(t0))
					}
					mu.Lock()
					lat = append(lat, mine...)
					mu.Unlock()
				}()
			}
			wg.Wait()
			b.StopTimer()
			close(stop)
			rwg.Wait()
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			if len(lat) > 0 {
				b.ReportMetric(float64(lat[len(lat)/2])/1e6, "p50-ms")
				b.ReportMetric(float64(lat[len(lat)*95/100])/1e6, "p95-ms")
			}
		})
	}
}

func newBenchEngine(b *testing.B) (*Engine, *recorder) {
	b.Helper()
	cfg := Config{DataDir: b.TempDir(), TickInterval: time.Second}
	cfg.Machine.AutomatedClean = true
	e, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	rec := &recorder{}
	if err := e.Start(rec); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(e.Close)
	if _, _, err := e.AddSite("s1"); err != nil {
		b.Fatal(err)
	}
	return e, rec
}
