// Package server wires the coordinator together: engine, embedded broker
// (or an external one), the MQTT link and the HTTP API. It holds no logic
// of its own; it must never be imported by the agents.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/bmedge/bmedge/coordinator/api"
	"github.com/bmedge/bmedge/coordinator/cluster"
	"github.com/bmedge/bmedge/coordinator/engine"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/coordinator/inspectrules"
	"github.com/bmedge/bmedge/coordinator/metrics"
	"github.com/bmedge/bmedge/coordinator/ui"
	"github.com/bmedge/bmedge/lib/mqttbroker"
	"github.com/bmedge/bmedge/lib/mqttlink"
	"github.com/bmedge/bmedge/lib/netbudget"
	"github.com/bmedge/bmedge/protocol"
)

// Options configure a coordinator.
type Options struct {
	DataDir    string
	APIListen  string
	MQTTListen string
	// BrokerURL selects an external MQTT v5 broker instead of the embedded one.
	BrokerURL      string
	BrokerUser     string
	BrokerPassword string
	// AdvertisedBrokerURL is what edge agents are told to connect to.
	AdvertisedBrokerURL string
	Machine             fsm.Config
	// BuiltInInspectionRules are the built-in inspection rules (serve's
	// --inspection-rules).
	BuiltInInspectionRules []inspectrules.Rule
	MaxConcurrentClean     int
	MaxConcurrentDeploy    int
	TickInterval           time.Duration
	Log                    *slog.Logger
	// HistoryMaxEntries caps each node's history (0: the engine's default).
	HistoryMaxEntries int
	// Cluster, if set, makes the coordinator a member of a cluster: its
	// engine runs only while the member leads, on the member's store,
	// committing through the replicated log; the API answers on every
	// member (cluster.go).
	Cluster *cluster.Member

	// Auth is the API's authentication: "none" (allowed only when the API
	// listens on loopback) or "http_basic" with HTPasswd (bcrypt entries).
	Auth     string
	HTPasswd string
	// TLSCert and TLSKey (PEM files) turn on TLS for the API and the
	// embedded broker alike.
	TLSCert, TLSKey string
	// BrokerCAFile is the CA that signs an external broker's certificate
	// (for mqtts:// broker URLs).
	BrokerCAFile string
	// MaxPacketSize bounds every MQTT packet after CONNECT (0: the default,
	// sized for the largest real inventory).
	MaxPacketSize int
	// FDReserve is how many file descriptors the listeners leave to the
	// store and the rest of the process (0: netbudget.DefaultReserve);
	// together the API and the broker hold at most NOFILE less it.
	FDReserve int
	// NoEdgePlans: every step's command goes alone, even to sites whose
	// edge agent runs plans (serve --edge-plans=false).
	NoEdgePlans bool
	// DefaultSite: engine.Config.DefaultSite (serve --default-site).
	DefaultSite string
	// APIConns and MQTTConns are the connection budgets of the API's and
	// the embedded broker's listeners, checked at accept before TLS;
	// fields <= 0 take DefaultAPIConnLimits' and
	// mqttbroker.DefaultConnLimits'.
	APIConns, MQTTConns netbudget.Limits
}

// DefaultAPIConnLimits are the API listener's budgets. An operator's
// proxy in front of the API comes from one address: raise
// MaxPerSource (--api-max-connections-per-source) for it. A connection
// is pending until a request of it passes authentication. Pending connections
// hold at most half of the listener (MaxPending), and when the listener
// or that half is full a source holding fewer takes the place of the
// oldest pending connection of the source holding the most (netbudget),
// so that many sources' idle sockets leave room for an API client.
var DefaultAPIConnLimits = netbudget.Limits{MaxConns: 1024, MaxPerSource: 256, MaxPending: 512, MaxPendingPerSource: 32}

// Coordinator is a running coordinator.
type Coordinator struct {
	Engine *engine.Engine
	// Metrics are served at GET /metrics on the API listener.
	Metrics   *metrics.Metrics
	Broker    *mqttbroker.Broker
	Link      *mqttlink.Link
	APIAddr   string
	APIURL    string // http://APIAddr, or https:// when the API serves TLS
	BrokerURL string
	http      *http.Server
	ln        net.Listener
	// Conns is the process's descriptor pool, shared by the API and the
	// embedded broker; its Stats are the listeners' counts.
	Conns     *netbudget.Pool
	cancel    context.CancelFunc
	closeOnce sync.Once
	// web is the web view, whose event streams end at Shutdown.
	web *ui.Handler
	// member is the cluster's part (cluster.go), nil for a single
	// coordinator.
	member *memberRun
}

// Start brings a coordinator up and returns once it serves. With
// Options.Cluster it serves as a member of a cluster (cluster.go).
func Start(ctx context.Context, o Options) (*Coordinator, error) {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	// The API's security is checked before anything is opened, so that a
	// refused configuration leaves nothing behind.
	auth, apiTLS, err := apiSecurity(o)
	if err != nil {
		return nil, err
	}
	reserve := o.FDReserve
	if reserve == 0 {
		reserve = -1
	}
	pool, err := netbudget.NewPool(reserve)
	if err != nil {
		return nil, err
	}
	if o.Cluster != nil {
		return startMember(ctx, o, auth, apiTLS, pool)
	}
	c, root, err := startCore(ctx, o, auth, pool)
	if err != nil {
		return nil, err
	}
	if err := c.listen(o, auth, apiTLS, root); err != nil {
		c.closeParts()
		return nil, err
	}
	return c, nil
}

// startCore starts the engine, the broker (or the link to an external
// one) and returns the API's handler: all of a single coordinator but
// its listener, and what a cluster's leader runs.
func startCore(ctx context.Context, o Options, auth *api.BasicAuth, pool *netbudget.Pool) (*Coordinator, http.Handler, error) {
	met := metrics.New()
	ec := engine.Config{DataDir: o.DataDir, Machine: o.Machine, MaxConcurrentClean: o.MaxConcurrentClean,
		MaxConcurrentDeploy: o.MaxConcurrentDeploy, TickInterval: o.TickInterval, HistoryMaxEntries: o.HistoryMaxEntries, Log: o.Log,
		Metrics: met, NoEdgePlans: o.NoEdgePlans, DefaultSite: o.DefaultSite, BuiltInInspectionRules: o.BuiltInInspectionRules}
	if o.Cluster != nil {
		ec.Store, ec.Committer, ec.Term = o.Cluster.Store(), o.Cluster.Committer, o.Cluster.Term
	}
	e, err := engine.New(ec)
	if err != nil {
		return nil, nil, err
	}
	met.Census(e.Each, func() map[string]bool {
		online := map[string]bool{}
		for _, s := range e.Sites() {
			online[s.Name] = s.Online
		}
		return online
	})
	conns := connCollector{pool: pool, rescue: met.RescueRefusals}
	if o.Cluster == nil {
		met.Registry().MustRegister(conns)
	} else {
		met.Registry().MustRegister(o.Cluster.Collector(), conns)
	}
	c := &Coordinator{Engine: e, Metrics: met, Conns: pool}
	ctx, c.cancel = context.WithCancel(ctx)
	user, pass := e.CoordinatorCredentials()
	c.BrokerURL = o.BrokerURL
	subs := []string{protocol.AllNodeEvents, protocol.AllBMCEvents, protocol.AllPresence, protocol.AllConsoleEvents}
	var pub engine.Publisher
	if o.BrokerURL == "" {
		// The embedded broker: the coordinator is its inline client, so
		// commands and events skip the loopback TCP round trip.
		hs := map[string]mqttbroker.Handler{}
		for _, f := range subs {
			hs[f] = e.HandleMessage
		}
		bc := mqttbroker.Config{Addr: o.MQTTListen, MaxPacketSize: o.MaxPacketSize, Name: "mqtt", Conns: o.MQTTConns, Pool: pool}
		scheme := "mqtt://"
		if o.TLSCert != "" {
			cert, err := tls.LoadX509KeyPair(o.TLSCert, o.TLSKey)
			if err != nil {
				e.Close()
				return nil, nil, fmt.Errorf("TLS certificate for the broker: %w; check --tls-cert and --tls-key (make a lab pair with 'coordinator certs')", err)
			}
			bc.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
			scheme = "mqtts://"
		}
		b, err := mqttbroker.Start(bc, e, o.Log, hs)
		if err != nil {
			e.Close()
			return nil, nil, fmt.Errorf("%w; pick another address with --mqtt-listen", err)
		}
		c.Broker = b
		met.Registry().MustRegister(publishRefusedCollector{b})
		e.SetRevoker(b.Disconnect)
		c.BrokerURL = scheme + b.Addr
		pub = b
	} else {
		if o.BrokerUser != "" {
			user, pass = o.BrokerUser, o.BrokerPassword
		}
		var tc *tls.Config
		if o.BrokerCAFile != "" {
			if tc, err = mqttlink.TLSFromCAFile(o.BrokerCAFile); err != nil {
				c.closeParts()
				return nil, nil, fmt.Errorf("--broker-ca-file: %w", err)
			}
		}
		link, err := mqttlink.Dial(ctx, mqttlink.Config{URL: c.BrokerURL, ClientID: "coordinator", Username: user, Password: pass,
			Subscriptions: subs, Handler: e.HandleMessage, Logger: o.Log, TLS: tc})
		if err != nil {
			c.closeParts()
			return nil, nil, err
		}
		c.Link = link
		pub = link
	}
	adv := o.AdvertisedBrokerURL
	if adv == "" {
		adv = c.BrokerURL
	}
	if err := e.Start(pub); err != nil {
		c.closeParts()
		return nil, nil, err
	}
	h := api.New(e, o.Log, adv)
	if auth != nil {
		h.UseBasicAuth(auth)
	}
	// GET /metrics asks for the API's credentials, with the API's
	// throttling of failed logins; with --auth none (loopback only,
	// checked above) it is open, as the API is.
	mh := h.Authenticated(met.Handler(nil))
	// The web view (/ui/) asks for the same credentials; its actions are
	// requests to the API itself.
	uo := ui.Options{Log: o.Log}
	if o.Cluster != nil {
		uo.Cluster = o.Cluster.Status
	}
	web := ui.New(e, uo)
	c.web = web
	uh := h.Authenticated(web)
	root := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			mh.ServeHTTP(w, r)
			return
		}
		if r.URL.Path == "/ui" || strings.HasPrefix(r.URL.Path, "/ui/") {
			uh.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
	if c.Link != nil {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := c.Link.AwaitUp(wctx); err != nil {
			o.Log.Warn("coordinator is not yet connected to the broker; it keeps trying", "broker", c.BrokerURL)
		}
	}
	return c, root, nil
}

// listen opens the API's listener and serves root on it.
func (c *Coordinator) listen(o Options, auth *api.BasicAuth, apiTLS *tls.Config, root http.Handler) error {
	ln, err := net.Listen("tcp", o.APIListen)
	if err != nil {
		return fmt.Errorf("API listener on %s: %w; pick another address with --api-listen", o.APIListen, err)
	}
	// A name like localhost is checked again on the address it really
	// bound, in case it resolved to something else.
	if auth == nil && !ln.Addr().(*net.TCPAddr).IP.IsLoopback() {
		ln.Close()
		return noAuthError(ln.Addr().String())
	}
	c.APIAddr = ln.Addr().String()
	c.APIURL = "http://" + c.APIAddr
	// The budgets see the raw TCP connection, before any TLS handshake.
	ln = c.Conns.Wrap(ln, netbudget.Options{Name: "api", Limits: o.APIConns.Or(DefaultAPIConnLimits), Log: o.Log})
	if apiTLS != nil {
		ln = tls.NewListener(ln, apiTLS)
		c.APIURL = "https://" + c.APIAddr
	}
	c.ln = ln
	// ErrorLog takes net/http's own complaints (TLS handshakes that fail,
	// mostly clients that do not trust the certificate) into the log.
	// A connection stays pending until a request of it passes
	// authentication (settle.go), not merely until its first header.
	c.http = &http.Server{Handler: settleAuthenticated(root, auth == nil), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(o.Log.Handler(), slog.LevelInfo), ConnContext: connContext}
	// Shutdown waits for idle connections: the web view's event streams
	// end first.
	if c.web != nil {
		c.http.RegisterOnShutdown(c.web.Close)
	}
	go func() {
		if err := c.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			o.Log.Error("API server stopped", "err", err)
		}
	}()
	return nil
}

func (c *Coordinator) closeParts() {
	if c.member != nil {
		c.member.close()
		return
	}
	if c.cancel != nil {
		c.cancel()
	}
	if c.Link != nil {
		c.Link.Close()
	}
	if c.Broker != nil {
		_ = c.Broker.Close()
	}
	if c.web != nil {
		c.web.Close()
	}
	if c.Engine != nil {
		c.Engine.Close()
	}
}

// Close stops the API, the link, the broker and the engine; it may be
// called more than once.
func (c *Coordinator) Close() {
	c.closeOnce.Do(func() {
		if c.http != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			_ = c.http.Shutdown(ctx)
			cancel()
		}
		c.closeParts()
	})
}

// apiSecurity checks the API's authentication and TLS options and loads
// what they name: the htpasswd file (nil for --auth none) and the
// certificate (nil without TLS).
func apiSecurity(o Options) (*api.BasicAuth, *tls.Config, error) {
	var auth *api.BasicAuth
	switch o.Auth {
	case "", "none":
		if o.HTPasswd != "" {
			return nil, nil, fmt.Errorf("--htpasswd is given but --auth is none, so nobody would be asked for a password; add --auth http_basic")
		}
		if !netbudget.LoopbackAddr(o.APIListen) {
			return nil, nil, noAuthError(o.APIListen)
		}
	case "http_basic":
		if o.HTPasswd == "" {
			return nil, nil, fmt.Errorf("--auth http_basic needs --htpasswd FILE, an htpasswd file of bcrypt entries (make one with 'htpasswd -cB -C 12 FILE USER')")
		}
		a, err := api.LoadHTPasswd(o.HTPasswd)
		if err != nil {
			return nil, nil, fmt.Errorf("--htpasswd: %w", err)
		}
		auth = a
	default:
		return nil, nil, fmt.Errorf("--auth %q is not known; use http_basic (with --htpasswd FILE), or none on a loopback --api-listen", o.Auth)
	}
	if (o.TLSCert == "") != (o.TLSKey == "") {
		return nil, nil, fmt.Errorf("TLS needs both --tls-cert and --tls-key (PEM files; 'coordinator certs --dir DIR' makes a lab pair)")
	}
	if o.TLSCert == "" {
		return auth, nil, nil
	}
	pair, err := tls.LoadX509KeyPair(o.TLSCert, o.TLSKey)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot load the API's TLS certificate --tls-cert %s --tls-key %s: %w", o.TLSCert, o.TLSKey, err)
	}
	return auth, &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}}, nil
}

func noAuthError(addr string) error {
	return fmt.Errorf("refusing to serve the API without authentication on %s: --auth none is allowed only on a loopback address "+
		"(127.0.0.1, ::1, localhost), because anyone who reaches the API can drive every node. "+
		"Use --auth http_basic --htpasswd FILE (entries made with 'htpasswd -B -C 12'), or listen on 127.0.0.1", addr)
}
