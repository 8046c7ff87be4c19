package systest

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net"
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

// clusterMember is one coordinator process of a test cluster.
type clusterMember struct {
	// extra are more serve flags.
	extra             []string
	name, ip          string
	api, mqtt, link   string
	data, log         string
	proc              *proc
	cert, key, caFile string
}

// freeOn returns a free address on ip.
func freeOn(t *testing.T, ip string) string {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// testCluster makes three members on 127.0.0.11-13 with their member
// certificates, one htpasswd file, and data folders that share db.key
// and secret (as docs/cluster.md says to prepare them).
func testCluster(t *testing.T) ([]*clusterMember, string) {
	t.Helper()
	dir := t.TempDir()
	pki := filepath.Join(dir, "pki")
	ca, err := certs.MakeCA("test cluster CA")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := certs.MakeServerCert(ca, []string{"127.0.0.11"})
	if err != nil {
		t.Fatal(err)
	}
	if err := certs.WriteFiles(pki, ca, srv, false); err != nil {
		t.Fatal(err)
	}
	key := make([]byte, 32)
	secret := make([]byte, 24)
	_, _ = rand.Read(key)
	_, _ = rand.Read(secret)
	htpasswd := testrig.HTPasswd(t, map[string]string{"operator": "s3cret-pw"})
	var ms []*clusterMember
	for i := 0; i < 3; i++ {
		m := &clusterMember{name: fmt.Sprintf("c%d", i+1), ip: fmt.Sprintf("127.0.0.%d", 11+i)}
		m.api, m.mqtt, m.link = freeOn(t, m.ip), freeOn(t, m.ip), freeOn(t, m.ip)
		m.data = filepath.Join(dir, m.name, "data")
		m.log = filepath.Join(dir, m.name, "coordinator.log")
		if err := os.MkdirAll(m.data, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(m.data, "db.key"), key, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(m.data, "secret"), []byte(fmt.Sprintf("%x", secret)), 0o600); err != nil {
			t.Fatal(err)
		}
		mc, err := certs.MakeMemberCert(ca, m.name, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := certs.WriteMember(pki, m.name, ca, mc, false); err != nil {
			t.Fatal(err)
		}
		m.cert, m.key = certs.MemberFiles(pki, m.name)
		m.caFile = filepath.Join(pki, certs.CAFile)
		ms = append(ms, m)
	}
	return ms, htpasswd
}

func (m *clusterMember) start(t *testing.T, peers, htpasswd string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "serve", "--data-dir", m.data, "--api-listen", m.api, "--mqtt-listen", m.mqtt,
		"--auth", "http_basic", "--htpasswd", htpasswd, "--tick", "100ms",
		"--cluster-member", m.name, "--cluster-listen", m.link, "--cluster-peers", peers,
		"--cluster-cert", m.cert, "--cluster-cert-key", m.key, "--cluster-ca", m.caFile)
	cmd.Args = append(cmd.Args, m.extra...)
	cmd.Env = append(os.Environ(), "BM_TEST_AS_COORDINATOR=1")
	log, err := os.OpenFile(m.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); log.Close(); close(p.done) }()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() || os.Getenv("BM_TEST_LOG") != "" {
			b, _ := os.ReadFile(m.log)
			t.Logf("log of %s:\n%s", m.name, b)
		}
	})
	m.proc = p
	p.awaitListening(t, m.api)
}

func (m *clusterMember) client(t *testing.T) *testrig.Client {
	return &testrig.Client{Base: "http://" + m.api, T: t, User: "operator", Password: "s3cret-pw"}
}

type clusterStatus struct {
	Member  string `json:"member"`
	Leader  string `json:"leader"`
	Members []struct {
		Name         string `json:"name"`
		Role         string `json:"role"`
		Voter        bool   `json:"voter"`
		AppliedIndex uint64 `json:"applied_index"`
	} `json:"members"`
}

// settled waits until every member in ms reports the same leader and
// the others of want as followers, every reachable member a voter, and
// the API serves through each; it returns the leader's name.
func settled(t *testing.T, ms []*clusterMember, want int, within time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(within)
	var last string
	for time.Now().Before(deadline) {
		leader, ok := "", true
		for _, m := range ms {
			var st clusterStatus
			if code := m.client(t).Do("GET", "/v1/cluster", nil, &st); code != 200 {
				ok, last = false, fmt.Sprintf("%s: GET /v1/cluster %d", m.name, code)
				break
			}
			roles := map[string]int{}
			for _, x := range st.Members {
				roles[x.Role]++
				if !x.Voter && x.Role != "unreachable" {
					roles["nonvoter"]++
				}
			}
			if st.Leader == "" || roles["nonvoter"] > 0 || roles["leader"] != 1 || roles["follower"] != want-1 || (leader != "" && st.Leader != leader) {
				ok, last = false, fmt.Sprintf("%s sees %+v", m.name, st)
				break
			}
			leader = st.Leader
		}
		// And the leader's engine serves, through every member.
		for _, m := range ms {
			if !ok {
				break
			}
			if code := m.client(t).Do("GET", "/v1/nodes", nil, nil); code != 200 {
				ok, last = false, fmt.Sprintf("GET /v1/nodes through %s: %d", m.name, code)
			}
		}
		if ok {
			return leader
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the cluster did not settle within %s: %s", within, last)
	return ""
}

// TestClusterFailover runs three coordinator processes on 127.0.0.11-13
// (Badger on disk): a leader within 5 s; cluster status shows one leader
// and two followers on every member; nodes created through a follower
// are served by every member; kill -9 of the leader: a new leader is
// elected and serves writes, no committed node is lost, the API works
// through the survivors; the killed member comes back as a follower and
// catches up. A request through a follower carries the caller's
// identity: a wrong password is refused by the leader.
func TestClusterFailover(t *testing.T) {
	t.Parallel()
	ms, htpasswd := testCluster(t)
	var peers []string
	for _, m := range ms {
		peers = append(peers, m.name+"="+m.link)
	}
	start := time.Now()
	for _, m := range ms {
		m.start(t, strings.Join(peers, ","), htpasswd)
	}
	leader := settled(t, ms, 3, 10*time.Second)
	t.Logf("leader %s within %s of start", leader, time.Since(start).Round(time.Millisecond))
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("a leader only %s after start", d)
	}
	byName := map[string]*clusterMember{}
	var follower *clusterMember
	for _, m := range ms {
		byName[m.name] = m
		if m.name != leader && follower == nil {
			follower = m
		}
	}
	fc := follower.client(t)
	if code := fc.Do("POST", "/v1/sites", map[string]string{"name": "site1"}, nil); code != 201 {
		t.Fatalf("create a site through follower %s: %d", follower.name, code)
	}
	var ids []string
	for i := 0; i < 20; i++ {
		ids = append(ids, fc.CreateNode(fmt.Sprintf("n%02d", i), "site1", nil))
	}
	// The caller's identity goes with a forwarded request.
	bad := &testrig.Client{Base: "http://" + follower.api, T: t, User: "operator", Password: "wrong"}
	if code := bad.Do("GET", "/v1/nodes", nil, nil); code != 401 {
		t.Fatalf("a wrong password through follower %s: %d, want 401", follower.name, code)
	}
	for _, m := range ms {
		var list struct {
			Nodes []struct{ UUID string } `json:"nodes"`
		}
		if code := m.client(t).Do("GET", "/v1/nodes", nil, &list); code != 200 || len(list.Nodes) != 20 {
			t.Fatalf("member %s lists %d nodes (%d), want 20", m.name, len(list.Nodes), code)
		}
	}

	// Each member's /metrics is its own: its role, and on the leader the
	// engine's figures too.
	for _, m := range ms {
		role := "follower"
		if m.name == leader {
			role = "leader"
		}
		text := metricsOf(t, m)
		if !strings.Contains(text, fmt.Sprintf("bmedge_cluster_role{member=%q,role=%q} 1", m.name, role)) {
			t.Fatalf("/metrics of %s does not say it is the %s:\n%s", m.name, role, text)
		}
		if got := strings.Contains(text, "bmedge_nodes{"); got != (role == "leader") {
			t.Fatalf("/metrics of %s (%s) with the engine's node counts: %v", m.name, role, got)
		}
	}
	// Ironic's own client through a follower (python3-ironicclient).
	bm := requireTool(t, "baremetal")
	cmd := exec.Command(bm, "node", "list", "-f", "json")
	cmd.Env = append(os.Environ(), "OS_AUTH_TYPE=http_basic", "OS_ENDPOINT=http://"+follower.api, "OS_USERNAME=operator", "OS_PASSWORD=s3cret-pw",
		"HOME="+t.TempDir(), "NO_PROXY=127.0.0.0/8,localhost", "no_proxy=127.0.0.0/8,localhost")
	out, err := cmd.CombinedOutput()
	var listed []map[string]any
	if err != nil || json.Unmarshal(out, &listed) != nil || len(listed) != 20 {
		t.Fatalf("baremetal node list through follower %s: %v, %d nodes\n%s", follower.name, err, len(listed), out)
	}
	// site list through a follower shows the cluster's members.
	if out, err := follower.cli(t, "site", "list"); err != nil || !strings.Contains(out, "cluster: leader "+leader+"; members ") {
		t.Fatalf("site list through %s: %v\n%s", follower.name, err, out)
	}
	// A backup through a follower is the leader's, whole.
	backup := filepath.Join(t.TempDir(), "cluster.backup")
	if out, err := follower.cli(t, "backup", "--out", backup); err != nil || !strings.Contains(out, "20 nodes") {
		t.Fatalf("backup through follower %s: %v\n%s", follower.name, err, out)
	}

	// kill -9 the leader.
	old := byName[leader]
	killed := time.Now()
	_ = old.proc.cmd.Process.Signal(syscall.SIGKILL)
	<-old.proc.done
	var survivors []*clusterMember
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
		code := s.client(t).Do("POST", "/v1/nodes", map[string]any{"name": "after-kill", "driver": "fake", "conductor_group": "site1"}, &n)
		if code == 201 {
			served = time.Since(killed)
			ids = append(ids, n.UUID)
			break
		}
		if code != 503 {
			t.Fatalf("write through %s after the kill: %d, want 201 or 503", s.name, code)
		}
		if time.Since(killed) > 20*time.Second {
			t.Fatal("no new leader serves writes 20 s after the kill")
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("a new leader served a write %s after kill -9 of %s", served.Round(time.Millisecond), leader)
	for _, s := range survivors {
		if text := metricsOf(t, s); strings.Contains(text, fmt.Sprintf("bmedge_cluster_leader_changes_total{member=%q} 0", s.name)) {
			t.Fatalf("/metrics of %s counts no leader change after the kill", s.name)
		}
	}
	for _, s := range survivors {
		c := s.client(t)
		for _, id := range ids {
			var n testrig.Node
			if code := c.Do("GET", "/v1/nodes/"+id, nil, &n); code != 200 || n.UUID != id {
				t.Fatalf("node %s through survivor %s: %d", id, s.name, code)
			}
		}
	}
	// The killed member comes back, follows, and catches up.
	old.start(t, strings.Join(peers, ","), htpasswd)
	newLeader := settled(t, ms, 3, 15*time.Second)
	if newLeader == leader {
		t.Logf("note: %s leads again", leader)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var st clusterStatus
		old.client(t).Do("GET", "/v1/cluster", nil, &st)
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
func (m *clusterMember) cli(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"--url", "http://" + m.api}, args...)...)
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
	ms, htpasswd := testCluster(t)
	var peers []string
	for _, m := range ms {
		peers = append(peers, m.name+"="+m.link)
	}
	for _, m := range ms {
		m.start(t, strings.Join(peers, ","), htpasswd)
	}
	leader := settled(t, ms, 3, 10*time.Second)
	for _, m := range ms {
		out, err := m.cli(t, "cluster", "status", "-f", "json")
		if err != nil {
			t.Fatalf("cluster status on %s: %v\n%s", m.name, err, out)
		}
		var st clusterStatus
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("cluster status -f json on %s: %v\n%s", m.name, err, out)
		}
		roles := map[string]int{}
		for _, x := range st.Members {
			roles[x.Role]++
		}
		if st.Member != m.name || st.Leader != leader || roles["leader"] != 1 || roles["follower"] != 2 {
			t.Fatalf("cluster status -f json on %s: %+v", m.name, st)
		}
	}
	var target *clusterMember
	for _, m := range ms {
		if m.name != leader {
			target = m
		}
	}
	c := target.client(t)
	if code := c.Do("POST", "/v1/sites", map[string]string{"name": "site1"}, nil); code != 201 {
		t.Fatalf("site: %d", code)
	}
	var ids []string
	for i := 0; i < 5; i++ {
		ids = append(ids, c.CreateNode(fmt.Sprintf("m%02d", i), "site1", nil))
	}
	if out, err := target.cli(t, "cluster", "transfer-leadership", target.name); err != nil {
		t.Fatalf("transfer-leadership %s: %v\n%s", target.name, err, out)
	}
	if got := settled(t, ms, 3, 10*time.Second); got != target.name {
		t.Fatalf("after transfer-leadership %s, %s leads", target.name, got)
	}
	// add-member: the cluster first, then the new member's start.
	m4 := &clusterMember{name: "c4", ip: "127.0.0.14"}
	m4.api, m4.mqtt, m4.link = freeOn(t, m4.ip), freeOn(t, m4.ip), freeOn(t, m4.ip)
	m4.data = filepath.Join(filepath.Dir(ms[0].data), "..", "c4", "data")
	m4.log = filepath.Join(filepath.Dir(m4.data), "coordinator.log")
	if err := os.MkdirAll(m4.data, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"db.key", "secret"} {
		b, err := os.ReadFile(filepath.Join(ms[0].data, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(m4.data, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pki := filepath.Dir(ms[0].caFile)
	ca, err := certs.ReadCA(pki)
	if err != nil {
		t.Fatal(err)
	}
	mc, _ := certs.MakeMemberCert(ca, "c4", nil)
	if err := certs.WriteMember(pki, "c4", ca, mc, false); err != nil {
		t.Fatal(err)
	}
	m4.cert, m4.key = certs.MemberFiles(pki, "c4")
	m4.caFile = ms[0].caFile
	// With another secret it is refused at its start, before it joins.
	if err := os.WriteFile(filepath.Join(m4.data, "secret"), []byte("not the cluster's secret, but 32 bytes long"), 0o600); err != nil {
		t.Fatal(err)
	}
	wrong := exec.Command(os.Args[0], "serve", "--data-dir", m4.data, "--api-listen", m4.api, "--mqtt-listen", m4.mqtt,
		"--auth", "http_basic", "--htpasswd", htpasswd, "--cluster-member", "c4", "--cluster-listen", m4.link,
		"--cluster-peers", strings.Join(append(peers, "c4="+m4.link), ","), "--cluster-cert", m4.cert, "--cluster-cert-key", m4.key, "--cluster-ca", m4.caFile)
	wrong.Env = append(os.Environ(), "BM_TEST_AS_COORDINATOR=1")
	if out, err := wrong.CombinedOutput(); err == nil || !strings.Contains(string(out), "holds another db.key or secret") {
		t.Fatalf("a member with another secret: %v\n%s", err, out)
	}
	b, _ := os.ReadFile(filepath.Join(ms[0].data, "secret"))
	if err := os.WriteFile(filepath.Join(m4.data, "secret"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := ms[0].cli(t, "cluster", "add-member", "c4", m4.link); err != nil {
		t.Fatalf("add-member: %v\n%s", err, out)
	}
	m4.start(t, strings.Join(append(peers, "c4="+m4.link), ","), htpasswd)
	all := append(append([]*clusterMember{}, ms...), m4)
	settled(t, all, 4, 15*time.Second)
	// remove-member of a follower, then its process ends.
	var gone *clusterMember
	for _, m := range ms {
		if m.name != target.name {
			gone = m
			break
		}
	}
	if out, err := target.cli(t, "cluster", "remove-member", gone.name); err != nil {
		t.Fatalf("remove-member %s: %v\n%s", gone.name, err, out)
	}
	gone.proc.kill()
	var rest []*clusterMember
	for _, m := range all {
		if m != gone {
			rest = append(rest, m)
		}
	}
	leader = settled(t, rest, 3, 10*time.Second)

	// The loss of a majority: two of the three go for good.
	var survivor *clusterMember
	for _, m := range rest {
		if m.name != leader && survivor == nil {
			survivor = m
			continue
		}
		m.proc.kill()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _ := exec.Command("curl", "-s", "-i", "-u", "operator:s3cret-pw", "http://"+survivor.api+"/v1/nodes").CombinedOutput()
		s := string(out)
		if strings.HasPrefix(s, "HTTP/1.1 503") && strings.Contains(s, "Retry-After: 2") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the survivor of a lost majority answers, 10 s on:\n%s", s)
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = survivor.proc.cmd.Process.Signal(syscall.SIGTERM)
	<-survivor.proc.done
	cmd := exec.Command(os.Args[0], "cluster", "recover", "--data-dir", survivor.data, "--cluster-member", survivor.name, "--cluster-listen", survivor.link)
	cmd.Env = append(os.Environ(), "BM_TEST_AS_COORDINATOR=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cluster recover: %v\n%s", err, out)
	}
	survivor.start(t, survivor.name+"="+survivor.link, htpasswd)
	settled(t, []*clusterMember{survivor}, 1, 10*time.Second)
	sc := survivor.client(t)
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
	ms, htpasswd := testCluster(t)
	first := ms[0]
	// A single coordinator first, on the same data folder.
	p := startCoordinatorProcess(t, first.data, first.api, first.mqtt)
	single := &testrig.Client{Base: "http://" + first.api, T: t}
	if code := single.Do("POST", "/v1/sites", map[string]string{"name": "site1"}, nil); code != 201 {
		t.Fatalf("site: %d", code)
	}
	var ids []string
	for i := 0; i < 10; i++ {
		ids = append(ids, single.CreateNode(fmt.Sprintf("s%02d", i), "site1", nil))
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	<-p.done
	var peers []string
	for _, m := range ms {
		peers = append(peers, m.name+"="+m.link)
	}
	refused := exec.Command(os.Args[0], "serve", "--data-dir", first.data, "--api-listen", first.api, "--mqtt-listen", first.mqtt,
		"--auth", "http_basic", "--htpasswd", htpasswd, "--cluster-member", first.name, "--cluster-listen", first.link,
		"--cluster-peers", strings.Join(peers, ","), "--cluster-cert", first.cert, "--cluster-cert-key", first.key, "--cluster-ca", first.caFile)
	refused.Env = append(os.Environ(), "BM_TEST_AS_COORDINATOR=1")
	if out, err := refused.CombinedOutput(); err == nil || !strings.Contains(string(out), "as a cluster of one") {
		t.Fatalf("a coordinator's data as one of three: %v\n%s", err, out)
	}
	first.start(t, first.name+"="+first.link, htpasswd)
	settled(t, ms[:1], 1, 10*time.Second)
	for i := 1; i < len(ms); i++ {
		m := ms[i]
		// testCluster gave every data folder the same db.key and secret;
		// the single coordinator kept the first's.
		for _, f := range []string{"db.key", "secret"} {
			b, err := os.ReadFile(filepath.Join(first.data, f))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(m.data, f), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if out, err := first.cli(t, "cluster", "add-member", m.name, m.link); err != nil {
			t.Fatalf("add-member %s: %v\n%s", m.name, err, out)
		}
		m.start(t, strings.Join(peers, ","), htpasswd)
		// One at a time: the new member votes once it caught up.
		settled(t, ms[:i+1], i+1, 15*time.Second)
	}
	settled(t, ms, 3, 15*time.Second)
	// Every follower applied the whole log before the first goes.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var st clusterStatus
		first.client(t).Do("GET", "/v1/cluster", nil, &st)
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
	first.proc.kill()
	settled(t, ms[1:], 2, 15*time.Second)
	for _, m := range ms[1:] {
		c := m.client(t)
		for _, id := range ids {
			var n testrig.Node
			if code := c.Do("GET", "/v1/nodes/"+id, nil, &n); code != 200 {
				t.Fatalf("node %s through %s after the first member is gone: %d", id, m.name, code)
			}
		}
	}
}

// metricsOf reads a member's /metrics with curl.
func metricsOf(t *testing.T, m *clusterMember) string {
	t.Helper()
	out, err := exec.Command("curl", "-sf", "-u", "operator:s3cret-pw", "http://"+m.api+"/metrics").CombinedOutput()
	if err != nil {
		t.Fatalf("curl /metrics of %s: %v\n%s", m.name, err, out)
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
	ms, htpasswd := testCluster(t)
	var peers, brokers []string
	for _, m := range ms {
		peers = append(peers, m.name+"="+m.link)
		brokers = append(brokers, "mqtt://"+m.mqtt)
	}
	for _, m := range ms {
		m.extra = []string{"--advertise-broker-url", strings.Join(brokers, ","), "--wait-timeout", "60s", "--resend-interval", "500ms"}
		m.start(t, strings.Join(peers, ","), htpasswd)
	}
	leader := settled(t, ms, 3, 10*time.Second)
	var via *clusterMember
	for _, m := range ms {
		if m.name != leader {
			via = m
		}
	}
	c := via.client(t)
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
	time.Sleep(500 * time.Millisecond)
	states := map[string]int{}
	for _, id := range ids {
		states[c.Get(id).State]++
	}
	var old *clusterMember
	for _, m := range ms {
		if m.name == leader {
			old = m
		}
	}
	_ = old.proc.cmd.Process.Signal(syscall.SIGKILL)
	<-old.proc.done
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
				t.Fatalf("node %s through %s: %d", id, via.name, code)
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
