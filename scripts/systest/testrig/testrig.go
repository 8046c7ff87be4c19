// Package testrig starts real coordinators and simulated sites for tests
// and benchmarks: embedded broker on loopback, Badger in a temp folder, an
// edge agent with simulated nodes over real MQTT. Everything it starts is
// stopped by t.Cleanup, even when the test fails.
//
// It lives with the system tests in scripts/systest, outside the programs,
// because it wires them together (it imports the coordinator and the edge
// agent). No program or shared library may import it: only _test.go files
// (and other testrig packages) do, which protocol's TestImportRule checks.
package testrig

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/coordinator/api"
	"github.com/bmedge/bmedge/coordinator/cli"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/coordinator/server"
	"github.com/bmedge/bmedge/lib/freeport"
)

// FreeAddr returns a free 127.0.0.1 address.
func FreeAddr(t testing.TB) string {
	t.Helper()
	addr, err := freeport.Addr("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// Logger is a quiet logger for tests (warnings and errors only), or a
// verbose one with BM_TEST_LOG=debug.
func Logger(t testing.TB) *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("BM_TEST_LOG") == "debug" {
		level = slog.LevelDebug
	}
	var w io.Writer = os.Stderr
	if os.Getenv("BM_TEST_LOG") == "" {
		w = testWriter{t}
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// Options for a test coordinator; zero values get fast test defaults.
type Options struct {
	DataDir   string
	BrokerURL string
	Machine   fsm.Config
	APIListen string
	MQTT      string

	// Auth, HTPasswd, TLSCert and TLSKey are server.Options' API
	// security, passed as they are.
	Auth, HTPasswd, TLSCert, TLSKey string
	// Users (name → password), when set, turns on http_basic with an
	// htpasswd file of these users; clients from NewClient (and Site)
	// log in as User, or as the first user in name order.
	Users map[string]string
	User  string
	// CACert is the CA that clients from NewClient trust, for TLSCert.
	CACert string
	// BrokerCAFile is the CA of an external mqtts:// BrokerURL.
	BrokerCAFile string
	// Log is the coordinator's log (default Logger(t)).
	Log *slog.Logger
	// NoAutomatedClean: provide and undeploy do not clean (on by default).
	NoAutomatedClean bool
}

// access is how clients of one test coordinator reach its API.
type access struct {
	user, password string
	http           *http.Client
}

// rigs holds the access of the coordinators started here, so that
// NewClient and Site work with authentication and TLS as without.
var rigs sync.Map // *server.Coordinator → access

// HTPasswd writes an htpasswd file of bcrypt entries for users (name →
// password) and returns its path. The cost is the lowest the coordinator
// accepts (api.MinBcryptCost, ~60 ms a check): good logins are cached, so
// tests pay it once per user.
func HTPasswd(t testing.TB, users map[string]string) string {
	t.Helper()
	var b strings.Builder
	for u, p := range users {
		h, err := bcrypt.GenerateFromPassword([]byte(p), api.MinBcryptCost)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s:%s\n", u, h)
	}
	path := filepath.Join(t.TempDir(), "htpasswd")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TLSClient returns an HTTP client that trusts only the CA in caFile.
func TLSClient(t testing.TB, caFile string) *http.Client {
	t.Helper()
	pem, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("%s holds no certificate", caFile)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// Coordinator starts a coordinator with fast timeouts for tests.
func Coordinator(t testing.TB, o Options) *server.Coordinator {
	t.Helper()
	if o.DataDir == "" {
		o.DataDir = t.TempDir()
	}
	if o.APIListen == "" {
		o.APIListen = "127.0.0.1:0"
	}
	if o.MQTT == "" && o.BrokerURL == "" {
		o.MQTT = FreeAddr(t)
	}
	m := o.Machine
	if m.WaitTimeout == 0 {
		m.WaitTimeout = 30 * time.Second
	}
	if m.CommandTimeout == 0 {
		m.CommandTimeout = 20 * time.Second
	}
	if m.ResendInterval == 0 {
		m.ResendInterval = 500 * time.Millisecond
	}
	m.AutomatedClean = !o.NoAutomatedClean
	if o.Log == nil {
		o.Log = Logger(t)
	}
	var acc access
	if len(o.Users) > 0 {
		if o.HTPasswd == "" {
			o.HTPasswd = HTPasswd(t, o.Users)
		}
		if o.Auth == "" {
			o.Auth = "http_basic"
		}
		acc.user = o.User
		if acc.user == "" {
			names := make([]string, 0, len(o.Users))
			for u := range o.Users {
				names = append(names, u)
			}
			sort.Strings(names)
			acc.user = names[0]
		}
		acc.password = o.Users[acc.user]
	}
	if o.CACert != "" {
		acc.http = TLSClient(t, o.CACert)
	}
	c, err := server.Start(context.Background(), server.Options{DataDir: o.DataDir, APIListen: o.APIListen, MQTTListen: o.MQTT,
		BrokerURL: o.BrokerURL, Machine: m, TickInterval: 100 * time.Millisecond, Log: o.Log,
		Auth: o.Auth, HTPasswd: o.HTPasswd, TLSCert: o.TLSCert, TLSKey: o.TLSKey, BrokerCAFile: o.BrokerCAFile})
	if err != nil {
		t.Fatal(err)
	}
	rigs.Store(c, acc)
	t.Cleanup(func() { c.Close(); rigs.Delete(c) })
	return c
}

// Client is a tiny JSON client of the coordinator API.
type Client struct {
	Base string
	T    testing.TB
	// User and Password, when User is set, are sent as HTTP Basic
	// credentials.
	User, Password string
	// HTTP is the client to send with (nil: http.DefaultClient).
	HTTP *http.Client
}

// NewClient returns a client of c's API, logged in and trusting its CA
// when the coordinator was started with Options.Users and CACert.
func NewClient(t testing.TB, c *server.Coordinator) *Client {
	cl := &Client{Base: "http://" + c.APIAddr, T: t}
	if c.APIURL != "" {
		cl.Base = c.APIURL
	}
	if v, ok := rigs.Load(c); ok {
		acc := v.(access)
		cl.User, cl.Password, cl.HTTP = acc.user, acc.password, acc.http
	}
	return cl
}

// Do sends a request and decodes the answer into out; it returns the status.
func (c *Client) Do(method, path string, body any, out any) int {
	c.T.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, c.Base+path, rd)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-OpenStack-Ironic-API-Version", "latest")
	if c.User != "" {
		req.SetBasicAuth(c.User, c.Password)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		c.T.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && len(b) > 0 {
		_ = json.Unmarshal(b, out)
	}
	return resp.StatusCode
}

// Site registers a site and starts its edge agent with simulated nodes.
func Site(t testing.TB, c *server.Coordinator, name string, sim agent.SimOptions) *agent.Agent {
	t.Helper()
	var creds agent.Credentials
	cl := NewClient(t, c)
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": name}, &creds); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	return StartAgent(t, creds, sim)
}

// StartAgent runs an edge agent with creds until the test ends.
func StartAgent(t testing.TB, creds agent.Credentials, sim agent.SimOptions) *agent.Agent {
	t.Helper()
	return StartAgentConfig(t, creds, agent.Config{Sim: sim})
}

// StartAgentConfig runs an edge agent with creds and cfg (site, broker and
// credentials come from creds; the test's log unless cfg.Log is set)
// until the test ends.
func StartAgentConfig(t testing.TB, creds agent.Credentials, cfg agent.Config) *agent.Agent {
	t.Helper()
	if cfg.Sim.Heartbeat == 0 {
		cfg.Sim.Heartbeat = 500 * time.Millisecond
	}
	if cfg.HeartbeatSummary == 0 {
		// Tests use short WAIT timeouts: heartbeats go up as often as
		// the simulated ramdisks beat.
		cfg.HeartbeatSummary = cfg.Sim.Heartbeat
	}
	cfg.Site, cfg.BrokerURL, cfg.Username, cfg.Password = creds.Site, creds.BrokerURL, creds.Username, creds.Password
	cfg.ResendInterval = 500 * time.Millisecond
	if cfg.Log == nil {
		cfg.Log = Logger(t)
	}
	a := agent.New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := a.Run(ctx); err != nil {
			t.Errorf("agent: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if err := a.AwaitUp(wctx); err != nil {
		t.Fatal(err)
	}
	return a
}

// Node is the part of a node the tests look at.
type Node struct {
	UUID           string         `json:"uuid"`
	Name           string         `json:"name"`
	State          string         `json:"provision_state"`
	Target         string         `json:"target_provision_state"`
	LastError      string         `json:"last_error"`
	Maintenance    bool           `json:"maintenance"`
	Reservation    string         `json:"reservation"`
	Properties     map[string]any `json:"properties"`
	CleanStep      map[string]any `json:"clean_step"`
	DeployStep     map[string]any `json:"deploy_step"`
	DriverInfo     map[string]any `json:"driver_info"`
	Retired        bool           `json:"retired"`
	PowerState     string         `json:"power_state"`
	InternalInfo   map[string]any `json:"driver_internal_info"`
	InstanceInfo   map[string]any `json:"instance_info"`
	ConductorGroup string         `json:"conductor_group"`
}

// Get reads a node.
func (c *Client) Get(id string) Node {
	c.T.Helper()
	var n Node
	if code := c.Do("GET", "/v1/nodes/"+id, nil, &n); code != 200 {
		c.T.Fatalf("get node %s: %d", id, code)
	}
	return n
}

// WaitRest waits until the node rests (no target, not locked) and returns it.
func (c *Client) WaitRest(id string, timeout time.Duration) Node {
	c.T.Helper()
	deadline := time.Now().Add(timeout)
	for {
		n := c.Get(id)
		// At rest: no lock, and a stable state. A failed state keeps its
		// target, as in Ironic (deploy failed → active).
		if n.Reservation == "" && (n.Target == "" || fsm.Stable(fsm.State(n.State))) {
			return n
		}
		if time.Now().After(deadline) {
			c.T.Fatalf("node %s still in %q → %q after %s (last_error %q)", id, n.State, n.Target, timeout, n.LastError)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// WaitState waits until the node is in state.
func (c *Client) WaitState(id, state string, timeout time.Duration) Node {
	c.T.Helper()
	deadline := time.Now().Add(timeout)
	for {
		n := c.Get(id)
		if n.State == state {
			return n
		}
		if time.Now().After(deadline) {
			c.T.Fatalf("node %s in %q, not %q, after %s (last_error %q)", id, n.State, state, timeout, n.LastError)
		}
		time.Sleep(30 * time.Millisecond)
	}
}

// Verb puts a provision target and returns the status.
func (c *Client) Verb(id, target string, extra map[string]any) (int, string) {
	c.T.Helper()
	body := map[string]any{"target": target}
	for k, v := range extra {
		body[k] = v
	}
	var e struct {
		ErrorMessage string `json:"error_message"`
	}
	code := c.Do("PUT", "/v1/nodes/"+id+"/states/provision", body, &e)
	var inner struct {
		Faultstring string `json:"faultstring"`
	}
	if json.Unmarshal([]byte(e.ErrorMessage), &inner) == nil && inner.Faultstring != "" {
		return code, inner.Faultstring
	}
	return code, e.ErrorMessage
}

// MustVerb puts a provision target and fails the test unless it is accepted.
func (c *Client) MustVerb(id, target string, extra map[string]any) {
	c.T.Helper()
	if code, msg := c.Verb(id, target, extra); code != 202 {
		c.T.Fatalf("%s on %s: %d %s", target, id, code, msg)
	}
}

// CreateNode creates a fake node at site and returns its UUID.
func (c *Client) CreateNode(name, site string, info map[string]any) string {
	c.T.Helper()
	var n Node
	body := map[string]any{"name": name, "driver": "fake", "conductor_group": site, "driver_info": info}
	if code := c.Do("POST", "/v1/nodes", body, &n); code != 201 {
		c.T.Fatalf("create node %s: %d", name, code)
	}
	return n.UUID
}

// AsCoordinator lets a test binary stand in for the coordinator program:
// called first in TestMain, it runs the command line and exits when the
// environment asks for it (BM_TEST_AS_COORDINATOR=1), so that tests can
// run the coordinator as a separate process and kill -9 it.
func AsCoordinator() {
	if os.Getenv("BM_TEST_AS_COORDINATOR") == "1" {
		os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
}
