package systest

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/coordinator/certs"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestClusterFailover runs three coordinator processes on loopback addresses of their own
// (Badger on disk): a leader within 5 s; cluster status shows one leader
// and two followers on every member; nodes created through a follower
// are served by every member; kill -9 of the leader: a new leader is
// elected and serves writes, no committed node is lost, the API works
// through the survivors; the killed member comes back as a follower and
// catches up. A request through a follower carries the caller's
// identity: a wrong password is refused by the leader.
func TestClusterFailover(t *testing.T) {
	t.Parallel()
	ms, htpasswd := testrig.NewCluster(t, 3)
	peers := testrig.Peers(ms)
	start := time.Now()
	for _, m := range ms {
		m.Start(t, peers, htpasswd)
	}
	// How soon is reported, not asserted: a loaded machine starts three
	// processes slowly.
	leader := testrig.Settled(t, ms, 3, time.Minute)
	t.Logf("leader %s within %s of start", leader, time.Since(start).Round(time.Millisecond))
	byName := map[string]*testrig.Member{}
	var follower *testrig.Member
	for _, m := range ms {
		byName[m.Name] = m
		if m.Name != leader && follower == nil {
			follower = m
		}
	}
	fc := follower.Client(t)
	if code := fc.Do("POST", "/v1/sites", map[string]string{"name": "site1"}, nil); code != 201 {
		t.Fatalf("create a site through follower %s: %d", follower.Name, code)
	}
	var ids []string
	for i := 0; i < 20; i++ {
		ids = append(ids, fc.CreateNode(fmt.Sprintf("n%02d", i), "site1", nil))
	}
	// The caller's identity goes with a forwarded request.
	bad := &testrig.Client{Base: "http://" + follower.API, T: t, User: "operator", Password: "wrong"}
	if code := bad.Do("GET", "/v1/nodes", nil, nil); code != 401 {
		t.Fatalf("a wrong password through follower %s: %d, want 401", follower.Name, code)
	}
	for _, m := range ms {
		var list struct {
			Nodes []struct{ UUID string } `json:"nodes"`
		}
		if code := m.Client(t).Do("GET", "/v1/nodes", nil, &list); code != 200 || len(list.Nodes) != 20 {
			t.Fatalf("member %s lists %d nodes (%d), want 20", m.Name, len(list.Nodes), code)
		}
	}

	// Each member's /metrics is its own: its role, and on the leader the
	// engine's figures too.
	for _, m := range ms {
		role := "follower"
		if m.Name == leader {
			role = "leader"
		}
		text := metricsOf(t, m)
		if !strings.Contains(text, fmt.Sprintf("bmedge_cluster_role{member=%q,role=%q} 1", m.Name, role)) {
			t.Fatalf("/metrics of %s does not say it is the %s:\n%s", m.Name, role, text)
		}
		if got := strings.Contains(text, "bmedge_nodes{"); got != (role == "leader") {
			t.Fatalf("/metrics of %s (%s) with the engine's node counts: %v", m.Name, role, got)
		}
	}
	// Ironic's own client through a follower (python3-ironicclient).
	bm := requireTool(t, "baremetal")
	cmd := exec.Command(bm, "node", "list", "-f", "json")
	cmd.Env = append(os.Environ(), "OS_AUTH_TYPE=http_basic", "OS_ENDPOINT=http://"+follower.API, "OS_USERNAME=operator", "OS_PASSWORD=s3cret-pw",
		"HOME="+t.TempDir(), "NO_PROXY=127.0.0.0/8,localhost", "no_proxy=127.0.0.0/8,localhost")
	out, err := cmd.CombinedOutput()
	var listed []map[string]any
	if err != nil || json.Unmarshal(out, &listed) != nil || len(listed) != 20 {
		t.Fatalf("baremetal node list through follower %s: %v, %d nodes\n%s", follower.Name, err, len(listed), out)
	}
	// site list through a follower shows the cluster's members.
	if out, err := memberCLI(t, follower, "site", "list"); err != nil || !strings.Contains(out, "cluster: leader "+leader+"; members ") {
		t.Fatalf("site list through %s: %v\n%s", follower.Name, err, out)
	}
	// A backup through a follower is the leader's, whole.
	backup := filepath.Join(t.TempDir(), "cluster.backup")
	if out, err := memberCLI(t, follower, "backup", "--out", backup); err != nil || !strings.Contains(out, "20 nodes") {
		t.Fatalf("backup through follower %s: %v\n%s", follower.Name, err, out)
	}

	// kill -9 the leader.
	old := byName[leader]
	killed := time.Now()
	_ = old.Proc.Cmd.Process.Signal(syscall.SIGKILL)
	<-old.Proc.Done
	var survivors []*testrig.Member
	for _, m := range ms {
		if m != old {
			survivors = append(survivors, m)
		}
	}
	// A write through a survivor succeeds once the new leader serves.
	var served time.Duration
	for i := 0; ; i++ {
		s := survivors[i%2]
		var n struct{ UUID string }
		code := s.Client(t).Do("POST", "/v1/nodes", map[string]any{"name": "after-kill", "driver": "fake", "conductor_group": "site1"}, &n)
		if code == 201 {
			served = time.Since(killed)
			ids = append(ids, n.UUID)
			break
		}
		if code != 503 {
			t.Fatalf("write through %s after the kill: %d, want 201 or 503", s.Name, code)
		}
		if time.Since(killed) > 20*time.Second {
			t.Fatal("no new leader serves writes 20 s after the kill")
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("a new leader served a write %s after kill -9 of %s", served.Round(time.Millisecond), leader)
	for _, s := range survivors {
		if text := metricsOf(t, s); strings.Contains(text, fmt.Sprintf("bmedge_cluster_leader_changes_total{member=%q} 0", s.Name)) {
			t.Fatalf("/metrics of %s counts no leader change after the kill", s.Name)
		}
	}
	for _, s := range survivors {
		c := s.Client(t)
		for _, id := range ids {
			var n testrig.Node
			if code := c.Do("GET", "/v1/nodes/"+id, nil, &n); code != 200 || n.UUID != id {
				t.Fatalf("node %s through survivor %s: %d", id, s.Name, code)
			}
		}
	}
	// The killed member comes back, follows, and catches up.
	old.Start(t, peers, htpasswd)
	newLeader := testrig.Settled(t, ms, 3, time.Minute)
	if newLeader == leader {
		t.Logf("note: %s leads again", leader)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var st testrig.ClusterStatus
		old.Client(t).Do("GET", "/v1/cluster", nil, &st)
		idx := map[uint64]bool{}
		for _, x := range st.Members {
			idx[x.AppliedIndex] = true
		}
		if len(idx) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the members' applied indexes differ 10 s after the restart: %+v", st)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// coordinatorCLI runs the coordinator's command line (this test binary
// standing in for it) against the member's API.
// memberCLI runs the coordinator's CLI against member m's API.
func memberCLI(t *testing.T, m *testrig.Member, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"--url", "http://" + m.API}, args...)...)
	cmd.Env = append(os.Environ(), "BM_TEST_AS_COORDINATOR=1", "OS_USERNAME=operator", "OS_PASSWORD=s3cret-pw")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestClusterMembership drives the operator's commands: cluster status
// -f json on every member (one leader, two followers), transfer-
// leadership to a named member, add-member of a fourth (it catches up),
// remove-member; then the loss of a majority: the survivor answers 503
// with Retry-After, and cluster recover makes its data a new cluster of
// one that serves every node.
func TestClusterMembership(t *testing.T) {
	t.Parallel()
	ms, htpasswd := testrig.NewCluster(t, 3)
	peers := testrig.Peers(ms)
	for _, m := range ms {
		m.Start(t, peers, htpasswd)
	}
	leader := testrig.Settled(t, ms, 3, time.Minute)
	for _, m := range ms {
		out, err := memberCLI(t, m, "cluster", "status", "-f", "json")
		if err != nil {
			t.Fatalf("cluster status on %s: %v\n%s", m.Name, err, out)
		}
		var st testrig.ClusterStatus
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("cluster status -f json on %s: %v\n%s", m.Name, err, out)
		}
		roles := map[string]int{}
		for _, x := range st.Members {
			roles[x.Role]++
		}
		if st.Member != m.Name || st.Leader != leader || roles["leader"] != 1 || roles["follower"] != 2 {
			t.Fatalf("cluster status -f json on %s: %+v", m.Name, st)
		}
	}
	var target *testrig.Member
	for _, m := range ms {
		if m.Name != leader {
			target = m
		}
	}
	c := target.Client(t)
	if code := c.Do("POST", "/v1/sites", map[string]string{"name": "site1"}, nil); code != 201 {
		t.Fatalf("site: %d", code)
	}
	var ids []string
	for i := 0; i < 5; i++ {
		ids = append(ids, c.CreateNode(fmt.Sprintf("m%02d", i), "site1", nil))
	}
	if out, err := memberCLI(t, target, "cluster", "transfer-leadership", target.Name); err != nil {
		t.Fatalf("transfer-leadership %s: %v\n%s", target.Name, err, out)
	}
	if got := testrig.Settled(t, ms, 3, time.Minute); got != target.Name {
		t.Fatalf("after transfer-leadership %s, %s leads", target.Name, got)
	}
	// add-member: the cluster first, then the new member's start.
	m4 := &testrig.Member{Name: "c4", IP: testrig.NextIP(ms)}
	m4.API, m4.MQTT, m4.Link = testrig.FreeOn(t, m4.IP), testrig.FreeOn(t, m4.IP), testrig.FreeOn(t, m4.IP)
	m4.Data = filepath.Join(filepath.Dir(ms[0].Data), "..", "c4", "data")
	m4.Log = filepath.Join(filepath.Dir(m4.Data), "coordinator.log")
	if err := os.MkdirAll(m4.Data, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"db.key", "secret"} {
		b, err := os.ReadFile(filepath.Join(ms[0].Data, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(m4.Data, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pki := filepath.Dir(ms[0].CAFile)
	ca, err := certs.ReadCA(pki)
	if err != nil {
		t.Fatal(err)
	}
	mc, _ := certs.MakeMemberCert(ca, "c4", nil)
	if err := certs.WriteMember(pki, "c4", ca, mc, false); err != nil {
		t.Fatal(err)
	}
	m4.Cert, m4.Key = certs.MemberFiles(pki, "c4")
	m4.CAFile = ms[0].CAFile
	// With another secret it is refused at its start, before it joins.
	if err := os.WriteFile(filepath.Join(m4.Data, "secret"), []byte("not the cluster's secret, but 32 bytes long"), 0o600); err != nil {
		t.Fatal(err)
	}
	wrong := exec.Command(os.Args[0], "serve", "--data-dir", m4.Data, "--api-listen", m4.API, "--mqtt-listen", m4.MQTT,
		"--auth", "http_basic", "--htpasswd", htpasswd, "--cluster-member", "c4", "--cluster-listen", m4.Link,
		"--cluster-peers", peers+",c4="+m4.Link, "--cluster-cert", m4.Cert, "--cluster-cert-key", m4.Key, "--cluster-ca", m4.CAFile)
	wrong.Env = append(os.Environ(), "BM_TEST_AS_COORDINATOR=1")
	if out, err := wrong.CombinedOutput(); err == nil || !strings.Contains(string(out), "holds another db.key or secret") {
		t.Fatalf("a member with another secret: %v\n%s", err, out)
	}
	b, _ := os.ReadFile(filepath.Join(ms[0].Data, "secret"))
	if err := os.WriteFile(filepath.Join(m4.Data, "secret"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := memberCLI(t, ms[0], "cluster", "add-member", "c4", m4.Link); err != nil {
		t.Fatalf("add-member: %v\n%s", err, out)
	}
	m4.Start(t, peers+",c4="+m4.Link, htpasswd)
	all := append(append([]*testrig.Member{}, ms...), m4)
	testrig.Settled(t, all, 4, 15*time.Second)
	// remove-member of a follower, then its process ends.
	var gone *testrig.Member
	for _, m := range ms {
		if m.Name != target.Name {
			gone = m
			break
		}
	}
	if out, err := memberCLI(t, target, "cluster", "remove-member", gone.Name); err != nil {
		t.Fatalf("remove-member %s: %v\n%s", gone.Name, err, out)
	}
	gone.Proc.Kill()
	var rest []*testrig.Member
	for _, m := range all {
		if m != gone {
			rest = append(rest, m)
		}
	}
	leader = testrig.Settled(t, rest, 3, 10*time.Second)

	// The loss of a majority: two of the three go for good.
	var survivor *testrig.Member
	for _, m := range rest {
		if m.Name != leader && survivor == nil {
			survivor = m
			continue
		}
		m.Proc.Kill()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _ := exec.Command("curl", "-s", "-i", "-u", "operator:s3cret-pw", "http://"+survivor.API+"/v1/nodes").CombinedOutput()
		s := string(out)
		if strings.HasPrefix(s, "HTTP/1.1 503") && strings.Contains(s, "Retry-After: 2") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the survivor of a lost majority answers, 10 s on:\n%s", s)
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = survivor.Proc.Cmd.Process.Signal(syscall.SIGTERM)
	<-survivor.Proc.Done
	cmd := exec.Command(os.Args[0], "cluster", "recover", "--data-dir", survivor.Data, "--cluster-member", survivor.Name, "--cluster-listen", survivor.Link)
	cmd.Env = append(os.Environ(), "BM_TEST_AS_COORDINATOR=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cluster recover: %v\n%s", err, out)
	}
	survivor.Start(t, survivor.Name+"="+survivor.Link, htpasswd)
	testrig.Settled(t, []*testrig.Member{survivor}, 1, 10*time.Second)
	sc := survivor.Client(t)
	for _, id := range ids {
		var n testrig.Node
		if code := sc.Do("GET", "/v1/nodes/"+id, nil, &n); code != 200 {
			t.Fatalf("node %s after recover: %d", id, code)
		}
	}
	if id := sc.CreateNode("after-recover", "site1", nil); id == "" {
		t.Fatal("no write after recover")
	}
}

// TestClusterFromSingle turns a single coordinator's data folder into a
// cluster: refused as one of three (the others could lead without its
// data), taken as a cluster of one, which copies its store into the log;
// two members added with empty data folders get every node, and serve
// them once the first member is killed.
func TestClusterFromSingle(t *testing.T) {
	t.Parallel()
	ms, htpasswd := testrig.NewCluster(t, 3)
	first := ms[0]
	// A single coordinator first, on the same data folder.
	p := startCoordinatorProcess(t, first.Data, first.API, first.MQTT)
	single := &testrig.Client{Base: "http://" + first.API, T: t}
	if code := single.Do("POST", "/v1/sites", map[string]string{"name": "site1"}, nil); code != 201 {
		t.Fatalf("site: %d", code)
	}
	var ids []string
	for i := 0; i < 10; i++ {
		ids = append(ids, single.CreateNode(fmt.Sprintf("s%02d", i), "site1", nil))
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	<-p.done
	peers := testrig.Peers(ms)
	refused := exec.Command(os.Args[0], "serve", "--data-dir", first.Data, "--api-listen", first.API, "--mqtt-listen", first.MQTT,
		"--auth", "http_basic", "--htpasswd", htpasswd, "--cluster-member", first.Name, "--cluster-listen", first.Link,
		"--cluster-peers", peers, "--cluster-cert", first.Cert, "--cluster-cert-key", first.Key, "--cluster-ca", first.CAFile)
	refused.Env = append(os.Environ(), "BM_TEST_AS_COORDINATOR=1")
	if out, err := refused.CombinedOutput(); err == nil || !strings.Contains(string(out), "as a cluster of one") {
		t.Fatalf("a coordinator's data as one of three: %v\n%s", err, out)
	}
	first.Start(t, first.Name+"="+first.Link, htpasswd)
	testrig.Settled(t, ms[:1], 1, 10*time.Second)
	for i := 1; i < len(ms); i++ {
		m := ms[i]
		// testCluster gave every data folder the same db.key and secret;
		// the single coordinator kept the first's.
		for _, f := range []string{"db.key", "secret"} {
			b, err := os.ReadFile(filepath.Join(first.Data, f))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(m.Data, f), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if out, err := memberCLI(t, first, "cluster", "add-member", m.Name, m.Link); err != nil {
			t.Fatalf("add-member %s: %v\n%s", m.Name, err, out)
		}
		m.Start(t, peers, htpasswd)
		// One at a time: the new member votes once it caught up.
		testrig.Settled(t, ms[:i+1], i+1, 15*time.Second)
	}
	testrig.Settled(t, ms, 3, time.Minute)
	// Every follower applied the whole log before the first goes.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var st testrig.ClusterStatus
		first.Client(t).Do("GET", "/v1/cluster", nil, &st)
		idx := map[uint64]bool{}
		for _, x := range st.Members {
			idx[x.AppliedIndex] = true
		}
		if len(idx) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("applied indexes differ: %+v", st)
		}
		time.Sleep(100 * time.Millisecond)
	}
	first.Proc.Kill()
	testrig.Settled(t, ms[1:], 2, 15*time.Second)
	for _, m := range ms[1:] {
		c := m.Client(t)
		for _, id := range ids {
			var n testrig.Node
			if code := c.Do("GET", "/v1/nodes/"+id, nil, &n); code != 200 {
				t.Fatalf("node %s through %s after the first member is gone: %d", id, m.Name, code)
			}
		}
	}
}

// metricsOf reads a member's /metrics with curl.
func metricsOf(t *testing.T, m *testrig.Member) string {
	t.Helper()
	out, err := exec.Command("curl", "-sf", "-u", "operator:s3cret-pw", "http://"+m.API+"/metrics").CombinedOutput()
	if err != nil {
		t.Fatalf("curl /metrics of %s: %v\n%s", m.Name, err, out)
	}
	return string(out)
}

// TestClusterSitesFollow runs a simulated site against a cluster whose
// members all advertise their brokers (only the leader runs one): nodes
// go through manage, provide and deploy while the leader is killed with
// kill -9, and every node ends active, its site having followed the new
// leader and the new leader's engine having carried on from the
// replicated state; each node's history has every transition and step
// result once.
func TestClusterSitesFollow(t *testing.T) {
	t.Parallel()
	ms, htpasswd := testrig.NewCluster(t, 3)
	var peers, brokers []string
	for _, m := range ms {
		peers = append(peers, m.Name+"="+m.Link)
		brokers = append(brokers, "mqtt://"+m.MQTT)
	}
	for _, m := range ms {
		m.Extra = []string{"--advertise-broker-url", strings.Join(brokers, ","), "--wait-timeout", "60s", "--resend-interval", "500ms"}
		m.Start(t, strings.Join(peers, ","), htpasswd)
	}
	leader := testrig.Settled(t, ms, 3, time.Minute)
	var via *testrig.Member
	for _, m := range ms {
		if m.Name != leader {
			via = m
		}
	}
	c := via.Client(t)
	var creds agent.Credentials
	if code := c.Do("POST", "/v1/sites", map[string]string{"name": "site1"}, &creds); code != 201 {
		t.Fatalf("site: %d", code)
	}
	if creds.BrokerURL != strings.Join(brokers, ",") {
		t.Fatalf("the site's credentials name %q, want every member's broker", creds.BrokerURL)
	}
	testrig.StartAgent(t, creds, agent.SimOptions{Nodes: 6, StepDuration: 700 * time.Millisecond, BMCDelay: 200 * time.Millisecond})
	var ids []string
	for i := 0; i < 6; i++ {
		id := c.CreateNode(fmt.Sprintf("f%d", i), "site1", nil)
		ids = append(ids, id)
		c.MustVerb(id, "manage", nil)
	}
	for _, id := range ids {
		c.WaitRest(id, 30*time.Second)
		c.MustVerb(id, "provide", nil)
	}
	for _, id := range ids {
		if n := c.WaitRest(id, 60*time.Second); n.State != "available" {
			t.Fatalf("node %s: %s (%s) after provide", id, n.State, n.LastError)
		}
		c.Do("PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "add", "path": "/instance_info/image_source", "value": "http://127.0.0.1:1/i"}}, nil)
		c.MustVerb(id, "active", nil)
	}
	// Every deploy under way, some node waiting for its call-back: the
	// leader dies in the middle.
	states := map[string]int{}
	waitFor(t, time.Minute, "every deploy under way", func() (bool, string) {
		clear(states)
		for _, id := range ids {
			states[c.Get(id).State]++
		}
		return states["available"] == 0 && states["wait call-back"] > 0, fmt.Sprint(states)
	})
	var old *testrig.Member
	for _, m := range ms {
		if m.Name == leader {
			old = m
		}
	}
	_ = old.Proc.Cmd.Process.Signal(syscall.SIGKILL)
	<-old.Proc.Done
	t.Logf("killed leader %s with the nodes in %v", leader, states)
	for _, id := range ids {
		deadline := time.Now().Add(90 * time.Second)
		var n testrig.Node
		for {
			// A fresh value each time: JSON's null leaves a field as it was.
			n = testrig.Node{}
			code := c.Do("GET", "/v1/nodes/"+id, nil, &n)
			if code == 200 && n.Reservation == "" && (n.Target == "" || fsm.Stable(fsm.State(n.State))) {
				break
			}
			if code != 200 && code != 503 {
				t.Fatalf("node %s through %s: %d", id, via.Name, code)
			}
			if time.Now().After(deadline) {
				var raw, hist map[string]any
				c.Do("GET", "/v1/nodes/"+id, nil, &raw)
				c.Do("GET", "/v1/nodes/"+id+"/history", nil, &hist)
				t.Fatalf("node %s still in %q -> %q, reservation %q, 90 s after the kill (last_error %q)\nnode: %v\nhistory: %v",
					id, n.State, n.Target, n.Reservation, n.LastError, raw, hist)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if n.State != "active" {
			t.Errorf("node %s ended %s (last_error %q), want active", id, n.State, n.LastError)
		}
		var h struct {
			History []map[string]any `json:"history"`
		}
		// Each transition and each step's result once: no step ran
		// twice, none was lost over the change of leader.
		c.Do("GET", "/v1/nodes/"+id+"/history", nil, &h)
		seen := map[string]int{}
		for _, e := range h.History {
			ev, _ := e["event"].(string)
			if e["event_type"] == "provisioning" || strings.HasSuffix(ev, " done") || strings.HasSuffix(ev, " done (out of band)") {
				seen[ev]++
			}
		}
		for _, want := range []string{"manage: enroll -> verifying", "provide: manageable -> cleaning", "done: cleaning -> available",
			"active: available -> deploying", "deploy step deploy.write_image done", "deploy step deploy.boot_instance done (out of band)", "done: deploying -> active"} {
			if seen[want] != 1 {
				t.Errorf("node %s: %q %d times in its history, want once", id, want, seen[want])
			}
		}
		for ev, n := range seen {
			if n > 1 {
				t.Errorf("node %s: %q %d times in its history", id, ev, n)
			}
		}
	}
}
