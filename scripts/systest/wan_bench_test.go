package systest

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/lib/mqttlink"
	"github.com/bmedge/bmedge/protocol"
)

// TestWANBench is make bench-wan (scripts/bench-wan/run.sh): the full
// cycle (manage, provide, deploy, undeploy) of BM_BENCH_WAN_NODES (50)
// simulated nodes over a clean link and over the impaired one (500 ms
// round trip, 5 % loss each way), with the wall time of each and the
// bytes that crossed the link per node (IP packets both ways, as the
// host's end of the link counts them; the simulated nodes fetch no
// image). Both links are of the same kind (veth, with tc netem for the
// impaired one, or the TUN wire where the kernel has no netem), so that
// their byte counts compare. The MQTT payloads of the site's topics are
// summed by kind too, from a second client of the site on the host (its
// traffic does not cross the link). BM_BENCH_WAN_STEP (30s) and
// BM_BENCH_WAN_BOOT (20s) are the simulated in-band step and ramdisk boot
// durations: shorter than real ones (erasing a disk, writing an image or
// booting a server takes minutes), but long enough that the ratio
// measures the design, not the round trips every cycle needs (with 2 s
// steps the clean cycle is 15 s, and its four verbs alone need four
// round trips, 2 s of a 500 ms link: more than 10 %). Not part of make
// test: it runs only with BM_BENCH_WAN=1.
func TestWANBench(t *testing.T) {
	if os.Getenv("BM_BENCH_WAN") != "1" {
		t.Skip("the WAN benchmark runs with BM_BENCH_WAN=1 (make bench-wan)")
	}
	nodes := 50
	if v, err := strconv.Atoi(os.Getenv("BM_BENCH_WAN_NODES")); err == nil && v > 0 {
		nodes = v
	}
	step, boot := "30s", "20s"
	if v := os.Getenv("BM_BENCH_WAN_STEP"); v != "" {
		step = v
	}
	if v := os.Getenv("BM_BENCH_WAN_BOOT"); v != "" {
		boot = v
	}
	needWAN(t)
	netem := netemWorks(t)
	type result struct {
		wall  time.Duration
		bytes int64
		how   string
		kinds map[string]*[2]int64 // kind → messages, bytes (as JSON)
		wire  map[string]*[2]int64 // "bundle" or "message" → publishes, payload bytes
	}
	// BM_BENCH_WAN_PLANS=0 sends every step's command alone (serve
	// --edge-plans=false), to compare with plans at the edge.
	mc := fsm.Config{WaitTimeout: 10 * time.Minute, CommandTimeout: 10 * time.Minute, ResendInterval: 5 * time.Second}
	plans := os.Getenv("BM_BENCH_WAN_PLANS") != "0"
	if !plans {
		mc.SitePlans = func(string) bool { return false }
	}
	cycle := func(t *testing.T, w *wanNet) result {
		s := startWANSite(t, w, mc,
			"--simulate", fmt.Sprint(nodes), "--step-duration", step, "--heartbeat", "5s", "--boot-delay", boot,
			"--bmc-delay", "50ms", "--resend-interval", "5s")
		ids := createNodes(t, s.cl, nodes)
		for _, id := range ids {
			s.cl.Do("PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "add", "path": "/instance_info/image_source", "value": "http://127.0.0.1:1/img"}}, nil)
		}
		r := result{how: "veth", kinds: map[string]*[2]int64{}, wire: map[string]*[2]int64{}}
		var mu sync.Mutex
		counting := false
		// The site's retained presence comes once the observer's
		// subscription is in place: the connection has settled then.
		settled := make(chan struct{})
		var settleOnce sync.Once
		obs, err := mqttlink.Dial(context.Background(), mqttlink.Config{URL: s.creds.BrokerURL, ClientID: "edge-site1.wanbench",
			Username: s.creds.Username, Password: s.creds.Password, CleanStart: true,
			Subscriptions: []string{protocol.TopicPrefix + "/site/site1/#"}, Logger: slog.New(slog.DiscardHandler),
			Handler: func(topic string, payload []byte) {
				if topic == protocol.SitePresenceTopic("site1") {
					settleOnce.Do(func() { close(settled) })
				}
				dir := "from site: "
				if strings.HasSuffix(topic, "/cmd") {
					dir = "to site: "
				}
				count := func(m map[string]*[2]int64, key string, n int) {
					k := m[key]
					if k == nil {
						k = &[2]int64{}
						m[key] = k
					}
					k[0]++
					k[1] += int64(n)
				}
				recs := []protocol.BundleRecord{{Topic: topic, Payload: payload}}
				wire := "message"
				if protocol.IsBundle(payload) {
					var err error
					if recs, err = protocol.DecodeBundle("site1", payload); err != nil {
						t.Errorf("a bundle on %s does not decode: %v", topic, err)
						return
					}
					wire = "bundle"
				}
				mu.Lock()
				defer mu.Unlock()
				if !counting {
					return
				}
				count(r.wire, dir+wire, len(payload))
				for _, rec := range recs {
					var m struct {
						Kind   string `json:"kind"`
						Action string `json:"action"`
					}
					_ = json.Unmarshal(rec.Payload, &m)
					key := m.Kind
					if m.Action != "" {
						key += " " + m.Action
					}
					count(r.kinds, dir+key, len(rec.Payload))
				}
			}})
		if err != nil {
			t.Fatal(err)
		}
		defer obs.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := obs.AwaitUp(ctx); err != nil {
			t.Fatal(err)
		}
		// Let the connection settle (subscriptions, the retained
		// presence) before counting.
		select {
		case <-settled:
		case <-ctx.Done():
			t.Fatal("the observer got no retained presence of site1 within 10 s")
		}
		mu.Lock()
		counting = true
		mu.Unlock()
		b0, start := w.Bytes(), time.Now()
		s.verbAll(t, ids, "manage", "manageable", nil, 15*time.Minute)
		s.verbAll(t, ids, "provide", "available", nil, 15*time.Minute)
		s.verbAll(t, ids, "active", "active", nil, 15*time.Minute)
		s.verbAll(t, ids, "deleted", "available", nil, 15*time.Minute)
		r.wall, r.bytes = time.Since(start), w.Bytes()-b0
		mu.Lock()
		counting = false
		mu.Unlock()
		if w.wire != nil {
			r.how = "TUN wire"
		} else if w.netem {
			r.how = "veth + tc netem"
		}
		return r
	}
	var clean, impaired result
	t.Run("clean", func(t *testing.T) {
		kind := wanWire
		if netem {
			kind = wanVeth
		}
		clean = cycle(t, newWAN(t, kind))
	})
	// BM_BENCH_WAN_DELAY (one way, 250ms) and BM_BENCH_WAN_LOSS (each
	// way, 0.05) change the impaired link, to see what each costs.
	delay, loss := 250*time.Millisecond, 0.05
	if v, err := time.ParseDuration(os.Getenv("BM_BENCH_WAN_DELAY")); err == nil {
		delay = v
	}
	if v, err := strconv.ParseFloat(os.Getenv("BM_BENCH_WAN_LOSS"), 64); err == nil {
		loss = v
	}
	t.Run("impaired", func(t *testing.T) { impaired = cycle(t, newImpairedWAN(t, delay, loss)) })
	if t.Failed() {
		return
	}
	kib := func(b int64) float64 { return float64(b) / 1024 }
	per := func(r result) float64 { return kib(r.bytes) / float64(nodes) }
	fmt.Printf("bench-wan: %d nodes, full cycle (manage, provide, deploy, undeploy), in-band steps %s, ramdisk boot %s, plans at the edge %v (BM_BENCH_WAN_PLANS)\n", nodes, step, boot, plans)
	fmt.Printf("  clean link (%s): %6.1f s, %7.1f KiB over the link, %5.1f KiB per node\n", clean.how, clean.wall.Seconds(), kib(clean.bytes), per(clean))
	fmt.Printf("  impaired (%s, %v RTT, %g %% loss each way): %6.1f s, %7.1f KiB over the link, %5.1f KiB per node\n", impaired.how, 2*delay, loss*100, impaired.wall.Seconds(), kib(impaired.bytes), per(impaired))
	fmt.Printf("  impaired / clean time: %.2f× (target ≤ 1.1×); WAN per node per cycle: %.1f / %.1f KiB (target ≤ 10 KiB)\n",
		impaired.wall.Seconds()/clean.wall.Seconds(), per(clean), per(impaired))
	table := func(m map[string]*[2]int64) {
		keys := make([]string, 0, len(m))
		var total int64
		for k, v := range m {
			keys = append(keys, k)
			total += v[1]
		}
		sort.Slice(keys, func(i, j int) bool { return m[keys[i]][1] > m[keys[j]][1] })
		for _, k := range keys {
			v := m[k]
			fmt.Printf("    %-40s %6.1f %8.0f B\n", k, float64(v[0])/float64(nodes), float64(v[1])/float64(nodes))
		}
		fmt.Printf("    %-40s %6s %8.0f B (%.1f KiB)\n", "total", "", float64(total)/float64(nodes), kib(total)/float64(nodes))
	}
	// Each command the site gets is a turn it waits for: a round trip
	// of the WAN (acks and welcomes answer what the site sent).
	rounds := func(r result) float64 {
		var n int64
		for k, v := range r.kinds {
			if strings.HasPrefix(k, "to site: command") {
				n += v[0]
			}
		}
		return float64(n) / float64(nodes)
	}
	fmt.Printf("  commands to the site per node per cycle (each one a WAN round trip the site waits for): %.1f clean, %.1f impaired\n", rounds(clean), rounds(impaired))
	// No design crosses the impaired link in fewer round trips than the
	// commands the site waits for: that is the floor of what the link adds.
	floor := time.Duration(rounds(clean) * float64(2*delay))
	fmt.Printf("  the impaired link added %.1f s to the cycle; its floor is %.1f commands × %v round trip = %.1f s, an impaired / clean floor of %.2f×\n",
		(impaired.wall - clean.wall).Seconds(), rounds(clean), 2*delay, floor.Seconds(), (clean.wall+floor).Seconds()/clean.wall.Seconds())
	fmt.Printf("  MQTT publishes per node per cycle on the clean link (publishes, payload bytes; MQTT, TCP and IP headers not included):\n")
	table(clean.wire)
	fmt.Printf("  the messages in them, by kind (messages, bytes as JSON before bundling and compression):\n")
	table(clean.kinds)
}
