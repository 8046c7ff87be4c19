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

// TestCallersFirst checks how a batch with waiting callers is split: the
// callers and the first callerBatchOthers others now, the rest later,
// each kind in its order.
func TestCallersFirst(t *testing.T) {
	mk := func(id int, caller bool) *request {
		r := &request{fn: func(*tx) error { return fmt.Errorf("%d", id) }}
		if caller {
			r.done = make(chan error, 1)
		}
		return r
	}
	id := func(r *request) int {
		var n int
		fmt.Sscan(r.fn(nil).Error(), &n)
		return n
	}
	var batch []*request
	for i := 0; i < 200; i++ {
		batch = append(batch, mk(i, i%50 == 49))
	}
	now, later := callersFirst(batch)
	var ids []int
	for _, r := range now {
		ids = append(ids, id(r))
	}
	// Others 0..64 but 49, which is a caller like 99, 149 and 199.
	want := []int{}
	others := 0
	for i := 0; i < 200; i++ {
		if i%50 == 49 || others < callerBatchOthers {
			want = append(want, i)
			if i%50 != 49 {
				others++
			}
		}
	}
	if fmt.Sprint(ids) != fmt.Sprint(want) {
		t.Fatalf("now: %v\nwant %v", ids, want)
	}
	if len(want) != callerBatchOthers+4 || len(later) != 200-len(want) || id(later[0]) != 65 {
		t.Fatalf("later: %d requests from %d", len(later), id(later[0]))
	}
	for i := 1; i < len(later); i++ {
		if id(later[i]) <= id(later[i-1]) || later[i].done != nil {
			t.Fatalf("later is out of order or holds a caller at %d", i)
		}
	}
	// Without callers, or with few others, a batch is left whole.
	if now, later := callersFirst(batch[:48]); len(now) != 48 || later != nil {
		t.Fatal("a batch without callers was split")
	}
	if now, later := callersFirst(batch[:50]); len(now) != 50 || later != nil {
		t.Fatal("a batch with 49 others was split")
	}
}
