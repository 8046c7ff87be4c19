// Package clusterload runs a coordinator cluster under the load of a
// whole simulated site while its leader is killed, without the race
// detector (scripts/systest runs the cluster's other tests under it; this
// one's thousands of requests would take most of make test's time there).
package clusterload

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestMain lets the test binary act as the coordinator program, so that
// the test runs the members as processes and kills them with SIGKILL.
func TestMain(m *testing.M) {
	testrig.AsCoordinator()
	os.Exit(m.Run())
}

// loadCluster is a client of a three-member cluster that goes to any
// member: a request that finds its member dead or without a leader (503)
// is sent again to the next one.
type loadCluster struct {
	t    *testing.T
	ms   []*testrig.Member
	next atomic.Uint64
	hc   *http.Client
}

// once sends one request to member m: its status, or 0 when m did not
// answer (dead, or starting).
func (c *loadCluster) once(m *testrig.Member, method, path string, b []byte, out any) (int, string) {
	req, _ := http.NewRequest(method, "http://"+m.API+path, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-OpenStack-Ironic-API-Version", "latest")
	req.SetBasicAuth(testrig.ClusterUser, testrig.ClusterPassword)
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(resp.Body)
	if out != nil && len(rb) > 0 && resp.StatusCode != 503 {
		_ = json.Unmarshal(rb, out)
	}
	return resp.StatusCode, string(rb)
}

// do sends the request until a member answers other than 503, for at
// most a minute; it returns the answer.
func (c *loadCluster) do(method, path string, body any, out any) int {
	c.t.Helper()
	var b []byte
	if body != nil {
		b, _ = json.Marshal(body)
	}
	deadline := time.Now().Add(time.Minute)
	last := "no answer"
	for time.Now().Before(deadline) {
		m := c.ms[c.next.Add(1)%uint64(len(c.ms))]
		code, text := c.once(m, method, path, b, out)
		if code != 0 && code != 503 {
			return code
		}
		last = fmt.Sprintf("%s: %d %s", m.Name, code, text)
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Errorf("%s %s: no member answered within a minute (%s)", method, path, last)
	return 0
}

func (c *loadCluster) node(id string) testrig.Node {
	var n testrig.Node
	c.do("GET", "/v1/nodes/"+id, nil, &n)
	return n
}

// TestClusterFailoverUnderLoad: 1000 simulated nodes of one site go
// through manage, provide, deploy and undeploy on a three-member cluster
// whose leader is killed with SIGKILL five times (each time restarted):
// every node ends available, none is lost, no in-band step ran twice in
// one boot at the site, each node's history has each transition as often
// as the cycle makes it; each time a new leader serves a write (the time
// to it is logged, p50 and max). A verb whose answer was lost with its
// leader is not sent blindly again: the node is read first.
// BM_CLUSTER_LOAD_NODES sets another number of nodes.
func TestClusterFailoverUnderLoad(t *testing.T) {
	t.Parallel()
	nodes := 1000
	if v := os.Getenv("BM_CLUSTER_LOAD_NODES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("BM_CLUSTER_LOAD_NODES=%q: want a number of nodes", v)
		}
		nodes = n
	}
	ms, htpasswd := testrig.NewCluster(t, 3)
	peers := testrig.Peers(ms)
	var brokers []string
	for _, m := range ms {
		brokers = append(brokers, "mqtt://"+m.MQTT)
	}
	for _, m := range ms {
		m.Extra = []string{"--advertise-broker-url", strings.Join(brokers, ","), "--wait-timeout", "10m", "--resend-interval", "1s"}
		m.Start(t, peers, htpasswd)
	}
	leader := testrig.Settled(t, ms, 3, 30*time.Second)
	c := &loadCluster{t: t, ms: ms, hc: &http.Client{Timeout: 30 * time.Second}}
	var creds agent.Credentials
	if code := c.do("POST", "/v1/sites", map[string]string{"name": "site1"}, &creds); code != 201 {
		t.Fatalf("site: %d", code)
	}

	// Every in-band step a simulated ramdisk starts, per node and boot.
	var mu sync.Mutex
	runs := map[string]int{}
	testrig.StartAgent(t, creds, agent.SimOptions{Nodes: nodes, StepDuration: 300 * time.Millisecond, BMCDelay: 20 * time.Millisecond,
		StepWatch: func(node string, boot uint64, step string) {
			mu.Lock()
			runs[fmt.Sprintf("%s boot %d: %s", node, boot, step)]++
			mu.Unlock()
		}})

	byName := map[string]*testrig.Member{}
	for _, m := range ms {
		byName[m.Name] = m
	}
	// kill ends the leader with SIGKILL, measures until a write is served
	// through a survivor, and starts the killed member again.
	var served []time.Duration
	kills := 0
	kill := func(when string) {
		t.Helper()
		var st testrig.ClusterStatus
		for deadline := time.Now().Add(time.Minute); st.Leader == ""; {
			for _, m := range ms {
				if code, _ := c.once(m, "GET", "/v1/cluster", nil, &st); code == 200 && st.Leader != "" {
					break
				}
			}
			if st.Leader == "" && time.Now().After(deadline) {
				t.Fatalf("no leader to kill %s", when)
			}
			time.Sleep(100 * time.Millisecond)
		}
		old := byName[st.Leader]
		killed := time.Now()
		old.Proc.Kill()
		kills++
		write, _ := json.Marshal(map[string]any{"discovery_max_nodes": 100 + kills})
		for i := 0; ; i++ {
			s := ms[i%3]
			if s == old {
				continue
			}
			code, text := c.once(s, "PATCH", "/v1/sites/site1", write, nil)
			if code == 200 {
				served = append(served, time.Since(killed))
				break
			}
			if code != 0 && code != 503 {
				t.Fatalf("a write through %s after kill %d: %d %s", s.Name, kills, code, text)
			}
			if time.Since(killed) > 2*time.Minute {
				t.Fatalf("no write served 2 minutes after kill %d (%s); last answer %d %s", kills, when, code, text)
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Logf("kill %d (%s): leader %s killed, a write served %s later", kills, when, old.Name, served[len(served)-1].Round(time.Millisecond))
		old.Start(t, peers, htpasswd)
	}

	ids := make([]string, nodes)
	parallel := func(n int, fn func(i int)) {
		var wg sync.WaitGroup
		work := make(chan int)
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range work {
					fn(i)
				}
			}()
		}
		for i := range n {
			work <- i
		}
		close(work)
		wg.Wait()
	}
	parallel(nodes, func(i int) {
		name := fmt.Sprintf("load%04d", i)
		var n testrig.Node
		code := c.do("POST", "/v1/nodes", map[string]any{"name": name, "driver": "fake", "conductor_group": "site1"}, &n)
		if code == 409 {
			// Created by a request whose answer was lost with its leader.
			n = c.node(name)
		} else if code != 201 {
			t.Errorf("create %s: %d", name, code)
		}
		ids[i] = n.UUID
	})
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("%d nodes created; leader %s", nodes, leader)

	// phase sends verb to every node (a kill half way through the sending
	// when killMid) and waits until every node rests in want.
	phase := func(verb, want string, extra map[string]any, killMid, killWait bool) {
		t.Helper()
		start := time.Now()
		var sent atomic.Int64
		var once sync.Once
		parallel(nodes, func(i int) {
			if killMid && sent.Add(1) == int64(nodes/2) {
				once.Do(func() { kill(verb + ", half the nodes sent") })
			}
			id := ids[i]
			body := map[string]any{"target": verb}
			for k, v := range extra {
				body[k] = v
			}
			var e struct {
				ErrorMessage string `json:"error_message"`
			}
			code := c.do("PUT", "/v1/nodes/"+id+"/states/provision", body, &e)
			if code == 202 {
				return
			}
			// The verb may have been stored by a leader that died before
			// it answered: then the node has left its state already.
			if n := c.node(id); code != 0 && (n.Target != "" || n.State == want) {
				return
			}
			t.Errorf("%s on %s: %d %s", verb, id, code, e.ErrorMessage)
		})
		if t.Failed() {
			t.FailNow()
		}
		if killWait {
			kill(verb + ", while the nodes work")
		}
		for _, id := range ids {
			deadline := time.Now().Add(10 * time.Minute)
			for {
				n := c.node(id)
				if n.UUID == id && n.Reservation == "" && (n.Target == "" || fsm.Stable(fsm.State(n.State))) {
					if n.State != want {
						t.Fatalf("%s: node %s rests in %s (last_error %q), want %s", verb, id, n.State, n.LastError, want)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: node %s still %s -> %s after 10 minutes", verb, id, n.State, n.Target)
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
		t.Logf("%s: %d nodes %s in %s", verb, nodes, want, time.Since(start).Round(time.Millisecond))
	}
	phase("manage", "manageable", nil, true, false)
	phase("provide", "available", nil, true, true)
	parallel(nodes, func(i int) {
		if code := c.do("PATCH", "/v1/nodes/"+ids[i], []map[string]any{{"op": "add", "path": "/instance_info/image_source", "value": "http://127.0.0.1:1/i"}}, nil); code != 200 {
			t.Errorf("patch %s: %d", ids[i], code)
		}
	})
	phase("active", "active", nil, false, true)
	phase("deleted", "available", nil, true, false)
	if kills != 5 {
		t.Fatalf("%d kills, want 5", kills)
	}

	// No node lost, and each one's history has each transition of the
	// cycle as often as the cycle makes it.
	var list struct {
		Nodes []struct{ UUID string } `json:"nodes"`
	}
	if code := c.do("GET", "/v1/nodes?limit=0&conductor_group=site1", nil, &list); code != 200 || len(list.Nodes) != nodes {
		t.Fatalf("the cluster lists %d nodes (%d), want %d", len(list.Nodes), code, nodes)
	}
	want := map[string]int{
		"manage: enroll -> verifying": 1, "done: verifying -> manageable": 1,
		"provide: manageable -> cleaning": 1, "done: cleaning -> available": 2,
		"active: available -> deploying": 1, "done: deploying -> active": 1,
		"deploy step deploy.write_image done": 1,
	}
	parallel(nodes, func(i int) {
		var h struct {
			History []map[string]any `json:"history"`
		}
		c.do("GET", "/v1/nodes/"+ids[i]+"/history", nil, &h)
		seen := map[string]int{}
		for _, e := range h.History {
			ev, _ := e["event"].(string)
			if e["event_type"] == "provisioning" || strings.HasSuffix(ev, " done") || strings.HasSuffix(ev, " done (out of band)") {
				seen[ev]++
			}
		}
		for ev, n := range want {
			if seen[ev] != n {
				t.Errorf("node %s: %q %d times in its history, want %d", ids[i], ev, seen[ev], n)
			}
		}
	})
	mu.Lock()
	writes := 0
	for k, n := range runs {
		if n > 1 {
			t.Errorf("the site ran %s %d times", k, n)
		}
		if strings.HasSuffix(k, ": deploy.write_image") {
			writes++
		}
	}
	mu.Unlock()
	if writes != nodes {
		t.Errorf("the site wrote the image in %d boots, want one per node (%d)", writes, nodes)
	}
	slices.Sort(served)
	t.Logf("a new leader served a write after each of %d kills: p50 %s, max %s", len(served),
		served[len(served)/2].Round(time.Millisecond), served[len(served)-1].Round(time.Millisecond))
}
