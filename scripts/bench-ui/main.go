// Command bench-ui measures the coordinator's web view with many
// simulated nodes: a coordinator process (Badger, embedded broker) with
// -sites edge agents in this process sharing -nodes simulated nodes,
// brought to a mix of states (manageable, available, clean failed, some
// in maintenance). It then times
//
//   - the server: GET of the fleet page, the first page of the node list,
//     the node list filtered to the failed nodes and its last page, and a
//     site's page (-samples times each, one after the other, whole body
//     read);
//
//   - the browser (Debian's headless Chromium through chromedriver, when
//     both are installed): DOMContentLoaded and load of the fleet page and
//     of the first page of the node list, from the navigation's start;
//
//   - the live update: from a node's change in the coordinator (its
//     updated_at, stamped by the engine as it applies the change) to the
//     event on an open /ui/events stream (a Go client), and to the new
//     value in the open node list page (in Chromium, seen by a
//     MutationObserver), at rest and while -churn-clients other clients
//     change other nodes as fast as the API takes it.
//
//     go run ./scripts/bench-ui -nodes 10000
//     make bench-ui
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/scripts/internal/loadrig"
)

type options struct {
	nodes, sites, samples, churn, concurrency int
	browser                                   bool
	keep                                      bool
	coordBin                                  string
}

func main() {
	var o options
	flag.IntVar(&o.nodes, "nodes", 10000, "simulated nodes")
	flag.IntVar(&o.sites, "sites", 10, "sites (each an edge agent in this process) the nodes are spread over")
	flag.IntVar(&o.samples, "samples", 20, "measurements of each page and of each kind of live update")
	flag.IntVar(&o.churn, "churn-clients", 8, "clients that change other nodes (maintenance on and off) during the second live-update measurement; 0 skips it")
	flag.IntVar(&o.concurrency, "concurrency", 16, "concurrent HTTP clients that create the nodes and send their verbs")
	flag.BoolVar(&o.browser, "browser", true, "measure in Debian's headless Chromium too (packages chromium and chromium-driver; skipped with a message when missing)")
	flag.BoolVar(&o.keep, "keep", false, "keep the temp folder (data dir, coordinator log)")
	flag.StringVar(&o.coordBin, "coordinator", "", "coordinator binary to run (default: build ./coordinator/cmd/coordinator into the temp folder)")
	flag.Parse()
	if o.nodes < 100 || o.sites < 1 || o.sites > o.nodes || o.samples < 1 || o.churn < 0 || o.concurrency < 1 {
		fmt.Fprintln(os.Stderr, "bench-ui: -nodes at least 100, -sites 1 to -nodes, -samples and -concurrency at least 1, -churn-clients 0 or more")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench-ui: FAILED: %v\n", err)
		os.Exit(1)
	}
}

type bench struct {
	o   options
	co  *loadrig.Coord
	api *loadrig.API
	ids []string
	// first is the nodes of the node list's first page; watched the
	// first of them, whose changes the live-update delay is measured on.
	first   map[string]bool
	watched string
	hc      *http.Client
	site    string
}

func run(ctx context.Context, o options) (err error) {
	tmp, err := os.MkdirTemp("", "bench-ui-")
	if err != nil {
		return err
	}
	var co *loadrig.Coord
	defer func() { loadrig.Finish("bench-ui", co, tmp, o.keep, err != nil && ctx.Err() == nil) }()
	bin := o.coordBin
	if bin == "" {
		if bin, err = loadrig.BuildCoordinator(ctx, tmp); err != nil {
			return err
		}
	}
	if co, err = loadrig.StartProcess(ctx, bin, tmp, loadrig.Settings{Tick: time.Second}); err != nil {
		return err
	}
	b := &bench{o: o, co: co, api: loadrig.NewAPI(co.APIURL, o.concurrency), hc: &http.Client{Timeout: time.Minute}}
	if err := b.setup(ctx, tmp); err != nil {
		return err
	}
	fmt.Printf("\nserver: whole page read, %d requests each, one at a time (ms)\n", o.samples)
	fmt.Printf("%-36s %8s %8s %8s %8s %9s\n", "page", "p50", "p90", "max", "KiB", "rows")
	for _, p := range []string{"/ui/", "/ui/nodes", "/ui/nodes?state=failed", fmt.Sprintf("/ui/nodes?page=%d", (o.nodes+49)/50), "/ui/sites/" + b.site} {
		if err := b.serverTime(ctx, p); err != nil {
			return err
		}
	}
	var wd *webDriver
	if o.browser {
		if wd, err = startChrome(tmp); err != nil {
			fmt.Printf("\nbrowser: skipped: %v\n", err)
			wd, err = nil, nil
		} else {
			defer wd.close()
			fmt.Printf("\nbrowser (%s): from the navigation's start, %d loads each (ms)\n", wd.version, o.samples)
			fmt.Printf("%-36s %8s %8s %8s %8s %8s %8s\n", "page", "DCL p50", "DCL p90", "DCL max", "load p50", "load p90", "load max")
			for _, p := range []string{"/ui/", "/ui/nodes"} {
				if err := b.browserTime(wd, p); err != nil {
					return err
				}
			}
		}
	}
	fmt.Printf("\nlive update: a node's updated_at (the engine applying the change) → (ms), %d changes each\n", o.samples)
	fmt.Printf("%-44s %8s %8s %8s\n", "", "p50", "p90", "max")
	if err := b.liveDelay(ctx, wd, "at rest"); err != nil {
		return err
	}
	if o.churn > 0 {
		var changes atomic.Int64
		cctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		// Other nodes than those of the node list's first page.
		var pool []string
		for _, id := range b.ids {
			if !b.first[id] {
				pool = append(pool, id)
			}
		}
		for c := 0; c < o.churn; c++ {
			wg.Add(1)
			go func(c int) {
				defer wg.Done()
				for i := c; cctx.Err() == nil; i += o.churn {
					id := pool[i%len(pool)]
					method := "PUT"
					if (i/len(pool))%2 == 1 {
						method = "DELETE"
					}
					var body any
					if method == "PUT" {
						body = map[string]string{"reason": "bench-ui churn"}
					}
					if b.api.Do(cctx, method, "/v1/nodes/"+id+"/maintenance", body, nil) == nil {
						changes.Add(1)
					}
				}
			}(c)
		}
		t0 := time.Now()
		err := b.liveDelay(ctx, wd, fmt.Sprintf("under churn (%d clients)", o.churn))
		el := time.Since(t0)
		cancel()
		wg.Wait()
		if err != nil {
			return err
		}
		fmt.Printf("churn: %d other changes in %.1f s (%.0f/s), each one event on every open stream\n", changes.Load(), el.Seconds(), float64(changes.Load())/el.Seconds())
	}
	fmt.Printf("\ncoordinator peak RSS %d MiB\n", loadrig.ProcStatusKB(co.PID, "VmHWM")/1024)
	return nil
}

// setup registers the sites, starts their agents, creates the nodes and
// brings them to a mix of states.
func (b *bench) setup(ctx context.Context, tmp string) error {
	o := b.o
	t0 := time.Now()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	actx, acancel := context.WithCancel(context.Background())
	go func() { <-ctx.Done(); acancel() }()
	var sites []string
	for i := 0; i < o.sites; i++ {
		name := fmt.Sprintf("site-%03d", i)
		sites = append(sites, name)
		var c agent.Credentials
		if err := b.api.Do(ctx, "POST", "/v1/sites", map[string]string{"name": name}, &c); err != nil {
			return fmt.Errorf("register site %s: %w", name, err)
		}
		per := o.nodes / o.sites
		if i < o.nodes%o.sites {
			per++
		}
		a := agent.New(agent.Config{Site: c.Site, BrokerURL: c.BrokerURL, Username: c.Username, Password: c.Password, Log: quiet,
			Sim: agent.SimOptions{Nodes: per, Heartbeat: 30 * time.Second}})
		go func() { _ = a.Run(actx) }()
		wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
		err := a.AwaitUp(wctx)
		wcancel()
		if err != nil {
			return fmt.Errorf("edge agent of %s: %w", name, err)
		}
	}
	b.site = sites[0]
	b.ids = make([]string, o.nodes)
	err := loadrig.ForEach(ctx, o.concurrency, o.nodes, func(ctx context.Context, i int) error {
		info := map[string]any{}
		// One node in 100 fails its cleaning: the failed counts and
		// last_error have something to show.
		if i%100 == 99 {
			info["fake_fail_step"] = "erase_devices"
		}
		body := map[string]any{"name": fmt.Sprintf("node-%05d", i), "driver": "fake", "conductor_group": sites[i%o.sites], "driver_info": info}
		var n struct {
			UUID string `json:"uuid"`
		}
		err := loadrig.Retrying(ctx, func() error { return b.api.Do(ctx, "POST", "/v1/nodes", body, &n) })
		b.ids[i] = n.UUID
		return err
	})
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	verb := func(ids []int, target string) error {
		return loadrig.ForEach(ctx, o.concurrency, len(ids), func(ctx context.Context, k int) error {
			return loadrig.Retrying(ctx, func() error {
				return b.api.Do(ctx, "PUT", "/v1/nodes/"+b.ids[ids[k]]+"/states/provision", map[string]string{"target": target}, nil)
			})
		})
	}
	all := make([]int, o.nodes)
	var provide []int
	for i := range all {
		all[i] = i
		if i%10 < 3 || i%100 == 99 {
			provide = append(provide, i)
		}
	}
	if err := verb(all, "manage"); err != nil {
		return fmt.Errorf("manage: %w", err)
	}
	if err := b.awaitRest(ctx); err != nil {
		return err
	}
	if err := verb(provide, "provide"); err != nil {
		return fmt.Errorf("provide: %w", err)
	}
	if err := b.awaitRest(ctx); err != nil {
		return err
	}
	// One node in 50 in maintenance.
	for i := 7; i < o.nodes; i += 50 {
		if err := b.api.Do(ctx, "PUT", "/v1/nodes/"+b.ids[i]+"/maintenance", map[string]string{"reason": "bench-ui"}, nil); err != nil {
			return err
		}
	}
	h, err := b.histogram(ctx)
	if err != nil {
		return err
	}
	// The nodes the node list's first page shows (in creation order,
	// which concurrent creates do not keep in name order).
	resp, err := b.hc.Get(b.co.APIURL + "/ui/nodes")
	if err != nil {
		return err
	}
	page, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	b.first = map[string]bool{}
	for _, part := range strings.Split(string(page), `<tr data-uuid="`)[1:] {
		id, _, _ := strings.Cut(part, `"`)
		if b.watched == "" {
			b.watched = id
		}
		b.first[id] = true
	}
	if b.watched == "" {
		return errors.New("the node list's first page shows no node")
	}
	fmt.Printf("bench-ui: %d nodes over %d sites (%s) ready in %.1f s; coordinator pid %d (separate process, no authentication)\n",
		o.nodes, o.sites, h, time.Since(t0).Seconds(), b.co.PID)
	return nil
}

type listed struct {
	Nodes []struct {
		UUID        string `json:"uuid"`
		State       string `json:"provision_state"`
		Target      string `json:"target_provision_state"`
		Reservation string `json:"reservation"`
	} `json:"nodes"`
}

func (b *bench) list(ctx context.Context) (listed, error) {
	var all listed
	marker := ""
	for {
		var l listed
		q := "/v1/nodes?fields=uuid,provision_state,target_provision_state,reservation&limit=1000"
		if marker != "" {
			q += "&marker=" + marker
		}
		if err := b.api.Do(ctx, "GET", q, nil, &l); err != nil {
			return all, err
		}
		all.Nodes = append(all.Nodes, l.Nodes...)
		if len(l.Nodes) < 1000 {
			return all, nil
		}
		marker = l.Nodes[len(l.Nodes)-1].UUID
	}
}

func (b *bench) histogram(ctx context.Context) (string, error) {
	l, err := b.list(ctx)
	if err != nil {
		return "", err
	}
	h := map[string]int{}
	for _, n := range l.Nodes {
		h[n.State]++
	}
	var keys []string
	for k := range h {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, h[k]))
	}
	return strings.Join(parts, ", "), nil
}

// awaitRest waits until no node has a target or a lock.
func (b *bench) awaitRest(ctx context.Context) error {
	deadline := time.Now().Add(10 * time.Minute)
	for {
		l, err := b.list(ctx)
		if err != nil {
			return err
		}
		busy := 0
		for _, n := range l.Nodes {
			if n.Reservation != "" || (n.Target != "" && !strings.HasSuffix(n.State, "failed")) {
				busy++
			}
		}
		if busy == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d nodes still busy after 10 minutes", busy)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func quantiles(d []time.Duration) (p50, p90, mx float64) {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	ms := func(x time.Duration) float64 { return float64(x.Microseconds()) / 1000 }
	return ms(d[len(d)/2]), ms(d[min(len(d)-1, len(d)*9/10)]), ms(d[len(d)-1])
}

// serverTime GETs a page samples times (after one unmeasured request)
// and reads the whole body each time.
func (b *bench) serverTime(ctx context.Context, path string) error {
	var d []time.Duration
	var size, rows int
	for i := -1; i < b.o.samples; i++ {
		req, _ := http.NewRequestWithContext(ctx, "GET", b.co.APIURL+path, nil)
		t0 := time.Now()
		resp, err := b.hc.Do(req)
		if err != nil {
			return err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		el := time.Since(t0)
		if err != nil || resp.StatusCode != 200 {
			return fmt.Errorf("GET %s: %d %v", path, resp.StatusCode, err)
		}
		if i >= 0 {
			d = append(d, el)
		}
		size, rows = len(body), strings.Count(string(body), "<tr data-uuid=")
	}
	p50, p90, mx := quantiles(d)
	fmt.Printf("%-36s %8.1f %8.1f %8.1f %8.1f %9d\n", path, p50, p90, mx, float64(size)/1024, rows)
	return nil
}

// browserTime loads a page in Chromium samples times (after one
// unmeasured load) and reads its navigation timing.
func (b *bench) browserTime(wd *webDriver, path string) error {
	var dcl, load []time.Duration
	for i := -1; i < b.o.samples; i++ {
		if err := wd.open(b.co.APIURL + path); err != nil {
			return err
		}
		var t struct {
			DCL  float64 `json:"dcl"`
			Load float64 `json:"load"`
		}
		// load ends after the script ran; the page is complete then.
		s, err := wd.js(`var n = performance.getEntriesByType("navigation")[0];
			return JSON.stringify({dcl: n.domContentLoadedEventEnd - n.startTime, load: n.loadEventEnd - n.startTime})`)
		if err != nil {
			return err
		}
		if err := json.Unmarshal([]byte(s), &t); err != nil {
			return fmt.Errorf("navigation timing of %s: %q", path, s)
		}
		if i >= 0 {
			dcl = append(dcl, time.Duration(t.DCL*float64(time.Millisecond)))
			load = append(load, time.Duration(t.Load*float64(time.Millisecond)))
		}
	}
	if path == "/ui/" {
		if s, _ := wd.js(`return document.getElementById("total-nodes").textContent`); s != fmt.Sprint(b.o.nodes) {
			return fmt.Errorf("the fleet page in Chromium shows %q nodes, not %d", s, b.o.nodes)
		}
	}
	a50, a90, amx := quantiles(dcl)
	l50, l90, lmx := quantiles(load)
	fmt.Printf("%-36s %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f\n", path, a50, a90, amx, l50, l90, lmx)
	return nil
}

// sseEvent is what the bench reads of a node event.
type sseEvent struct {
	at  time.Time
	sum struct {
		UUID        string    `json:"uuid"`
		Maintenance bool      `json:"maintenance"`
		Updated     time.Time `json:"updated_at"`
	}
}

// liveDelay changes the first node's maintenance samples times, one
// change at a time, and measures the delay from its updated_at to the
// event on a Go events stream and (with wd) to the value in the node
// list page open in Chromium.
func (b *bench) liveDelay(ctx context.Context, wd *webDriver, label string) error {
	id := b.watched
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, _ := http.NewRequestWithContext(sctx, "GET", b.co.APIURL+"/ui/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("GET /ui/events: %d", resp.StatusCode)
	}
	events := make(chan sseEvent, 4096)
	var resyncs atomic.Int64
	go func() {
		defer close(events)
		rd := bufio.NewReader(resp.Body)
		var name string
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimRight(line, "\n")
			switch {
			case strings.HasPrefix(line, "event: "):
				name = line[7:]
			case strings.HasPrefix(line, "data: ") && name == "resync":
				// The stream fell behind and dropped changes: read the
				// node, as the page reads its live part again.
				resyncs.Add(1)
				ev := sseEvent{}
				if b.api.Do(sctx, "GET", "/ui/api/nodes/"+id, nil, &ev.sum) == nil {
					ev.at = time.Now()
					select {
					case events <- ev:
					default:
					}
				}
			case strings.HasPrefix(line, "data: ") && name == "node":
				ev := sseEvent{at: time.Now()}
				if json.Unmarshal([]byte(line[6:]), &ev.sum) == nil && ev.sum.UUID == id {
					select {
					case events <- ev:
					default:
					}
				}
			}
		}
	}()
	if wd != nil {
		if err := wd.open(b.co.APIURL + "/ui/nodes"); err != nil {
			return err
		}
		if _, err := wd.js(`window.marks = []; var last = null, id = arguments[0];
			var note = function () {
				var el = document.querySelector('tr[data-uuid="' + id + '"] [data-f=maintenance]');
				var v = el ? el.textContent : "";
				if (v !== last) { last = v; window.marks.push([Date.now(), v]); }
			};
			note();
			new MutationObserver(note).observe(document.getElementById("live"), {subtree: true, childList: true, characterData: true});
			return ""`, id); err != nil {
			return err
		}
		for deadline := time.Now().Add(10 * time.Second); ; {
			if s, _ := wd.js(`return document.getElementById("live-status").textContent`); s == "live" {
				break
			}
			if time.Now().After(deadline) {
				return errors.New("the node list page in Chromium did not go live")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// The node starts out of maintenance.
	_ = b.api.Do(ctx, "DELETE", "/v1/nodes/"+id+"/maintenance", nil, nil)
	time.Sleep(700 * time.Millisecond)
	for len(events) > 0 {
		<-events
	}
	var toStream, toPage []time.Duration
	for i := 0; i < b.o.samples; i++ {
		on := i%2 == 0
		method, body := "DELETE", any(nil)
		if on {
			method, body = "PUT", map[string]string{"reason": "bench-ui"}
		}
		if err := b.api.Do(ctx, method, "/v1/nodes/"+id+"/maintenance", body, nil); err != nil {
			return err
		}
		var ev sseEvent
		timeout := time.After(10 * time.Second)
	wait:
		for {
			select {
			case e, ok := <-events:
				if !ok {
					return errors.New("the events stream ended")
				}
				if e.sum.Maintenance == on {
					ev = e
					break wait
				}
			case <-timeout:
				return fmt.Errorf("no event for maintenance %v of %s within 10 s", on, id)
			}
		}
		toStream = append(toStream, ev.at.Sub(ev.sum.Updated))
		if wd != nil {
			want := map[bool]string{true: "on", false: ""}[on]
			var at int64
			for deadline := time.Now().Add(10 * time.Second); at == 0; {
				s, err := wd.js(`var m = window.marks[window.marks.length - 1]; return JSON.stringify(m)`)
				if err != nil {
					return err
				}
				var m []any
				if json.Unmarshal([]byte(s), &m) == nil && len(m) == 2 && m[1] == want {
					at = int64(m[0].(float64))
					break
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("the page did not show maintenance %q for %s within 10 s (last mark %s)", want, id, s)
				}
				time.Sleep(10 * time.Millisecond)
			}
			toPage = append(toPage, time.UnixMilli(at).Sub(ev.sum.Updated))
		}
		// Changes apart, so that each is measured on its own.
		time.Sleep(100 * time.Millisecond)
	}
	p50, p90, mx := quantiles(toStream)
	fmt.Printf("%-44s %8.1f %8.1f %8.1f\n", "event on /ui/events, "+label, p50, p90, mx)
	if n := resyncs.Load(); n > 0 {
		fmt.Printf("  (the stream fell behind %d times: resync, the node read again)\n", n)
	}
	if wd != nil {
		p50, p90, mx = quantiles(toPage)
		fmt.Printf("%-44s %8.1f %8.1f %8.1f\n", "value in the open node list, "+label, p50, p90, mx)
	}
	return nil
}

// tmpDir is where chromedriver's profile goes.
func tmpDir(base, name string) string { return filepath.Join(base, name) }
