package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/scripts/internal/loadrig"
)

// apiResult holds the API measurements made after the cycle, every node
// resting in available.
type apiResult struct {
	listed     int   // nodes in one detail answer
	bytes      int64 // size of one detail answer
	detail1    []time.Duration
	detailN    []time.Duration
	detailWall time.Duration // the detailN requests, first sent → last answered
	manage     []time.Duration
	provide    []time.Duration
	provideRun time.Duration // provide: first PUT → every node available
	// load averages (1 min) of the machine before and after
	loadBefore, loadAfter string
	// the engine's side of the PUTs, from the coordinator's metrics
	manageEngine, provideEngine engineSide
}

// engineSide is what the coordinator's metrics say of a run of PUTs: the
// verbs' time in the engine (queued, applied, durably committed) and the
// group commits to Badger meanwhile.
type engineSide struct {
	verbs       int
	verbMean    time.Duration
	verbP95     time.Duration // upper bound: the histogram bucket holding p95
	commits     int
	commitMean  time.Duration
	commitTotal time.Duration
}

// promSamples are lines of Prometheus' text format: name{labels} → value.
type promSamples map[string]float64

func (b *bench) scrape(ctx context.Context, api *loadrig.API) (promSamples, error) {
	req, err := newGet(ctx, api.Base+"/metrics")
	if err != nil {
		return nil, err
	}
	resp, err := api.HC.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	out := promSamples{}
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "bmedge_verb_duration_seconds") && !strings.HasPrefix(line, "bmedge_store_commit") &&
			!strings.HasPrefix(line, "bmedge_engine_loop_hold") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(line[i+1:], &v); err == nil {
			out[line[:i]] = v
		}
	}
	return out, nil
}

// engineDelta is the engine's side of the verb's PUTs between two scrapes.
func engineDelta(before, after promSamples, verb string) engineSide {
	d := func(k string) float64 { return after[k] - before[k] }
	lbl := `{verb="` + verb + `"}`
	e := engineSide{verbs: int(d("bmedge_verb_duration_seconds_count" + lbl)), commits: int(d("bmedge_store_commit_duration_seconds_count"))}
	sec := func(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }
	if e.verbs > 0 {
		e.verbMean = sec(d("bmedge_verb_duration_seconds_sum"+lbl) / float64(e.verbs))
		type bucket struct {
			le    float64
			count float64
		}
		var bs []bucket
		prefix := `bmedge_verb_duration_seconds_bucket{verb="` + verb + `",le="`
		for k := range after {
			if le, ok := strings.CutPrefix(k, prefix); ok {
				var x float64
				if _, err := fmt.Sscan(strings.TrimSuffix(le, `"}`), &x); err == nil {
					bs = append(bs, bucket{x, d(k)})
				}
			}
		}
		sort.Slice(bs, func(i, j int) bool { return bs[i].le < bs[j].le })
		for _, x := range bs {
			if x.count >= 0.95*float64(e.verbs) {
				e.verbP95 = sec(x.le)
				break
			}
		}
	}
	if e.commits > 0 {
		e.commitTotal = sec(d("bmedge_store_commit_duration_seconds_sum"))
		e.commitMean = e.commitTotal / time.Duration(e.commits)
	}
	return e
}

// detailPath is the listing measured: Ironic's detailed node list, one
// page of 1000 nodes.
const detailPath = "/v1/nodes/detail?limit=1000"

// timed sends one request and returns its duration, from the request
// being sent to the answer's last byte read.
func timed(ctx context.Context, api *loadrig.API, method, path string, body any) (time.Duration, error) {
	t0 := time.Now()
	err := api.Do(ctx, method, path, body, nil)
	return time.Since(t0), err
}

// apiBench measures, with every node available:
//   - GET /v1/nodes/detail?limit=1000: o.detailReqs requests from one
//     client one after the other, then o.detailReqs requests from
//     o.apiClients concurrent clients (each request's own duration);
//   - provision PUTs from o.apiClients concurrent clients: manage on every
//     node (available → manageable, no command), then provide on every
//     node (manageable → cleaning: a commit and the first command each),
//     then a wait until every node is available again.
func (b *bench) apiBench(ctx context.Context) (*apiResult, error) {
	n := b.o.apiClients
	api := loadrig.NewAPI(b.co.APIURL, n)
	r := &apiResult{loadBefore: loadAvg()}
	var l listed
	if err := api.Do(ctx, "GET", detailPath, nil, &l); err != nil {
		return nil, fmt.Errorf("detail list: %w", err)
	}
	r.listed = len(l.Nodes)
	stopProfile, err := b.profileAPI("detail")
	if err != nil {
		return nil, err
	}
	if size, err := b.bodySize(ctx, api, detailPath); err == nil {
		r.bytes = size
	}
	fmt.Fprintf(os.Stderr, "bench: API: %d detail lists (%d nodes each) from 1 client, then from %d clients…\n", b.o.detailReqs, r.listed, n)
	for i := 0; i < b.o.detailReqs; i++ {
		d, err := timed(ctx, api, "GET", detailPath, nil)
		if err != nil {
			return nil, fmt.Errorf("detail list: %w", err)
		}
		r.detail1 = append(r.detail1, d)
	}
	var mu sync.Mutex
	collect := func(to *[]time.Duration, d time.Duration) {
		mu.Lock()
		*to = append(*to, d)
		mu.Unlock()
	}
	t0 := time.Now()
	err = loadrig.ForEach(ctx, n, b.o.detailReqs, func(ctx context.Context, i int) error {
		d, err := timed(ctx, api, "GET", detailPath, nil)
		if err != nil {
			return fmt.Errorf("detail list: %w", err)
		}
		collect(&r.detailN, d)
		return nil
	})
	if err != nil {
		return nil, err
	}
	r.detailWall = time.Since(t0)
	if err := stopProfile(); err != nil {
		return nil, err
	}
	put := func(target string, to *[]time.Duration) error {
		return loadrig.ForEach(ctx, n, len(b.nodes), func(ctx context.Context, i int) error {
			d, err := timed(ctx, api, "PUT", "/v1/nodes/"+b.nodes[i].uuid+"/states/provision", map[string]any{"target": target})
			if err != nil {
				return fmt.Errorf("%s on node %s: %w", target, b.nodes[i].uuid, err)
			}
			collect(to, d)
			return nil
		})
	}
	fmt.Fprintf(os.Stderr, "bench: API: manage and provide PUTs on %d nodes from %d clients…\n", len(b.nodes), n)
	if stopProfile, err = b.profileAPI("manage"); err != nil {
		return nil, err
	}
	m0, _ := b.scrape(ctx, api)
	if err := put("manage", &r.manage); err != nil {
		return nil, err
	}
	m1, _ := b.scrape(ctx, api)
	r.manageEngine = engineDelta(m0, m1, "manage")
	if err := stopProfile(); err != nil {
		return nil, err
	}
	if err := b.await(ctx, &phaseResult{}, fsm.Manageable, []fsm.State{fsm.Available}); err != nil {
		return nil, fmt.Errorf("manage: %w", err)
	}
	start := time.Now()
	if stopProfile, err = b.profileAPI("provide"); err != nil {
		return nil, err
	}
	m0, _ = b.scrape(ctx, api)
	if err := put("provide", &r.provide); err != nil {
		return nil, err
	}
	m1, _ = b.scrape(ctx, api)
	r.provideEngine = engineDelta(m0, m1, "provide")
	if err := stopProfile(); err != nil {
		return nil, err
	}
	if err := b.await(ctx, &phaseResult{}, fsm.Available, []fsm.State{fsm.Manageable, fsm.Cleaning, fsm.CleanWait}); err != nil {
		return nil, fmt.Errorf("provide: %w", err)
	}
	r.provideRun = time.Since(start)
	r.loadAfter = loadAvg()
	for _, d := range [][]time.Duration{r.detail1, r.detailN, r.manage, r.provide} {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	}
	return r, nil
}

// profileAPI starts, with -api-profile, CPU, mutex and block profiles of
// one API measurement (the coordinator runs in this process); the
// function it returns stops them and writes NAME.cpu.pprof,
// NAME.mutex.pprof and NAME.block.pprof.
func (b *bench) profileAPI(name string) (stop func() error, err error) {
	dir := b.o.apiProfile
	if dir == "" {
		return func() error { return nil }, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.Create(filepath.Join(dir, name+".cpu.pprof"))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	runtime.SetMutexProfileFraction(5)
	runtime.SetBlockProfileRate(int(100 * time.Microsecond))
	return func() error {
		pprof.StopCPUProfile()
		f.Close()
		for _, p := range []string{"mutex", "block"} {
			out, err := os.Create(filepath.Join(dir, name+"."+p+".pprof"))
			if err != nil {
				return err
			}
			err = pprof.Lookup(p).WriteTo(out, 0)
			out.Close()
			if err != nil {
				return err
			}
		}
		runtime.SetMutexProfileFraction(0)
		runtime.SetBlockProfileRate(0)
		return nil
	}, nil
}

// bodySize returns the size of one answer to GET path.
func (b *bench) bodySize(ctx context.Context, api *loadrig.API, path string) (int64, error) {
	req, err := newGet(ctx, api.Base+path)
	if err != nil {
		return 0, err
	}
	resp, err := api.HC.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return countBytes(resp.Body)
}

func (b *bench) reportAPI(r *apiResult) {
	c := b.o.apiClients
	fmt.Println()
	fmt.Printf("API with every node available (%d HTTP clients; each request timed from sending to the answer's last byte):\n", c)
	fmt.Printf("%-44s %7s %9s %9s %9s %9s\n", "request", "count", "p50 ms", "p95 ms", "p99 ms", "max ms")
	row := func(name string, d []time.Duration) {
		fmt.Printf("%-44s %7d %9s %9s %9s %9s\n", name, len(d), ms(pct(d, .5)), ms(pct(d, .95)), ms(pct(d, .99)), ms(pct(d, 1)))
	}
	row("GET "+detailPath+", 1 client", r.detail1)
	row(fmt.Sprintf("GET %s, %d clients", detailPath, c), r.detailN)
	row(fmt.Sprintf("PUT provision manage, %d clients", c), r.manage)
	row(fmt.Sprintf("PUT provision provide, %d clients", c), r.provide)
	all := append(append([]time.Duration{}, r.manage...), r.provide...)
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	row(fmt.Sprintf("PUT provision, both, %d clients", c), all)
	fmt.Printf("detail answer: %d nodes, %.1f KiB; %d clients: %d answers in %.2f s, %.2f ms of wall time per answer\n",
		r.listed, float64(r.bytes)/1024, c, len(r.detailN), r.detailWall.Seconds(), float64(r.detailWall)/float64(len(r.detailN))/float64(time.Millisecond))
	fmt.Printf("provide: every node available %.2f s after the first PUT\n", r.provideRun.Seconds())
	for _, x := range []struct {
		verb string
		e    engineSide
	}{{"manage", r.manageEngine}, {"provide", r.provideEngine}} {
		if x.e.verbs == 0 {
			continue
		}
		fmt.Printf("PUT %s in the engine (coordinator's metrics: queued, applied, durably committed): mean %s ms, p95 ≤ %s ms; %d group commits meanwhile, mean %s ms each\n",
			x.verb, ms(x.e.verbMean), ms(x.e.verbP95), x.e.commits, ms(x.e.commitMean))
	}
	fmt.Printf("machine load average (1 min): %s before the API measurements, %s after\n", r.loadBefore, r.loadAfter)
	// The detail list's time is one request's (p50 from one client) and,
	// with 32 clients, the wall time per answer: 32 requests at once on a
	// few cores each wait for the others, so their own p50 is about 32
	// times the time per answer, whatever the server does.
	perAnswer := r.detailWall / time.Duration(max(len(r.detailN), 1))
	ok := func(b bool) string { return map[bool]string{true: "ok", false: "MISSED"}[b] }
	fmt.Printf("targets: detail list ≤ 10 ms: %s (p50 %s ms from 1 client; %.2f ms of wall time per answer with %d clients); provision PUT p95 ≤ 10 ms with %d clients: %s (%s ms)\n",
		ok(pct(r.detail1, .5) <= 10*time.Millisecond && perAnswer <= 10*time.Millisecond), ms(pct(r.detail1, .5)), float64(perAnswer)/float64(time.Millisecond), c,
		c, ok(pct(all, .95) <= 10*time.Millisecond), ms(pct(all, .95)))
	if r.listed < 1000 {
		fmt.Printf("note: the detail answers held %d nodes, not 1000 (-nodes %d)\n", r.listed, b.o.nodes)
	}
}

// loadAvg is the machine's 1-minute load average ("?" if unknown).
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}

func newGet(ctx context.Context, url string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-OpenStack-Ironic-API-Version", "latest")
	return req, nil
}

func countBytes(r io.Reader) (int64, error) { return io.Copy(io.Discard, r) }
