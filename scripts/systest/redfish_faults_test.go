package systest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/coordinator/server"
	"github.com/bmedge/bmedge/drivers/redfish/vbmc"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestRedfishFaults: each fault of a Redfish BMC, met by a node through
// the whole chain (API, coordinator, MQTT, edge agent in real mode,
// redfish driver, virtual BMC), ends the operation at rest in its failed
// or previous state with a last_error that names the fault and what to
// do; once the fault is gone, the same node is managed, powered and
// booted again. No last_error, history entry, API answer or log line of
// the coordinator or the agent carries the BMC's password.
//
// The edge agent builds its redfish drivers with the driver's default
// options (30 s per request, 5 attempts, backoff from 1 s), so the slow
// BMC is made slower than the coordinator's command timeout, which a
// test can shorten.
func TestRedfishFaults(t *testing.T) {
	t.Parallel()
	t.Run("slow BMC", func(t *testing.T) {
		r := newFaultRig(t, faultRigOptions{commandTimeout: 8 * time.Second})
		r.createNode(nil)

		// A BMC slower than the command (but within the driver's 30 s
		// per request): manage fails back to enroll.
		slow := vbmc.Faults{Latency: 20 * time.Second}
		r.bmc.SetFaults(slow)
		r.verb("manage")
		n := r.waitRest("enroll", 30*time.Second)
		r.lastError(n, "BMC validate failed", "did not answer within", "the time left for this operation", "overloaded or unreachable")

		r.bmc.SetFaults(vbmc.Faults{})
		r.verb("manage")
		r.waitRest("manageable", 30*time.Second)

		// The same on a power action: the node stays manageable, its
		// power state as it was, and the BMC is not powered on.
		r.bmc.SetFaults(slow)
		r.power("power on")
		n = r.waitRest("manageable", 30*time.Second)
		r.lastError(n, "power on failed", "did not answer within", "the time left for this operation", "overloaded or unreachable")
		if n.PowerState == "power on" || r.machine.PoweredOn() {
			t.Errorf("a power on that failed powered the node on (recorded %q, machine on %v)", n.PowerState, r.machine.PoweredOn())
		}

		r.bmc.SetFaults(vbmc.Faults{})
		r.power("power on")
		n = r.waitRest("manageable", 30*time.Second)
		r.ok(n, "power on")
		if n.PowerState != "power on" || !r.machine.PoweredOn() {
			t.Fatalf("power on after the BMC recovered: recorded %q, machine on %v", n.PowerState, r.machine.PoweredOn())
		}
	})

	t.Run("5xx answers", func(t *testing.T) {
		r := newFaultRig(t, faultRigOptions{})
		r.createNode(nil)
		r.verb("manage")
		r.waitRest("manageable", 30*time.Second)

		// A BMC that answers 503 to everything: the driver tries 5
		// times with backoff, then the power action fails.
		r.bmc.SetFaults(vbmc.Faults{FailStatus: http.StatusServiceUnavailable, FailCount: -1})
		before := len(r.bmc.RequestLog())
		r.power("power on")
		n := r.waitRest("manageable", 60*time.Second)
		r.lastError(n, "power on failed", "HTTP 503", "Injected fault", "after 5 attempts", "check the BMC's health or reset it")
		// Five attempts of the power action, then the agent's read-back
		// of the power state after the failure (within 5 s: at most three
		// attempts, backoff from 1 s).
		if got := countPrefix(r.bmc.RequestLog()[before:], "GET /redfish/v1/Systems/1 503"); got < 5 || got > 8 {
			t.Errorf("the BMC answered 503 to %d requests; want 5 (one per attempt) and at most 3 of the read-back after the failure", got)
		}
		if r.machine.PoweredOn() || n.PowerState == "power on" {
			t.Fatalf("a power on that failed powered the node on (recorded %q)", n.PowerState)
		}

		// Two 503s, then answers: the retries hide them.
		r.bmc.SetFaults(vbmc.Faults{FailStatus: http.StatusServiceUnavailable, FailCount: 2})
		r.power("power on")
		n = r.waitRest("manageable", 60*time.Second)
		r.ok(n, "power on through two 503 answers")
		if !r.machine.PoweredOn() {
			t.Fatal("the BMC did not power the node on")
		}

		r.bmc.SetFaults(vbmc.Faults{})
		r.power("power off")
		n = r.waitRest("manageable", 30*time.Second)
		r.ok(n, "power off")
		if r.machine.PoweredOn() {
			t.Fatal("the BMC did not power the node off")
		}
	})

	t.Run("session limit", func(t *testing.T) {
		r := newFaultRig(t, faultRigOptions{sessionLimit: 2})
		r.createNode(map[string]any{"redfish_auth_type": "session"})

		// Other tools hold every session the BMC has.
		others := r.fillSessions()
		r.verb("manage")
		n := r.waitRest("enroll", 30*time.Second)
		r.lastError(n, "no free session", "SessionLimitExceeded", "close the other sessions", "set redfish_auth_type to basic")

		r.closeSession(others[0])
		r.verb("manage")
		r.waitRest("manageable", 30*time.Second)

		// The BMC restarts (every session is gone) and other tools take
		// all its sessions before the agent logs in again: a ramdisk
		// boot from virtual media fails and inspection ends.
		r.closeSession(others[1])
		r.bmc.DropSessions()
		others = r.fillSessions()
		r.verb("inspect")
		n = r.waitRest("inspect failed", 30*time.Second)
		r.lastError(n, "virtual media", "no free session", "SessionLimitExceeded", "set redfish_auth_type to basic")
		if st := r.state(); st.MediaInserted || r.machine.PoweredOn() {
			t.Fatalf("inspection failed but the BMC holds the ramdisk (%v) or the node is on (%v)", st.MediaInserted, r.machine.PoweredOn())
		}

		// The sessions are freed: the node boots its ramdisk again.
		for _, s := range others {
			r.closeSession(s)
		}
		r.inspectBootsAndAbort()

		// As the error says: with Basic authentication the node is
		// driven although no session is free.
		r.patch("/driver_info/redfish_auth_type", "basic")
		r.verb("manage")
		r.waitRest("manageable", 30*time.Second)
		r.fillSessions()
		r.power("power on")
		n = r.waitRest("manageable", 30*time.Second)
		r.ok(n, "power on with redfish_auth_type basic and no free session")
		if !r.machine.PoweredOn() {
			t.Fatal("the BMC did not power the node on")
		}
	})

	t.Run("certificate that does not verify", func(t *testing.T) {
		cert, key, caFile := testrig.LabCerts(t, "127.0.0.1")
		r := newFaultRig(t, faultRigOptions{certFile: cert, keyFile: key})
		if !strings.HasPrefix(r.srv.URL, "https://") {
			t.Fatalf("vBMC at %s; want https", r.srv.URL)
		}
		// No redfish_verify_ca: the system's CAs do not know the lab CA.
		r.createNode(nil)
		before := len(r.bmc.RequestLog())
		r.verb("manage")
		n := r.waitRest("enroll", 30*time.Second)
		r.lastError(n, "TLS verification failed", "not signed by a trusted CA", "set redfish_verify_ca to the file of the CA")
		if got := len(r.bmc.RequestLog()) - before; got != 0 {
			t.Fatalf("%d requests reached the BMC over a connection whose certificate did not verify", got)
		}

		r.patch("/driver_info/redfish_verify_ca", caFile)
		r.verb("manage")
		r.waitRest("manageable", 30*time.Second)

		// The BMC gets a certificate of another CA (it was replaced, or
		// reset to its self-signed one): the ramdisk boot fails.
		cert2, key2, caFile2 := testrig.LabCerts(t, "127.0.0.1")
		r.restartBMC(cert2, key2)
		before = len(r.bmc.RequestLog())
		r.verb("inspect")
		n = r.waitRest("inspect failed", 30*time.Second)
		r.lastError(n, "virtual media", "TLS verification failed", "not signed by a trusted CA",
			"redfish_verify_ca="+caFile+" is not the CA that signed it")
		if got := len(r.bmc.RequestLog()) - before; got != 0 {
			t.Fatalf("%d requests reached the BMC over a connection whose certificate did not verify", got)
		}
		if r.machine.PoweredOn() {
			t.Fatal("inspection failed but the node was powered on")
		}

		r.patch("/driver_info/redfish_verify_ca", caFile2)
		r.inspectBootsAndAbort()
	})
}

// faultRig is one coordinator, one site whose edge agent drives real
// BMCs and serves a (dummy) ramdisk ISO, one vBMC and one redfish node.
// Everything the coordinator and the agent log is kept, and searched for
// the BMC's password when the test ends.
type faultRig struct {
	t        *testing.T
	c        *server.Coordinator
	cl       *testrig.Client
	bmc      *vbmc.BMC
	srv      *vbmc.Server
	machine  *vbmc.MemoryMachine
	sysID    string
	password string
	node     string
	logs     *lockedBuffer
}

type faultRigOptions struct {
	commandTimeout    time.Duration
	sessionLimit      int
	certFile, keyFile string
}

// lockedBuffer collects log lines from several goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// await waits until the log holds want n times, failing the test after d.
func (l *lockedBuffer) await(t *testing.T, want string, n int, d time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(d); strings.Count(l.String(), want) < n; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the log does not say %q %d times after %s:\n%s", want, n, d, l.String())
		}
	}
}

func newFaultRig(t *testing.T, o faultRigOptions) *faultRig {
	t.Helper()
	pw := make([]byte, 8)
	if _, err := rand.Read(pw); err != nil {
		t.Fatal(err)
	}
	r := &faultRig{t: t, password: "BMC-pw-" + hex.EncodeToString(pw), logs: &lockedBuffer{}}
	// Debug level: a secret must not show at any level.
	log := slog.New(slog.NewTextHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	t.Cleanup(func() {
		logs := r.logs.String()
		if strings.Contains(logs, r.password) {
			t.Errorf("the BMC password is in the coordinator's or the agent's log")
		}
		if t.Failed() {
			if len(logs) > 20000 {
				logs = "...\n" + logs[len(logs)-20000:]
			}
			t.Logf("coordinator and agent log:\n%s", logs)
		}
	})

	r.machine = vbmc.NewMemoryMachine(vbmc.MemoryOptions{})
	b, err := vbmc.New(vbmc.Config{Username: "root", Password: r.password, SessionLimit: o.sessionLimit,
		Systems: []vbmc.SystemConfig{{Machine: r.machine}}})
	if err != nil {
		t.Fatal(err)
	}
	r.bmc = b
	r.srv, err = vbmc.Serve(b, vbmc.ServeOptions{CertFile: o.certFile, KeyFile: o.keyFile})
	if err != nil {
		b.Close()
		t.Fatal(err)
	}
	// Closes whichever server restartBMC left running.
	t.Cleanup(func() { r.srv.Close(); b.Close() })
	r.sysID = b.SystemIDs()[0]

	cmdTimeout := o.commandTimeout
	if cmdTimeout == 0 {
		cmdTimeout = 30 * time.Second
	}
	c, err := server.Start(context.Background(), server.Options{DataDir: t.TempDir(), APIListen: "127.0.0.1:0", MQTTListen: testrig.FreeAddr(t),
		Machine:      fsm.Config{WaitTimeout: 60 * time.Second, CommandTimeout: cmdTimeout, ResendInterval: 500 * time.Millisecond, AutomatedClean: true},
		TickInterval: 100 * time.Millisecond, Log: log.With("component", "coordinator")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	r.c, r.cl = c, testrig.NewClient(t, c)

	var creds agent.Credentials
	if code := r.cl.Do("POST", "/v1/sites", map[string]string{"name": "rack1"}, &creds); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	iso := filepath.Join(t.TempDir(), "bmramdisk.iso")
	if err := os.WriteFile(iso, bytes.Repeat([]byte("not really an ISO "), 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	testrig.StartAgentConfig(t, creds, agent.Config{Log: log.With("component", "agent"),
		Ramdisk: agent.RamdiskOptions{ISO: iso, Listen: "127.0.0.1:0", BrokerURL: "mqtt://10.0.2.2:1883"}})
	return r
}

// createNode creates the redfish node of the rig's BMC.
func (r *faultRig) createNode(extra map[string]any) {
	r.t.Helper()
	info := map[string]any{"redfish_address": r.srv.URL, "redfish_username": "root", "redfish_password": r.password}
	for k, v := range extra {
		info[k] = v
	}
	var n testrig.Node
	if code := r.cl.Do("POST", "/v1/nodes", map[string]any{"name": "srv1", "driver": "redfish", "conductor_group": "rack1", "driver_info": info}, &n); code != 201 {
		r.t.Fatalf("create node: %d", code)
	}
	r.node = n.UUID
	r.t.Cleanup(r.checkAPIForPassword)
}

// checkAPIForPassword searches the node and its history, as the API
// shows them, for the BMC's password.
func (r *faultRig) checkAPIForPassword() {
	for _, p := range []string{"/v1/nodes/" + r.node, "/v1/nodes/" + r.node + "/history"} {
		var raw json.RawMessage
		if code := r.cl.Do("GET", p, nil, &raw); code != 200 {
			r.t.Errorf("GET %s: %d", p, code)
			continue
		}
		if strings.Contains(string(raw), r.password) {
			r.t.Errorf("GET %s shows the BMC password", p)
		}
	}
}

func (r *faultRig) verb(target string) {
	r.t.Helper()
	r.cl.MustVerb(r.node, target, nil)
}

func (r *faultRig) power(target string) {
	r.t.Helper()
	if code := r.cl.Do("PUT", "/v1/nodes/"+r.node+"/states/power", map[string]string{"target": target}, nil); code != 202 {
		r.t.Fatalf("%s: %d", target, code)
	}
}

func (r *faultRig) patch(path string, value any) {
	r.t.Helper()
	if code := r.cl.Do("PATCH", "/v1/nodes/"+r.node, []map[string]any{{"op": "add", "path": path, "value": value}}, nil); code != 200 {
		r.t.Fatalf("patch %s: %d", path, code)
	}
}

// restNode is a node with what tells that it rests.
type restNode struct {
	testrig.Node
	TargetPower string `json:"target_power_state"`
}

// waitRest waits (up to bound: not stuck, not a speed test) until the
// node rests, and checks that it rests in want: no operation, no
// reservation, no target, no power target, neither an -ing nor a wait
// state.
func (r *faultRig) waitRest(want string, bound time.Duration) restNode {
	r.t.Helper()
	return r.waitRestIn(want, bound)
}

func (r *faultRig) waitRestIn(want string, bound time.Duration) restNode {
	r.t.Helper()
	r.cl.WaitRest(r.node, bound)
	var n restNode
	if code := r.cl.Do("GET", "/v1/nodes/"+r.node, nil, &n); code != 200 {
		r.t.Fatalf("get node: %d", code)
	}
	if n.State != want || (n.Target != "" && !strings.HasSuffix(n.State, "failed")) || n.Reservation != "" || n.TargetPower != "" ||
		strings.HasSuffix(n.State, "ing") || strings.Contains(n.State, "wait") {
		r.t.Fatalf("node in %q (target %q, power target %q, reservation %q, last_error %q); want it at rest in %q",
			n.State, n.Target, n.TargetPower, n.Reservation, n.LastError, want)
	}
	return n
}

// lastError checks that the node's last_error names the fault (every
// part) and not the password, and logs it for the reader.
func (r *faultRig) lastError(n restNode, parts ...string) {
	r.t.Helper()
	r.t.Logf("last_error: %s", n.LastError)
	if strings.Contains(n.LastError, r.password) {
		r.t.Fatalf("last_error carries the BMC password")
	}
	for _, p := range parts {
		if !strings.Contains(n.LastError, p) {
			r.t.Fatalf("last_error %q lacks %q", n.LastError, p)
		}
	}
	if !strings.Contains(n.LastError, r.srv.URL) {
		r.t.Fatalf("last_error %q does not name the BMC (%s)", n.LastError, r.srv.URL)
	}
}

func (r *faultRig) ok(n restNode, what string) {
	r.t.Helper()
	if n.LastError != "" {
		r.t.Fatalf("%s: last_error %q", what, n.LastError)
	}
}

func (r *faultRig) state() vbmc.SystemState {
	r.t.Helper()
	st, err := r.bmc.State(r.sysID)
	if err != nil {
		r.t.Fatal(err)
	}
	return st
}

// inspectBootsAndAbort shows that the node boots its ramdisk from virtual
// media again: inspect reaches inspect wait with the ISO inserted and the
// node on; then abort and power off end that boot.
func (r *faultRig) inspectBootsAndAbort() {
	r.t.Helper()
	r.verb("inspect")
	r.cl.WaitState(r.node, "inspect wait", 30*time.Second)
	deadline := time.Now().Add(30 * time.Second)
	for !r.machine.PoweredOn() {
		if time.Now().After(deadline) {
			r.t.Fatal("the node was not powered on for its ramdisk boot")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st := r.state(); !st.MediaInserted || !strings.HasSuffix(st.MediaImage, "/ramdisk.iso") {
		r.t.Fatalf("ramdisk boot: the BMC's CD holds %q (inserted %v); want the ramdisk ISO", st.MediaImage, st.MediaInserted)
	}
	r.verb("abort")
	r.waitRest("inspect failed", 30*time.Second)
	r.power("power off")
	n := r.waitRest("inspect failed", 30*time.Second)
	if n.PowerState != "power off" || r.machine.PoweredOn() {
		r.t.Fatalf("power off after the aborted inspection: recorded %q, machine on %v", n.PowerState, r.machine.PoweredOn())
	}
	if st := r.state(); st.MediaInserted {
		r.t.Fatal("the ramdisk ISO is still inserted after the boot ended")
	}
}

// fillSessions opens sessions, as other tools would, until the BMC has
// no free one; it returns their addresses.
func (r *faultRig) fillSessions() []string {
	r.t.Helper()
	var out []string
	hc := r.bmcClient()
	for i := 0; i < 100; i++ {
		body := fmt.Sprintf(`{"UserName":"root","Password":%q}`, r.password)
		resp, err := hc.Post(r.srv.URL+"/redfish/v1/SessionService/Sessions", "application/json", strings.NewReader(body))
		if err != nil {
			r.t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable {
			return out
		}
		if resp.StatusCode != http.StatusCreated {
			r.t.Fatalf("open a session: HTTP %d", resp.StatusCode)
		}
		out = append(out, resp.Header.Get("Location"))
	}
	r.t.Fatal("the BMC takes sessions without limit")
	return nil
}

func (r *faultRig) closeSession(path string) {
	r.t.Helper()
	req, _ := http.NewRequest(http.MethodDelete, r.srv.URL+path, nil)
	req.SetBasicAuth("root", r.password)
	resp, err := r.bmcClient().Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		r.t.Fatalf("close session %s: HTTP %d", path, resp.StatusCode)
	}
}

// bmcClient is an HTTP client of the vBMC for the test itself (plain
// HTTP: the rigs that use it serve no TLS).
func (r *faultRig) bmcClient() *http.Client {
	return &http.Client{Timeout: 10 * time.Second}
}

// restartBMC serves the same BMC on the same address with another
// certificate, closing every connection to the old server.
func (r *faultRig) restartBMC(certFile, keyFile string) {
	r.t.Helper()
	addr := strings.TrimPrefix(r.srv.URL, "https://")
	r.srv.Close()
	var err error
	for i := 0; i < 50; i++ {
		var srv *vbmc.Server
		if srv, err = vbmc.Serve(r.bmc, vbmc.ServeOptions{Addr: addr, CertFile: certFile, KeyFile: keyFile}); err == nil {
			r.srv = srv
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	r.t.Fatalf("serve the BMC again on %s: %v", addr, err)
}

func countPrefix(log []string, prefix string) int {
	n := 0
	for _, l := range log {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}
