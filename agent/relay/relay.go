package relay

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net"
	neturl "net/url"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/bmedge/bmedge/lib/clock"
	"github.com/bmedge/bmedge/lib/mqttbroker"
	"github.com/bmedge/bmedge/lib/mqttlink"
	"github.com/bmedge/bmedge/lib/netbudget"
	"github.com/bmedge/bmedge/protocol"
)

// The relay. The edge agent is its site's anchor: the ramdisks of the
// site's nodes talk to an MQTT broker the agent runs on the site network
// (the site broker), never across the WAN, and the agent carries their
// messages over its one WAN connection to the coordinator:
//
//   - hello goes up at once (the ramdisk repeats it until welcomed);
//   - a heartbeat goes up at once only when it names a step the agent has
//     not seen the node run before (it tells the coordinator to stop
//     resending the command); otherwise only the node's latest heartbeat
//     is kept, and every HeartbeatSummary one summary message carries the
//     latest heartbeat of every node that beat (protocol.KindBeats);
//   - a result is written to the durable outbox, acknowledged to the
//     ramdisk at once (the agent has it now), and sent up until the
//     coordinator acknowledges it, again after a restart if need be;
//   - commands and welcomes from the coordinator go down to the node's
//     ramdisk (a write_image step through imageArgs, to the site's image
//     cache); the coordinator's acks of relayed results stay with the
//     agent.
//
// The simulated ramdisks (--simulate) go through the same relay, without
// the broker in between.

// SiteBrokerOptions configure the site's MQTT broker, which the site's
// ramdisks use.
type SiteBrokerOptions struct {
	// Listen is the broker's address on the site network (host:port).
	// Empty: no site broker; the ramdisks this agent boots are given
	// Ramdisk.BrokerURL / QEMU.BrokerURL, which may be the coordinator's.
	Listen string
	// URL is the broker as the ramdisks reach it (default mqtt://Listen,
	// or mqtts://Listen with TLS).
	URL string
	// TLSCert and TLSKey (PEM files), when set, make the broker speak
	// MQTT over TLS only. The ramdisks get the pin of the CA in CAFile
	// (bm.ca), which must have signed TLSCert.
	TLSCert, TLSKey, CAFile string
	// Conns are the broker listener's connection budgets (fields <= 0:
	// mqttbroker.DefaultConnLimits'), from the process's descriptor pool.
	Conns netbudget.Limits
}

// DefaultHeartbeatSummary is how often the heartbeats of the site's
// ramdisks go up, as one message.
const DefaultHeartbeatSummary = 10 * time.Second

// MaxBeatsPerSummary and maxSummaryBytes bound one summary message (a
// site of 10,000 simulated nodes sends several): well under
// protocol.MaxBeats, and small enough to be bundled with other messages
// (uplink sends a message of more than half a bundle alone), far under
// protocol.MaxMessageBytes, which the coordinator refuses past.
// MaxBeatDetail bounds a heartbeat's detail as the relay takes it (a
// longer one is cut, with DetailCut at its end): a ramdisk's detail is
// meant to be short, and a summary carries a thousand of them.
const (
	MaxBeatsPerSummary = 1000
	maxSummaryBytes    = protocol.MaxBundleBytes/2 - 4096
	MaxBeatDetail      = 1024
	DetailCut          = " [cut]"
)

// State is the relay's bookkeeping, under its lock (Inspect).
type State struct {
	// Beats holds each node's latest heartbeat since the last summary.
	Beats map[string]protocol.Message
	// Seen is the step each node's ramdisk was last seen running.
	Seen map[string]string
	// summary are the outbox entries of the last summary (its beats
	// too), replaced by the next one when still unacknowledged.
	summary []summaryPart
	// Sent is what the summaries last carried for each node; Held are
	// beats left out of a summary as no news (see newsBeat), carried to
	// the next.
	Sent map[string]SentBeat
	Held map[string]protocol.Message
}

// SentBeat is what a summary last carried for a node, and when.
type SentBeat struct {
	Token, Running, Detail string
	Progress               float64
	// RescueRefused are the rescue login's refusals it counted: more is
	// news too (the coordinator's /metrics).
	RescueRefused map[string]int64
	At            time.Time
}

// Outbox is what the relay needs of the durable outbox (agent/outbox).
type Outbox interface {
	// Keep stores a relayed result unchanged (false: not kept).
	Keep(topic string, m *protocol.Message, payload []byte) bool
	Ack(ids []string)
	// Withdraw takes an unacknowledged message back (a summary).
	Withdraw(id string) bool
	// PutMemOnly holds and publishes a message never written to disk.
	PutMemOnly(id, topic string, payload []byte)
	Len() int
}

// Config configures the relay.
type Config struct {
	Site string
	Log  *slog.Logger
	// Clock is the clock (default clock.Real): message times, heartbeat
	// ages and the summary's ticker.
	Clock clock.Clock
	// Summary is how often the heartbeat summary goes up (default
	// DefaultHeartbeatSummary).
	Summary    time.Duration
	SiteBroker SiteBrokerOptions
	// CAFile is the agent's CA file (--ca-file): the site broker's CA
	// when SiteBroker.CAFile is not set.
	CAFile string
	// Admit checks a ramdisk's boot credential (agent/boot).
	Admit func(node, password string) error
	// Up queues a message for the coordinator (the uplink).
	Up func(topic string, payload []byte)
	// Outbox keeps relayed results and the summaries.
	Outbox Outbox
	// Local delivers a message to a node's ramdisk when it runs in this
	// process (a simulated one) and tells whether it did.
	Local func(node string, m *protocol.Message) bool
	// ImageArgs rewrites an in-band step's image for the site cache.
	ImageArgs func(m *protocol.Message) *protocol.Message
	// NewID makes a message id.
	NewID func() string
	// OnResult, when set, is told of each result of a ramdisk once it is
	// kept in the outbox (a copy already kept too): its command and
	// whether it succeeded (the plan runner, agent/plan).
	OnResult func(node, cmdID string, ok bool)
	// OnRunning, when set, is told of each heartbeat that names the
	// command a ramdisk runs.
	OnRunning func(node, cmdID string)
	// OnDiscovery, when set, takes the report of a ramdisk in discovery
	// mode (a protocol.DiscoveryNode), the only message such a ramdisk
	// may send, and tells whether it is kept (the ramdisk is then acked).
	OnDiscovery func(node string, m *protocol.Message) bool
}

// Relay is the site broker and the relay between it (and the simulated
// ramdisks) and the coordinator.
type Relay struct {
	cfg  Config
	log  *slog.Logger
	ctx  context.Context
	site *siteBroker // nil without one; set by Start

	mu sync.Mutex
	st State
}

// New returns the relay; Start starts its site broker.
func New(cfg Config) *Relay {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.Summary <= 0 {
		cfg.Summary = DefaultHeartbeatSummary
	}
	if cfg.Local == nil {
		cfg.Local = func(string, *protocol.Message) bool { return false }
	}
	if cfg.ImageArgs == nil {
		cfg.ImageArgs = func(m *protocol.Message) *protocol.Message { return m }
	}
	return &Relay{cfg: cfg, log: cfg.Log, ctx: context.Background(), st: State{Beats: map[string]protocol.Message{}, Seen: map[string]string{},
		Sent: map[string]SentBeat{}, Held: map[string]protocol.Message{}}}
}

// Inspect calls fn with the relay's bookkeeping under its lock (tests).
func (r *Relay) Inspect(fn func(*State)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fn(&r.st)
}

// Start starts the site broker when configured; stop ends it. ctx bounds
// what the relay publishes on it.
func (r *Relay) Start(ctx context.Context) (stop func(), err error) {
	r.ctx = ctx
	return r.start()
}

// Broker is the site broker as the ramdisks reach it (ok false without
// one).
func (r *Relay) Broker() (url, pin string, ok bool) {
	if r.site == nil {
		return "", "", false
	}
	return r.site.url, r.site.pin, true
}

// Forget drops what the relay holds of a deleted node.
func (r *Relay) Forget(node string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.st.Beats, node)
	delete(r.st.Seen, node)
	delete(r.st.Sent, node)
	delete(r.st.Held, node)
}

// BeatRefresh is how often a node whose heartbeats bring no news is in a
// summary all the same (its agent_last_heartbeat, and the touch that
// keeps its WAIT state alive, as Ironic's heartbeat does); progressStep
// is the change in progress that is news.
const (
	BeatRefresh  = time.Minute
	progressStep = 0.1
)

// newsBeat tells whether b is news against what the summaries last
// carried for its node: a new boot or step, a new detail, progress moved
// by progressStep or reached 1, new rescue refusals, or BeatRefresh
// passed.
func newsBeat(last SentBeat, ok bool, b *protocol.Message, now time.Time) bool {
	return !ok || b.Token != last.Token || b.Running != last.Running || b.Detail != last.Detail ||
		math.Abs(b.Progress-last.Progress) >= progressStep || (b.Progress == 1 && last.Progress != 1) ||
		!maps.Equal(b.RescueRefused, last.RescueRefused) || now.Sub(last.At) >= BeatRefresh
}

type summaryPart struct {
	id    string
	beats []protocol.Message
}

// siteBroker is the running site broker.
type siteBroker struct {
	b   *mqttbroker.Broker
	url string
	pin string
}

// start starts the site broker when configured.
func (r *Relay) start() (stop func(), err error) {
	o := r.cfg.SiteBroker
	if o.Listen == "" {
		return func() {}, nil
	}
	if _, _, err := net.SplitHostPort(o.Listen); err != nil {
		return nil, fmt.Errorf("--site-broker-listen %q: %w (want HOST:PORT on the site network)", o.Listen, err)
	}
	cfg := mqttbroker.Config{Addr: o.Listen, Name: "site-broker", Conns: o.Conns, Pool: netbudget.Default()}
	scheme := "mqtt://"
	var pin string
	if o.TLSCert != "" || o.TLSKey != "" {
		if o.TLSCert == "" || o.TLSKey == "" {
			return nil, errors.New("the site broker's TLS needs both --site-broker-tls-cert and --site-broker-tls-key")
		}
		cert, err := tls.LoadX509KeyPair(o.TLSCert, o.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("site broker certificate: %w", err)
		}
		cfg.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		scheme = "mqtts://"
		ca := o.CAFile
		if ca == "" {
			ca = r.cfg.CAFile
		}
		if ca == "" {
			return nil, errors.New("the site broker's TLS needs the CA that signed its certificate (--site-broker-ca, or --ca-file when the same CA signs both brokers), so that the ramdisks can verify it")
		}
		if pin, err = mqttlink.PinOfFile(ca); err != nil {
			return nil, fmt.Errorf("site broker CA: %w", err)
		}
	}
	site := r.cfg.Site
	b, err := mqttbroker.Start(cfg, siteCreds{r}, r.log, map[string]mqttbroker.Handler{
		protocol.TopicPrefix + "/site/" + site + "/node/+/evt": r.FromRamdisk,
	})
	if err != nil {
		return nil, fmt.Errorf("site broker: %w; pick another address with --site-broker-listen", err)
	}
	url, err := siteBrokerURL(o.URL, scheme, b.Addr)
	if err != nil {
		_ = b.Close()
		return nil, err
	}
	r.site = &siteBroker{b: b, url: url, pin: pin}
	r.log.Info("site broker up: the site's ramdisks connect to "+url, "listen", b.Addr)
	return func() { _ = b.Close() }, nil
}

// siteBrokerURL is the site broker's URL as the ramdisks reach it: given
// (a URL without a port gets the bound one), or scheme + bound address.
func siteBrokerURL(given, scheme, bound string) (string, error) {
	if given == "" {
		return scheme + bound, nil
	}
	u, err := neturl.Parse(given)
	if err != nil || (u.Scheme != "mqtt" && u.Scheme != "mqtts") || u.Hostname() == "" || (u.Path != "" && u.Path != "/") {
		return "", fmt.Errorf("--site-broker-url %q is not a broker URL like mqtt://10.1.0.1:1883 or mqtts://edge.site:8883", given)
	}
	if u.Scheme+"://" != scheme {
		return "", fmt.Errorf("--site-broker-url %q says %s, but the site broker speaks %s (TLS comes with --site-broker-tls-cert)", given, u.Scheme, strings.TrimSuffix(scheme, "://"))
	}
	if u.Port() == "" {
		_, port, _ := net.SplitHostPort(bound)
		u.Host = net.JoinHostPort(u.Hostname(), port)
	}
	return u.Scheme + "://" + u.Host, nil
}

// Addr is the site broker's bound address ("" without one).
func (r *Relay) Addr() string {
	if r.site == nil {
		return ""
	}
	return r.site.b.Addr
}

// ConnStats are the site broker listener's counts: connections held and
// refused at accept by kind (ok false without a site broker).
func (r *Relay) ConnStats() (netbudget.Stats, bool) {
	if r.site == nil {
		return netbudget.Stats{}, false
	}
	return r.site.b.ConnStats(), true
}

// PublishRefused counts the publishes the site broker refused to
// logged-in clients, by kind (lib/mqttbroker's Refused*); ok is false
// without a site broker.
func (r *Relay) PublishRefused() (map[string]int64, bool) {
	if r.site == nil {
		return nil, false
	}
	return r.site.b.PublishRefused(), true
}

// siteCreds admits to the site broker only the ramdisks of the nodes this
// agent is booting, each with its boot's credential (from the power
// command that boots it), under its own client ID, to its own topics.
type siteCreds struct{ r *Relay }

func (c siteCreds) Authenticate(user, password, clientID string) error {
	node, ok := strings.CutPrefix(user, "node:")
	if !ok || node == "" {
		return errors.New("only the ramdisks of this site's nodes (user node:UUID) use the site broker")
	}
	if clientID != "ramdisk-"+node {
		return fmt.Errorf("client ID %q does not belong to node %s (use %q)", clientID, node, "ramdisk-"+node)
	}
	return c.r.cfg.Admit(node, password)
}

func (c siteCreds) Prefix(user string) (string, bool) {
	node, ok := strings.CutPrefix(user, "node:")
	if !ok || node == "" || strings.ContainsAny(node, "/+#") {
		return "", false
	}
	return protocol.TopicPrefix + "/site/" + c.r.cfg.Site + "/node/" + node + "/", true
}

// Dropped: a node's ramdisk boot ended at the site (its credential
// is no longer admitted, agent/boot): the site broker closes the
// connections that used it, and the relay forgets its beats.
func (r *Relay) Dropped(node string) {
	if r.site != nil {
		r.site.b.Disconnect("node:" + node)
	}
	r.mu.Lock()
	delete(r.st.Seen, node)
	delete(r.st.Sent, node)
	delete(r.st.Held, node)
	r.mu.Unlock()
}

// FromRamdisk takes a message a ramdisk of the site published (on the
// site broker, or a simulated one directly).
func (r *Relay) FromRamdisk(topic string, payload []byte) {
	site, node, leaf, err := protocol.ParseTopic(topic)
	if err != nil || site != r.cfg.Site || leaf != "evt" {
		r.log.Warn("ramdisk message rejected", "topic", topic, "reason", "not a node event topic of this site")
		return
	}
	m, err := protocol.Decode(payload)
	if err != nil {
		r.log.Warn("ramdisk message rejected", "topic", topic, "reason", err)
		return
	}
	if m.Node != node || (m.Site != "" && m.Site != site) {
		r.log.Warn("ramdisk message rejected", "topic", topic, "reason", fmt.Sprintf("message names node %q of site %q but came on node %q's topic", m.Node, m.Site, node))
		return
	}
	if strings.HasPrefix(node, protocol.DiscoveryNodePrefix) || m.Kind == protocol.KindDiscovery {
		// A machine in discovery mode is no node: it reports its
		// inventory, once, and nothing else goes up from it.
		if !strings.HasPrefix(node, protocol.DiscoveryNodePrefix) || m.Kind != protocol.KindDiscovery || r.cfg.OnDiscovery == nil {
			r.log.Warn("ramdisk message rejected", "topic", topic, "reason", "only a ramdisk in discovery mode reports a discovery, and it reports nothing else")
			return
		}
		if r.cfg.OnDiscovery(node, m) {
			r.ToRamdisk(node, &protocol.Message{Kind: protocol.KindAck, Site: site, Node: node, Sent: r.cfg.Clock.Now(), AckIDs: []string{m.ID}})
		}
		return
	}
	switch m.Kind {
	case protocol.KindHello:
		r.cfg.Up(topic, payload)
	case protocol.KindHeartbeat:
		// Taken in as a summary carries it (protocol.KindBeats): a
		// heartbeat of this site, with no summary nested in it, and a
		// short detail. One a summary would refuse would make its whole
		// chunk fail to encode.
		if len(m.Beats) > 0 {
			r.log.Warn("ramdisk message rejected", "topic", topic, "reason", "a heartbeat carries no beats")
			return
		}
		if m.Site == "" {
			m.Site = site
		}
		if len(m.Detail) > MaxBeatDetail {
			m.Detail = cutDetail(m.Detail)
			b, err := protocol.Encode(m)
			if err != nil {
				r.log.Warn("ramdisk message rejected", "topic", topic, "reason", err)
				return
			}
			payload = b
		}
		r.mu.Lock()
		r.st.Beats[node] = *m
		fresh := m.Running != "" && r.st.Seen[node] != m.Running
		if m.Running != "" {
			r.st.Seen[node] = m.Running
		}
		r.mu.Unlock()
		if fresh {
			r.cfg.Up(topic, payload)
		}
		if m.Running != "" && r.cfg.OnRunning != nil {
			r.cfg.OnRunning(node, m.Running)
		}
	case protocol.KindResult:
		if !r.keep(topic, m, payload) {
			return
		}
		// The agent holds it now, on disk: the ramdisk may forget it.
		r.ToRamdisk(node, &protocol.Message{Kind: protocol.KindAck, Site: site, Node: node, Sent: r.cfg.Clock.Now(), AckIDs: []string{m.ID}})
		r.cfg.Up(topic, payload)
		if r.cfg.OnResult != nil {
			r.cfg.OnResult(node, m.CommandID, m.OK)
		}
	default:
		r.log.Warn("ramdisk message rejected", "topic", topic, "reason", fmt.Sprintf("kind %q does not come from ramdisks", m.Kind))
	}
}

// cutDetail shortens a heartbeat's detail to MaxBeatDetail bytes, at a
// character's start, marked with DetailCut.
func cutDetail(d string) string {
	n := MaxBeatDetail - len(DetailCut)
	for n > 0 && !utf8.RuneStart(d[n]) {
		n--
	}
	return d[:n] + DetailCut
}

// keep puts a relayed message into the durable outbox, unchanged, and
// tells whether it is there (a copy already there counts).
func (r *Relay) keep(topic string, m *protocol.Message, payload []byte) bool {
	// Not kept (the store is closing): not acknowledged to the ramdisk,
	// which sends it again to the next agent.
	return r.cfg.Outbox.Keep(topic, m, payload)
}

// ToRamdisk hands a message to a node's ramdisk: its simulated session,
// or the site broker.
func (r *Relay) ToRamdisk(node string, m *protocol.Message) {
	if r.cfg.Local(node, m) {
		return
	}
	if r.site == nil {
		return
	}
	b, err := protocol.Encode(m)
	if err != nil {
		r.log.Error("not relaying an invalid message", "node", node, "err", err)
		return
	}
	if err := r.site.b.Publish(r.ctx, protocol.NodeCmdTopic(r.cfg.Site, node), b, false); err != nil {
		r.log.Warn("site broker refused a message for a ramdisk", "node", node, "err", err)
	}
}

// FromCoordinator takes what the coordinator sent on a node's cmd topic.
func (r *Relay) FromCoordinator(node string, m *protocol.Message) {
	if m.Kind == protocol.KindAck {
		r.cfg.Outbox.Ack(m.AckIDs)
		return
	}
	if m.Kind == protocol.KindCommand && m.Action == protocol.ActionInbandRun {
		m = r.cfg.ImageArgs(m)
	}
	r.ToRamdisk(node, m)
}

// SummaryLoop sends the heartbeat summaries.
func (r *Relay) SummaryLoop(ctx context.Context) {
	tk := r.cfg.Clock.NewTicker(r.cfg.Summary)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C():
		}
		r.Summarize()
	}
}

// Summarize sends one summary of the heartbeats since the last one. A
// previous summary still unacknowledged (the WAN is down) is withdrawn
// and its nodes' beats carried into this one, so that the outbox holds
// one summary at most, with each node's latest beat.
func (r *Relay) Summarize() {
	now := r.cfg.Clock.Now()
	r.mu.Lock()
	cur := r.st.Beats
	r.st.Beats = map[string]protocol.Message{}
	for node, b := range r.st.Held {
		if _, ok := cur[node]; !ok {
			cur[node] = b
		}
	}
	r.st.Held = map[string]protocol.Message{}
	for _, p := range r.st.summary {
		if !r.cfg.Outbox.Withdraw(p.id) {
			continue
		}
		for _, b := range p.beats {
			// Never delivered: it is news again.
			delete(r.st.Sent, b.Node)
			if _, ok := cur[b.Node]; !ok {
				cur[b.Node] = b
			}
		}
	}
	r.st.summary = nil
	// Only news crosses the WAN; the rest waits for the next summary. A
	// beat counts as sent once its summary is made (sendSummary).
	for node, b := range cur {
		last, ok := r.st.Sent[node]
		if !newsBeat(last, ok, &b, now) {
			r.st.Held[node] = b
			delete(cur, node)
		}
	}
	r.mu.Unlock()
	queued := r.cfg.Outbox.Len()
	if len(cur) == 0 {
		return
	}
	all := make([]protocol.Message, 0, len(cur))
	for _, b := range cur {
		all = append(all, b)
	}
	var parts []summaryPart
	for len(all) > 0 {
		n := min(len(all), MaxBeatsPerSummary)
		parts = r.sendSummary(parts, all[:n:n], queued, now)
		all = all[n:]
	}
	r.mu.Lock()
	r.st.summary = parts
	r.mu.Unlock()
}

// summaryBeatOK applies the rules a summary has for each of its beats.
func summaryBeatOK(b *protocol.Message, site string) error {
	if b.Kind != protocol.KindHeartbeat || len(b.Beats) > 0 {
		return fmt.Errorf("a %q, not a heartbeat", b.Kind)
	}
	if b.Site != site {
		return fmt.Errorf("of site %q", b.Site)
	}
	return b.Validate()
}

// sendSummary makes one summary of chunk, puts it in the outbox, marks
// its beats sent and publishes it; it returns parts with it added. A
// beat the summary refuses is dropped alone (logged), not with the
// chunk; a summary larger than maxSummaryBytes is split in two, until it
// fits (a single beat larger than protocol.MaxMessageBytes, which the
// coordinator would refuse, is dropped).
func (r *Relay) sendSummary(parts []summaryPart, chunk []protocol.Message, queued int, now time.Time) []summaryPart {
	site := r.cfg.Site
	m := &protocol.Message{Kind: protocol.KindBeats, ID: r.cfg.NewID(), Site: site, Sent: r.cfg.Clock.Now(), Beats: chunk, Queued: queued}
	b, err := protocol.Encode(m)
	if err != nil {
		good := make([]protocol.Message, 0, len(chunk))
		for i := range chunk {
			if err := summaryBeatOK(&chunk[i], site); err != nil {
				r.log.Warn("heartbeat left out of the summary", "node", chunk[i].Node, "reason", err)
				continue
			}
			good = append(good, chunk[i])
		}
		if len(good) == 0 {
			return parts
		}
		chunk, m.Beats = good, good
		if b, err = protocol.Encode(m); err != nil {
			r.log.Error("heartbeat summary not sent", "beats", len(chunk), "err", err)
			return parts
		}
	}
	if len(b) > maxSummaryBytes && len(chunk) > 1 {
		h := len(chunk) / 2
		parts = r.sendSummary(parts, chunk[:h:h], queued, now)
		return r.sendSummary(parts, chunk[h:], queued, now)
	}
	if len(b) > protocol.MaxMessageBytes {
		r.log.Error("heartbeat left out of the summary", "node", chunk[0].Node, "reason", fmt.Sprintf("%d bytes, larger than a message may be", len(b)))
		return parts
	}
	topic := protocol.BMCEvtTopic(site)
	r.mu.Lock()
	for i := range chunk {
		x := &chunk[i]
		r.st.Sent[x.Node] = SentBeat{Token: x.Token, Running: x.Running, Detail: x.Detail, Progress: x.Progress, RescueRefused: x.RescueRefused, At: now}
	}
	r.mu.Unlock()
	// Not written to disk: a summary is only worth its latest state,
	// which the ramdisks' next heartbeats rebuild after a restart.
	r.cfg.Outbox.PutMemOnly(m.ID, topic, b)
	return append(parts, summaryPart{id: m.ID, beats: chunk})
}
