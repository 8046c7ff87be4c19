// Package agent is the edge agent of one site: it holds the site's MQTT
// link to the coordinator and wires the parts that do the site's work,
// each in its own package with its own state and lock: the durable
// outbox and exactly-once command runner (agent/outbox), the BMCs
// (agent/bmc), ramdisk boots (agent/boot), the site broker and relay
// (agent/relay) and the simulator (agent/sim). It must never decide a
// node's lifecycle: it does what the coordinator's commands say.
package agent

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/bmedge/bmedge/agent/bmc"
	"github.com/bmedge/bmedge/agent/boot"
	"github.com/bmedge/bmedge/agent/console"
	"github.com/bmedge/bmedge/agent/discover"
	"github.com/bmedge/bmedge/agent/outbox"
	"github.com/bmedge/bmedge/agent/plan"
	"github.com/bmedge/bmedge/agent/relay"
	"github.com/bmedge/bmedge/agent/sim"
	"github.com/bmedge/bmedge/agent/sitecache"
	"github.com/bmedge/bmedge/lib/clock"
	"github.com/bmedge/bmedge/lib/mqttlink"
	"github.com/bmedge/bmedge/lib/ratelog"
	"github.com/bmedge/bmedge/protocol"
)

// Agent is a running edge agent.
type Agent struct {
	cfg  Config
	log  *slog.Logger
	link *mqttlink.Link
	// cons relays the nodes' serial consoles (set in Run).
	cons *console.Manager

	mu sync.Mutex
	// ob is the durable outbox and the exactly-once command runner.
	ob *outbox.Outbox
	// bmcs are the site's BMCs (agent/bmc).
	bmcs *bmc.Set
	// boot prepares and ends the nodes' ramdisk boots (agent/boot).
	boot *boot.Boot
	// sim runs the simulated ramdisks (agent/sim, --simulate).
	sim *sim.Sim
	ctx context.Context
	// metrics are served on Config.MetricsListen (metricsAddr, bound).
	metrics     *agentMetrics
	metricsAddr string
	// ready is closed once link is set: callbacks may fire before Dial returns.
	ready chan struct{}
	// up is the way to the coordinator; relay the site broker and the
	// relay of the ramdisks' messages (agent/relay).
	up    *relay.Uplink
	relay *relay.Relay
	// cache is the site image cache as the nodes reach it
	// (agent/sitecache; off without Config.Cache.Dir).
	cache *sitecache.Cache
	// plans runs the nodes' plans (agent/plan, plans.go); heard is when
	// the coordinator was last heard.
	plans *plan.Runner
	heard heardAt
	// warn logs refused commands at a bounded rate.
	warn *ratelog.Limiter
	// term is the highest coordinator cluster term seen (fence.go).
	term term
	// disc is the site's discovery (discovery.go); discWarn logs its
	// refusals at a bounded rate; simKick wakes the simulated unknown
	// machines.
	disc     *discover.Gate
	discWarn *ratelog.Limiter
	simKick  chan struct{}
}

// DefaultOutboxLimit is the default of Config.OutboxLimit.
const DefaultOutboxLimit = outbox.DefaultLimit

// New prepares an agent; Run connects it.
func New(cfg Config) *Agent {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.ResendInterval == 0 {
		cfg.ResendInterval = 5 * time.Second
	}
	if cfg.ClientID == "" {
		cfg.ClientID = "edge-" + cfg.Site
	}
	if cfg.Sim.Heartbeat == 0 {
		cfg.Sim.Heartbeat = 10 * time.Second
	}
	if cfg.PowerSyncConcurrency <= 0 {
		cfg.PowerSyncConcurrency = 8
	}
	if cfg.BMCConcurrency <= 0 {
		cfg.BMCConcurrency = 32
	}
	if cfg.OutboxLimit <= 0 {
		cfg.OutboxLimit = outbox.DefaultLimit
	}
	if cfg.HeartbeatSummary <= 0 {
		cfg.HeartbeatSummary = DefaultHeartbeatSummary
	}
	cfg.Clock = clock.Or(cfg.Clock)
	a := &Agent{cfg: cfg, log: cfg.Log, ready: make(chan struct{}), simKick: make(chan struct{}, 1),
		disc: discover.New(cfg.Site, []byte(cfg.Password), cfg.Clock), discWarn: ratelog.New(cfg.Log, time.Minute)}
	a.ob = outbox.New(outbox.Config{Site: cfg.Site, Dir: cfg.StateDir, Limit: cfg.OutboxLimit, Resend: cfg.ResendInterval, Log: cfg.Log, Clock: cfg.Clock,
		Publish: a.publish, Resent: func(n int) { a.metrics.resent.Add(float64(n)) }})
	a.bmcs = bmc.New(bmc.Config{Site: cfg.Site, Log: cfg.Log, Clock: cfg.Clock, Builders: a.builders(), Concurrency: cfg.BMCConcurrency,
		PowerSyncInterval: cfg.PowerSyncInterval, PowerSyncConcurrency: cfg.PowerSyncConcurrency,
		HealthInterval: cfg.HealthInterval, SensorInterval: cfg.SensorInterval, Withdraw: func(id string) bool { return a.ob.Withdraw(id) },
		Report:     func(m *protocol.Message) { a.ob.Send(protocol.BMCEvtTopic(cfg.Site), m, time.Time{}) },
		Paused:     a.ob.Full,
		Observe:    func(err error) { a.observePowerRead(err) },
		BlobURL:    func(ctx context.Context, u, sum string) (string, error) { return a.cache.BlobURL(ctx, u, sum) },
		MediaURL:   func(ctx context.Context, u string) (string, error) { return a.cache.MediaURL(ctx, u) },
		BootISOURL: func(ctx context.Context, k, r, p string) (string, error) { return a.cache.BootISOURL(ctx, k, r, p) },
		NewID:      outbox.NewID})
	a.cache = sitecache.New(sitecache.Config{Site: cfg.Site, Log: cfg.Log, Clock: cfg.Clock, Opts: cfg.Cache, SimNodes: cfg.Sim.Nodes,
		BMCs: a.bmcs.Addresses, Own: a.ownAddrs})
	a.boot = boot.New(boot.Config{Site: cfg.Site, Log: cfg.Log, Clock: cfg.Clock, Ramdisk: cfg.Ramdisk, Netboot: cfg.Netboot,
		QEMUBrokerURL: cfg.QEMU.BrokerURL, QEMUCmdline: cfg.QEMU.Cmdline,
		SiteBroker:     func() (string, string, bool) { return a.relay.Broker() },
		Info:           a.bmcs.Info,
		NetworkBoot:    a.bmcs.NetworkBoot,
		HTTPBoot:       a.bmcs.HTTPBoot,
		PutCred:        func(node string, h []byte) { a.ob.Store().PutCred(node, h) },
		Dropped:        func(node string) { a.relay.Dropped(node) },
		Discover:       func(mac net.HardwareAddr) (string, bool) { return a.discoverMAC(mac) },
		AdmitDiscovery: a.disc.Check})
	a.up = relay.NewUplink(relay.UplinkConfig{Site: cfg.Site, Log: cfg.Log, Clock: cfg.Clock, Drop: a.ob.Drop,
		Publish: func(ctx context.Context, topic string, payload []byte) error {
			return a.link.Publish(ctx, topic, payload, false)
		},
		Observe: func(waiting, acked time.Duration) {
			if m := a.metrics; m != nil {
				m.uplink.WithLabelValues("waiting").Observe(waiting.Seconds())
				m.uplink.WithLabelValues("acknowledged").Observe(acked.Seconds())
			}
		}})
	a.relay = relay.New(relay.Config{Site: cfg.Site, Log: cfg.Log, Clock: cfg.Clock, Summary: cfg.HeartbeatSummary, SiteBroker: cfg.SiteBroker, CAFile: cfg.CAFile,
		Admit: a.boot.Admit, Up: a.publish, Outbox: a.ob, Local: a.deliverLocal, ImageArgs: a.cache.ImageArgs, NewID: outbox.NewID,
		OnResult: func(node, cmd string, ok bool) { a.plans.Result(node, cmd, ok) }, OnRunning: func(node, cmd string) { a.plans.Running(node, cmd) },
		OnDiscovery: a.discovered})
	a.plans = a.newPlans()
	a.sim = sim.New(sim.Config{Site: cfg.Site, Log: cfg.Log, Clock: cfg.Clock, Opts: cfg.Sim, ResendInterval: cfg.ResendInterval, Info: a.bmcs.Info,
		Transport: agentTransport{a}, Context: func() context.Context { return a.ctx }, CacheBase: a.cache.Base, BootMACs: a.boot.BootMACs})
	a.metrics = newAgentMetrics(a)
	a.warn = ratelog.New(cfg.Log, time.Minute)
	return a
}

// presence is the site's retained presence. Online, it says whether the
// agent relays every ramdisk of the site (relays), so that the
// coordinator may bundle everything for the site and hand it plans, and
// whether it runs the site broker (whose ramdisks the coordinator's
// broker then refuses).
func presence(site string, now time.Time, online, relay, siteBroker bool) []byte {
	b, _ := protocol.Encode(&protocol.Message{Kind: protocol.KindPresence, Site: site, Online: online, Relay: online && relay, Plans: online && relay,
		SiteBroker: online && siteBroker, Software: protocol.Software(), Sent: now})
	return b
}

// Run connects and serves until ctx ends.
func (a *Agent) Run(ctx context.Context) error {
	a.ctx = ctx
	site := a.cfg.Site
	store, err := outbox.OpenStoreClock(a.cfg.StateDir, a.log, a.cfg.Clock)
	if err != nil {
		return err
	}
	defer func() {
		if err := store.Close(); err != nil {
			a.log.Error("closing the outbox in the state folder", "err", err)
		}
	}()
	if err := a.ob.Load(store); err != nil {
		return err
	}
	a.term.highest.Store(store.LoadTerm())
	creds, err := store.LoadCreds()
	if err != nil {
		return fmt.Errorf("read the boot credentials in the state folder: %w", err)
	}
	a.boot.LoadCreds(creds)
	if err := a.loadDiscoveryConfig(store); err != nil {
		return fmt.Errorf("read the discovery configuration in the state folder: %w", err)
	}
	if err := a.boot.Keep(store); err != nil {
		return err
	}
	// Power sync polls the nodes it polled before a restart at once, not
	// only after each node's next command.
	if err := a.bmcs.Keep(store); err != nil {
		return err
	}
	cons, err := console.New(console.Config{Site: site, Log: a.log, Keep: a.cfg.ConsoleKeep, Bandwidth: a.cfg.ConsoleBandwidth, Store: store,
		Publish: func(ctx context.Context, topic string, payload []byte) error {
			return a.link.Publish(ctx, topic, payload, false)
		},
		Busy:  func() bool { return len(a.up.Queue()) > 0 },
		Yield: func() bool { return a.up.InFlight() > 0 }})
	if err != nil {
		return err
	}
	a.cons = cons
	if err := a.serveMetrics(ctx); err != nil {
		return err
	}
	var tc *tls.Config
	if a.cfg.CAFile != "" {
		if tc, err = mqttlink.TLSFromCAFile(a.cfg.CAFile); err != nil {
			return err
		}
		pin, err := mqttlink.PinOfFile(a.cfg.CAFile)
		if err != nil {
			return err
		}
		a.boot.SetCAPin(pin)
	}
	stopSite, err := a.relay.Start(ctx)
	if err != nil {
		return err
	}
	defer stopSite()
	stopBoot, err := a.boot.Start(ctx)
	if err != nil {
		return err
	}
	defer stopBoot()
	stopCache, err := a.cache.Start(ctx)
	if err != nil {
		return err
	}
	defer stopCache()
	link, err := mqttlink.Dial(ctx, mqttlink.Config{
		URL: a.cfg.BrokerURL, ClientID: a.cfg.ClientID, Username: a.cfg.Username, Password: a.cfg.Password, TLS: tc,
		Subscriptions: []string{protocol.BMCCmdTopic(site), protocol.TopicPrefix + "/site/" + site + "/node/+/cmd", protocol.DiscoveryTopic(site), protocol.ConsoleCmdTopic(site)},
		Handler:       a.handle,
		WillTopic:     protocol.SitePresenceTopic(site), WillPayload: presence(site, a.cfg.Clock.Now(), false, false, false),
		OnlineTopic: protocol.SitePresenceTopic(site), OnlinePayload: presence(site, a.cfg.Clock.Now(), true, a.relays(), a.relay.Addr() != ""),
		Logger: a.log, Clock: a.cfg.Clock,
		OnUp: func() {
			a.log.Info("edge agent connected", "site", site, "broker", a.cfg.BrokerURL)
			a.ob.ResendAll()
		},
	})
	if err != nil {
		return err
	}
	a.link = link
	close(a.ready)
	go a.up.Run(ctx)
	go a.cons.Run(ctx)
	// Simulated nodes go on as real ones do across a restart.
	if err := a.sim.Restore(store); err != nil {
		link.Close()
		return err
	}
	// And so do the plans, on those ramdisks and the BMCs.
	if err := a.startPlans(ctx); err != nil {
		link.Close()
		return err
	}
	go a.ob.ResendLoop(ctx)
	go a.relay.SummaryLoop(ctx)
	go a.bmcs.PowerSyncLoop(ctx)
	if a.cfg.Sim.Unknown > 0 {
		go a.simDiscoveryLoop(ctx)
	}
	<-ctx.Done()
	a.sim.StopAll()
	a.bmcs.CloseAll()
	// A clean stop: say offline ourselves (the will is for crashes).
	pctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_ = link.Publish(pctx, protocol.SitePresenceTopic(site), presence(site, a.cfg.Clock.Now(), false, false, false), true)
	cancel()
	link.Close()
	return nil
}

// AwaitUp waits for the agent's link.
func (a *Agent) AwaitUp(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-a.ready:
	}
	return a.link.AwaitUp(ctx)
}

// publish queues a message for the coordinator (relay.Uplink.Publish).
func (a *Agent) publish(topic string, payload []byte) { a.up.Publish(a.ctx, topic, payload) }

// agentTransport hands a simulated node's messages to the edge agent's
// relay, as the site broker does a real ramdisk's.
type agentTransport struct{ a *Agent }

func (t agentTransport) Publish(ctx context.Context, topic string, payload []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t.a.relay.FromRamdisk(topic, payload)
	return nil
}

// ImageCacheAddr is the address the image cache listens on ("" without one).
func (a *Agent) ImageCacheAddr() string { return a.cache.Addr() }

// deliverLocal hands a message to a node's simulated ramdisk, if it runs.
func (a *Agent) deliverLocal(node string, m *protocol.Message) bool {
	return a.sim.Deliver(node, m)
}

// Outbox returns how many results wait for the coordinator's ack.
func (a *Agent) Outbox() int {
	return a.ob.Len()
}

// forget drops everything the agent holds for a deleted node: its BMC
// (closed), power polling, boot credential, virtual media, network boot,
// simulated ramdisk (and so a simulated node's slot), and its results and
// reports still in the outbox or kept as done-records, and its plan.
func (a *Agent) forget(node string) {
	a.bmcs.Forget(node)
	a.relay.Forget(node)
	a.plans.Forget(node)
	a.ob.Forget(node)
	a.sim.Forget(node)
	a.boot.Forget(node)
	a.log.Info("node deleted at the coordinator: forgotten", "node", node)
}

// ownAddrs are the agent's listeners but the image cache's (which the
// cache adds itself): the fetch rule refuses them (agent/fetchrule).
func (a *Agent) ownAddrs() []string {
	own := a.boot.Addrs()
	if x := a.relay.Addr(); x != "" {
		own = append(own, x)
	}
	if x := a.metricsAddr; x != "" {
		own = append(own, x)
	}
	return own
}
