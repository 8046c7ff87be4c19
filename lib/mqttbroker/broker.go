// Package mqttbroker runs an embedded MQTT v5 broker (mochi), the
// coordinator's and each edge agent's site broker,
// with this system's access rules: a ramdisk agent may use only its own
// node's topics, an edge agent only its own site's, and nobody without
// credentials gets in. It must never persist or log message payloads.
package mqttbroker

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/bmedge/bmedge/lib/netbudget"
	"github.com/bmedge/bmedge/lib/ratelog"
	"github.com/bmedge/bmedge/protocol"
)

// Credentials decides who may connect, under which client ID, and under
// which topic prefix.
type Credentials interface {
	// Authenticate tells whether user/password is valid right now and
	// whether clientID belongs to that identity; the error says why not
	// (for the log: it must not contain the password). It is asked at
	// CONNECT, before any session is resumed, and again on every publish
	// and delivery, so that a credential revoked while its client is
	// connected stops working at once.
	Authenticate(user, password, clientID string) error
	// Prefix returns the topic prefix user may use ("" for everything).
	Prefix(user string) (prefix string, ok bool)
}

// PresenceOwner may be implemented by Credentials whose identities have
// one client that speaks for the identity (an edge agent; its site's
// tools connect under other client IDs): only that client may publish
// on the identity's presence topic (PREFIX + "presence"), or leave a
// last will there. Others are refused, so that a second client of the
// site cannot say that the site is offline.
type PresenceOwner interface {
	// PresenceClient returns the client ID that alone may say user's
	// presence ("" lets any client of user do it).
	PresenceClient(user string) string
}

// PublishObserver may be implemented by Credentials that need to know
// who sent what: Published is called for every message a client (not
// the inline one) publishes that passed the checks, before it is
// delivered, on the client's connection goroutine; it must be quick.
type PublishObserver interface {
	Published(user, clientID, topic string)
}

// Kinds of CONNECT refusal. Authenticate wraps one of them (fmt.Errorf
// with %w), so that the broker logs each kind at a bounded rate, with
// the count of those it left out; any other error counts as "refused".
var (
	ErrUnknownUser   = errors.New("unknown user")
	ErrWrongPassword = errors.New("wrong password")
	ErrClientID      = errors.New("client ID of another identity")
	ErrNotHere       = errors.New("not admitted at this broker")
)

// Config configures the embedded broker.
type Config struct {
	// Addr is the listen address (host:port).
	Addr string
	// TLS, when set, makes the listener speak MQTT over TLS only.
	TLS *tls.Config
	// MaxPacketSize bounds every packet after CONNECT (default
	// DefaultMaxPacketSize); larger ones close the connection before
	// their body is read.
	MaxPacketSize int
	// MaxConnectSize bounds the CONNECT packet, read before anybody is
	// authenticated (default DefaultMaxConnectSize).
	MaxConnectSize int
	// MaxPendingConnects bounds the connections that have not yet sent
	// their whole CONNECT (Conns.MaxPending; default
	// DefaultMaxPendingConnects); more are closed at once, or take the
	// place of the oldest of a source that holds more (netbudget).
	MaxPendingConnects int
	// Name names the listener in logs and stats; it is the prefix of its
	// budget flags (default "mqtt": --mqtt-max-connections...).
	Name string
	// Conns are the listener's connection budgets, checked at accept
	// before TLS or any read; fields <= 0 take DefaultConnLimits'. A
	// connection is pending until its whole CONNECT is read.
	Conns netbudget.Limits
	// Pool is the process's file-descriptor pool, shared with its other
	// listeners (default: a pool of its own with netbudget's default
	// reserve).
	Pool *netbudget.Pool
	// MaxSubscriptions bounds the topic filters one client may hold
	// (default DefaultMaxSubscriptions); a SUBSCRIBE's filters past it
	// are refused (SUBACK 0x97 quota exceeded; 0x80 in MQTT 3).
	MaxSubscriptions int
}

// DefaultConnLimits are a broker listener's budgets. Sites and ramdisks
// behind one NAT address share the per-source caps; a benchmark's
// simulated sites all come from 127.0.0.1 and raise them. What stops a
// flood of connections that never log in is the pending cap per source.
var DefaultConnLimits = netbudget.Limits{MaxConns: 16384, MaxPerSource: 2048, MaxPending: DefaultMaxPendingConnects, MaxPendingPerSource: 128}

// Limits of the embedded broker.
const (
	// DefaultMaxPacketSize fits the largest message the protocol accepts
	// (an inventory of a server with hundreds of disks and NICs is a few
	// hundred KiB) plus topic and properties.
	DefaultMaxPacketSize = protocol.MaxMessageBytes + 64<<10
	// DefaultMaxConnectSize fits user name, password, client ID and a
	// presence will many times over.
	DefaultMaxConnectSize = 16 << 10
	// maxInflight bounds the QoS 1 messages kept per client (also while
	// it is offline); beyond it the broker drops and the sender's resend
	// loop delivers later.
	maxInflight = 8192
	// maxWritesPending bounds the messages queued for a client's socket.
	maxWritesPending = 4096
	// DefaultMaxSubscriptions is how many topic filters a client may
	// hold: an edge agent holds 2, a ramdisk 1, the coordinator's tools
	// a few. Each costs the broker memory (100,000 took 230 MB).
	DefaultMaxSubscriptions = 64
)

// Broker is a running embedded broker.
type Broker struct {
	srv  *mqtt.Server
	Addr string
	drop *dropHook
	conn *netbudget.Listener
	sl   *serveListener
	acl  *aclHook
	// redirect is StartRedirect's hook (nil for a broker that admits).
	redirect *redirectHook
	// served is closed once srv.Serve has returned (it has started the
	// listener's accept loop).
	served    chan struct{}
	closeOnce sync.Once
}

// ConnStats returns the counts of the broker's listener: connections
// held and refused at accept.
func (b *Broker) ConnStats() netbudget.Stats { return b.conn.Stats() }

// PublishRefused counts the publishes (and last wills) the broker
// refused to authenticated clients, by kind (Refused* constants; every
// kind is present).
func (b *Broker) PublishRefused() map[string]int64 {
	out := map[string]int64{}
	if b.acl == nil {
		return out
	}
	for k, n := range b.acl.refusedBy {
		out[k] = n.Load()
	}
	return out
}

// Handler receives a message published to a subscribed topic filter.
// It runs on the publishing client's connection goroutine and must not
// keep payload after it returns.
type Handler func(topic string, payload []byte)

// Start listens on cfg.Addr and serves until Close. The coordinator is
// the broker's inline client: subs (topic filter → handler) are in place
// before the first client can connect, and Publish hands messages to the
// broker without a network round trip.
func Start(cfg Config, creds Credentials, log *slog.Logger, subs map[string]Handler) (*Broker, error) {
	return start(cfg, creds, log, subs, nil)
}

// start is Start, or StartRedirect's broker when rh is set (creds and
// subs then unused).
func start(cfg Config, creds Credentials, log *slog.Logger, subs map[string]Handler, rh *redirectHook) (*Broker, error) {
	if cfg.MaxPacketSize <= 0 {
		cfg.MaxPacketSize = DefaultMaxPacketSize
	}
	if cfg.MaxConnectSize <= 0 {
		cfg.MaxConnectSize = DefaultMaxConnectSize
	}
	caps := mqtt.NewDefaultServerCapabilities()
	// Queued messages of offline sessions must not silently expire.
	caps.MaximumMessageExpiryInterval = 0
	caps.MaximumClientWritesPending = maxWritesPending
	caps.MaximumInflight = maxInflight
	caps.MaximumSessionExpiryInterval = 7 * 24 * 3600
	caps.MaximumPacketSize = uint32(cfg.MaxPacketSize)
	blog := slog.New(quietHandler{Handler: log.Handler(), rl: ratelog.New(log.With("component", "broker"), 0)}).With("component", "broker")
	srv := mqtt.New(&mqtt.Options{Capabilities: caps, Logger: blog, InlineClient: true})
	if cfg.MaxSubscriptions <= 0 {
		cfg.MaxSubscriptions = DefaultMaxSubscriptions
	}
	var acl *aclHook
	if rh != nil {
		rh.srv = srv
		if err := srv.AddHook(rh, nil); err != nil {
			return nil, err
		}
	} else {
		acl = &aclHook{creds: creds, log: blog, rl: ratelog.New(blog, 0), maxSubs: cfg.MaxSubscriptions,
			refusedBy: map[string]*atomic.Int64{RefusedCommandTopic: new(atomic.Int64), RefusedPresence: new(atomic.Int64), RefusedTopic: new(atomic.Int64)}}
		acl.owner, _ = creds.(PresenceOwner)
		acl.obs, _ = creds.(PublishObserver)
		if err := srv.AddHook(acl, nil); err != nil {
			return nil, err
		}
	}
	drop := &dropHook{log: blog}
	if err := srv.AddHook(drop, nil); err != nil {
		return nil, err
	}
	id := 0
	for filter, fn := range subs {
		id++
		err := srv.Subscribe(filter, id, func(_ *mqtt.Client, _ packets.Subscription, pk packets.Packet) {
			fn(pk.TopicName, pk.Payload)
		})
		if err != nil {
			return nil, fmt.Errorf("inline subscription to %s: %w", filter, err)
		}
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("MQTT listener on %s: %w", cfg.Addr, err)
	}
	if cfg.Name == "" {
		cfg.Name = "mqtt"
	}
	if cfg.Pool == nil {
		if cfg.Pool, err = netbudget.NewPool(-1); err != nil {
			ln.Close()
			return nil, err
		}
	}
	bl, gl := listenerStack(ln, cfg, blog)
	sl := newServeListener("mqtt", gl, srv)
	if err := srv.AddListener(sl); err != nil {
		ln.Close()
		return nil, err
	}
	served := make(chan struct{})
	go func() {
		// Serve starts the listener's loop in a goroutine of its own.
		err := srv.Serve()
		close(served)
		if err != nil {
			log.Error("broker stopped", "err", err)
		}
	}()
	return &Broker{srv: srv, Addr: ln.Addr().String(), drop: drop, conn: bl, sl: sl, served: served, acl: acl}, nil
}

// listenerStack puts ln (the raw TCP listener) under the broker's
// budgets: netbudget's on the raw TCP connection, before TLS (its Accept
// also outlives failed accepts, where mochi's listener stopped for good
// at the first error), then TLS, then the guard, which reads above TLS so
// that it checks MQTT bytes.
func listenerStack(ln net.Listener, cfg Config, blog *slog.Logger) (*netbudget.Listener, *guardListener) {
	lim := cfg.Conns
	if cfg.MaxPendingConnects > 0 {
		lim.MaxPending = cfg.MaxPendingConnects
	}
	bl := cfg.Pool.Wrap(ln, netbudget.Options{Name: cfg.Name, Limits: lim.Or(DefaultConnLimits), Log: blog})
	var inner net.Listener = bl
	if cfg.TLS != nil {
		inner = tls.NewListener(bl, cfg.TLS)
	}
	return bl, &guardListener{Listener: inner, max: cfg.MaxConnectSize, log: blog, rl: ratelog.New(blog, 0)}
}

// Publish hands a message to the broker as its inline client, which may
// use every topic. QoS 1 applies to the subscribers' side. Delivery to a
// subscriber whose send buffer is full is dropped by the broker (and
// counted, see Dropped); the sender's resend loop covers it.
func (b *Broker) Publish(_ context.Context, topic string, payload []byte, retain bool) error {
	return b.srv.Publish(topic, payload, retain, 1)
}

// HasClient says whether the broker holds a client with this ID: a
// client with a clean session that went away is dropped only after its
// last will (if any) is published, so false says that is done.
func (b *Broker) HasClient(clientID string) bool {
	_, ok := b.srv.Clients.Get(clientID)
	return ok
}

// Subscribed says whether the connected client with this ID holds a
// subscription to filter.
func (b *Broker) Subscribed(clientID, filter string) bool {
	cl, ok := b.srv.Clients.Get(clientID)
	if !ok || cl.Closed() {
		return false
	}
	_, ok = cl.State.Subscriptions.Get(filter)
	return ok
}

// Dropped returns how many messages the broker dropped because a
// subscriber could not keep up.
func (b *Broker) Dropped() int64 { return b.drop.n.Load() }

// Disconnect closes the connections of every client that connected as
// user (a credential just revoked), so that they end now rather than at
// their next publish or delivery, which would be refused anyway. It
// returns how many it closed.
func (b *Broker) Disconnect(user string) int {
	n := 0
	for _, cl := range b.srv.Clients.GetAll() {
		if !cl.Net.Inline && string(cl.Properties.Username) == user && !cl.Closed() {
			cl.Stop(errors.New("credential revoked"))
			n++
		}
	}
	return n
}

// Close stops the broker and drops every connection. It stops accepting
// first, and waits for that, before mochi's Close (see serveListener).
func (b *Broker) Close() error {
	b.closeOnce.Do(func() {
		<-b.served
		b.sl.stop(true)
		_ = b.srv.Close()
	})
	return nil
}

// dropHook counts messages the broker drops because a client's pending
// writes are full and logs the first of each burst (never the payload).
type dropHook struct {
	mqtt.HookBase
	log  *slog.Logger
	n    atomic.Int64
	last atomic.Int64 // unix seconds of the last log line
}

func (h *dropHook) ID() string { return "bm-drops" }

func (h *dropHook) Provides(b byte) bool { return b == mqtt.OnPublishDropped }

func (h *dropHook) OnPublishDropped(cl *mqtt.Client, pk packets.Packet) {
	total := h.n.Add(1)
	now := time.Now().Unix()
	if last := h.last.Load(); now-last >= 10 && h.last.CompareAndSwap(last, now) {
		h.log.Warn("broker dropped a message to a slow client; senders resend until acknowledged",
			"client", cl.ID, "topic", pk.TopicName, "dropped_total", total)
	}
}

type aclHook struct {
	mqtt.HookBase
	creds Credentials
	log   *slog.Logger
	// rl logs what strangers and clients can repeat (bad logins, refused
	// presence, subscriptions over the cap) at a bounded rate.
	rl *ratelog.Limiter
	// owner and obs are creds' optional parts (nil without them).
	owner PresenceOwner
	obs   PublishObserver
	// maxSubs bounds the topic filters a client may hold.
	maxSubs int
	// refusedBy counts refused publishes by kind (a fixed set of keys).
	refusedBy map[string]*atomic.Int64
	// pass holds each connected client's password, so that every ACL
	// check can ask whether its credential is still valid.
	pass sync.Map // *mqtt.Client → string
}

func (h *aclHook) ID() string { return "bm-acl" }

func (h *aclHook) Provides(b byte) bool {
	return bytes.Contains([]byte{mqtt.OnConnectAuthenticate, mqtt.OnACLCheck, mqtt.OnDisconnect, mqtt.OnPublish, mqtt.OnWill,
		mqtt.OnSubscribe, mqtt.OnSubscribed}, []byte{b})
}

// refusalKind is the log kind of a refused CONNECT: a fixed string,
// never taken from the input.
func refusalKind(err error) string {
	for _, k := range []error{ErrUnknownUser, ErrWrongPassword, ErrClientID, ErrNotHere} {
		if errors.Is(err, k) {
			return "mqtt login: " + k.Error()
		}
	}
	return "mqtt login: refused"
}

// clip shortens what a stranger chose (a user name, a client ID, an
// error quoting them) for the log.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// refuse logs a refused CONNECT: one line per kind per interval, with
// the count of those left out (ratelog), never one per attempt.
func (h *aclHook) refuse(kind string, cl *mqtt.Client, user string, err error) {
	h.rl.Warn(kind, "MQTT login refused", "reason", clip(err.Error(), 160), "user", clip(user, 64), "remote", cl.Net.Remote)
}

func (h *aclHook) OnConnectAuthenticate(cl *mqtt.Client, pk packets.Packet) bool {
	user, pass := string(pk.Connect.Username), string(pk.Connect.Password)
	if err := h.creds.Authenticate(user, pass, pk.Connect.ClientIdentifier); err != nil {
		h.refuse(refusalKind(err), cl, user, err)
		return false
	}
	// The broker publishes a last will without the checks of a publish
	// (mochi calls neither OnACLCheck nor OnPublish for it), so it is
	// checked here as the publish it will be.
	if pk.Connect.WillFlag {
		if err := h.willAllowed(user, pk.Connect.ClientIdentifier, pk.Connect.WillTopic, pk.Connect.WillRetain, pk.Connect.WillProperties.WillDelayInterval); err != nil {
			h.refuse("mqtt login: last will", cl, user, err)
			return false
		}
	}
	h.pass.Store(cl, pass)
	// The source proved an identity: its connections are spared by the
	// listener's evictions (netbudget).
	netbudget.Known(cl.Net.Conn)
	return true
}

// willAllowed is the rule for a last will: a topic the identity's client
// may publish on, retained only on its own presence topic, without a
// delay (a delayed will would be published after the checks at
// disconnect).
func (h *aclHook) willAllowed(user, clientID, topic string, retain bool, delay uint32) error {
	prefix, ok := h.creds.Prefix(user)
	switch {
	case !ok || !Allowed(prefix, topic) || strings.ContainsAny(topic, "+#"):
		return fmt.Errorf("last will on topic %q, outside this identity's topics", clip(topic, 100))
	case retain && !retainAllowed(prefix, topic):
		return fmt.Errorf("retained last will on topic %q; only the identity's own presence topic may be retained", clip(topic, 100))
	case delay > 0:
		return errors.New("a last will with a delay interval is not taken")
	}
	if err := commandAllowed(prefix, topic); err != nil {
		h.refused(RefusedCommandTopic)
		return err
	}
	return h.presenceAllowed(user, clientID, prefix, topic)
}

// presenceAllowed tells whether clientID may say user's presence on
// topic: only the identity's own client may (PresenceOwner).
func (h *aclHook) presenceAllowed(user, clientID, prefix, topic string) error {
	if h.owner == nil || prefix == "" || topic != prefix+"presence" {
		return nil
	}
	if own := h.owner.PresenceClient(user); own != "" && clientID != own {
		return fmt.Errorf("presence of %s from client %q; only its own client %q may say it", clip(user, 64), clip(clientID, 64), own)
	}
	return nil
}

// droppedWill replaces a will that may not be published: a topic nobody
// subscribes to (no filter of a client may start with '$'), not retained.
var droppedWill = mqtt.Will{TopicName: "$bm/dropped-will"}

// OnWill checks a last will again when the broker is about to publish it:
// the credential may have been revoked since the CONNECT (a boot that
// ended, a site re-keyed or deleted), and then nothing is published.
func (h *aclHook) OnWill(cl *mqtt.Client, will mqtt.Will) (mqtt.Will, error) {
	user := string(cl.Properties.Username)
	pass, ok := h.pass.Load(cl)
	if !ok || h.creds.Authenticate(user, pass.(string), cl.ID) != nil {
		h.log.Info("last will dropped: its credential is no longer valid", "user", user, "client", cl.ID)
		return droppedWill, nil
	}
	if err := h.willAllowed(user, cl.ID, will.TopicName, will.Retain, 0); err != nil {
		h.log.Warn("last will dropped", "user", user, "client", cl.ID, "reason", err)
		return droppedWill, nil
	}
	return will, nil
}

func (h *aclHook) OnDisconnect(cl *mqtt.Client, _ error, _ bool) { h.pass.Delete(cl) }

func (h *aclHook) OnACLCheck(cl *mqtt.Client, topic string, write bool) bool {
	user := string(cl.Properties.Username)
	pass, ok := h.pass.Load(cl)
	if !ok || h.creds.Authenticate(user, pass.(string), cl.ID) != nil {
		return false
	}
	prefix, ok := h.creds.Prefix(user)
	if !ok || !Allowed(prefix, topic) {
		if write {
			h.refused(RefusedTopic)
			h.rl.Warn("mqtt topic", "MQTT publish refused", "reason", "outside the identity's topics", "user", clip(user, 64), "client", clip(cl.ID, 64), "topic", clip(topic, 100), "remote", cl.Net.Remote)
		}
		return false
	}
	if write {
		if err := commandAllowed(prefix, topic); err != nil {
			h.refused(RefusedCommandTopic)
			h.rl.Warn("mqtt command topic", "MQTT publish refused", "reason", err, "user", clip(user, 64), "client", clip(cl.ID, 64), "remote", cl.Net.Remote)
			return false
		}
		if err := h.presenceAllowed(user, cl.ID, prefix, topic); err != nil {
			h.refused(RefusedPresence)
			h.rl.Warn("mqtt presence", "MQTT publish refused", "reason", err, "remote", cl.Net.Remote)
			return false
		}
	}
	return true
}

// Kinds of refused publish, as PublishRefused counts them.
const (
	// RefusedCommandTopic: a publish (or a last will) on a command topic
	// by an identity that does not hold every topic.
	RefusedCommandTopic = "command-topic"
	// RefusedPresence: a presence said by another client of the
	// identity than its own (PresenceOwner).
	RefusedPresence = "presence"
	// RefusedTopic: a publish on a topic outside the identity's own
	// (a node's ramdisk on another node's topics).
	RefusedTopic = "topic"
)

// IsCommandTopic tells whether topic is a command topic: its last level
// is "cmd" (a site's bmc/cmd, a node's cmd). Only the coordinator sends
// commands.
func IsCommandTopic(topic string) bool { return topic == "cmd" || strings.HasSuffix(topic, "/cmd") }

// commandAllowed is the rule of command topics: only an identity that
// holds every topic (prefix "", the coordinator's own link; the inline
// client is not checked) may publish on one. A site's clients (its edge
// agent and every edge-SITE.* tool, all with the site's credential) and
// a ramdisk may read their command topics, never write them: else one
// of them could send the agent a power command, a forged plan or an ack
// that drops its results.
func commandAllowed(prefix, topic string) error {
	if prefix != "" && IsCommandTopic(topic) {
		return fmt.Errorf("publish on command topic %q: only the coordinator sends commands", clip(topic, 100))
	}
	return nil
}

func (h *aclHook) refused(kind string) {
	if n, ok := h.refusedBy[kind]; ok {
		n.Add(1)
	}
}

// OnPublish refuses retained messages except on the identity's own
// presence topic: every retained message is kept by the broker for ever,
// so a client that could retain on topics of its choosing (any name that
// ends in /presence, too) could grow the broker's memory without bound.
// What passes is told to the PublishObserver.
func (h *aclHook) OnPublish(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	if cl.Net.Inline {
		return pk, nil
	}
	user := string(cl.Properties.Username)
	if pk.FixedHeader.Retain {
		prefix, ok := h.creds.Prefix(user)
		if !ok || !retainAllowed(prefix, pk.TopicName) {
			if cl.Properties.ProtocolVersion == 5 && pk.FixedHeader.Qos > 0 {
				return pk, packets.ErrNotAuthorized // PUBACK 0x87 tells the client
			}
			return pk, packets.ErrRejectPacket // mochi publishes on any other error
		}
	}
	if h.obs != nil {
		h.obs.Published(user, cl.ID, pk.TopicName)
	}
	return pk, nil
}

// overQuota stands in a SUBSCRIBE for a filter past the client's cap: not
// a valid filter, so the broker subscribes nothing for it, and
// OnSubscribed turns its reason code into quota exceeded.
const overQuota = "#/over-quota"

// OnSubscribe refuses the filters of a SUBSCRIBE that would take the
// client past maxSubs filters held: each one costs the broker memory for
// as long as the session lives. Filters the client holds already (a
// SUBSCRIBE again) and filters it may not use anyway do not count.
func (h *aclHook) OnSubscribe(cl *mqtt.Client, pk packets.Packet) packets.Packet {
	if cl.Net.Inline {
		return pk
	}
	prefix, ok := h.creds.Prefix(string(cl.Properties.Username))
	if !ok {
		return pk
	}
	held := cl.State.Subscriptions.Len()
	var filters []packets.Subscription
	seen := map[string]bool{}
	refused := 0
	for i, sub := range pk.Filters {
		if _, has := cl.State.Subscriptions.Get(sub.Filter); has || seen[sub.Filter] ||
			!mqtt.IsValidFilter(sub.Filter, false) || !Allowed(prefix, sub.Filter) {
			continue
		}
		seen[sub.Filter] = true
		if held < h.maxSubs {
			held++
			continue
		}
		if filters == nil {
			filters = append([]packets.Subscription(nil), pk.Filters...)
		}
		filters[i].Filter = overQuota
		refused++
	}
	if refused > 0 {
		pk.Filters = filters
		h.rl.Warn("mqtt subscriptions", "MQTT subscriptions over the cap refused", "user", clip(string(cl.Properties.Username), 64),
			"client", clip(cl.ID, 64), "refused", refused, "cap", h.maxSubs)
	}
	return pk
}

// OnSubscribed gives the filters OnSubscribe refused their reason code in
// the SUBACK (reasonCodes is the SUBACK's, not yet sent).
func (h *aclHook) OnSubscribed(cl *mqtt.Client, pk packets.Packet, reasonCodes []byte) {
	for i, sub := range pk.Filters {
		if sub.Filter == overQuota && i < len(reasonCodes) {
			reasonCodes[i] = packets.ErrQuotaExceeded.Code
			if cl.Properties.ProtocolVersion < 5 {
				reasonCodes[i] = packets.ErrUnspecifiedError.Code
			}
		}
	}
}

// retainAllowed tells whether an identity of prefix may retain a message
// on topic: only on its own presence topic (PREFIX + "presence"), one per
// identity. The coordinator (empty prefix) may retain anywhere.
func retainAllowed(prefix, topic string) bool {
	return prefix == "" || topic == prefix+"presence"
}

// Allowed tells whether a topic or filter stays inside prefix. An empty
// prefix allows everything. A filter whose wildcard could reach outside
// the prefix is refused.
func Allowed(prefix, topic string) bool {
	if prefix == "" {
		return true
	}
	if !strings.HasPrefix(topic, prefix) {
		return false
	}
	return !strings.ContainsAny(prefix, "+#")
}

// quietHandler wraps the broker's logger: a client that hangs up (the
// listener's bare EOF, or its connection closed under it) is not worth a
// warning, a refused login is logged once already (aclHook, bounded), and
// any other error that ends a connection (mochi logs one line each,
// which a stranger can repeat at will) goes through rl: one line per
// interval with the count. A packet attached to a log record ("pk") is
// reduced to its type and topic, so that neither a payload nor a CONNECT
// password ever reaches the log.
type quietHandler struct {
	slog.Handler
	rl *ratelog.Limiter
}

func (h quietHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	eof, refused, connErr := false, false, false
	var attrs []any
	r.Attrs(func(a slog.Attr) bool {
		switch {
		case a.Key == "pk" || a.Key == "packet":
			if pk, ok := a.Value.Any().(packets.Packet); ok {
				a = slog.Group("packet", "type", packets.PacketNames[pk.FixedHeader.Type], "topic", pk.TopicName)
			} else {
				a = slog.String(a.Key, "(not logged)")
			}
		case a.Key == "error" && r.Message == "":
			if err, ok := a.Value.Any().(error); ok {
				switch {
				case errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed):
					eof = true
				case errors.Is(err, packets.ErrBadUsernameOrPassword):
					refused = true
				default:
					connErr = true
				}
			}
		}
		out.AddAttrs(a)
		attrs = append(attrs, a)
		return true
	})
	switch {
	case eof || refused:
		if !h.Enabled(ctx, slog.LevelDebug) {
			return nil
		}
		out.Level = slog.LevelDebug
		out.Message = "client connection closed"
	case connErr && h.rl != nil:
		h.rl.Warn("mqtt connection error", "MQTT connection ended by an error", attrs...)
		return nil
	}
	return h.Handler.Handle(ctx, out)
}

func (h quietHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return quietHandler{h.Handler.WithAttrs(as), h.rl}
}

func (h quietHandler) WithGroup(name string) slog.Handler {
	return quietHandler{h.Handler.WithGroup(name), h.rl}
}
