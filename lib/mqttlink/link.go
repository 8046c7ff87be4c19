// Package mqttlink is the MQTT v5 connection every program of this system
// uses: persistent session, QoS 1, automatic reconnect with re-subscribe,
// retained presence with a last will. It moves bytes; what they mean is
// the protocol package's business. It must never log message payloads
// (commands can carry BMC credentials).
package mqttlink

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"

	"github.com/bmedge/bmedge/lib/clock"
)

// Config says where and how to connect.
type Config struct {
	URL      string // mqtt://host:port, or mqtts://host:port for TLS
	ClientID string
	Username string
	Password string
	// Subscriptions are (re)made on every connection.
	Subscriptions []string
	// Handler gets every message received; it must not block for long.
	Handler func(topic string, payload []byte)
	// WillTopic and WillPayload: the retained last will (presence offline).
	WillTopic   string
	WillPayload []byte
	// OnlineTopic and OnlinePayload are published retained on every connect.
	OnlineTopic   string
	OnlinePayload []byte
	// SessionExpiry keeps the broker session while disconnected.
	SessionExpiry time.Duration
	KeepAlive     uint16
	Logger        *slog.Logger
	// OnUp is called (in its own goroutine) after each successful
	// connection and subscription; not for a connection that went down
	// (or was replaced) before its subscription succeeded.
	OnUp func()
	// TLS configures mqtts:// connections (nil: the system's roots).
	TLS *tls.Config
	// CleanStart discards any session the broker kept for ClientID at the
	// first connection (reconnects still resume it): a ramdisk's new boot
	// has nothing to resume from an earlier one.
	CleanStart bool
	// Clock is the time of the link's own waits (the retry of a refused
	// subscription; nil: the system clock). The MQTT client's connect
	// timeout and reconnect backoff are its own, in real time.
	Clock clock.Clock
}

// Link is a live MQTT connection manager.
type Link struct {
	cfg Config
	cm  *autopaho.ConnectionManager
	log *slog.Logger
	mu  sync.Mutex
	up  bool
	// upc is closed while the link is up, and replaced when it goes down
	// (AwaitUp waits on it).
	upc     chan struct{}
	lastErr string // why the last connection attempt failed, explained
	stop    context.CancelFunc
	// connDown ends the current connection's context: its onUp (the
	// subscribe retries, presence, OnUp) stops when the connection goes
	// down or a newer one comes up. Under mu.
	connDown context.CancelFunc
	// redirect is the Server Reference the next attempt takes (follow.go),
	// followed how many were followed. Under mu.
	redirect *url.URL
	followed int64
}

// connectError explains a failed connection attempt. A new reason is a
// warning; the same reason again (every reconnect) is debug.
func (l *Link) connectError(err error) {
	msg := explain(err)
	l.mu.Lock()
	same := msg == l.lastErr
	l.lastErr = msg
	l.mu.Unlock()
	level := slog.LevelWarn
	if same {
		level = slog.LevelDebug
	}
	l.log.Log(context.Background(), level, "mqtt connect failed; retrying", "broker", l.cfg.URL, "client", l.cfg.ClientID, "err", msg)
}

// explain turns the usual causes into what to do about them.
func explain(err error) string {
	var unknown x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var verr *tls.CertificateVerificationError
	var rec tls.RecordHeaderError
	var ce *autopaho.ConnackError
	switch {
	case errors.As(err, &unknown):
		return err.Error() + " (the broker's certificate is not signed by the CA this client trusts: check the CA file or pin)"
	case errors.As(err, &hostErr):
		return err.Error() + " (the broker's certificate does not name the host in the broker URL)"
	case errors.Is(err, ErrPinMismatch), errors.As(err, &verr):
		return err.Error() + " (TLS verification of the broker failed: check the CA file or pin)"
	case errors.As(err, &rec):
		return err.Error() + " (the broker does not speak TLS here: use mqtt://, or point mqtts:// at its TLS port)"
	case errors.As(err, &ce) && (ce.ReasonCode == 0x9C || ce.ReasonCode == 0x9D):
		return err.Error() + " (a coordinator cluster's member that does not lead: the link follows its Server Reference to the leader)"
	case errors.As(err, &ce) && ce.ReasonCode == 0x88:
		return err.Error() + " (a coordinator cluster's member with no leader yet: an election is under way, or no majority of members is up)"
	case errors.As(err, &ce):
		return err.Error() + " (the broker refused this client: check the credentials and that the client ID is this identity's own)"
	}
	return err.Error()
}

// Dial starts connecting and returns at once; Publish waits for the
// connection. Call Close to stop.
func Dial(ctx context.Context, cfg Config) (*Link, error) {
	// Several URLs, separated by commas (a coordinator cluster's
	// members), are tried in turn until one connects, and again after
	// each disconnection; a broker that refuses with a Server Reference
	// (a cluster's follower naming the leader's broker) is followed at
	// once (follow.go).
	var urls []*url.URL
	for _, s := range strings.Split(cfg.URL, ",") {
		s = strings.TrimSpace(s)
		u, err := url.Parse(s)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("broker URL %q is not valid; use mqtt://HOST:PORT or mqtts://HOST:PORT (several separated by commas)", s)
		}
		switch u.Scheme {
		case "mqtt", "tcp":
			if cfg.TLS != nil {
				return nil, fmt.Errorf("broker URL %q is plain MQTT but a CA was given; use mqtts://", s)
			}
		case "mqtts", "ssl", "tls":
		default:
			return nil, fmt.Errorf("broker URL %q: scheme %q is not known; use mqtt:// or mqtts://", s, u.Scheme)
		}
		urls = append(urls, u)
	}
	u := urls[0]
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.KeepAlive == 0 {
		cfg.KeepAlive = 20
	}
	if cfg.SessionExpiry == 0 {
		cfg.SessionExpiry = time.Hour
	}
	if cfg.TLS != nil && cfg.TLS.ServerName == "" && len(urls) == 1 {
		// Name the host for verification (also an IP address, which Go
		// would not send as SNI and a pinned check would not see).
		cfg.TLS = cfg.TLS.Clone()
		cfg.TLS.ServerName = u.Hostname()
	}
	cfg.Clock = clock.Or(cfg.Clock)
	l := &Link{cfg: cfg, log: cfg.Logger, upc: make(chan struct{})}
	ctx, l.stop = context.WithCancel(ctx)
	ac := autopaho.ClientConfig{
		ServerUrls:                    urls,
		KeepAlive:                     cfg.KeepAlive,
		CleanStartOnInitialConnection: cfg.CleanStart,
		TlsCfg:                        cfg.TLS,
		SessionExpiryInterval:         uint32(cfg.SessionExpiry / time.Second),
		ReconnectBackoff:              func(int) time.Duration { return 500 * time.Millisecond },
		ConnectTimeout:                5 * time.Second,
		ConnectUsername:               cfg.Username,
		ConnectPassword:               []byte(cfg.Password),
		OnConnectionUp: func(cm *autopaho.ConnectionManager, _ *paho.Connack) {
			// Each connection has its own onUp, ended with it: on a
			// flapping link, onUps of connections long gone must not
			// pile up and each call OnUp once one subscribe succeeds.
			cctx, cancel := context.WithCancel(ctx)
			l.mu.Lock()
			if l.connDown != nil {
				l.connDown()
			}
			l.connDown = cancel
			l.mu.Unlock()
			go l.onUp(cctx, cm)
		},
		OnConnectionDown: func() bool {
			l.mu.Lock()
			if l.up {
				l.up, l.upc = false, make(chan struct{})
			}
			if l.connDown != nil {
				l.connDown()
				l.connDown = nil
			}
			l.mu.Unlock()
			return true
		},
		OnConnectError:    l.connectError,
		AttemptConnection: l.attempt,
		ClientConfig: paho.ClientConfig{
			ClientID: cfg.ClientID,
			OnPublishReceived: []func(paho.PublishReceived) (bool, error){
				func(pr paho.PublishReceived) (bool, error) {
					if cfg.Handler != nil {
						cfg.Handler(pr.Packet.Topic, pr.Packet.Payload)
					}
					return true, nil
				},
			},
		},
	}
	if cfg.WillTopic != "" {
		ac.WillMessage = &paho.WillMessage{Topic: cfg.WillTopic, Payload: cfg.WillPayload, QoS: 1, Retain: true}
	}
	cm, err := autopaho.NewConnection(ctx, ac)
	if err != nil {
		l.stop()
		return nil, fmt.Errorf("connect to broker %s: %w", cfg.URL, err)
	}
	l.cm = cm
	return l, nil
}

// Up tells whether the link is connected and subscribed.
func (l *Link) Up() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.up
}

func (l *Link) onUp(ctx context.Context, cm *autopaho.ConnectionManager) {
	for attempt := 0; ; attempt++ {
		err := l.subscribe(ctx, cm)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		l.log.Warn("mqtt subscribe failed; retrying", "client", l.cfg.ClientID, "err", err)
		t := l.cfg.Clock.NewTimer(time.Duration(min(attempt+1, 10)) * 200 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
	if l.cfg.OnlineTopic != "" {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := cm.Publish(pctx, &paho.Publish{Topic: l.cfg.OnlineTopic, Payload: l.cfg.OnlinePayload, QoS: 1, Retain: true})
		cancel()
		if err != nil {
			l.log.Warn("mqtt presence publish failed", "client", l.cfg.ClientID, "err", err)
		}
	}
	// Up only while this connection is the current one.
	l.mu.Lock()
	if ctx.Err() != nil {
		l.mu.Unlock()
		return
	}
	if !l.up {
		l.up = true
		close(l.upc)
	}
	l.mu.Unlock()
	if l.cfg.OnUp != nil {
		l.cfg.OnUp()
	}
}

func (l *Link) subscribe(ctx context.Context, cm *autopaho.ConnectionManager) error {
	l.mu.Lock()
	filters := append([]string(nil), l.cfg.Subscriptions...)
	l.mu.Unlock()
	if len(filters) == 0 {
		return nil
	}
	var subs []paho.SubscribeOptions
	for _, t := range filters {
		subs = append(subs, paho.SubscribeOptions{Topic: t, QoS: 1})
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ack, err := cm.Subscribe(sctx, &paho.Subscribe{Subscriptions: subs})
	// paho reports a refusal as a bare error; the suback says which filter.
	if ack != nil {
		for i, rc := range ack.Reasons {
			if rc >= 0x80 && i < len(filters) {
				return refused(filters[i], rc)
			}
		}
	}
	return err
}

// refused explains a subscription the broker did not grant.
func refused(filter string, rc byte) error {
	hint := ""
	if rc == 0x87 {
		hint = " (not authorized: the broker's access rules keep this client to its own node's or site's topics)"
	}
	return fmt.Errorf("broker refused subscription %q with reason 0x%02x%s", filter, rc, hint)
}

// ErrNotConnected is returned by Publish when the link is down.
var ErrNotConnected = errors.New("not connected to the MQTT broker")

// Publish sends one QoS 1 message and waits for the broker's ack or ctx.
func (l *Link) Publish(ctx context.Context, topic string, payload []byte, retain bool) error {
	if err := l.cm.AwaitConnection(ctx); err != nil {
		return ErrNotConnected
	}
	_, err := l.cm.Publish(ctx, &paho.Publish{Topic: topic, Payload: payload, QoS: 1, Retain: retain})
	return err
}

// Subscribe adds a subscription now (and on every reconnect).
func (l *Link) Subscribe(ctx context.Context, filter string) error {
	l.mu.Lock()
	l.cfg.Subscriptions = append(l.cfg.Subscriptions, filter)
	l.mu.Unlock()
	if err := l.cm.AwaitConnection(ctx); err != nil {
		return ErrNotConnected
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ack, err := l.cm.Subscribe(sctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: 1}}})
	if ack != nil && len(ack.Reasons) > 0 && ack.Reasons[0] >= 0x80 {
		return refused(filter, ack.Reasons[0])
	}
	return err
}

// AwaitUp waits until the link is connected and subscribed.
func (l *Link) AwaitUp(ctx context.Context) error {
	for {
		l.mu.Lock()
		up, upc := l.up, l.upc
		l.mu.Unlock()
		if up {
			return nil
		}
		select {
		case <-ctx.Done():
			l.mu.Lock()
			why := l.lastErr
			l.mu.Unlock()
			if why != "" {
				return fmt.Errorf("no connection to broker %s: %w; last attempt: %s", l.cfg.URL, ctx.Err(), why)
			}
			return fmt.Errorf("no connection to broker %s: %w", l.cfg.URL, ctx.Err())
		case <-upc:
		}
	}
}

// Close disconnects cleanly (the will is not sent) and stops reconnecting.
func (l *Link) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = l.cm.Disconnect(ctx)
	l.stop()
}
