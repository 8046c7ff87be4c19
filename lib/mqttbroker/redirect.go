package mqttbroker

import (
	"bytes"
	"errors"
	"log/slog"
	"sync/atomic"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// StartRedirect listens on cfg.Addr as a broker that admits nobody: every
// CONNECT is answered with CONNACK 0x9C "use another server" and the
// Server Reference property set to leader() (the cluster leader's broker
// URL, as sites reach it), or 0x88 "server unavailable" while leader()
// is "" (no leader yet). A cluster's follower runs it on its
// --mqtt-listen so that a site that reaches it learns where to go at
// once. The reference is not a secret (every member's URL is in the
// site's credential file), so it is given before any authentication;
// nothing else is served: no session, no subscription, no publish.
func StartRedirect(cfg Config, leader func() string, log *slog.Logger) (*Broker, error) {
	rh := &redirectHook{leader: leader}
	b, err := start(cfg, nil, log, nil, rh)
	if err != nil {
		return nil, err
	}
	b.redirect = rh
	return b, nil
}

// Redirected counts the CONNECTs a redirecting broker answered with
// 0x9C (with a Server Reference) and with 0x88 (no leader known).
func (b *Broker) Redirected() (moved, unavailable int64) {
	if b.redirect == nil {
		return 0, 0
	}
	return b.redirect.moved.Load(), b.redirect.unavailable.Load()
}

// errRedirected ends a redirected connection after its CONNACK.
var errRedirected = errors.New("redirected to the cluster's leader")

type redirectHook struct {
	mqtt.HookBase
	leader             func() string
	srv                *mqtt.Server
	moved, unavailable atomic.Int64
}

func (h *redirectHook) ID() string { return "bm-redirect" }

func (h *redirectHook) Provides(b byte) bool {
	return bytes.Contains([]byte{mqtt.OnConnect, mqtt.OnConnectAuthenticate, mqtt.OnACLCheck}, []byte{b})
}

// OnConnect answers every CONNECT; the error stops the connection before
// authentication and any session work.
func (h *redirectHook) OnConnect(cl *mqtt.Client, _ packets.Packet) error {
	ref := h.leader()
	code := packets.ErrUseAnotherServer
	props := &packets.Properties{ServerReference: ref}
	if ref == "" {
		code, props = packets.ErrServerUnavailable, nil
		h.unavailable.Add(1)
	} else {
		h.moved.Add(1)
	}
	if cl.Properties.ProtocolVersion < 5 {
		// MQTT 3 has neither code nor property: "server unavailable".
		code, props = packets.ErrServerUnavailable, nil
	}
	if err := h.srv.SendConnack(cl, code, false, props); err != nil {
		return err
	}
	return errRedirected
}

// Nothing passes, should OnConnect ever be bypassed.
func (h *redirectHook) OnConnectAuthenticate(*mqtt.Client, packets.Packet) bool { return false }
func (h *redirectHook) OnACLCheck(*mqtt.Client, string, bool) bool              { return false }
