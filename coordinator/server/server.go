// Package server wires the coordinator together: engine, embedded broker
// (or an external one), the MQTT link and the HTTP API. It holds no logic
// of its own; it must never be imported by the agents.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/bmedge/bmedge/coordinator/api"
	"github.com/bmedge/bmedge/coordinator/broker"
	"github.com/bmedge/bmedge/coordinator/engine"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/protocol"
	"github.com/bmedge/bmedge/protocol/mqttlink"
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
	MaxConcurrentClean  int
	MaxConcurrentDeploy int
	TickInterval        time.Duration
	Log                 *slog.Logger

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
}

// Coordinator is a running coordinator.
type Coordinator struct {
	Engine    *engine.Engine
	Broker    *broker.Broker
	Link      *mqttlink.Link
	APIAddr   string
	BrokerURL string
	http      *http.Server
	ln        net.Listener
	cancel    context.CancelFunc
}

// Start brings a coordinator up and returns once it serves.
func Start(ctx context.Context, o Options) (*Coordinator, error) {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	e, err := engine.New(engine.Config{DataDir: o.DataDir, Machine: o.Machine, MaxConcurrentClean: o.MaxConcurrentClean,
		MaxConcurrentDeploy: o.MaxConcurrentDeploy, TickInterval: o.TickInterval, Log: o.Log})
	if err != nil {
		return nil, err
	}
	c := &Coordinator{Engine: e}
	ctx, c.cancel = context.WithCancel(ctx)
	user, pass := e.CoordinatorCredentials()
	c.BrokerURL = o.BrokerURL
	subs := []string{protocol.AllNodeEvents, protocol.AllBMCEvents, protocol.AllPresence}
	var pub engine.Publisher
	if o.BrokerURL == "" {
		// The embedded broker: the coordinator is its inline client, so
		// commands and events skip the loopback TCP round trip.
		hs := map[string]broker.Handler{}
		for _, f := range subs {
			hs[f] = e.HandleMessage
		}
		b, err := broker.Start(o.MQTTListen, e, o.Log, hs)
		if err != nil {
			e.Close()
			return nil, err
		}
		c.Broker = b
		c.BrokerURL = "mqtt://" + o.MQTTListen
		pub = b
	} else {
		if o.BrokerUser != "" {
			user, pass = o.BrokerUser, o.BrokerPassword
		}
		link, err := mqttlink.Dial(ctx, mqttlink.Config{URL: c.BrokerURL, ClientID: "coordinator", Username: user, Password: pass,
			Subscriptions: subs, Handler: e.HandleMessage, Logger: o.Log})
		if err != nil {
			c.closeParts()
			return nil, err
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
		return nil, err
	}
	ln, err := net.Listen("tcp", o.APIListen)
	if err != nil {
		c.closeParts()
		return nil, fmt.Errorf("API listener on %s: %w; pick another address with --api-listen", o.APIListen, err)
	}
	c.ln = ln
	c.APIAddr = ln.Addr().String()
	c.http = &http.Server{Handler: api.New(e, o.Log, adv), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := c.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			o.Log.Error("API server stopped", "err", err)
		}
	}()
	if c.Link != nil {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := c.Link.AwaitUp(wctx); err != nil {
			o.Log.Warn("coordinator is not yet connected to the broker; it keeps trying", "broker", c.BrokerURL)
		}
	}
	return c, nil
}

func (c *Coordinator) closeParts() {
	c.cancel()
	if c.Link != nil {
		c.Link.Close()
	}
	if c.Broker != nil {
		_ = c.Broker.Close()
	}
	c.Engine.Close()
}

// Close stops the API, the link, the broker and the engine.
func (c *Coordinator) Close() {
	if c.http != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_ = c.http.Shutdown(ctx)
		cancel()
	}
	c.closeParts()
}
