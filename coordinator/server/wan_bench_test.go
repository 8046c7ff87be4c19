package server_test

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/bmedge/bmedge/coordinator/fsm"
)

// TestWANBench is make bench-wan (scripts/bench-wan/run.sh): the full
// cycle (manage, provide, deploy, undeploy) of BM_BENCH_WAN_NODES (50)
// simulated nodes over a clean link and over the impaired one (500 ms
// round trip, 5 % loss each way), with the wall time of each and the
// bytes that crossed the link per node (IP packets both ways, as the
// host's end of the link counts them; the simulated nodes fetch no
// image). Not part of make test: it runs only with BM_BENCH_WAN=1.
func TestWANBench(t *testing.T) {
	if os.Getenv("BM_BENCH_WAN") != "1" {
		t.Skip("the WAN benchmark runs with BM_BENCH_WAN=1 (make bench-wan)")
	}
	nodes := 50
	if v, err := strconv.Atoi(os.Getenv("BM_BENCH_WAN_NODES")); err == nil && v > 0 {
		nodes = v
	}
	type result struct {
		wall  time.Duration
		bytes int64
		how   string
	}
	cycle := func(t *testing.T, w *wanNet) result {
		s := startWANSite(t, w, fsm.Config{WaitTimeout: 5 * time.Minute, CommandTimeout: 5 * time.Minute, ResendInterval: 5 * time.Second},
			"--simulate", fmt.Sprint(nodes), "--step-duration", "2s", "--heartbeat", "5s", "--boot-delay", "1s",
			"--bmc-delay", "50ms", "--resend-interval", "5s")
		ids := createNodes(t, s.cl, nodes)
		for _, id := range ids {
			s.cl.Do("PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "add", "path": "/instance_info/image_source", "value": "http://127.0.0.1:1/img"}}, nil)
		}
		// Let the connection settle (presence, subscriptions) before
		// counting.
		time.Sleep(2 * time.Second)
		b0, start := w.Bytes(), time.Now()
		s.verbAll(t, ids, "manage", "manageable", nil, 10*time.Minute)
		s.verbAll(t, ids, "provide", "available", nil, 10*time.Minute)
		s.verbAll(t, ids, "active", "active", nil, 10*time.Minute)
		s.verbAll(t, ids, "deleted", "available", nil, 10*time.Minute)
		r := result{wall: time.Since(start), bytes: w.Bytes() - b0, how: "veth"}
		if w.wire != nil {
			r.how = "TUN wire"
		} else if w.netem {
			r.how = "veth + tc netem"
		}
		return r
	}
	var clean, impaired result
	t.Run("clean", func(t *testing.T) { clean = cycle(t, newWAN(t, wanVeth)) })
	t.Run("impaired", func(t *testing.T) { impaired = cycle(t, newImpairedWAN(t, 250*time.Millisecond, 0.05)) })
	if t.Failed() {
		return
	}
	per := func(r result) float64 { return float64(r.bytes) / float64(nodes) / 1024 }
	fmt.Printf("bench-wan: %d nodes, full cycle (manage, provide, deploy, undeploy)\n", nodes)
	fmt.Printf("  clean link (%s):                 %6.1f s, %7.1f KiB over the link, %5.1f KiB per node\n", clean.how, clean.wall.Seconds(), float64(clean.bytes)/1024, per(clean))
	fmt.Printf("  impaired (%s, 500 ms RTT, 5 %% loss): %6.1f s, %7.1f KiB over the link, %5.1f KiB per node\n", impaired.how, impaired.wall.Seconds(), float64(impaired.bytes)/1024, per(impaired))
	fmt.Printf("  impaired / clean time: %.2f× (target ≤ 1.1×); WAN per node per cycle: %.1f / %.1f KiB (target ≤ 10 KiB)\n",
		impaired.wall.Seconds()/clean.wall.Seconds(), per(clean), per(impaired))
}
