// Package broker runs the coordinator's embedded MQTT v5 broker (mochi)
// with this system's access rules: a ramdisk agent may use only its own
// node's topics, an edge agent only its own site's, and nobody without
// credentials gets in. It must never persist or log message payloads.
package broker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
)

// Credentials decides who may connect and under which topic prefix.
type Credentials interface {
	// Check tells whether user/password is valid.
	Check(user, password string) bool
	// Prefix returns the topic prefix user may use ("" for everything).
	Prefix(user string) (prefix string, ok bool)
}

// Broker is a running embedded broker.
type Broker struct {
	srv  *mqtt.Server
	Addr string
	drop *dropHook
}

// Handler receives a message published to a subscribed topic filter.
// It runs on the publishing client's connection goroutine and must not
// keep payload after it returns.
type Handler func(topic string, payload []byte)

// Start listens on addr (host:port) and serves until Close. The
// coordinator is the broker's inline client: subs (topic filter →
// handler) are in place before the first client can connect, and
// Publish hands messages to the broker without a network round trip.
func Start(addr string, creds Credentials, log *slog.Logger, subs map[string]Handler) (*Broker, error) {
	caps := mqtt.NewDefaultServerCapabilities()
	// Queued messages of offline sessions must not silently expire.
	caps.MaximumMessageExpiryInterval = 0
	caps.MaximumClientWritesPending = 4096
	caps.MaximumSessionExpiryInterval = 7 * 24 * 3600
	blog := slog.New(quietHandler{log.Handler()}).With("component", "broker")
	srv := mqtt.New(&mqtt.Options{Capabilities: caps, Logger: blog, InlineClient: true})
	if err := srv.AddHook(&aclHook{creds: creds}, nil); err != nil {
		return nil, err
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
	tcp := listeners.NewTCP(listeners.Config{ID: "tcp", Address: addr})
	if err := srv.AddListener(tcp); err != nil {
		return nil, fmt.Errorf("MQTT listener on %s: %w; pick another address with --mqtt-listen", addr, err)
	}
	go func() {
		if err := srv.Serve(); err != nil {
			log.Error("broker stopped", "err", err)
		}
	}()
	return &Broker{srv: srv, Addr: addr, drop: drop}, nil
}

// Publish hands a message to the broker as its inline client, which may
// use every topic. QoS 1 applies to the subscribers' side. Delivery to a
// subscriber whose send buffer is full is dropped by the broker (and
// counted, see Dropped); the sender's resend loop covers it.
func (b *Broker) Publish(_ context.Context, topic string, payload []byte, retain bool) error {
	return b.srv.Publish(topic, payload, retain, 1)
}

// Dropped returns how many messages the broker dropped because a
// subscriber could not keep up.
func (b *Broker) Dropped() int64 { return b.drop.n.Load() }

// Close stops the broker and drops every connection.
func (b *Broker) Close() error { return b.srv.Close() }

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
}

func (h *aclHook) ID() string { return "bm-acl" }

func (h *aclHook) Provides(b byte) bool {
	return bytes.Contains([]byte{mqtt.OnConnectAuthenticate, mqtt.OnACLCheck}, []byte{b})
}

func (h *aclHook) OnConnectAuthenticate(cl *mqtt.Client, pk packets.Packet) bool {
	return h.creds.Check(string(pk.Connect.Username), string(pk.Connect.Password))
}

func (h *aclHook) OnACLCheck(cl *mqtt.Client, topic string, write bool) bool {
	prefix, ok := h.creds.Prefix(string(cl.Properties.Username))
	if !ok {
		return false
	}
	return Allowed(prefix, topic)
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
// warning, and a packet attached to a
// log record ("pk") is reduced to its type and topic, so that neither a
// payload nor a CONNECT password ever reaches the log.
type quietHandler struct{ slog.Handler }

func (h quietHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	eof := false
	r.Attrs(func(a slog.Attr) bool {
		switch {
		case a.Key == "pk":
			if pk, ok := a.Value.Any().(packets.Packet); ok {
				a = slog.Group("packet", "type", packets.PacketNames[pk.FixedHeader.Type], "topic", pk.TopicName)
			} else {
				a = slog.String("pk", "(not logged)")
			}
		case a.Key == "error" && r.Message == "":
			if err, ok := a.Value.Any().(error); ok && (errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed)) {
				eof = true
			}
		}
		out.AddAttrs(a)
		return true
	})
	if eof {
		if !h.Enabled(ctx, slog.LevelDebug) {
			return nil
		}
		out.Level = slog.LevelDebug
		out.Message = "client connection closed"
	}
	return h.Handler.Handle(ctx, out)
}

func (h quietHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return quietHandler{h.Handler.WithAttrs(as)}
}

func (h quietHandler) WithGroup(name string) slog.Handler {
	return quietHandler{h.Handler.WithGroup(name)}
}
