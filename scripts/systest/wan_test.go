package systest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/coordinator/server"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// wanSite is a coordinator on the host and a site's edge agent (the real
// binary, with simulated nodes) in the WAN's namespace.
type wanSite struct {
	c        *server.Coordinator
	w        *wanNet
	cl       *testrig.Client
	creds    agent.Credentials
	agentLog string
}

// startWANSite starts a coordinator whose broker listens on the host's end
// of w, registers site1 and runs its edge agent in w's namespace with
// agentArgs (after the credentials and state folder).
func startWANSite(t *testing.T, w *wanNet, m fsm.Config, agentArgs ...string) *wanSite {
	t.Helper()
	return startWANSiteOpts(t, w, testrig.Options{Machine: m}, agentArgs...)
}

// startWANSiteOpts is startWANSite with the coordinator's options (its
// MQTT listener is set to the link's).
func startWANSiteOpts(t *testing.T, w *wanNet, o testrig.Options, agentArgs ...string) *wanSite {
	t.Helper()
	bin := buildAgent(t)
	o.MQTT = w.FreePort()
	c := testrig.Coordinator(t, o)
	cl := testrig.NewClient(t, c)
	var creds agent.Credentials
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "site1"}, &creds); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	if !strings.Contains(creds.BrokerURL, w.HostIP) {
		t.Fatalf("the site's broker URL %q is not on the link's host address %s", creds.BrokerURL, w.HostIP)
	}
	dir := t.TempDir()
	credFile := filepath.Join(dir, "site1.json")
	b, _ := json.Marshal(creds)
	if err := os.WriteFile(credFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	s := &wanSite{c: c, w: w, cl: cl, creds: creds, agentLog: filepath.Join(dir, "agent.log")}
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(s.agentLog)
			t.Logf("agent.log:\n%s", b)
		}
	})
	ip, args := w.Command(bin, append([]string{"--credentials-file", credFile, "--state-dir", filepath.Join(dir, "state"),
		"--power-sync-interval", "0"}, agentArgs...)...)
	startAgentProcess(t, ip, s.agentLog, args...)
	waitFor(t, 30*time.Second, "the agent in the namespace connects", func() (bool, string) {
		b, _ := os.ReadFile(s.agentLog)
		return strings.Contains(string(b), "edge agent connected"), "no 'edge agent connected' in its log"
	})
	return s
}

type wanSiteInfo struct {
	Online       bool       `json:"online"`
	LastSeen     *time.Time `json:"last_seen"`
	OfflineSince *time.Time `json:"offline_since"`
	Queued       int        `json:"queued"`
}

func (s *wanSite) site(t *testing.T) wanSiteInfo {
	t.Helper()
	var resp struct {
		Sites []struct {
			Name string `json:"name"`
			wanSiteInfo
		} `json:"sites"`
	}
	if code := s.cl.Do("GET", "/v1/sites", nil, &resp); code != 200 {
		t.Fatalf("GET /v1/sites: %d", code)
	}
	for _, x := range resp.Sites {
		if x.Name == "site1" {
			return x.wanSiteInfo
		}
	}
	t.Fatalf("site1 not listed")
	return wanSiteInfo{}
}

// nodes reads every node in one request.
func (s *wanSite) nodes(t *testing.T) map[string]testrig.Node {
	t.Helper()
	var resp struct {
		Nodes []testrig.Node `json:"nodes"`
	}
	if code := s.cl.Do("GET", "/v1/nodes/detail", nil, &resp); code != 200 {
		t.Fatalf("GET /v1/nodes/detail: %d", code)
	}
	out := map[string]testrig.Node{}
	for _, n := range resp.Nodes {
		out[n.UUID] = n
	}
	return out
}

// failed returns a description of the nodes in a failed state or with a
// last_error, "" if none.
func failed(ns map[string]testrig.Node) string {
	var bad []string
	for _, n := range ns {
		if strings.HasSuffix(n.State, "failed") || n.State == "error" || n.LastError != "" {
			bad = append(bad, fmt.Sprintf("%s in %q: %s", n.Name, n.State, n.LastError))
		}
	}
	sort.Strings(bad)
	return strings.Join(bad, "; ")
}

// verbAll puts target on every node and waits until all of them rest in
// want, failing at the first node that fails.
func (s *wanSite) verbAll(t *testing.T, ids []string, target, want string, extra map[string]any, timeout time.Duration) {
	t.Helper()
	for _, id := range ids {
		s.cl.MustVerb(id, target, extra)
	}
	deadline := time.Now().Add(timeout)
	for {
		ns := s.nodes(t)
		if bad := failed(ns); bad != "" {
			t.Fatalf("%s: %s", target, bad)
		}
		done := 0
		for _, id := range ids {
			n := ns[id]
			if n.State == want && n.Reservation == "" && n.Target == "" {
				done++
			}
		}
		if done == len(ids) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d of %d nodes in %q after %s", target, done, len(ids), want, timeout)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// checkHistory: no error in any node's history, and each in-band step
// result recorded once per operation (want: event suffix → count).
func (s *wanSite) checkHistory(t *testing.T, ids []string, want map[string]int) {
	t.Helper()
	for _, id := range ids {
		got := map[string]int{}
		var lines []string
		for _, e := range historyOf(t, s.cl, id) {
			lines = append(lines, e.Severity+" "+e.Event)
			if e.Severity == "ERROR" || strings.Contains(strings.ToLower(e.Event), "timeout") {
				t.Errorf("node %s: %s %s", id, e.Severity, e.Event)
			}
			for w := range want {
				if strings.HasPrefix(e.Event, w) {
					got[w]++
				}
			}
		}
		for w, n := range want {
			if got[w] != n {
				t.Errorf("node %s: %q recorded %d times, want %d; history:\n%s", id, w, got[w], n, strings.Join(lines, "\n"))
			}
		}
	}
}

// historyEntry is one entry of a node's history, as the API shows it.
type historyEntry struct {
	Event    string `json:"event"`
	Severity string `json:"severity"`
}

// historyOf reads a node's history through the API.
func historyOf(t *testing.T, cl *testrig.Client, id string) []historyEntry {
	t.Helper()
	var h struct {
		History []historyEntry `json:"history"`
	}
	if code := cl.Do("GET", "/v1/nodes/"+id+"/history", nil, &h); code != 200 {
		t.Fatalf("history of %s: %d", id, code)
	}
	return h.History
}

func createNodes(t *testing.T, cl *testrig.Client, n int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		ids = append(ids, cl.CreateNode(fmt.Sprintf("n%d", i), "site1", nil))
	}
	return ids
}

// TestWANCut: the nodes of a site are cleaning (in-band steps of 15 s)
// when the link between the site's edge agent and the coordinator is cut
// (a veth pair into the site's network namespace, set down) for longer
// than the WAIT and command timeouts. Those are 50 s: the broker notices a
// dead connection 30 s (the agent's MQTT keepalive and a half) after the
// agent's last packet, and a node's deadline is its last heartbeat plus
// the timeout, where heartbeats may come up to 10 s apart (the edge
// agent's heartbeat summaries); the coordinator cannot tell a cut link
// from a silent node sooner than its broker notices. The
// coordinator sees the site unreachable and fails nobody; after the link
// returns every node completes its cleaning, each step's result recorded
// exactly once and no node timed out.
func TestWANCut(t *testing.T) {
	t.Parallel()
	w := newWAN(t, wanVeth)
	const nodes = 6
	const timeout = 50 * time.Second
	s := startWANSite(t, w, fsm.Config{WaitTimeout: timeout, CommandTimeout: timeout, ResendInterval: time.Second},
		"--simulate", fmt.Sprint(nodes), "--step-duration", "15s", "--heartbeat", "1s", "--boot-delay", "500ms",
		"--bmc-delay", "100ms", "--resend-interval", "1s")
	ids := createNodes(t, s.cl, nodes)
	s.verbAll(t, ids, "manage", "manageable", nil, 60*time.Second)
	for _, id := range ids {
		s.cl.MustVerb(id, "provide", nil)
	}
	// Every node runs its first in-band clean step.
	waitFor(t, 60*time.Second, "every node runs an in-band clean step", func() (bool, string) {
		ns := s.nodes(t)
		running := 0
		for _, n := range ns {
			if n.State == "clean wait" && n.CleanStep != nil && n.CleanStep["requires_ramdisk"] == true && ramdiskRuns(n) {
				running++
			}
		}
		return running == nodes, fmt.Sprintf("%d of %d (the ramdisk's heartbeat saying it runs the step); failed: %s", running, nodes, failed(ns))
	})
	cut := time.Now()
	w.Cut()
	t.Logf("link cut at %s", cut.Format(time.TimeOnly))
	// Past the timeouts: nobody fails, and the coordinator says the site
	// is unreachable since about the cut.
	var offline time.Time
	for time.Since(cut) < timeout+10*time.Second {
		if bad := failed(s.nodes(t)); bad != "" {
			t.Fatalf("%s after the cut: %s", time.Since(cut).Round(time.Second), bad)
		}
		if si := s.site(t); !si.Online && offline.IsZero() {
			offline = time.Now()
			if si.OfflineSince == nil || si.OfflineSince.Before(cut.Add(-15*time.Second)) || si.OfflineSince.After(cut.Add(time.Second)) {
				t.Fatalf("site list: offline since %v, want about the cut (%s)", si.OfflineSince, cut.Format(time.TimeOnly))
			}
			if si.LastSeen == nil || !si.LastSeen.Equal(*si.OfflineSince) {
				t.Fatalf("site list: last seen %v, want the outage's start %v", si.LastSeen, si.OfflineSince)
			}
			t.Logf("the coordinator saw the site unreachable %s after the cut (offline since %s)",
				offline.Sub(cut).Round(100*time.Millisecond), si.OfflineSince.Format(time.TimeOnly+".000"))
		}
		time.Sleep(time.Second)
	}
	if offline.IsZero() {
		t.Fatalf("the coordinator did not notice the cut within %s", time.Since(cut).Round(time.Second))
	}
	w.Restore()
	t.Logf("link restored after %s", time.Since(cut).Round(time.Second))
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ns := s.nodes(t)
		if bad := failed(ns); bad != "" {
			t.Fatalf("after the link returned: %s", bad)
		}
		done := 0
		for _, n := range ns {
			if n.State == "available" && n.Reservation == "" {
				done++
			}
		}
		if done == nodes {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d nodes available 2 minutes after the link returned", done, nodes)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if si := s.site(t); !si.Online || si.OfflineSince != nil {
		t.Fatalf("site list after the return: %+v", si)
	}
	s.checkHistory(t, ids, map[string]int{
		"clean step deploy.erase_devices_metadata done": 1,
		"clean step deploy.erase_devices done":          1,
	})
}

// TestWANImpaired: 50 simulated nodes go through a full cycle (manage,
// provide, deploy, undeploy) over a WAN of 500 ms round trip and 5 %
// packet loss each way, with no failure and each step recorded once.
func TestWANImpaired(t *testing.T) {
	t.Parallel()
	w := newImpairedWAN(t, 250*time.Millisecond, 0.05)
	const nodes = 50
	s := startWANSite(t, w, fsm.Config{WaitTimeout: time.Minute, CommandTimeout: time.Minute, ResendInterval: 3 * time.Second},
		"--simulate", fmt.Sprint(nodes), "--step-duration", "2s", "--heartbeat", "5s", "--boot-delay", "1s",
		"--bmc-delay", "50ms", "--resend-interval", "3s")
	start := time.Now()
	ids := createNodes(t, s.cl, nodes)
	s.verbAll(t, ids, "manage", "manageable", nil, 3*time.Minute)
	s.verbAll(t, ids, "provide", "available", nil, 3*time.Minute)
	for _, id := range ids {
		s.cl.Do("PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "add", "path": "/instance_info/image_source", "value": "http://127.0.0.1:1/img"}}, nil)
	}
	s.verbAll(t, ids, "active", "active", nil, 3*time.Minute)
	s.verbAll(t, ids, "deleted", "available", nil, 3*time.Minute)
	t.Logf("%d nodes through manage, provide, deploy, undeploy in %s over the impaired link (%s)", nodes,
		time.Since(start).Round(time.Second), map[bool]string{true: "tc netem", false: "TUN wire"}[w.netem])
	s.checkHistory(t, ids, map[string]int{
		"clean step deploy.erase_devices_metadata done": 2,
		"clean step deploy.erase_devices done":          2,
	})
}

// ramdiskRuns tells whether the node's ramdisk said, in a heartbeat, that
// it runs the node's outstanding in-band command: the command crossed the
// site and its step is under way.
func ramdiskRuns(n testrig.Node) bool {
	c, _ := n.InternalInfo["outstanding_command"].(map[string]any)
	return c != nil && c["accepted"] == true
}
