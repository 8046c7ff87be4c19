package server

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/bmedge/bmedge/coordinator/api"
	"github.com/bmedge/bmedge/coordinator/cluster"
	"github.com/bmedge/bmedge/lib/mqttbroker"
	"github.com/bmedge/bmedge/lib/netbudget"
)

// A cluster member serves the API for the whole process; its core (the
// engine, the broker, the API's handler: startCore) runs only while the
// member leads, on the member's store. A follower forwards each request
// over the cluster link to the leader, with the caller's credentials and
// address (the leader authenticates it, as it would its own); with no
// leader, or while the new leader loads, the API answers 503 with
// Retry-After. GET /v1/cluster is every member's own answer; the
// membership changes under /v1/cluster/ are done by the leader.

// memberRun is the member's side of a Coordinator.
type memberRun struct {
	o      Options
	auth   *api.BasicAuth
	pool   *netbudget.Pool
	m      *cluster.Member
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	failed chan struct{}

	// metrics is a follower's /metrics: the member's own figures (the
	// leader's has the engine's too).
	metrics http.Handler

	mu   sync.Mutex
	core *Coordinator
	root http.Handler
	// redirect is the follower's broker on --mqtt-listen (embedded
	// broker only): it sends every site to the leader's broker (run's
	// goroutine changes it, under mu); movedBefore and unavailBefore
	// count the CONNECTs redirects closed before had answered.
	redirect                   *mqttbroker.Broker
	movedBefore, unavailBefore int64
	// redirectFailed is when the redirect's listener last failed to
	// open (logged once per failure streak).
	redirectFailed bool
}

func startMember(ctx context.Context, o Options, auth *api.BasicAuth, apiTLS *tls.Config, pool *netbudget.Pool) (*Coordinator, error) {
	r := &memberRun{o: o, auth: auth, pool: pool, m: o.Cluster, failed: make(chan struct{})}
	reg := prometheus.NewRegistry()
	reg.MustRegister(o.Cluster.Collector(), connCollector{pool: pool, rescue: func() map[string]int64 { return nil }}, redirectCollector{r})
	r.metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
	r.ctx, r.cancel = context.WithCancel(ctx)
	c := &Coordinator{Conns: pool, member: r, cancel: r.cancel}
	if err := c.listen(o, auth, apiTLS, r); err != nil {
		r.cancel()
		return nil, err
	}
	r.m.SetHandler(linkHandler{r})
	r.wg.Add(1)
	go r.run()
	return c, nil
}

// run starts the core when the member leads and stops it when it does
// not, checking every second besides raft's notifications (a
// notification may come while the previous change is under way).
func (r *memberRun) run() {
	defer r.wg.Done()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var coreFailed <-chan struct{}
	for {
		select {
		case <-r.ctx.Done():
			r.stopCore()
			r.redirectTo(false)
			return
		case <-r.m.Failed():
			r.stopCore()
			r.redirectTo(false)
			close(r.failed)
			<-r.ctx.Done()
			return
		case <-r.m.Leading():
		case <-tick.C:
		case <-coreFailed:
			// Its commit failed: the member lost its leadership (or
			// its store failed, which Failed says).
			r.o.Log.Warn("the engine stopped; this member no longer leads", "member", r.m.Name())
			r.stopCore()
			coreFailed = nil
			continue
		}
		leading := r.m.IsLeader()
		r.mu.Lock()
		running := r.core != nil
		r.mu.Unlock()
		switch {
		case leading && !running:
			r.redirectTo(false) // the leader's broker takes the port
			if c := r.startCore(); c != nil {
				coreFailed = c.Engine.Failed()
			}
		case !leading && running:
			r.stopCore()
			coreFailed = nil
		}
		r.mu.Lock()
		running = r.core != nil
		r.mu.Unlock()
		r.redirectTo(!running)
	}
}

// redirectTo starts (on) or stops the follower's redirecting broker. It
// runs only with the embedded broker: with an external one the sites
// connect there and only the leader publishes and consumes.
func (r *memberRun) redirectTo(on bool) {
	if r.o.BrokerURL != "" || on == (r.redirect != nil) {
		return
	}
	if !on {
		_ = r.redirect.Close()
		r.mu.Lock()
		mv, un := r.redirect.Redirected()
		r.movedBefore += mv
		r.unavailBefore += un
		r.redirect = nil
		r.mu.Unlock()
		return
	}
	bc := mqttbroker.Config{Addr: r.o.MQTTListen, Name: "mqtt", Conns: r.o.MQTTConns, Pool: r.pool}
	if r.o.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(r.o.TLSCert, r.o.TLSKey)
		if err != nil {
			r.o.Log.Warn("cannot load the broker's TLS certificate; sites reaching this member are not sent to the leader", "err", err)
			return
		}
		bc.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	b, err := mqttbroker.StartRedirect(bc, r.m.LeaderBrokerURL, r.o.Log)
	if err != nil {
		// The port may be held a moment longer by the engine's broker
		// just closed: run tries again every second.
		if !r.redirectFailed {
			r.o.Log.Warn("cannot listen for sites to send to the leader; trying again", "member", r.m.Name(), "err", err)
		}
		r.redirectFailed = true
		return
	}
	r.redirectFailed = false
	r.mu.Lock()
	r.redirect = b
	r.mu.Unlock()
}

// redirectedDesc: the CONNECTs this member's brokers answered as a
// follower (0x9C with the leader's URL, or 0x88 with no leader known).
var redirectedDesc = prometheus.NewDesc("bmedge_cluster_mqtt_redirected_total",
	"Site CONNECTs this member answered as a follower: moved (0x9C, use another server, with the leader's broker URL) or unavailable (0x88, no leader known).",
	[]string{"answer"}, nil)

type redirectCollector struct{ r *memberRun }

func (c redirectCollector) Describe(ch chan<- *prometheus.Desc) { ch <- redirectedDesc }

func (c redirectCollector) Collect(ch chan<- prometheus.Metric) {
	c.r.mu.Lock()
	mv, un := c.r.movedBefore, c.r.unavailBefore
	if c.r.redirect != nil {
		m, u := c.r.redirect.Redirected()
		mv, un = mv+m, un+u
	}
	c.r.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(redirectedDesc, prometheus.CounterValue, float64(mv), "moved")
	ch <- prometheus.MustNewConstMetric(redirectedDesc, prometheus.CounterValue, float64(un), "unavailable")
}

// startCore loads the engine from the member's store once every entry
// committed before is applied to it, and serves.
func (r *memberRun) startCore() *Coordinator {
	if err := r.m.Barrier(10 * time.Second); err != nil {
		r.o.Log.Warn("leading, but the log is not applied yet; trying again", "member", r.m.Name(), "err", err)
		return nil
	}
	if err := r.m.Seed(); err != nil {
		r.o.Log.Warn("leading, but the store is not in the log yet; trying again", "member", r.m.Name(), "err", err)
		return nil
	}
	start := time.Now()
	c, root, err := startCore(r.ctx, r.o, r.auth, r.pool)
	if err != nil {
		r.o.Log.Error("this member leads but cannot run the engine; handing the leadership on", "member", r.m.Name(), "err", err)
		_ = r.m.TransferLeadership("")
		return nil
	}
	r.mu.Lock()
	r.core, r.root = c, root
	r.mu.Unlock()
	r.o.Log.Info("this member leads: the engine runs", "member", r.m.Name(), "loaded", time.Since(start).Round(time.Millisecond), "broker", c.BrokerURL)
	return c
}

func (r *memberRun) stopCore() {
	r.mu.Lock()
	c := r.core
	r.core, r.root = nil, nil
	r.mu.Unlock()
	if c == nil {
		return
	}
	c.closeParts()
	r.o.Log.Info("this member follows: the engine stopped", "member", r.m.Name())
}

func (r *memberRun) local() http.Handler {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.root
}

func (r *memberRun) close() {
	r.cancel()
	r.wg.Wait()
	r.m.Close()
}

// ServeHTTP is the member's API: the leader's core answers, here or
// through the link.
func (r *memberRun) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.serve(w, req, false)
}

// linkHandler answers what followers forward: never forwarded again.
type linkHandler struct{ r *memberRun }

func (l linkHandler) ServeHTTP(w http.ResponseWriter, req *http.Request) { l.r.serve(w, req, true) }

func (r *memberRun) serve(w http.ResponseWriter, req *http.Request, forwarded bool) {
	if req.URL.Path == "/v1/cluster" || strings.HasPrefix(req.URL.Path, "/v1/cluster/") {
		r.serveCluster(w, req, forwarded)
		return
	}
	if h := r.local(); h != nil {
		// A read is answered from the engine's memory once a majority
		// confirms this member still leads: a leader cut off from the
		// others, not knowing it yet, does not answer what another
		// leader has changed since (writes need the majority anyway).
		if req.Method == http.MethodGet || req.Method == http.MethodHead {
			if err := r.m.VerifyLeader(); err != nil {
				cluster.Unavailable(w, "this member is no longer sure it leads the cluster (it cannot reach a majority); try again, or ask another member")
				return
			}
			h.ServeHTTP(w, req)
			return
		}
		h.ServeHTTP(newConfirmingWriter(w, r.m.VerifyLeader), req)
		return
	}
	// Each member's /metrics is its own: the leader's above, with the
	// engine's.
	if req.URL.Path == "/metrics" && !forwarded {
		if r.authenticated(w, req) {
			r.metrics.ServeHTTP(w, req)
		}
		return
	}
	if forwarded {
		cluster.Unavailable(w, "this member is not the cluster's leader (any more); try again")
		return
	}
	r.m.Forward(w, req)
}

// authenticated checks the caller's HTTP Basic credentials for the
// member's own answers (with --auth none, loopback only, all pass).
func (r *memberRun) authenticated(w http.ResponseWriter, req *http.Request) bool {
	if r.auth == nil {
		return true
	}
	user, pass, ok := req.BasicAuth()
	if ok {
		if good, retry := r.auth.Attempt(req.RemoteAddr, user, pass); good {
			return true
		} else if retry > 0 {
			w.Header().Set("Retry-After", retryAfter(retry))
			cluster.Error(w, http.StatusTooManyRequests, "Too many failed logins from this address; try again later.")
			return false
		}
	}
	w.Header().Set("WWW-Authenticate", `Basic realm="`+api.Realm+`"`)
	cluster.Error(w, http.StatusUnauthorized, "Incorrect username or password")
	return false
}

func retryAfter(d time.Duration) string {
	return strconv.Itoa(max(1, int(d.Seconds()+0.999)))
}

// serveCluster answers /v1/cluster (every member its own view) and the
// membership changes (the leader: a follower forwards them).
func (r *memberRun) serveCluster(w http.ResponseWriter, req *http.Request, forwarded bool) {
	if !r.authenticated(w, req) {
		return
	}
	if req.URL.Path == "/v1/cluster" && req.Method == http.MethodGet {
		st, err := r.m.Status()
		if err != nil {
			cluster.Unavailable(w, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, st)
		return
	}
	add := req.URL.Path == "/v1/cluster/members" && req.Method == http.MethodPost
	remove := strings.HasPrefix(req.URL.Path, "/v1/cluster/members/") && req.Method == http.MethodDelete
	transfer := req.URL.Path == "/v1/cluster/leader" && req.Method == http.MethodPut
	if !add && !remove && !transfer {
		cluster.Error(w, http.StatusNotFound, "Not found: the cluster's resources are GET /v1/cluster, POST /v1/cluster/members, DELETE /v1/cluster/members/NAME and PUT /v1/cluster/leader")
		return
	}
	// Changes are the leader's: the request goes there whole.
	if !r.m.IsLeader() {
		if forwarded {
			cluster.Unavailable(w, "this member is not the cluster's leader (any more); try again")
			return
		}
		r.m.Forward(w, req)
		return
	}
	var do func() error
	switch {
	case add:
		var body struct {
			Name    string `json:"name"`
			Address string `json:"address"`
		}
		if !readJSON(w, req, &body) {
			return
		}
		if body.Name == "" || body.Address == "" {
			cluster.Error(w, http.StatusBadRequest, "give the new member's name and address: {\"name\": NAME, \"address\": \"HOST:PORT\"}")
			return
		}
		do = func() error { return r.m.AddMember(body.Name, body.Address) }
	case remove:
		name := strings.TrimPrefix(req.URL.Path, "/v1/cluster/members/")
		do = func() error { return r.m.RemoveMember(name) }
	default:
		var body struct {
			Name string `json:"name"`
		}
		if !readJSON(w, req, &body) {
			return
		}
		do = func() error { return r.m.TransferLeadership(body.Name) }
	}
	if err := do(); err != nil {
		code := http.StatusBadRequest
		if errors.Is(err, cluster.ErrNotLeader) {
			code = http.StatusServiceUnavailable
			w.Header().Set("Retry-After", strconv.Itoa(cluster.RetryAfter))
		}
		cluster.Error(w, code, err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func readJSON(w http.ResponseWriter, req *http.Request, v any) bool {
	b, err := io.ReadAll(io.LimitReader(req.Body, 64<<10))
	if err == nil {
		err = json.Unmarshal(b, v)
	}
	if err != nil {
		cluster.Error(w, http.StatusBadRequest, "the body is not the JSON object expected: "+err.Error())
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// Failed is closed when the coordinator must end because its store
// failed (ExitStoreFailed): the engine's, or a cluster member's.
func (c *Coordinator) Failed() <-chan struct{} {
	if c.member != nil {
		return c.member.failed
	}
	return c.Engine.Failed()
}
