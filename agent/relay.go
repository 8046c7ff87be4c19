package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"net"
	neturl "net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/bmedge/bmedge/agent/outbox"
	"github.com/bmedge/bmedge/protocol"
	"github.com/bmedge/bmedge/protocol/mqttbroker"
	"github.com/bmedge/bmedge/protocol/mqttlink"
	"github.com/bmedge/bmedge/protocol/netbudget"
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

// maxBeatsPerSummary and maxSummaryBytes bound one summary message (a
// site of 10,000 simulated nodes sends several): well under
// protocol.MaxBeats, and small enough to be bundled with other messages
// (uplink sends a message of more than half a bundle alone), far under
// protocol.MaxMessageBytes, which the coordinator refuses past.
// maxBeatDetail bounds a heartbeat's detail as the relay takes it (a
// longer one is cut, with detailCut at its end): a ramdisk's detail is
// meant to be short, and a summary carries a thousand of them.
const (
	maxBeatsPerSummary = 1000
	maxSummaryBytes    = protocol.MaxBundleBytes/2 - 4096
	maxBeatDetail      = 1024
	detailCut          = " [cut]"
)

// relayState is the relay's bookkeeping, under Agent.mu.
type relayState struct {
	// beats holds each node's latest heartbeat since the last summary.
	beats map[string]protocol.Message
	// seen is the step each node's ramdisk was last seen running.
	seen map[string]string
	// summary are the outbox entries of the last summary (its beats
	// too), replaced by the next one when still unacknowledged.
	summary []summaryPart
	// sent is what the summaries last carried for each node; held are
	// beats left out of a summary as no news (see newsBeat), carried to
	// the next.
	sent map[string]sentBeat
	held map[string]protocol.Message
}

// sentBeat is what a summary last carried for a node, and when.
type sentBeat struct {
	token, running, detail string
	progress               float64
	at                     time.Time
}

// beatRefresh is how often a node whose heartbeats bring no news is in a
// summary all the same (its agent_last_heartbeat, and the touch that
// keeps its WAIT state alive, as Ironic's heartbeat does); progressStep
// is the change in progress that is news.
const (
	beatRefresh  = time.Minute
	progressStep = 0.1
)

// newsBeat tells whether b is news against what the summaries last
// carried for its node: a new boot or step, a new detail, progress moved
// by progressStep or reached 1, or beatRefresh passed.
func newsBeat(last sentBeat, ok bool, b *protocol.Message, now time.Time) bool {
	return !ok || b.Token != last.token || b.Running != last.running || b.Detail != last.detail ||
		math.Abs(b.Progress-last.progress) >= progressStep || (b.Progress == 1 && last.progress != 1) ||
		now.Sub(last.at) >= beatRefresh
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

// startSiteBroker starts the site broker when configured.
func (a *Agent) startSiteBroker() (stop func(), err error) {
	o := a.cfg.SiteBroker
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
			ca = a.cfg.CAFile
		}
		if ca == "" {
			return nil, errors.New("the site broker's TLS needs the CA that signed its certificate (--site-broker-ca, or --ca-file when the same CA signs both brokers), so that the ramdisks can verify it")
		}
		if pin, err = mqttlink.PinOfFile(ca); err != nil {
			return nil, fmt.Errorf("site broker CA: %w", err)
		}
	}
	site := a.cfg.Site
	b, err := mqttbroker.Start(cfg, siteCreds{a}, a.log, map[string]mqttbroker.Handler{
		protocol.TopicPrefix + "/site/" + site + "/node/+/evt": a.fromRamdisk,
	})
	if err != nil {
		return nil, fmt.Errorf("site broker: %w; pick another address with --site-broker-listen", err)
	}
	url, err := siteBrokerURL(o.URL, scheme, b.Addr)
	if err != nil {
		_ = b.Close()
		return nil, err
	}
	a.site = &siteBroker{b: b, url: url, pin: pin}
	a.log.Info("site broker up: the site's ramdisks connect to "+url, "listen", b.Addr)
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

// SiteBrokerAddr is the site broker's bound address ("" without one).
func (a *Agent) SiteBrokerAddr() string {
	if a.site == nil {
		return ""
	}
	return a.site.b.Addr
}

// siteCreds admits to the site broker only the ramdisks of the nodes this
// agent is booting, each with its boot's credential (from the power
// command that boots it), under its own client ID, to its own topics.
type siteCreds struct{ a *Agent }

func (c siteCreds) Authenticate(user, password, clientID string) error {
	node, ok := strings.CutPrefix(user, "node:")
	if !ok || node == "" {
		return errors.New("only the ramdisks of this site's nodes (user node:UUID) use the site broker")
	}
	if clientID != "ramdisk-"+node {
		return fmt.Errorf("client ID %q does not belong to node %s (use %q)", clientID, node, "ramdisk-"+node)
	}
	return c.a.boot.Admit(node, password)
}

func (c siteCreds) Prefix(user string) (string, bool) {
	node, ok := strings.CutPrefix(user, "node:")
	if !ok || node == "" || strings.ContainsAny(node, "/+#") {
		return "", false
	}
	return protocol.TopicPrefix + "/site/" + c.a.cfg.Site + "/node/" + node + "/", true
}

// bootDropped: a node's ramdisk boot ended at the site (its credential
// is no longer admitted, agent/boot): the site broker closes the
// connections that used it, and the relay forgets its beats.
func (a *Agent) bootDropped(node string) {
	if a.site != nil {
		a.site.b.Disconnect("node:" + node)
	}
	a.mu.Lock()
	delete(a.relay.seen, node)
	delete(a.relay.sent, node)
	delete(a.relay.held, node)
	a.mu.Unlock()
}

// fromRamdisk takes a message a ramdisk of the site published (on the
// site broker, or a simulated one directly).
func (a *Agent) fromRamdisk(topic string, payload []byte) {
	site, node, leaf, err := protocol.ParseTopic(topic)
	if err != nil || site != a.cfg.Site || leaf != "evt" {
		a.log.Warn("ramdisk message rejected", "topic", topic, "reason", "not a node event topic of this site")
		return
	}
	m, err := protocol.Decode(payload)
	if err != nil {
		a.log.Warn("ramdisk message rejected", "topic", topic, "reason", err)
		return
	}
	if m.Node != node || (m.Site != "" && m.Site != site) {
		a.log.Warn("ramdisk message rejected", "topic", topic, "reason", fmt.Sprintf("message names node %q of site %q but came on node %q's topic", m.Node, m.Site, node))
		return
	}
	switch m.Kind {
	case protocol.KindHello:
		a.publish(topic, payload)
	case protocol.KindHeartbeat:
		// Taken in as a summary carries it (protocol.KindBeats): a
		// heartbeat of this site, with no summary nested in it, and a
		// short detail. One a summary would refuse would make its whole
		// chunk fail to encode.
		if len(m.Beats) > 0 {
			a.log.Warn("ramdisk message rejected", "topic", topic, "reason", "a heartbeat carries no beats")
			return
		}
		if m.Site == "" {
			m.Site = site
		}
		if len(m.Detail) > maxBeatDetail {
			m.Detail = cutDetail(m.Detail)
			b, err := protocol.Encode(m)
			if err != nil {
				a.log.Warn("ramdisk message rejected", "topic", topic, "reason", err)
				return
			}
			payload = b
		}
		a.mu.Lock()
		a.relay.beats[node] = *m
		fresh := m.Running != "" && a.relay.seen[node] != m.Running
		if m.Running != "" {
			a.relay.seen[node] = m.Running
		}
		a.mu.Unlock()
		if fresh {
			a.publish(topic, payload)
		}
	case protocol.KindResult:
		if !a.keep(topic, m, payload) {
			return
		}
		// The agent holds it now, on disk: the ramdisk may forget it.
		a.toRamdisk(node, &protocol.Message{Kind: protocol.KindAck, Site: site, Node: node, Sent: time.Now(), AckIDs: []string{m.ID}})
		a.publish(topic, payload)
	default:
		a.log.Warn("ramdisk message rejected", "topic", topic, "reason", fmt.Sprintf("kind %q does not come from ramdisks", m.Kind))
	}
}

// cutDetail shortens a heartbeat's detail to maxBeatDetail bytes, at a
// character's start, marked with detailCut.
func cutDetail(d string) string {
	n := maxBeatDetail - len(detailCut)
	for n > 0 && !utf8.RuneStart(d[n]) {
		n--
	}
	return d[:n] + detailCut
}

// keep puts a relayed message into the durable outbox, unchanged, and
// tells whether it is there (a copy already there counts).
func (a *Agent) keep(topic string, m *protocol.Message, payload []byte) bool {
	// Not kept (the store is closing): not acknowledged to the ramdisk,
	// which sends it again to the next agent.
	return a.ob.Keep(topic, m, payload)
}

// toRamdisk hands a message to a node's ramdisk: its simulated session,
// or the site broker.
func (a *Agent) toRamdisk(node string, m *protocol.Message) {
	a.mu.Lock()
	r := a.sessions[node]
	a.mu.Unlock()
	if r != nil {
		r.Deliver(m)
		return
	}
	if a.site == nil {
		return
	}
	b, err := protocol.Encode(m)
	if err != nil {
		a.log.Error("not relaying an invalid message", "node", node, "err", err)
		return
	}
	if err := a.site.b.Publish(a.ctx, protocol.NodeCmdTopic(a.cfg.Site, node), b, false); err != nil {
		a.log.Warn("site broker refused a message for a ramdisk", "node", node, "err", err)
	}
}

// fromCoordinator takes what the coordinator sent on a node's cmd topic.
func (a *Agent) fromCoordinator(node string, m *protocol.Message) {
	if m.Kind == protocol.KindAck {
		a.ob.Ack(m.AckIDs)
		return
	}
	if m.Kind == protocol.KindCommand && m.Action == protocol.ActionInbandRun {
		m = a.imageArgs(m)
	}
	a.toRamdisk(node, m)
}

// summaryLoop sends the heartbeat summaries.
func (a *Agent) summaryLoop(ctx context.Context) {
	tk := time.NewTicker(a.cfg.HeartbeatSummary)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
		a.summarize()
	}
}

// summarize sends one summary of the heartbeats since the last one. A
// previous summary still unacknowledged (the WAN is down) is withdrawn
// and its nodes' beats carried into this one, so that the outbox holds
// one summary at most, with each node's latest beat.
func (a *Agent) summarize() {
	now := time.Now()
	a.mu.Lock()
	cur := a.relay.beats
	a.relay.beats = map[string]protocol.Message{}
	for node, b := range a.relay.held {
		if _, ok := cur[node]; !ok {
			cur[node] = b
		}
	}
	a.relay.held = map[string]protocol.Message{}
	for _, p := range a.relay.summary {
		if !a.ob.Withdraw(p.id) {
			continue
		}
		for _, b := range p.beats {
			// Never delivered: it is news again.
			delete(a.relay.sent, b.Node)
			if _, ok := cur[b.Node]; !ok {
				cur[b.Node] = b
			}
		}
	}
	a.relay.summary = nil
	// Only news crosses the WAN; the rest waits for the next summary. A
	// beat counts as sent once its summary is made (sendSummary).
	for node, b := range cur {
		last, ok := a.relay.sent[node]
		if !newsBeat(last, ok, &b, now) {
			a.relay.held[node] = b
			delete(cur, node)
		}
	}
	a.mu.Unlock()
	queued := a.ob.Len()
	if len(cur) == 0 {
		return
	}
	all := make([]protocol.Message, 0, len(cur))
	for _, b := range cur {
		all = append(all, b)
	}
	var parts []summaryPart
	for len(all) > 0 {
		n := min(len(all), maxBeatsPerSummary)
		parts = a.sendSummary(parts, all[:n:n], queued, now)
		all = all[n:]
	}
	a.mu.Lock()
	a.relay.summary = parts
	a.mu.Unlock()
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
func (a *Agent) sendSummary(parts []summaryPart, chunk []protocol.Message, queued int, now time.Time) []summaryPart {
	site := a.cfg.Site
	m := &protocol.Message{Kind: protocol.KindBeats, ID: outbox.NewID(), Site: site, Sent: time.Now(), Beats: chunk, Queued: queued}
	b, err := protocol.Encode(m)
	if err != nil {
		good := make([]protocol.Message, 0, len(chunk))
		for i := range chunk {
			if err := summaryBeatOK(&chunk[i], site); err != nil {
				a.log.Warn("heartbeat left out of the summary", "node", chunk[i].Node, "reason", err)
				continue
			}
			good = append(good, chunk[i])
		}
		if len(good) == 0 {
			return parts
		}
		chunk, m.Beats = good, good
		if b, err = protocol.Encode(m); err != nil {
			a.log.Error("heartbeat summary not sent", "beats", len(chunk), "err", err)
			return parts
		}
	}
	if len(b) > maxSummaryBytes && len(chunk) > 1 {
		h := len(chunk) / 2
		parts = a.sendSummary(parts, chunk[:h:h], queued, now)
		return a.sendSummary(parts, chunk[h:], queued, now)
	}
	if len(b) > protocol.MaxMessageBytes {
		a.log.Error("heartbeat left out of the summary", "node", chunk[0].Node, "reason", fmt.Sprintf("%d bytes, larger than a message may be", len(b)))
		return parts
	}
	topic := protocol.BMCEvtTopic(site)
	a.mu.Lock()
	for i := range chunk {
		x := &chunk[i]
		a.relay.sent[x.Node] = sentBeat{token: x.Token, running: x.Running, detail: x.Detail, progress: x.Progress, at: now}
	}
	a.mu.Unlock()
	// Not written to disk: a summary is only worth its latest state,
	// which the ramdisks' next heartbeats rebuild after a restart.
	a.ob.PutMemOnly(m.ID, topic, b)
	return append(parts, summaryPart{id: m.ID, beats: chunk})
}
