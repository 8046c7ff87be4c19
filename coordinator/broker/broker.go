// Package broker runs the coordinator's embedded MQTT v5 broker (mochi)
// with this system's access rules: a ramdisk agent may use only its own
// node's topics, an edge agent only its own site's, and nobody without
// credentials gets in. It must never persist or log message payloads.
package broker

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"

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
}

// Start listens on addr (host:port) and serves until Close.
func Start(addr string, creds Credentials, log *slog.Logger) (*Broker, error) {
	caps := mqtt.NewDefaultServerCapabilities()
	// Queued messages of offline sessions must not silently expire.
	caps.MaximumMessageExpiryInterval = 0
	caps.MaximumClientWritesPending = 4096
	caps.MaximumSessionExpiryInterval = 7 * 24 * 3600
	srv := mqtt.New(&mqtt.Options{Capabilities: caps, Logger: log.With("component", "broker"), InlineClient: false})
	if err := srv.AddHook(&aclHook{creds: creds}, nil); err != nil {
		return nil, err
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
	return &Broker{srv: srv, Addr: addr}, nil
}

// Close stops the broker and drops every connection.
func (b *Broker) Close() error { return b.srv.Close() }

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
