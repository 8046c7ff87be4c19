package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"log/slog"
	neturl "net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/bmedge/bmedge/lib/mqttlink"
	"github.com/bmedge/bmedge/protocol"
	"github.com/bmedge/bmedge/ramdisk/boot"
	"github.com/bmedge/bmedge/ramdisk/steps"
)

// Discovery mode (bm.mode=discovery): the machine belongs to no node.
// Its edge agent booted it with a credential that lets it report one
// inventory to the site broker and nothing else. It reads the inventory
// as inspect_hardware does (with the BMC address in band and the LLDP
// neighbours), publishes it until the agent acknowledges it (the agent
// then holds it on disk for the coordinator, whose link may be down),
// and powers the machine off.

// discoveryResend is how often the report goes again until acked, and
// discoveryWait how long the ramdisk waits for the ack in all.
const (
	discoveryResend = 10 * time.Second
	discoveryWait   = 15 * time.Minute
)

func discover(ctx context.Context, p boot.Params) error {
	url := p.Broker
	if !strings.Contains(url, "://") {
		url = "mqtt://" + url
	}
	if _, ok := protocol.DiscoveryMAC(p.Node); !ok {
		return fmt.Errorf("bm.mode=discovery with bm.node=%q, which is not a discovery name (%sHEX)", p.Node, protocol.DiscoveryNodePrefix)
	}
	log := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{Level: slog.LevelInfo}))
	runner := &steps.Runner{Log: log}
	data, err := runner.Run(ctx, protocol.Step{Interface: "deploy", Step: "inspect_hardware"}, func(float64, string) {})
	if err != nil {
		return fmt.Errorf("discovery: reading the inventory: %w", err)
	}
	idb := make([]byte, 16)
	_, _ = rand.Read(idb)
	msg := &protocol.Message{Kind: protocol.KindDiscovery, ID: hex.EncodeToString(idb), Site: p.Site, Node: p.Node,
		Data: map[string]any{protocol.DataInventory: data["inventory"], protocol.DataProperties: data["properties"]}}
	var tc *tls.Config
	if p.CAPin != "" {
		u, perr := neturl.Parse(url)
		if perr != nil {
			return fmt.Errorf("bm.broker=%q: %w", p.Broker, perr)
		}
		if tc, err = mqttlink.TLSFromPin(p.CAPin, u.Hostname()); err != nil {
			return err
		}
	}
	acked := make(chan struct{})
	var once sync.Once
	link, err := mqttlink.Dial(ctx, mqttlink.Config{URL: url, ClientID: "ramdisk-" + p.Node, Username: p.User, Password: p.Password,
		TLS: tc, CleanStart: true,
		Subscriptions: []string{protocol.NodeCmdTopic(p.Site, p.Node)},
		Handler: func(topic string, payload []byte) {
			m, err := protocol.Decode(payload)
			if err != nil || m.Kind != protocol.KindAck {
				return
			}
			for _, id := range m.AckIDs {
				if id == msg.ID {
					once.Do(func() { close(acked) })
				}
			}
		},
		KeepAlive: 10, Logger: log})
	if err != nil {
		return err
	}
	defer link.Close()
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	err = link.AwaitUp(wctx)
	cancel()
	if err != nil {
		return fmt.Errorf("broker %s: %w", url, err)
	}
	logger.Printf("discovery: connected to %s as %s; reporting the inventory", url, p.User)
	deadline := time.After(discoveryWait)
	for {
		msg.Sent = time.Now()
		b, err := protocol.Encode(msg)
		if err != nil {
			return fmt.Errorf("discovery report: %w", err)
		}
		pctx, pcancel := context.WithTimeout(ctx, discoveryResend)
		if err := link.Publish(pctx, protocol.NodeEvtTopic(p.Site, p.Node), b, false); err != nil {
			logger.Printf("discovery: report not sent (sent again): %v", err)
		}
		pcancel()
		select {
		case <-acked:
			logger.Printf("discovery: the site has the inventory; powering off")
			return nil
		case <-deadline:
			return fmt.Errorf("discovery: the site did not acknowledge the report in %s", discoveryWait)
		case <-time.After(discoveryResend):
		}
	}
}
