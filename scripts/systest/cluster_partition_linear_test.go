package systest

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/lib/waitfor"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestClusterPartitionLinearizable records what four concurrent clients
// do to two nodes' descriptions and provision states through every
// member of three coordinator processes, the cut-off leader included,
// before, during and after a partition that cuts the leader off from
// both followers (the cluster links behind the proxies of partitionNet,
// as in TestClusterPartitionedLeader), and checks the history with
// porcupine against nodeModel (cluster_linear_test.go, which says how
// each answer is modelled): linearizable.
//
// Each client takes the members in turn, and goes round one that
// answered 503 (or nothing) for its Retry-After, as a client of the API
// should; it reads a node, writes its description, or asks for the verb
// that would move the node from the state it last saw (provide from
// manageable, manage from available: synchronous moves, the nodes having
// no automated cleaning), which, with four clients at it, often finds
// the node moved already and is refused naming the state. A write or
// verb that got no answer or 5xx is recorded open; a read that failed is
// left out.
func TestClusterPartitionLinearizable(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/net/tcp"); err != nil {
		if os.Getenv("BM_REQUIRE_ALL") == "1" {
			t.Fatal("the partition needs /proc/net/tcp to tell which member opened a link connection")
		}
		t.Skip("the partition needs /proc/net/tcp to tell which member opened a link connection")
	}
	started := time.Now()
	ms, htpasswd := testrig.NewCluster(t, 3)
	pn := newPartitionNet(t)
	var peers, brokers []string
	for _, m := range ms {
		peers = append(peers, m.Name+"="+pn.front(t, m.IP, m.Link, m.Name))
		brokers = append(brokers, "mqtt://"+m.MQTT)
	}
	for _, m := range ms {
		m.Extra = []string{"--advertise-broker-url", strings.Join(brokers, ","), "--wait-timeout", "60s", "--resend-interval", "500ms"}
		m.Start(t, strings.Join(peers, ","), htpasswd)
		pn.member(m.Proc.Cmd.Process.Pid, m.Name)
	}
	leader := testrig.Settled(t, ms, 3, time.Minute)
	var old *testrig.Member
	var others []*testrig.Member
	for _, m := range ms {
		if m.Name == leader {
			old = m
		} else {
			others = append(others, m)
		}
	}

	// Two nodes, managed by a simulated site (enroll → manageable needs
	// the site's validate), without automated cleaning.
	c := old.Client(t)
	var creds agent.Credentials
	if code := c.Do("POST", "/v1/sites", map[string]string{"name": "site1"}, &creds); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	testrig.StartAgent(t, creds, agent.SimOptions{Nodes: 2, StepDuration: 100 * time.Millisecond, BMCDelay: 20 * time.Millisecond})
	var ids []string
	start := map[string]nodeState{}
	for i := range 2 {
		var n testrig.Node
		body := map[string]any{"name": fmt.Sprintf("l%d", i), "driver": "fake", "conductor_group": "site1", "automated_clean": false}
		if code := c.Do("POST", "/v1/nodes", body, &n); code != 201 {
			t.Fatalf("create node l%d: %d", i, code)
		}
		ids = append(ids, n.UUID)
		c.MustVerb(n.UUID, "manage", nil)
	}
	for _, id := range ids {
		if n := c.WaitRest(id, time.Minute); n.State != "manageable" {
			t.Fatalf("node %s after manage: %q (%s)", id, n.State, n.LastError)
		}
		start[id] = nodeState{State: "manageable"}
	}

	// The clients.
	h := newNodeHistory(10 * time.Second)
	// h.phase: 0 before the cut, 1 during, 2 after the heal.
	type tally struct{ sent, answered, unavailable, noAnswer int }
	var mu sync.Mutex
	tallies := map[[2]any]*tally{} // phase, member
	count := func(p int32, member string, code int) {
		mu.Lock()
		defer mu.Unlock()
		k := [2]any{p, member}
		if tallies[k] == nil {
			tallies[k] = &tally{}
		}
		x := tallies[k]
		x.sent++
		switch {
		case code == 0:
			x.noAnswer++
		case code >= 500:
			x.unavailable++
		case code >= 200 && code < 300 || code == 400:
			x.answered++
		}
	}
	get := func(p int32, member string) tally {
		mu.Lock()
		defer mu.Unlock()
		if x := tallies[[2]any{p, member}]; x != nil {
			return *x
		}
		return tally{}
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for cl := range 4 {
		wg.Add(1)
		go func(cl int) {
			defer wg.Done()
			away := map[string]time.Time{} // a member's Retry-After
			last := map[string]string{}    // the state last seen of each node
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				var m *testrig.Member
				for k := range ms {
					if x := ms[(cl+i+k)%len(ms)]; time.Now().After(away[x.Name]) {
						m = x
						break
					}
				}
				if m == nil {
					time.Sleep(50 * time.Millisecond)
					continue
				}
				node := ids[(cl+i/len(ms))%len(ids)]
				in := nodeInput{Node: node, Kind: "read"}
				switch i % 3 {
				case 1:
					in = nodeInput{Node: node, Kind: "describe", Value: fmt.Sprintf("c%d-%d", cl, i)}
				case 2:
					in = nodeInput{Node: node, Kind: "verb", Verb: "provide"}
					if last[node] == "available" {
						in.Verb = "manage"
					}
				}
				p := h.phase.Load()
				code, out, retry := h.do(cl, m, in)
				count(p, m.Name, code)
				switch {
				case code == 0 || code >= 500:
					if retry <= 0 || retry > 5*time.Second {
						retry = 2 * time.Second
					}
					away[m.Name] = time.Now().Add(retry)
				case in.Kind == "verb" && code == 202:
					last[node] = verbMoves[in.Verb][1]
				case out.State != "":
					last[node] = out.State
				}
				time.Sleep(10 * time.Millisecond)
			}
		}(cl)
	}
	t.Cleanup(func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	})
	// served: every member of ms answered at least k operations
	// (2xx, or a verb refused by the state) in phase p.
	served := func(p int32, ms []*testrig.Member, k int) bool {
		for _, m := range ms {
			if get(p, m.Name).answered < k {
				return false
			}
		}
		return true
	}
	phaseWait := 2 * time.Minute
	if !waitfor.Until(phaseWait, func() bool { return served(0, ms, 10) }) {
		t.Fatalf("before the cut, the members did not each answer 10 operations in %s", phaseWait)
	}

	// The cut.
	// (Phase 1 begins once the cut is made, and ends before the heal:
	// what is counted in it ran during the cut; an operation in flight
	// at the cut counts in phase 0.)
	cut := time.Now()
	pn.isolate(old.Name)
	h.phase.Store(1)
	nl := testrig.Settled(t, others, 2, time.Minute)
	elected := time.Since(cut)
	// The partition lasts until both others have answered operations
	// and the cut-off leader has been asked a few.
	if !waitfor.Until(phaseWait, func() bool { return served(1, others, 10) && get(1, old.Name).sent >= 8 }) {
		t.Fatalf("during the cut: %s answered %+v, %s %+v, %s was asked %+v", others[0].Name, get(1, others[0].Name),
			others[1].Name, get(1, others[1].Name), old.Name, get(1, old.Name))
	}
	cutFor := time.Since(cut)

	// The heal.
	h.phase.Store(2)
	pn.heal()
	healed := time.Now()
	testrig.Settled(t, ms, 3, time.Minute)
	if !waitfor.Until(phaseWait, func() bool { return served(2, ms, 10) }) {
		t.Fatalf("after the heal, the members did not each answer 10 operations in %s", phaseWait)
	}
	close(stop)
	wg.Wait()
	t.Logf("cut %s off at %s; %s led %s after the cut; healed after %s; settled %s after the heal",
		old.Name, cut.Sub(started).Round(time.Millisecond), nl, elected.Round(time.Millisecond), cutFor.Round(time.Millisecond),
		time.Since(healed).Round(time.Millisecond))
	for p, name := range []string{"before the cut", "during the cut", "after the heal"} {
		var parts []string
		for _, m := range ms {
			x := get(int32(p), m.Name)
			parts = append(parts, fmt.Sprintf("%s %d sent, %d answered, %d 5xx, %d no answer", m.Name, x.sent, x.answered, x.unavailable, x.noAnswer))
		}
		t.Logf("%s: %s", name, strings.Join(parts, "; "))
	}
	// Cut off, the old leader can confirm nothing with a majority: no
	// read or write through it succeeds.
	for _, op := range h.all {
		if m := op.Metadata.(opMeta); m.Phase == 1 && m.Member == old.Name && m.Code >= 200 && m.Code < 300 {
			t.Errorf("through the cut-off %s, during the cut: %s: HTTP %d", old.Name, nodeModel(nil).DescribeOperation(op.Input, op.Output), m.Code)
		}
	}
	ops := h.history()
	model := nodeModel(start)
	// logOps logs the operations tried (those left out too) that sel
	// picks.
	logOps := func(sel func(m opMeta) bool) {
		for _, op := range h.all {
			if m := op.Metadata.(opMeta); sel(m) {
				t.Logf("through %s, %s after the cut, for %s: %s: HTTP %d %s", m.Member, (m.Since - cut.Sub(h.start)).Round(time.Millisecond),
					m.Taken.Round(time.Millisecond), model.DescribeOperation(op.Input, op.Output), m.Code, m.Msg)
			}
		}
	}
	logOps(func(m opMeta) bool { return m.Phase == 1 && m.Member == old.Name })
	// What the answers other than 2xx and the verbs' refusals said.
	why := map[string]int{}
	for _, op := range h.all {
		if m := op.Metadata.(opMeta); (m.Code < 200 || m.Code > 299) && !op.Output.(nodeOutput).Refused {
			why[fmt.Sprintf("phase %d, %s, HTTP %d %s", m.Phase, op.Input.(nodeInput).Kind, m.Code, m.Msg)]++
		}
	}
	for _, k := range slices.Sorted(maps.Keys(why)) {
		t.Logf("%d× %s", why[k], k)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log("every operation not answered 2xx:")
			logOps(func(m opMeta) bool { return m.Code < 200 || m.Code > 299 })
		}
	})
	n := countOps(ops)
	t.Logf("checking %d operations: %d reads, %d acknowledged writes, %d accepted verbs, %d verbs refused by the state, %d open (no answer or 5xx); %d left out (failed reads, other refusals, open writes no read saw)",
		len(ops), n.reads, n.writes, n.verbs, n.refused, n.unknown, h.dropped+len(h.ops)-len(ops))
	if n.reads < 30 || n.writes < 20 || n.verbs < 10 || n.refused < 5 || n.unknown < 1 {
		t.Fatalf("too few operations of a kind to tell: %+v", n)
	}
	checkStart := time.Now()
	if res := porcupine.CheckOperationsTimeout(model, ops, time.Minute); res != porcupine.Ok {
		t.Fatalf("the history is %s, want linearizable (after %s)", res, time.Since(checkStart).Round(time.Millisecond))
	}
	t.Logf("porcupine: linearizable, in %s", time.Since(checkStart).Round(time.Millisecond))
	// The same checker refuses the same history with a stale read at
	// its end: a node's first (empty) description.
	end := h.now()
	stale := append(ops[:len(ops):len(ops)], porcupine.Operation{ClientId: 4, Input: nodeInput{Node: ids[0], Kind: "read"}, Call: end,
		Output: nodeOutput{State: "manageable"}, Return: end + 1})
	// Proving a history illegal means trying every order of its open
	// operations: a minute on a quiet machine is plenty, a loaded one
	// may need several (Unknown is a timeout).
	checkStart = time.Now()
	if res := porcupine.CheckOperationsTimeout(model, stale, 5*time.Minute); res != porcupine.Illegal {
		t.Fatalf("the history with a stale read at its end: %s, want Illegal (after %s)", res, time.Since(checkStart).Round(time.Millisecond))
	}
	t.Logf("porcupine: the history with a stale read at its end is illegal, found in %s", time.Since(checkStart).Round(time.Millisecond))
	t.Logf("whole run %s", time.Since(started).Round(time.Millisecond))
}
