// Package agent is the edge agent of one site: it holds the site's MQTT
// link to the coordinator, runs out-of-band commands on the site's BMCs,
// keeps every result in an outbox until the coordinator acknowledges it,
// and (first form) simulates the site's nodes and their ramdisk agents
// speaking the real protocol. It must never decide a node's lifecycle:
// it does what the coordinator's commands say.
package agent

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/bmedge/bmedge/agent/bmc"
	"github.com/bmedge/bmedge/agent/boot"
	"github.com/bmedge/bmedge/agent/outbox"
	"github.com/bmedge/bmedge/agent/relay"
	"github.com/bmedge/bmedge/protocol"
	"github.com/bmedge/bmedge/protocol/mqttlink"
	"github.com/bmedge/bmedge/protocol/netbudget"
	"github.com/bmedge/bmedge/protocol/session"
)

// Credentials is the file `coordinator site add` writes for an edge agent.
type Credentials struct {
	Site      string `json:"site"`
	Username  string `json:"username"`
	Password  string `json:"password"`
	BrokerURL string `json:"broker_url"`
}

// LoadCredentials reads a credentials file.
func LoadCredentials(path string) (Credentials, error) {
	var c Credentials
	b, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("read credentials file: %w (create it with 'coordinator site add SITE --credentials-file %s')", err, path)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("credentials file %s is not valid JSON: %w", path, err)
	}
	if c.Username == "" || c.Password == "" || c.Site == "" {
		return c, fmt.Errorf("credentials file %s lacks site, username or password", path)
	}
	return c, nil
}

// SimOptions shape the simulated nodes. Per node, driver_info keys
// fake_fail_step, fake_die_step, fake_reboot_step, fake_no_boot and
// fake_step_seconds override them (for failure injection in tests).
type SimOptions struct {
	Nodes        int
	StepDuration time.Duration
	BootDelay    time.Duration
	Heartbeat    time.Duration
	BMCDelay     time.Duration
	FailStep     string // every node fails this in-band step
	DieStep      string // every node's ramdisk dies during this step
	RebootStep   string // every node's ramdisk reboots on its own during this step
	NoBoot       bool   // no ramdisk ever boots
}

// QEMUOptions configure the development driver qemu-dev: the ramdisk the
// VMs boot and the broker address as the guests see it.
type QEMUOptions struct {
	Kernel, Initrd string
	// BrokerURL is the broker as seen from inside the VM (user-mode
	// networking reaches the host's loopback at 10.0.2.2).
	BrokerURL string
	// Cmdline is appended to the ramdisk's kernel parameters (bm.ip=...).
	Cmdline string
}

// Config configures an edge agent.
type Config struct {
	QEMU QEMUOptions
	// Ramdisk says how nodes whose BMC has virtual media (redfish) boot
	// the ramdisk: the ISO this agent serves and the broker it names.
	Ramdisk   boot.RamdiskOptions
	Site      string
	BrokerURL string
	Username  string
	Password  string
	ClientID  string
	// CAFile (PEM) is the CA that signs the broker's certificate, for an
	// mqtts:// broker URL; its pin is handed to the ramdisks this agent
	// boots (bm.ca), so that they verify the broker too.
	CAFile         string
	ResendInterval time.Duration
	// PowerSyncInterval is how often the power state of every real BMC
	// the agent knows (ipmi, redfish, qemu-dev; not the simulated ones)
	// is read; only changes and failures are reported. 0 disables it
	// (the agent command defaults it to 60 s).
	PowerSyncInterval time.Duration
	// PowerSyncConcurrency bounds the BMCs read at once (default 8).
	PowerSyncConcurrency int
	// BMCConcurrency bounds the BMC commands run at once across the
	// site's BMCs (default 32); more wait their turn, each within its
	// own deadline. The relay and other nodes never wait for them.
	BMCConcurrency int
	// MetricsListen, when set, serves GET /metrics (Prometheus text
	// format) there; it must be a loopback address unless
	// MetricsListenAny is set (the metrics have no authentication).
	MetricsListen    string
	MetricsListenAny bool
	// MetricsConns are the metrics listener's connection budgets (fields
	// <= 0: DefaultMetricsConns'; connbudget.go).
	MetricsConns netbudget.Limits
	// StateDir is the folder of the durable outbox (Badger, encrypted at
	// rest with a key file created there on first start): every result
	// and power report is written there, synced, before it is first
	// published, and stays until the coordinator acknowledges it; a
	// restarted agent sends again what was not acknowledged. "" keeps the
	// outbox in memory, for in-process tests only: the agent command
	// always gives a folder.
	StateDir string
	// OutboxLimit bounds the results and power reports that wait for the
	// coordinator's ack (default DefaultOutboxLimit). At the limit the
	// agent logs it, runs no new BMC command (the coordinator resends its
	// commands) and takes no power reading until acks make room; no
	// result is ever dropped. Commands already running when the limit is
	// reached still store theirs (at most BMCConcurrency more).
	OutboxLimit int
	// SiteBroker is the site's own MQTT broker, which the ramdisks use;
	// the agent relays between it and the coordinator (relay.go).
	SiteBroker relay.SiteBrokerOptions
	// HeartbeatSummary is how often the latest heartbeats of the site's
	// ramdisks go to the coordinator, as one message (default
	// DefaultHeartbeatSummary).
	HeartbeatSummary time.Duration
	// Netboot serves network boot to nodes without virtual media.
	Netboot boot.NetbootOptions
	// Cache is the site's image cache.
	Cache ImageCacheOptions
	Sim   SimOptions
	Log   *slog.Logger
}

// Agent is a running edge agent.
type Agent struct {
	cfg  Config
	log  *slog.Logger
	link *mqttlink.Link

	mu sync.Mutex
	// ob is the durable outbox and the exactly-once command runner.
	ob *outbox.Outbox
	// bmcs are the site's BMCs (agent/bmc).
	bmcs *bmc.Set
	// boot prepares and ends the nodes' ramdisk boots (agent/boot).
	boot     *boot.Boot
	sessions map[string]*session.Session
	ctx      context.Context
	// metrics are served on Config.MetricsListen (metricsAddr, bound).
	metrics     *agentMetrics
	metricsAddr string
	// ready is closed once link is set: callbacks may fire before Dial returns.
	ready chan struct{}
	// up is the way to the coordinator; relay the site broker and the
	// relay of the ramdisks' messages (agent/relay).
	up    *relay.Uplink
	relay *relay.Relay
	// cache is the site image cache (nil without one), set by Run
	// before the agent connects, never changed after.
	cache *siteCache
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
	a := &Agent{cfg: cfg, log: cfg.Log, sessions: map[string]*session.Session{}, ready: make(chan struct{})}
	a.ob = outbox.New(outbox.Config{Site: cfg.Site, Dir: cfg.StateDir, Limit: cfg.OutboxLimit, Resend: cfg.ResendInterval, Log: cfg.Log,
		Publish: a.publish, Resent: func(n int) { a.metrics.resent.Add(float64(n)) }})
	a.bmcs = bmc.New(bmc.Config{Site: cfg.Site, Log: cfg.Log, Builders: a.builders(), Concurrency: cfg.BMCConcurrency,
		PowerSyncInterval: cfg.PowerSyncInterval, PowerSyncConcurrency: cfg.PowerSyncConcurrency,
		Report:  func(m *protocol.Message) { a.ob.Send(protocol.BMCEvtTopic(cfg.Site), m, time.Time{}) },
		Paused:  a.ob.Full,
		Observe: func(err error) { a.observePowerRead(err) },
		NewID:   outbox.NewID})
	a.boot = boot.New(boot.Config{Site: cfg.Site, Log: cfg.Log, Ramdisk: cfg.Ramdisk, Netboot: cfg.Netboot,
		QEMUBrokerURL: cfg.QEMU.BrokerURL, QEMUCmdline: cfg.QEMU.Cmdline,
		SiteBroker: func() (string, string, bool) { return a.relay.Broker() },
		Info:       a.bmcs.Info,
		PutCred:    func(node string, h []byte) { a.ob.Store().PutCred(node, h) },
		Dropped:    func(node string) { a.relay.Dropped(node) }})
	a.up = relay.NewUplink(relay.UplinkConfig{Site: cfg.Site, Log: cfg.Log, Drop: a.ob.Drop,
		Publish: func(ctx context.Context, topic string, payload []byte) error {
			return a.link.Publish(ctx, topic, payload, false)
		}})
	a.relay = relay.New(relay.Config{Site: cfg.Site, Log: cfg.Log, Summary: cfg.HeartbeatSummary, SiteBroker: cfg.SiteBroker, CAFile: cfg.CAFile,
		Admit: a.boot.Admit, Up: a.publish, Outbox: a.ob, Local: a.deliverLocal, ImageArgs: a.imageArgs, NewID: outbox.NewID})
	a.metrics = newAgentMetrics(a)
	return a
}

// presence is the site's retained presence. Online, it says whether the
// agent relays every ramdisk of the site (relays), so that the
// coordinator may bundle everything for the site, and whether it runs
// the site broker (whose ramdisks the coordinator's broker then refuses).
func presence(site string, online, relay, siteBroker bool) []byte {
	b, _ := protocol.Encode(&protocol.Message{Kind: protocol.KindPresence, Site: site, Online: online, Relay: online && relay,
		SiteBroker: online && siteBroker, Software: protocol.Software(), Sent: time.Now()})
	return b
}

// Run connects and serves until ctx ends.
func (a *Agent) Run(ctx context.Context) error {
	a.ctx = ctx
	site := a.cfg.Site
	store, err := outbox.OpenStore(a.cfg.StateDir, a.log)
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
	creds, err := store.LoadCreds()
	if err != nil {
		return fmt.Errorf("read the boot credentials in the state folder: %w", err)
	}
	a.boot.LoadCreds(creds)
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
	stopCache, err := a.startImageCache(ctx)
	if err != nil {
		return err
	}
	defer stopCache()
	link, err := mqttlink.Dial(ctx, mqttlink.Config{
		URL: a.cfg.BrokerURL, ClientID: a.cfg.ClientID, Username: a.cfg.Username, Password: a.cfg.Password, TLS: tc,
		Subscriptions: []string{protocol.BMCCmdTopic(site), protocol.TopicPrefix + "/site/" + site + "/node/+/cmd"},
		Handler:       a.handle,
		WillTopic:     protocol.SitePresenceTopic(site), WillPayload: presence(site, false, false, false),
		OnlineTopic: protocol.SitePresenceTopic(site), OnlinePayload: presence(site, true, a.relays(), a.relay.Addr() != ""),
		Logger: a.log,
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
	go a.ob.ResendLoop(ctx)
	go a.relay.SummaryLoop(ctx)
	go a.bmcs.PowerSyncLoop(ctx)
	<-ctx.Done()
	a.mu.Lock()
	for _, r := range a.sessions {
		r.Stop()
	}
	a.mu.Unlock()
	a.bmcs.CloseAll()
	// A clean stop: say offline ourselves (the will is for crashes).
	pctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_ = link.Publish(pctx, protocol.SitePresenceTopic(site), presence(site, false, false, false), true)
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

// fromRamdisk takes a message a simulated ramdisk published.
func (a *Agent) fromRamdisk(topic string, payload []byte) { a.relay.FromRamdisk(topic, payload) }

// deliverLocal hands a message to a node's simulated ramdisk, if it runs.
func (a *Agent) deliverLocal(node string, m *protocol.Message) bool {
	a.mu.Lock()
	r := a.sessions[node]
	a.mu.Unlock()
	if r != nil {
		r.Deliver(m)
	}
	return r != nil
}

// Outbox returns how many results wait for the coordinator's ack.
func (a *Agent) Outbox() int {
	return a.ob.Len()
}

// forget drops everything the agent holds for a deleted node: its BMC
// (closed), power polling, boot credential, virtual media, network boot,
// simulated ramdisk (and so a simulated node's slot), and its results and
// reports still in the outbox or kept as done-records.
func (a *Agent) forget(node string) {
	a.bmcs.Forget(node)
	a.mu.Lock()
	s := a.sessions[node]
	delete(a.sessions, node)
	a.mu.Unlock()
	a.relay.Forget(node)
	a.ob.Forget(node)
	if s != nil {
		s.Stop()
	}
	a.boot.Forget(node)
	a.log.Info("node deleted at the coordinator: forgotten", "node", node)
}

func (a *Agent) runBMC(m *protocol.Message) {
	switch a.ob.Once(outbox.Command{Msg: m, CheckSeq: true, CheckFull: true,
		Start: func() { a.bmcs.Begin(m.Node) },
		End:   func() { a.bmcs.End(m.Node) },
		Run:   func() *protocol.Message { return a.bmcCommand(m) }}) {
	case outbox.Stale:
		a.metrics.stale.Inc()
		a.log.Debug("stale BMC command not run: a newer command of the node has started", "node", m.Node, "command", m.ID, "action", m.Action)
	case outbox.Full:
		a.log.Debug("BMC command not run: the outbox is full", "node", m.Node, "command", m.ID, "action", m.Action)
	}
}

// bmcCommand runs a BMC command and returns its result (nil when the
// agent is stopping).
func (a *Agent) bmcCommand(m *protocol.Message) *protocol.Message {
	// The command ends a little before its deadline, so that its result,
	// a failure saying what the BMC did, reaches the coordinator before
	// the coordinator gives up on the command with less to say.
	ctx, cancel := context.WithDeadline(a.ctx, m.Deadline.Add(-resultMargin(time.Until(m.Deadline))))
	defer cancel()
	err := a.execLimited(ctx, m)
	if err != nil && a.ctx.Err() != nil {
		// The agent is stopping: its failure says nothing about the BMC,
		// and stored it would fail the node's operation after a restart.
		// The coordinator sends the command again to the next agent.
		a.log.Info("edge agent stopping: BMC command interrupted, no result kept", "node", m.Node, "command", m.ID, "action", m.Action)
		return nil
	}
	done := bmc.StepsDone(m, err)
	var se *bmc.StepsError
	errors.As(err, &se)
	if err == nil {
		a.bmcs.CommandDone(m)
	}
	if err == nil || done > 0 {
		a.boot.Ended(m, done)
	}
	res := &protocol.Message{Kind: protocol.KindResult, ID: outbox.NewID(), Site: a.cfg.Site, Node: m.Node, Sent: time.Now(), CommandID: m.ID, Seq: m.Seq, OK: err == nil}
	if err != nil {
		res.Error = err.Error()
	}
	if se != nil {
		res.Data = map[string]any{protocol.StepsDone: se.Done}
	}
	return res
}

// execLimited runs a BMC command when one of the site's BMC slots is
// free (Config.BMCConcurrency), or fails when ctx ends first.
func (a *Agent) execLimited(ctx context.Context, m *protocol.Message) error {
	return a.bmcs.Limited(ctx, func() error { return a.execBMC(ctx, m) })
}

// resultMargin is the time kept back from a command's deadline for its
// result to travel: a tenth of the time left, at most 5 s.
func resultMargin(left time.Duration) time.Duration {
	return min(max(left/10, 0), 5*time.Second)
}

func (a *Agent) execBMC(ctx context.Context, m *protocol.Message) (err error) {
	defer a.observeBMC(m, time.Now(), &err)
	return a.bmcs.Exec(ctx, m, a.boot)
}

func (a *Agent) onPower(node, state, boot string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if r := a.sessions[node]; r != nil {
		r.Stop()
		delete(a.sessions, node)
	}
	if state == protocol.PowerOff || boot != protocol.BootPXE {
		return
	}
	opts := a.cfg.Sim
	info := a.bmcs.Info(node)
	if s, _ := info["fake_fail_step"].(string); s != "" {
		opts.FailStep = s
	}
	if s, _ := info["fake_die_step"].(string); s != "" {
		opts.DieStep = s
	}
	if s, _ := info["fake_reboot_step"].(string); s != "" {
		opts.RebootStep = s
	}
	if s, _ := info["fake_no_boot"].(string); s == "true" {
		opts.NoBoot = true
	}
	if s, _ := info["fake_step_seconds"].(string); s != "" {
		var f float64
		if _, err := fmt.Sscanf(s, "%g", &f); err == nil {
			opts.StepDuration = time.Duration(f * float64(time.Second))
		}
	}
	if opts.NoBoot {
		return
	}
	s := session.New(session.Config{Site: a.cfg.Site, Node: node, Heartbeat: opts.Heartbeat, ResendInterval: a.cfg.ResendInterval,
		Runner: &simRunner{a: a, node: node, opts: opts, reboot: func() {
			// As a crash-only agent does: the node reboots into a new
			// ramdisk boot that the coordinator did not ask for.
			go a.onPower(node, protocol.PowerOn, protocol.BootPXE)
		}}, Transport: agentTransport{a}, Log: a.log})
	a.sessions[node] = s
	go func() {
		select {
		case <-a.ctx.Done():
			return
		case <-s.Stopped():
			return
		case <-time.After(opts.BootDelay):
		}
		s.Run(a.ctx)
	}()
}
