package testrig

import (
	"crypto/rand"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bmedge/bmedge/coordinator/certs"
)

// Member is one coordinator process of a test cluster: the test binary
// run as the coordinator program (AsCoordinator) on its own 127.0.0.x.
type Member struct {
	// Extra are more serve flags.
	Extra             []string
	Name, IP          string
	API, MQTT, Link   string
	Data, Log         string
	Proc              *Proc
	Cert, Key, CAFile string
}

// Proc is a process a test started.
type Proc struct {
	Cmd  *exec.Cmd
	Done chan struct{}
}

// Kill ends the process with SIGKILL and waits for it.
func (p *Proc) Kill() {
	if p.Cmd.Process != nil {
		_ = p.Cmd.Process.Signal(syscall.SIGKILL)
	}
	<-p.Done
}

// FreeOn returns a free address on ip.
func FreeOn(t testing.TB, ip string) string {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// NextIP is the loopback address after the cluster's last member's: for
// a member a test adds to it.
func NextIP(ms []*Member) string {
	ip := netip.MustParseAddr(ms[len(ms)-1].IP)
	return ip.Next().String()
}

// ClusterUser and ClusterPassword are the API's user in a test cluster.
const ClusterUser, ClusterPassword = "operator", "s3cret-pw"

// clusterBlock gives a test cluster five loopback addresses of its own
// (127.0.0.100 onwards, 25 blocks) for the test's life: ports picked free
// on an address are bound only later by the member processes, and a
// cluster test beside another on the same addresses (in this process or
// another package's) could meanwhile take one of them. A block is held
// by an exclusive lock on a file in the temporary folder.
func clusterBlock(t testing.TB) int {
	t.Helper()
	for try := 0; ; try++ {
		for k := range 25 {
			f, err := os.OpenFile(filepath.Join(os.TempDir(), fmt.Sprintf("bmedge-test-cluster-%d.lock", k)), os.O_CREATE|os.O_RDWR, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
				f.Close()
				continue
			}
			t.Cleanup(func() { f.Close() }) // closing releases the lock
			return 100 + 5*k
		}
		if try == 600 {
			t.Fatal("no free block of loopback addresses for a test cluster in 5 minutes")
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// NewCluster makes n (at most 4, a fifth address stays free for a member
// a test adds) members on loopback addresses of their own with their member
// certificates, one htpasswd file (ClusterUser), and data folders that
// share db.key and secret (as docs/cluster.md says to prepare them). It
// returns the members and the htpasswd file; none is started.
func NewCluster(t testing.TB, n int) ([]*Member, string) {
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
	htpasswd := HTPasswd(t, map[string]string{ClusterUser: ClusterPassword})
	if n > 4 {
		t.Fatalf("NewCluster: %d members; at most 4", n)
	}
	base := clusterBlock(t)
	var ms []*Member
	for i := range n {
		m := &Member{Name: fmt.Sprintf("c%d", i+1), IP: fmt.Sprintf("127.0.0.%d", base+i)}
		m.API, m.MQTT, m.Link = FreeOn(t, m.IP), FreeOn(t, m.IP), FreeOn(t, m.IP)
		m.Data = filepath.Join(dir, m.Name, "data")
		m.Log = filepath.Join(dir, m.Name, "coordinator.log")
		if err := os.MkdirAll(m.Data, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(m.Data, "db.key"), key, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(m.Data, "secret"), []byte(fmt.Sprintf("%x", secret)), 0o600); err != nil {
			t.Fatal(err)
		}
		mc, err := certs.MakeMemberCert(ca, m.Name, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := certs.WriteMember(pki, m.Name, ca, mc, false); err != nil {
			t.Fatal(err)
		}
		m.Cert, m.Key = certs.MemberFiles(pki, m.Name)
		m.CAFile = filepath.Join(pki, certs.CAFile)
		ms = append(ms, m)
	}
	return ms, htpasswd
}

// Peers is the --cluster-peers list of ms.
func Peers(ms []*Member) string {
	var peers []string
	for _, m := range ms {
		peers = append(peers, m.Name+"="+m.Link)
	}
	return strings.Join(peers, ",")
}

// Start runs the member's coordinator with peers and waits until its API
// listens; the test's end kills it (and logs its output when the test
// failed, or BM_TEST_LOG is set).
func (m *Member) Start(t testing.TB, peers, htpasswd string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "serve", "--data-dir", m.Data, "--api-listen", m.API, "--mqtt-listen", m.MQTT,
		"--auth", "http_basic", "--htpasswd", htpasswd, "--tick", "100ms",
		"--cluster-member", m.Name, "--cluster-listen", m.Link, "--cluster-peers", peers,
		"--cluster-cert", m.Cert, "--cluster-cert-key", m.Key, "--cluster-ca", m.CAFile)
	cmd.Args = append(cmd.Args, m.Extra...)
	cmd.Env = append(os.Environ(), "BM_TEST_AS_COORDINATOR=1")
	log, err := os.OpenFile(m.Log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Proc{Cmd: cmd, Done: make(chan struct{})}
	go func() { _ = cmd.Wait(); log.Close(); close(p.Done) }()
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() || os.Getenv("BM_TEST_LOG") != "" {
			b, _ := os.ReadFile(m.Log)
			t.Logf("log of %s:\n%s", m.Name, b)
		}
	})
	m.Proc = p
	deadline := time.Now().Add(30 * time.Second)
	for {
		if c, err := net.DialTimeout("tcp", m.API, time.Second); err == nil {
			c.Close()
			return
		}
		select {
		case <-p.Done:
			t.Fatalf("member %s exited before it listened on %s", m.Name, m.API)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("member %s does not listen on %s after 30 s", m.Name, m.API)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Client is a client of the member's API as ClusterUser.
func (m *Member) Client(t testing.TB) *Client {
	return &Client{Base: "http://" + m.API, T: t, User: ClusterUser, Password: ClusterPassword}
}

// ClusterStatus is GET /v1/cluster's answer.
type ClusterStatus struct {
	Member  string `json:"member"`
	Leader  string `json:"leader"`
	Members []struct {
		Name         string `json:"name"`
		Role         string `json:"role"`
		Voter        bool   `json:"voter"`
		AppliedIndex uint64 `json:"applied_index"`
	} `json:"members"`
}

// Settled waits until every member in ms reports the same leader and the
// others of want as followers, every reachable member a voter, and the
// API serves through each; it returns the leader's name.
func Settled(t testing.TB, ms []*Member, want int, within time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(within)
	var last string
	for time.Now().Before(deadline) {
		leader, ok := "", true
		for _, m := range ms {
			var st ClusterStatus
			if code := m.Client(t).Do("GET", "/v1/cluster", nil, &st); code != 200 {
				ok, last = false, fmt.Sprintf("%s: GET /v1/cluster %d", m.Name, code)
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
				ok, last = false, fmt.Sprintf("%s sees %+v", m.Name, st)
				break
			}
			leader = st.Leader
		}
		// And the leader's engine serves, through every member.
		for _, m := range ms {
			if !ok {
				break
			}
			if code := m.Client(t).Do("GET", "/v1/nodes", nil, nil); code != 200 {
				ok, last = false, fmt.Sprintf("GET /v1/nodes through %s: %d", m.Name, code)
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
