package systest

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/coordinator/fsm"
)

// TestWANCutMidPlan: plans at the edge across a WAN outage. Six nodes
// clean with six in-band steps of 15 s (automated cleaning with four
// more steps enabled by priority), handed to the site as one plan; the
// link is cut for 3 minutes once every node has finished its first step.
// The site goes on by itself: when the link returns, every node's steps
// are done, the results are applied in order and each node is available
// within one heartbeat-summary interval of the site's return, each step
// once in its history, nothing failed or timed out.
//
// Two more nodes are aborted during the outage. The abort takes effect
// at the site when the link returns, at the first abortable point: node
// a (abortable steps of 150 s, still cleaning at the return) has its
// running step aborted and starts no other; node b (deploying, its
// write_image of 230 s not abortable and still running at the return)
// finishes write_image and runs none of the deploy's out-of-band steps
// after it; the coordinator fails a at once (clean failed) and b when
// write_image ends (deploy failed, "after step deploy.write_image").
func TestWANCutMidPlan(t *testing.T) {
	t.Parallel()
	w := newWAN(t, wanVeth)
	const nodes = 6
	const summary = 10 * time.Second
	steps := []string{"deploy.erase_devices_metadata", "deploy.burnin_cpu", "deploy.burnin_memory", "deploy.erase_pstore", "deploy.burnin_disk", "deploy.erase_devices"}
	mc := fsm.Config{WaitTimeout: 2 * time.Minute, CommandTimeout: 2 * time.Minute, ResendInterval: time.Second,
		PriorityOverrides: map[string]int{"deploy.burnin_cpu": 60, "deploy.burnin_memory": 50, "deploy.erase_pstore": 40, "deploy.burnin_disk": 30}}
	s := startWANSite(t, w, mc,
		"--simulate", fmt.Sprint(nodes+2), "--step-duration", "15s", "--heartbeat", "1s", "--boot-delay", "500ms",
		"--bmc-delay", "100ms", "--resend-interval", "1s", "--heartbeat-summary", summary.String())
	ids := createNodes(t, s.cl, nodes)
	a := s.cl.CreateNode("a", "site1", map[string]any{"fake_step_seconds": "150"})
	b := s.cl.CreateNode("b", "site1", map[string]any{"fake_step_seconds": "0.1"})
	all := append(append([]string{}, ids...), a, b)
	s.verbAll(t, all, "manage", "manageable", nil, 60*time.Second)
	// b is made available quickly, then deploys with a long write_image.
	s.verbAll(t, []string{b}, "provide", "available", nil, 60*time.Second)
	s.cl.Do("PATCH", "/v1/nodes/"+b, []map[string]any{
		{"op": "add", "path": "/instance_info/image_source", "value": "http://127.0.0.1:1/img"},
		{"op": "replace", "path": "/driver_info/fake_step_seconds", "value": "230"}}, nil)
	for _, id := range append(append([]string{}, ids...), a) {
		s.cl.MustVerb(id, "provide", nil)
	}
	s.cl.MustVerb(b, "active", nil)
	// Every cleaning node has finished its first step (the plan runs on
	// the site), b runs write_image.
	waitFor(t, 90*time.Second, "every node past its first clean step, b writing its image", func() (bool, string) {
		ns := s.nodes(t)
		past := 0
		for _, id := range ids {
			for _, e := range historyOf(t, s.cl, id) {
				if e.Event == "clean step "+steps[0]+" done" {
					past++
				}
			}
		}
		bn := ns[b]
		writing := bn.State == "wait call-back" && bn.DeployStep["step"] == "write_image"
		return past == nodes && writing && failed(ns) == "", fmt.Sprintf("%d of %d past the first step; b in %q (%v); failed: %s", past, nodes, bn.State, bn.DeployStep, failed(ns))
	})
	cut := time.Now()
	w.Cut()
	t.Logf("link cut at %s", cut.Format(time.TimeOnly))
	// Abort a and b once the coordinator knows the site is unreachable.
	waitFor(t, time.Minute, "the coordinator sees the site unreachable", func() (bool, string) {
		si := s.site(t)
		return !si.Online, fmt.Sprintf("online %v", si.Online)
	})
	for _, id := range []string{a, b} {
		s.cl.MustVerb(id, "abort", nil)
	}
	for time.Since(cut) < 3*time.Minute {
		ns := s.nodes(t)
		for _, id := range ids {
			if n := ns[id]; strings.HasSuffix(n.State, "failed") || n.LastError != "" {
				t.Fatalf("%s after the cut: node %s in %q: %s", time.Since(cut).Round(time.Second), n.Name, n.State, n.LastError)
			}
		}
		time.Sleep(2 * time.Second)
	}
	w.Restore()
	t.Logf("link restored after %s", time.Since(cut).Round(time.Second))
	waitFor(t, time.Minute, "the site is reachable again", func() (bool, string) {
		si := s.site(t)
		return si.Online, fmt.Sprintf("online %v", si.Online)
	})
	back := time.Now()
	waitFor(t, 2*time.Minute, "every node available", func() (bool, string) {
		ns := s.nodes(t)
		done := 0
		for _, id := range ids {
			n := ns[id]
			if n.LastError != "" {
				t.Fatalf("node %s after the return: %q: %s", n.Name, n.State, n.LastError)
			}
			if n.State == "available" && n.Reservation == "" {
				done++
			}
		}
		return done == nodes, fmt.Sprintf("%d of %d available", done, nodes)
	})
	// About one summary interval on a quiet machine; the bound leaves
	// room for a loaded one (what it catches is a wait for a timeout,
	// minutes).
	if took := time.Since(back); took > 3*summary+30*time.Second {
		t.Errorf("the nodes took %s after the site's return to be available, more than three summary intervals (%s) and 30 s", took.Round(100*time.Millisecond), summary)
	} else {
		t.Logf("every node available %s after the site's return", took.Round(100*time.Millisecond))
	}
	want := map[string]int{}
	for _, st := range steps {
		want["clean step "+st+" done"] = 1
	}
	s.checkHistory(t, ids, want)
	for _, id := range ids {
		var order []string
		for _, e := range historyOf(t, s.cl, id) {
			for _, st := range steps {
				if e.Event == "clean step "+st+" done" {
					order = append(order, st)
				}
			}
		}
		if strings.Join(order, ",") != strings.Join(steps, ",") {
			t.Errorf("node %s: steps done in the order %v, want %v", id, order, steps)
		}
	}

	// a: failed at the abort; b: when write_image ended.
	waitFor(t, 2*time.Minute, "b's write_image ends", func() (bool, string) {
		n := s.nodes(t)[b]
		return n.State == "deploy failed", fmt.Sprintf("b in %q: %s", n.State, n.LastError)
	})
	ns := s.nodes(t)
	if n := ns[a]; n.State != "clean failed" || !strings.Contains(n.LastError, "aborted by request during step") {
		t.Errorf("a: %q, %q; want clean failed, aborted during a step", n.State, n.LastError)
	}
	if n := ns[b]; !strings.Contains(n.LastError, "aborted by request after step deploy.write_image finished") {
		t.Errorf("b: %q; want aborted after write_image finished", n.LastError)
	}
	for _, e := range historyOf(t, s.cl, b) {
		if strings.Contains(e.Event, "step deploy.prepare_instance_boot done") || strings.Contains(e.Event, "step deploy.boot_instance done") {
			t.Errorf("b: %q in its history: a step after the abort ran", e.Event)
		}
	}
	// At the site: a's running step was aborted, b's finished; neither
	// plan went on.
	log, _ := os.ReadFile(s.agentLog)
	for id, aborted := range map[string]string{a: "true", b: "false"} {
		found := false
		for _, l := range strings.Split(string(log), "\n") {
			if strings.Contains(l, `msg="plan stopped by the coordinator"`) && strings.Contains(l, "node="+id) {
				found = true
				if !strings.Contains(l, "mode=abort") || !strings.Contains(l, "running_step_aborted="+aborted) {
					t.Errorf("the site stopped %s's plan so: %s; want mode=abort running_step_aborted=%s", id, l, aborted)
				}
			}
		}
		if !found {
			t.Errorf("the site never stopped %s's plan", id)
		}
	}
}
