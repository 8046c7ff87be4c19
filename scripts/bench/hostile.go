package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/scripts/internal/loadrig"
)

// The hostile requests (issue 17): while the cycle runs, one client sends,
// over and over, a JSON Patch at the coordinator's cap on operations
// (api.MaxPatchOps), once with values that fit the node's field cap and
// once with values that make the patch as large as the body cap allows
// (refused after it was applied, 400), and a manual clean at the cap on
// steps (api.MaxStepsPerRequest). They go to nodes of a site of their own,
// with its own simulated edge agent, so that the cycle's counts (by site)
// do not see them. The report gives the longest single hold of the
// engine loop (bmedge_engine_loop_hold_max_seconds): what any request or
// agent message may have waited behind one other request.
const (
	hostileSite     = "bench-hostile"
	hostilePatchOps = 1000 // api.MaxPatchOps
	hostileSteps    = 100  // api.MaxStepsPerRequest
	hostilePause    = 100 * time.Millisecond
)

type hostileResult struct {
	rounds    int
	codes     map[string]int // "PATCH fits 200" → answers
	fitBytes  int
	bigBytes  int
	maxHold   time.Duration
	holds     int
	holdsOver map[float64]int // holds longer than le seconds
}

// hostilePatch is a patch of hostilePatchOps "add /extra/hNNNN" with
// values of size bytes.
func hostilePatch(size int) []map[string]any {
	v := strings.Repeat("x", size)
	ops := make([]map[string]any, hostilePatchOps)
	for i := range ops {
		ops[i] = map[string]any{"op": "add", "path": fmt.Sprintf("/extra/h%04d", i), "value": v}
	}
	return ops
}

// startHostile sets up the hostile site and its nodes and starts sending;
// stop ends the sending and returns what was sent and answered.
func (b *bench) startHostile(ctx context.Context) (stop func() (*hostileResult, error), err error) {
	var c agent.Credentials
	if err := b.api.Do(ctx, "POST", "/v1/sites", map[string]string{"name": hostileSite}, &c); err != nil {
		return nil, fmt.Errorf("register the hostile site: %w", err)
	}
	actx, acancel := context.WithCancel(context.Background())
	a := agent.New(agent.Config{Site: c.Site, BrokerURL: c.BrokerURL, Username: c.Username, Password: c.Password,
		Sim: agent.SimOptions{Nodes: 2, Heartbeat: 30 * time.Second}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	agentDone := make(chan error, 1)
	go func() { agentDone <- a.Run(actx) }()
	stopAgent := func() {
		acancel()
		select {
		case <-agentDone:
		case <-time.After(10 * time.Second):
		}
	}
	wctx, wcancel := context.WithTimeout(ctx, 15*time.Second)
	err = a.AwaitUp(wctx)
	wcancel()
	if err != nil {
		stopAgent()
		return nil, fmt.Errorf("MQTT link of the hostile site's edge agent: %w", err)
	}
	var patchNode, cleanNode struct {
		UUID string `json:"uuid"`
	}
	for _, x := range []struct {
		name string
		out  any
	}{{"bench-hostile-patch", &patchNode}, {"bench-hostile-clean", &cleanNode}} {
		if err := b.api.Do(ctx, "POST", "/v1/nodes", map[string]any{"name": x.name, "driver": "fake", "conductor_group": hostileSite}, x.out); err != nil {
			stopAgent()
			return nil, fmt.Errorf("create %s: %w", x.name, err)
		}
	}
	if err := b.api.Do(ctx, "PUT", "/v1/nodes/"+cleanNode.UUID+"/states/provision", map[string]any{"target": "manage"}, nil); err != nil {
		stopAgent()
		return nil, fmt.Errorf("manage bench-hostile-clean: %w", err)
	}
	if err := b.awaitNode(ctx, cleanNode.UUID, "manageable"); err != nil {
		stopAgent()
		return nil, err
	}
	steps := make([]map[string]any, hostileSteps)
	for i := range steps {
		steps[i] = map[string]any{"interface": "management", "step": "fake_reset_bmc", "args": map[string]any{}}
	}
	clean := map[string]any{"target": "clean", "clean_steps": steps}
	fits, big := hostilePatch(40), hostilePatch(990)
	r := &hostileResult{codes: map[string]int{}}
	r.fitBytes, r.bigBytes = jsonSize(fits), jsonSize(big)
	var mu sync.Mutex
	answer := func(ctx context.Context, what string, err error) {
		if ctx.Err() != nil {
			return // cut short by the stop: not an answer
		}
		code := "2xx"
		var he *loadrig.HTTPError
		switch {
		case err == nil:
		case errors.As(err, &he):
			code = fmt.Sprint(he.Code)
		default:
			code = "error"
		}
		mu.Lock()
		r.codes[what+" "+code]++
		mu.Unlock()
	}
	hctx, hcancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for hctx.Err() == nil {
			answer(hctx, "PATCH fits", b.api.Do(hctx, "PATCH", "/v1/nodes/"+patchNode.UUID, fits, nil))
			answer(hctx, "PATCH too large", b.api.Do(hctx, "PATCH", "/v1/nodes/"+patchNode.UUID, big, nil))
			answer(hctx, "clean", b.api.Do(hctx, "PUT", "/v1/nodes/"+cleanNode.UUID+"/states/provision", clean, nil))
			mu.Lock()
			r.rounds++
			mu.Unlock()
			select {
			case <-hctx.Done():
			case <-time.After(hostilePause):
			}
		}
	}()
	return func() (*hostileResult, error) {
		hcancel()
		<-done
		defer stopAgent()
		// The hostile nodes go, so that the API measurements after the
		// cycle list only the cycle's nodes.
		if err := b.awaitNode(ctx, cleanNode.UUID, "manageable"); err != nil {
			return r, err
		}
		for _, id := range []string{patchNode.UUID, cleanNode.UUID} {
			if err := loadrig.Retrying(ctx, func() error { return b.api.Do(ctx, "DELETE", "/v1/nodes/"+id, nil, nil) }); err != nil {
				return r, fmt.Errorf("delete hostile node %s: %w", id, err)
			}
		}
		s, err := b.scrape(ctx, b.api)
		if err != nil {
			return r, fmt.Errorf("read the coordinator's metrics: %w", err)
		}
		r.maxHold = time.Duration(s["bmedge_engine_loop_hold_max_seconds"] * float64(time.Second))
		r.holds = int(s["bmedge_engine_loop_hold_seconds_count"])
		r.holdsOver = map[float64]int{}
		for k, v := range s {
			if le, ok := strings.CutPrefix(k, `bmedge_engine_loop_hold_seconds_bucket{le="`); ok {
				var x float64
				if _, err := fmt.Sscan(strings.TrimSuffix(le, `"}`), &x); err == nil {
					r.holdsOver[x] = r.holds - int(v)
				}
			}
		}
		return r, nil
	}, nil
}

// awaitNode polls a node until it is in state, for up to two minutes.
func (b *bench) awaitNode(ctx context.Context, id, state string) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var n struct {
			State  string  `json:"provision_state"`
			Target *string `json:"target_provision_state"`
		}
		if err := b.api.Do(ctx, "GET", "/v1/nodes/"+id, nil, &n); err != nil {
			return err
		}
		if n.State == state && (n.Target == nil || *n.Target == "") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("hostile node %s is %s after two minutes, want %s", id, n.State, state)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func jsonSize(v any) int {
	b, _ := json.Marshal(v)
	return len(b)
}

// reportHostile prints the hostile requests' line.
func reportHostile(r *hostileResult) {
	keys := make([]string, 0, len(r.codes))
	for k := range r.codes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s ×%d", k, r.codes[k]))
	}
	over := ""
	for _, want := range []float64{0.01024, 0.04096} {
		for le, n := range r.holdsOver {
			if le > want*0.999 && le < want*1.001 {
				over += fmt.Sprintf(", %d over %.2f ms", n, le*1000)
			}
		}
	}
	fmt.Printf("hostile requests during the cycle: %d rounds of a PATCH at the %d-operation cap (%d KiB, applied; %d KiB, refused as over the field cap after applying) and a manual clean at the %d-step cap: %s\n",
		r.rounds, hostilePatchOps, r.fitBytes>>10, r.bigBytes>>10, hostileSteps, strings.Join(parts, ", "))
	fmt.Printf("longest single hold of the engine loop: %s ms (bmedge_engine_loop_hold_max_seconds; %d requests held it%s)\n",
		ms(r.maxHold), r.holds, over)
}
