package systest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/lib/waitfor"
	"github.com/bmedge/bmedge/protocol"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestClusterPartitionedLeader cuts the leader of three coordinator
// processes (Badger on disk) off from both followers while a simulated
// site works through a clustered broker (two Mosquittos bridged: the
// leader reaches the site through one, the followers through the
// other, as members in different rooms would), and checks that the
// cut-off leader keeps nothing:
//
//   - it stops leading, and a write sent to it is refused (503), never
//     committed; so is a read;
//   - the followers elect a leader of a newer term, which serves writes
//     and carries on with the command the old leader had sent;
//   - a command the old leader sent before the cut but that reaches the
//     site only after the new leader's (its path to its broker was held
//     up; the test holds it in a proxy) is refused at the site by its
//     term and counted (bmedge_agent_commands_refused_total{kind=
//     "older-term"});
//   - after the heal the old leader follows the new one, with the same
//     applied index and, once it leads again (a transfer of the
//     leadership loads its engine from its own store), the same node
//     records and histories; the write refused during the cut is nowhere.
//
// The cluster link of every member runs through a proxy of the test
// (partitionNet); the cut closes every connection from or to the leader's
// process and refuses new ones, both ways, until the heal.
func TestClusterPartitionedLeader(t *testing.T) {
	t.Parallel()
	mosq := requireTool(t, "mosquitto")
	if _, err := os.Stat("/proc/net/tcp"); err != nil {
		t.Skip("the partition needs /proc/net/tcp to tell which member opened a link connection")
	}
	ms, htpasswd := testrig.NewCluster(t, 3)
	started := time.Now()
	// Two brokers bridged: m1 for c1 (the leader to be cut off), m2 for
	// the site and the other members.
	m1 := testrig.FreeOn(t, ms[0].IP)
	m2 := testrig.FreeOn(t, ms[1].IP)
	startMosquitto(t, mosq, m1, "")
	startMosquitto(t, mosq, m2, m1)
	hold := newHoldProxy(t, ms[0].IP, m1)
	pn := newPartitionNet(t)
	var peers []string
	for _, m := range ms {
		peers = append(peers, m.Name+"="+pn.front(t, m.IP, m.Link, m.Name))
	}
	for i, m := range ms {
		broker := "mqtt://" + m2
		if i == 0 {
			broker = "mqtt://" + hold.addr()
		}
		m.Extra = []string{"--broker-url", broker, "--advertise-broker-url", "mqtt://" + m2, "--resend-interval", "500ms", "--wait-timeout", "60s"}
		m.Start(t, strings.Join(peers, ","), htpasswd)
		pn.member(m.Proc.Cmd.Process.Pid, m.Name)
	}
	byName := map[string]*testrig.Member{}
	for _, m := range ms {
		byName[m.Name] = m
	}
	old := ms[0]
	leadBy(t, ms, old.Name)
	term := selfOf(ownStatus(t, old)).Term
	t.Logf("%s leads in term %d, %s after the start", old.Name, term, time.Since(started).Round(time.Millisecond))

	oc := old.Client(t)
	var creds agent.Credentials
	if code := oc.Do("POST", "/v1/sites", map[string]string{"name": "site1"}, &creds); code != 201 {
		t.Fatalf("site add through %s: %d", old.Name, code)
	}
	a := testrig.StartAgentConfig(t, creds, agent.Config{MetricsListen: "127.0.0.1:0",
		Sim: agent.SimOptions{Nodes: 3, StepDuration: 200 * time.Millisecond, BMCDelay: 50 * time.Millisecond}})
	var ids []string
	for i := range 3 {
		ids = append(ids, oc.CreateNode(fmt.Sprintf("p%d", i), "site1", nil))
	}
	// The site works with the leader through the bridge.
	oc.MustVerb(ids[0], "manage", nil)
	if n := oc.WaitRest(ids[0], 30*time.Second); n.State != "manageable" {
		t.Fatalf("manage through %s: %s (%s)", old.Name, n.State, n.LastError)
	}
	if got := olderTermRefusals(t, a); got != 0 {
		t.Fatalf("the site refused %v older-term messages before any change of leader", got)
	}

	// The leader's way to its broker is held up: the command of the
	// next verb leaves the leader (committed by a majority first) but
	// does not reach the site.
	hold.hold()
	oc.MustVerb(ids[1], "manage", nil)
	var held []heldMessage
	if !waitfor.Until(30*time.Second, func() bool {
		held = hold.messages(t, "site1")
		return containsCommand(held, ids[1], protocol.ActionValidate, term)
	}) {
		t.Fatalf("%s's command to validate node %s (term %d) never left it; held: %+v", old.Name, ids[1], term, held)
	}

	// The cut.
	cut := time.Now()
	pn.isolate(old.Name)
	// A write sent to the cut-off leader is refused, never committed.
	code, _ := patchDescription(t, oc, ids[2], "written to the cut-off leader")
	refusedIn := time.Since(cut)
	if code != 503 {
		t.Errorf("a write to the cut-off leader %s: %d, want 503", old.Name, code)
	}
	var stepped time.Duration
	if !waitfor.Until(30*time.Second, func() bool {
		var st statusJSON
		if oc.Do("GET", "/v1/cluster", nil, &st) != 200 {
			return false
		}
		stepped = time.Since(cut)
		return selfOf(st).Role != "leader"
	}) {
		t.Fatalf("%s still leads 30 s after it was cut off", old.Name)
	}
	t.Logf("cut off: %s answered a write 503 after %s and stopped leading after %s (lease 500 ms)", old.Name, refusedIn.Round(time.Millisecond), stepped.Round(time.Millisecond))
	if code, _ := patchDescription(t, oc, ids[2], "written to the cut-off leader"); code != 503 {
		t.Errorf("a write to %s once it stopped leading: %d, want 503", old.Name, code)
	}
	// And a read: it cannot know what another leader changed since.
	if code := oc.Do("GET", "/v1/nodes/"+ids[2], nil, nil); code != 503 {
		t.Errorf("a read through the cut-off %s: %d, want 503", old.Name, code)
	}

	// The followers elect a leader of a newer term, which serves writes
	// and carries on with the held command: the site validates the node.
	var nl *testrig.Member
	var newTerm uint64
	if !waitfor.Until(60*time.Second, func() bool {
		st := ownStatus(t, ms[1])
		if st.Leader != ms[1].Name && st.Leader != ms[2].Name {
			return false
		}
		nl = byName[st.Leader]
		lst := ownStatus(t, nl)
		newTerm = selfOf(lst).Term
		return lst.Leader == nl.Name && selfOf(lst).Role == "leader"
	}) {
		t.Fatalf("no new leader among %s and %s within 60 s of the cut", ms[1].Name, ms[2].Name)
	}
	if newTerm <= term {
		t.Fatalf("new leader %s in term %d, not after %d", nl.Name, newTerm, term)
	}
	t.Logf("new leader %s in term %d, %s after the cut", nl.Name, newTerm, time.Since(cut).Round(time.Millisecond))
	// The new leader's engine serves once it has loaded (503 before).
	if l := testrig.Settled(t, []*testrig.Member{ms[1], ms[2]}, 2, time.Minute); l != nl.Name {
		t.Fatalf("the followers settled on %s, not %s", l, nl.Name)
	}
	nc := nl.Client(t)
	if n := nc.WaitRest(ids[1], 60*time.Second); n.State != "manageable" {
		t.Fatalf("node %s after the new leader's resend: %s (%s)", ids[1], n.State, n.LastError)
	}
	if code, _ := patchDescription(t, nc, ids[0], "written to the new leader"); code != 200 {
		t.Fatalf("a write to the new leader %s: %d", nl.Name, code)
	}
	if got := olderTermRefusals(t, a); got != 0 {
		t.Fatalf("the site refused %v older-term messages before the old leader's reached it", got)
	}

	// The old leader's messages reach the site now: each refused by its
	// term. (The retained discovery configuration carries no term and is
	// taken from whoever sent it: it is not counted.)
	var fenced []heldMessage
	for _, m := range hold.messages(t, "site1") {
		if strings.HasSuffix(m.Topic, "/discovery") {
			continue
		}
		if m.Term != term {
			t.Errorf("a held message of term %d, want %d: %+v", m.Term, term, m)
		}
		fenced = append(fenced, m)
	}
	heldFor := time.Since(cut)
	hold.release()
	// Each held message that reaches the site is refused by its term.
	// On a loaded machine the old leader's broker may have dropped its
	// held connection (keepalive) before the release, and what it still
	// held is lost on the way: then fewer reach the site, none acted on.
	// At least one must arrive, and none may be taken.
	var refused float64
	last, still := -1.0, time.Now()
	if !waitfor.Until(time.Minute, func() bool {
		refused = olderTermRefusals(t, a)
		if refused != last {
			last, still = refused, time.Now()
		}
		return refused >= float64(len(fenced)) || refused >= 1 && time.Since(still) > 3*time.Second
	}) || refused == 0 {
		t.Fatalf("the site refused none of the old leader's %d held messages (term %d) after the new leader's (term %d): %+v (delivery to the broker: %v)",
			len(fenced), term, newTerm, fenced, hold.deliveryError())
	}
	if refused > float64(len(fenced)) {
		t.Errorf("the site refused %v older-term messages, but %d were held", refused, len(fenced))
	}
	if refused < float64(len(fenced)) {
		t.Logf("the site refused %v of the %d held messages; the rest did not reach it (delivery to the broker: %v)", refused, len(fenced), hold.deliveryError())
	} else {
		t.Logf("held %d messages of term %d for %s; the site refused each by its term", len(fenced), term, heldFor.Round(time.Millisecond))
	}

	// The heal: the old leader follows the new one, with the same log.
	pn.heal()
	leader := testrig.Settled(t, ms, 3, time.Minute)
	if leader == old.Name {
		t.Fatalf("%s leads again after the heal: it lacks what was committed in term %d", old.Name, newTerm)
	}
	var applied map[string]uint64
	if !waitfor.Until(30*time.Second, func() bool {
		applied = map[string]uint64{}
		for _, m := range ms {
			applied[m.Name] = selfOf(ownStatus(t, m)).AppliedIndex
		}
		return applied[ms[0].Name] == applied[ms[1].Name] && applied[ms[1].Name] == applied[ms[2].Name]
	}) {
		t.Fatalf("applied indexes after the heal differ: %v", applied)
	}
	t.Logf("after the heal %s leads; applied index %v", leader, applied)
	want := nodeRecords(t, byName[leader])
	// The old leader's own store: it leads again, its engine loaded from it.
	leadBy(t, ms, old.Name)
	got := nodeRecords(t, old)
	if len(got) != len(want) || len(want) != 3 {
		t.Fatalf("%s has %d nodes, %s had %d, want 3", old.Name, len(got), leader, len(want))
	}
	for id, w := range want {
		if g := got[id]; g != w {
			t.Errorf("node %s on %s:\n  %s\nwas on %s:\n  %s", id, old.Name, g, leader, w)
		}
		if strings.Contains(w, "cut-off leader") {
			t.Errorf("the write refused during the cut is in node %s: %s", id, w)
		}
	}
	if !strings.Contains(want[ids[0]], "written to the new leader") {
		t.Errorf("the new leader's write is not in node %s: %s", ids[0], want[ids[0]])
	}
	t.Logf("whole run %s", time.Since(started).Round(time.Millisecond))
}

type memberJSON struct {
	Name         string `json:"name"`
	Role         string `json:"role"`
	Term         uint64 `json:"term"`
	AppliedIndex uint64 `json:"applied_index"`
}

type statusJSON struct {
	Member  string       `json:"member"`
	Leader  string       `json:"leader"`
	Members []memberJSON `json:"members"`
}

// ownStatus is m's own GET /v1/cluster (empty when it does not answer).
func ownStatus(t *testing.T, m *testrig.Member) statusJSON {
	t.Helper()
	var st statusJSON
	m.Client(t).Do("GET", "/v1/cluster", nil, &st)
	return st
}

// selfOf is the answering member's own report in st.
func selfOf(st statusJSON) memberJSON {
	for _, x := range st.Members {
		if x.Name == st.Member {
			return x
		}
	}
	return memberJSON{}
}

// leadBy makes name the leader (a transfer of the leadership) and waits
// until the three members agree.
func leadBy(t *testing.T, ms []*testrig.Member, name string) {
	t.Helper()
	for try := 0; try < 5; try++ {
		leader := testrig.Settled(t, ms, len(ms), time.Minute)
		if leader == name {
			return
		}
		for _, m := range ms {
			if m.Name == leader {
				code := m.Client(t).Do("PUT", "/v1/cluster/leader", map[string]string{"name": name}, nil)
				t.Logf("transfer of the leadership from %s to %s: %d", leader, name, code)
			}
		}
	}
	t.Fatalf("%s does not lead after five transfers of the leadership", name)
}

func patchDescription(t *testing.T, c *testrig.Client, id, text string) (int, time.Duration) {
	t.Helper()
	start := time.Now()
	code := c.Do("PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "add", "path": "/description", "value": text}}, nil)
	return code, time.Since(start)
}

// nodeRecords reads every node and its history through m: one line per
// node of the fields a partition could make diverge.
func nodeRecords(t *testing.T, m *testrig.Member) map[string]string {
	t.Helper()
	c := m.Client(t)
	var list struct {
		Nodes []map[string]any `json:"nodes"`
	}
	if code := c.Do("GET", "/v1/nodes/detail", nil, &list); code != 200 {
		t.Fatalf("GET /v1/nodes/detail through %s: %d", m.Name, code)
	}
	out := map[string]string{}
	for _, n := range list.Nodes {
		id, _ := n["uuid"].(string)
		var h struct {
			History []map[string]any `json:"history"`
		}
		if code := c.Do("GET", "/v1/nodes/"+id+"/history", nil, &h); code != 200 {
			t.Fatalf("history of %s through %s: %d", id, m.Name, code)
		}
		var events []string
		for _, e := range h.History {
			events = append(events, fmt.Sprint(e["event"]))
		}
		out[id] = fmt.Sprintf("name=%v state=%v target=%v description=%v last_error=%v maintenance=%v history=%q",
			n["name"], n["provision_state"], n["target_provision_state"], n["description"], n["last_error"], n["maintenance"], events)
	}
	return out
}

func olderTermRefusals(t *testing.T, a *agent.Agent) float64 {
	t.Helper()
	resp, err := http.Get("http://" + a.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, `bmedge_agent_commands_refused_total{kind="older-term"} `); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				t.Fatalf("agent metrics: %q", line)
			}
			return v
		}
	}
	t.Fatalf("the agent's /metrics has no older-term refusals count:\n%s", b)
	return 0
}

// startMosquitto runs a Mosquitto on addr until the test ends; with
// bridgeTo, bridged (bm/#, both ways, MQTT v5) to the one there.
func startMosquitto(t *testing.T, bin, addr, bridgeTo string) {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	conf := fmt.Sprintf("listener %s %s\nallow_anonymous true\npersistence false\nmax_queued_messages 100000\nmax_inflight_messages 1000\n", port, host)
	if bridgeTo != "" {
		conf += fmt.Sprintf("connection bridge\naddress %s\ntopic bm/# both 1\nbridge_protocol_version mqttv50\nremote_clientid bridge-%s\nrestart_timeout 1\n", bridgeTo, port)
	}
	dir := t.TempDir()
	f := filepath.Join(dir, "mosquitto.conf")
	if err := os.WriteFile(f, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-c", f)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("mosquitto on %s said:\n%s", addr, out.String())
		}
	})
	p.awaitListening(t, addr)
}

// partitionNet is a TCP proxy in front of each member's cluster link
// (the address the other members dial). It tells which member opened a
// connection by the socket's owner (/proc/net/tcp and the members'
// file descriptors): isolate closes every connection to or from a member
// and refuses new ones, both ways, until heal.
type partitionNet struct {
	mu      sync.Mutex
	pids    map[int]string
	targets map[string]string
	cut     string
	conns   map[*proxied]bool
	closing bool
}

type proxied struct {
	a, b       net.Conn
	from, to   string
	closedOnce sync.Once
}

func (p *proxied) close() { p.closedOnce.Do(func() { p.a.Close(); p.b.Close() }) }

func newPartitionNet(t *testing.T) *partitionNet {
	n := &partitionNet{pids: map[int]string{}, targets: map[string]string{}, conns: map[*proxied]bool{}}
	t.Cleanup(func() {
		n.mu.Lock()
		n.closing = true
		for c := range n.conns {
			c.close()
		}
		n.mu.Unlock()
	})
	return n
}

// member names the process pid.
func (n *partitionNet) member(pid int, name string) {
	n.mu.Lock()
	n.pids[pid] = name
	n.mu.Unlock()
}

// front listens on ip for member name's link at target and returns its
// address.
func (n *partitionNet) front(t *testing.T, ip, target, name string) string {
	t.Helper()
	n.mu.Lock()
	n.targets[target] = name
	n.mu.Unlock()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go n.serve(c, target)
		}
	}()
	return ln.Addr().String()
}

// owner's name of the member whose process opened c (its peer end), ""
// when it cannot be told.
func (n *partitionNet) owner(c net.Conn) string {
	local, remote := c.RemoteAddr().(*net.TCPAddr), c.LocalAddr().(*net.TCPAddr)
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return ""
	}
	want1, want2 := procAddr(local), procAddr(remote)
	inode := ""
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 9 && f[1] == want1 && f[2] == want2 {
			inode = f[9]
		}
	}
	if inode == "" {
		return ""
	}
	n.mu.Lock()
	pids := make(map[int]string, len(n.pids))
	for p, name := range n.pids {
		pids[p] = name
	}
	n.mu.Unlock()
	for pid, name := range pids {
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, fd := range fds {
			if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); l == "socket:["+inode+"]" {
				return name
			}
		}
	}
	return ""
}

// procAddr is a as /proc/net/tcp writes it.
func procAddr(a *net.TCPAddr) string {
	ip := a.IP.To4()
	if ip == nil {
		return ""
	}
	return fmt.Sprintf("%08X:%04X", binary.LittleEndian.Uint32(ip), a.Port)
}

func (n *partitionNet) serve(c net.Conn, target string) {
	from := n.owner(c)
	n.mu.Lock()
	to := n.targets[target]
	blocked := n.closing || n.blocked(from, to)
	n.mu.Unlock()
	if blocked {
		c.Close()
		return
	}
	up, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		c.Close()
		return
	}
	p := &proxied{a: c, b: up, from: from, to: to}
	n.mu.Lock()
	if n.closing || n.blocked(from, to) {
		n.mu.Unlock()
		p.close()
		return
	}
	n.conns[p] = true
	n.mu.Unlock()
	go func() { _, _ = io.Copy(up, c); p.close() }()
	_, _ = io.Copy(c, up)
	p.close()
	n.mu.Lock()
	delete(n.conns, p)
	n.mu.Unlock()
}

// blocked: a connection from one member to another crosses the cut
// (from or to the isolated member; one from a process the net cannot
// tell is refused too while a member is cut off). Under mu.
func (n *partitionNet) blocked(from, to string) bool {
	if n.cut == "" {
		return false
	}
	return from == "" || from == n.cut || to == n.cut
}

func (n *partitionNet) isolate(name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cut = name
	for p := range n.conns {
		if n.blocked(p.from, p.to) {
			p.close()
		}
	}
}

func (n *partitionNet) heal() {
	n.mu.Lock()
	n.cut = ""
	n.mu.Unlock()
}

// holdProxy forwards TCP to a broker and can hold what its clients send
// (the broker's answers still flow): hold keeps every byte sent from then
// on, release delivers them, in order, on the connections they came on
// (one whose client has closed meanwhile is closed after them).
type holdProxy struct {
	ln      net.Listener
	target  string
	mu      sync.Mutex
	cond    *sync.Cond
	holding bool
	closed  bool
	// held is every byte the clients sent while held.
	held  []byte
	conns []net.Conn
	// upErr is the first failure to deliver to the broker after a hold.
	upErr error
}

func newHoldProxy(t *testing.T, ip, target string) *holdProxy {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	h := &holdProxy{ln: ln, target: target}
	h.cond = sync.NewCond(&h.mu)
	t.Cleanup(func() {
		ln.Close()
		h.mu.Lock()
		h.closed = true
		for _, c := range h.conns {
			c.Close()
		}
		h.cond.Broadcast()
		h.mu.Unlock()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go h.serve(c)
		}
	}()
	return h
}

func (h *holdProxy) addr() string { return h.ln.Addr().String() }

// deliveryError is the first failure to write to the broker.
func (h *holdProxy) deliveryError() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.upErr
}

func (h *holdProxy) hold() {
	h.mu.Lock()
	h.holding, h.held = true, nil
	h.mu.Unlock()
}

func (h *holdProxy) release() {
	h.mu.Lock()
	h.holding = false
	h.cond.Broadcast()
	h.mu.Unlock()
}

func (h *holdProxy) serve(c net.Conn) {
	up, err := net.DialTimeout("tcp", h.target, 5*time.Second)
	if err != nil {
		c.Close()
		return
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		c.Close()
		up.Close()
		return
	}
	h.conns = append(h.conns, c, up)
	h.mu.Unlock()
	var pending []byte
	eof := false
	go func() {
		buf := make([]byte, 32<<10)
		for {
			k, err := c.Read(buf)
			h.mu.Lock()
			pending = append(pending, buf[:k]...)
			if h.holding {
				h.held = append(h.held, buf[:k]...)
			}
			if err != nil {
				eof = true
			}
			h.cond.Broadcast()
			h.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	go func() { _, _ = io.Copy(c, up); c.Close() }()
	for {
		h.mu.Lock()
		for !h.closed && (h.holding || len(pending) == 0 && !eof) {
			h.cond.Wait()
		}
		if h.closed {
			h.mu.Unlock()
			return
		}
		d := pending
		pending = nil
		done := eof && len(d) == 0
		h.mu.Unlock()
		if done {
			up.Close()
			return
		}
		if _, err := up.Write(d); err != nil {
			h.mu.Lock()
			if h.upErr == nil {
				h.upErr = err
			}
			h.mu.Unlock()
			c.Close()
			return
		}
	}
}

// heldMessage is a bmedge message in a PUBLISH the proxy holds.
type heldMessage struct {
	Topic, Kind, Action, Node string
	Term                      uint64
}

// messages decodes the PUBLISH packets (MQTT v5) held so far, their
// bundles and messages, those of site's tree.
func (h *holdProxy) messages(t *testing.T, site string) []heldMessage {
	t.Helper()
	h.mu.Lock()
	b := append([]byte(nil), h.held...)
	h.mu.Unlock()
	var out []heldMessage
	add := func(topic string, payload []byte) {
		m, err := protocol.Decode(payload)
		if err != nil {
			return
		}
		out = append(out, heldMessage{Topic: topic, Kind: m.Kind, Action: m.Action, Node: m.Node, Term: m.Term})
	}
	for len(b) > 0 {
		typ := b[0] >> 4
		size, k := binary.Uvarint(b[1:])
		if k <= 0 || uint64(len(b)-1-k) < size {
			break // a packet held in part
		}
		body := b[1+k : 1+k+int(size)]
		qos := (b[0] >> 1) & 3
		b = b[1+k+int(size):]
		if typ != 3 || len(body) < 2 {
			continue
		}
		tl := int(binary.BigEndian.Uint16(body))
		if len(body) < 2+tl {
			continue
		}
		topic := string(body[2 : 2+tl])
		rest := body[2+tl:]
		if qos > 0 && len(rest) >= 2 {
			rest = rest[2:]
		}
		pl, k := binary.Uvarint(rest)
		if k <= 0 || uint64(len(rest)-k) < pl {
			continue
		}
		payload := rest[k+int(pl):]
		if !strings.HasPrefix(topic, protocol.SitePrefix(site)) {
			continue
		}
		if protocol.IsBundle(payload) {
			recs, err := protocol.DecodeBundle(site, payload)
			if err != nil {
				t.Fatalf("a held bundle on %s does not decode: %v", topic, err)
			}
			for _, r := range recs {
				add(r.Topic, r.Payload)
			}
			continue
		}
		add(topic, payload)
	}
	return out
}

func containsCommand(ms []heldMessage, node, action string, term uint64) bool {
	for _, m := range ms {
		if m.Node == node && m.Action == action && m.Term == term {
			return true
		}
	}
	return false
}
