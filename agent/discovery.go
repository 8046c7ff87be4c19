package agent

import (
	"context"
	"encoding/json"
	"time"

	"github.com/bmedge/bmedge/agent/discover"
	"github.com/bmedge/bmedge/agent/outbox"
	"github.com/bmedge/bmedge/protocol"
)

// Discovery at this site (agent/discover): the coordinator's retained
// configuration says whether the site discovers, and the agent answers
// the network boot of machines that belong to no node within its
// bounds; each machine's report goes into the durable outbox, so that
// discovery goes on while the WAN is down and the coordinator enrolls
// the machines when it returns.

// takeDiscoveryConfig takes the coordinator's configuration and keeps
// it in the state folder.
func (a *Agent) takeDiscoveryConfig(m *protocol.Message) {
	if m.Kind != protocol.KindDiscoveryConfig || m.Discovery == nil {
		a.log.Warn("message rejected", "topic", protocol.DiscoveryTopic(a.cfg.Site), "reason", "not a discovery configuration")
		return
	}
	was := a.disc.Enabled()
	a.disc.SetConfig(*m.Discovery)
	if b, err := json.Marshal(m.Discovery); err == nil {
		a.ob.Store().PutDiscovery(b)
	}
	if on := m.Discovery.Enabled; on != was {
		a.log.Info("site discovery "+map[bool]string{true: "on", false: "off"}[on], "site", a.cfg.Site,
			"remaining", m.Discovery.Remaining, "rate_per_minute", m.Discovery.Rate, "known_macs", len(m.Discovery.KnownMACs))
	}
	a.kickSimDiscovery()
}

// loadDiscoveryConfig takes the configuration kept in the state folder.
func (a *Agent) loadDiscoveryConfig(st *outbox.Store) error {
	b, err := st.LoadDiscovery()
	if err != nil || b == nil {
		return err
	}
	var c protocol.DiscoveryConfig
	if err := json.Unmarshal(b, &c); err != nil {
		a.log.Warn("discovery configuration in the state folder unreadable; off until the coordinator says again", "err", err)
		return nil
	}
	a.disc.SetConfig(c)
	return nil
}

// discoverMAC is asked by network boot about a PXE client that belongs
// to no node: whether to discover it, with its boot's credential.
func (a *Agent) discoverMAC(mac []byte) (string, bool) {
	ok, reason := a.disc.Admit(mac)
	if !ok {
		if reason != discover.ReasonKnown {
			a.metrics.discovery.WithLabelValues(reason).Inc()
			a.discWarn.Warn("discovery "+reason, "not discovering a machine that belongs to no node", "mac", macString(mac), "reason", reason)
		}
		return "", false
	}
	a.metrics.discovery.WithLabelValues("booted").Inc()
	return a.disc.Password(mac), true
}

func macString(b []byte) string {
	const hexd = "0123456789abcdef"
	out := make([]byte, 0, 17)
	for i, x := range b {
		if i > 0 {
			out = append(out, ':')
		}
		out = append(out, hexd[x>>4], hexd[x&15])
	}
	return string(out)
}

// discovered takes the report of a ramdisk in discovery mode: the first
// of its boot goes into the durable outbox for the coordinator (on the
// site's bmc/evt topic); the same report again is acked again; any
// other is refused.
func (a *Agent) discovered(node string, m *protocol.Message) bool {
	first, dup := a.disc.Report(node, m.ID)
	if dup {
		return true
	}
	if !first {
		a.metrics.discovery.WithLabelValues("report_refused").Inc()
		a.discWarn.Warn("discovery report refused", "discovery report refused: its machine's boot was not answered by this agent, or it reported already", "ramdisk", node, "id", m.ID)
		return false
	}
	mac, _ := protocol.DiscoveryMAC(node)
	up := &protocol.Message{Kind: protocol.KindDiscovery, ID: m.ID, Site: a.cfg.Site, Sent: a.cfg.Clock.Now(),
		Data: map[string]any{protocol.DataInventory: m.Data[protocol.DataInventory], protocol.DataBootMAC: mac.String()}}
	if p, ok := m.Data[protocol.DataProperties].(map[string]any); ok {
		up.Data[protocol.DataProperties] = p
	}
	a.ob.Send(protocol.BMCEvtTopic(a.cfg.Site), up, time.Time{})
	a.metrics.discovery.WithLabelValues("reported").Inc()
	a.log.Info("machine discovered: its inventory is kept for the coordinator", "mac", mac.String(), "report", m.ID)
	if a.boot != nil {
		a.boot.EndDiscovery(node)
	}
	return true
}

// kickSimDiscovery has the simulated unknown machines try to boot.
func (a *Agent) kickSimDiscovery() {
	select {
	case a.simKick <- struct{}{}:
	default:
	}
}

// simDiscoveryLoop boots the simulated unknown machines (--simulate-
// unknown) while the site discovers: each one that is no node's and not
// yet discovered by this process asks the gate as a real machine's
// network boot would, and, admitted, reports its inventory after the
// simulated boot delay through the relay, as a real ramdisk's report
// comes from the site broker.
func (a *Agent) simDiscoveryLoop(ctx context.Context) {
	n := min(a.cfg.Sim.Unknown, 1<<16) // a MAC of 16 bits of index each
	booted := make([]bool, n)
	tk := a.cfg.Clock.NewTicker(2 * time.Second)
	defer tk.Stop()
	for {
		for i := range n {
			if booted[i] {
				continue
			}
			mac := a.sim.UnknownMAC(i)
			if _, ok := a.discoverMAC(mac); !ok {
				continue
			}
			booted[i] = true
			go a.simDiscoveryBoot(ctx, i)
		}
		select {
		case <-ctx.Done():
			return
		case <-tk.C():
		case <-a.simKick:
		}
	}
}

func (a *Agent) simDiscoveryBoot(ctx context.Context, i int) {
	if d := a.cfg.Sim.BootDelay; d > 0 {
		select {
		case <-ctx.Done():
			return
		case <-a.cfg.Clock.NewTimer(d).C():
		}
	}
	node := protocol.DiscoveryNode(a.sim.UnknownMAC(i))
	m := &protocol.Message{Kind: protocol.KindDiscovery, ID: outbox.NewID(), Node: node, Site: a.cfg.Site, Sent: a.cfg.Clock.Now(),
		Data: a.sim.UnknownReport(i)}
	b, err := protocol.Encode(m)
	if err != nil {
		a.log.Error("simulated discovery report not made", "err", err)
		return
	}
	// The ramdisk resends until acked; here the relay takes it at once
	// (or refuses it for good).
	a.relay.FromRamdisk(protocol.NodeEvtTopic(a.cfg.Site, node), b)
}

// Discovery is the site's discovery configuration as the agent goes by
// it, and how many discovery boots wait for their report and how many
// reports the coordinator has not made nodes of yet.
func (a *Agent) Discovery() (c protocol.DiscoveryConfig, boots, reports int) {
	boots, reports = a.disc.Pending()
	return a.disc.Config(), boots, reports
}
