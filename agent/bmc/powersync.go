package bmc

import (
	"context"
	"sync"
	"time"

	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/protocol"
)

// CommandDone starts power sync of a node whose real BMC just ran a
// command (its credentials work), and takes a power command's outcome as
// the last reading: the coordinator records it from the result, so
// reporting it again would only add a message.
func (s *Set) CommandDone(m *protocol.Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bmcs[m.Node] == nil || s.cfg.Builders[s.kind[m.Node]].NoPowerSync {
		return
	}
	seen := s.synce[m.Node]
	if seen == nil {
		s.synce[m.Node] = &powerSeen{}
		return
	}
	if !seen.known {
		return
	}
	state := ""
	switch m.Action {
	case protocol.ActionPower:
		state, _ = m.Args["state"].(string)
	case protocol.ActionOOBStep:
		if m.Step != nil && m.Step.Interface+"."+m.Step.Step == "deploy.tear_down_agent" {
			state = protocol.PowerOff
		} else if m.Step != nil && m.Step.Interface+"."+m.Step.Step == "deploy.boot_instance" {
			state = protocol.PowerOn
		}
	}
	switch state {
	case "":
		return
	case protocol.PowerReboot, protocol.PowerSoftReboot:
		state = protocol.PowerOn
	case protocol.PowerSoftOff:
		state = protocol.PowerOff
	}
	seen.state, seen.failing = state, false
}

// PowerSyncLoop reads the power state of the site's polled BMCs every
// PowerSyncInterval until ctx ends; a round ends before the next begins,
// so a slow BMC delays the round rather than piling up reads.
func (s *Set) PowerSyncLoop(ctx context.Context) {
	if s.cfg.PowerSyncInterval <= 0 {
		return
	}
	tk := s.cfg.Clock.NewTicker(s.cfg.PowerSyncInterval)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C():
		}
		s.PowerSyncRound(ctx)
	}
}

// PowerSyncRound reads every polled BMC once, PowerSyncConcurrency at a
// time, and reports changes and failures.
func (s *Set) PowerSyncRound(ctx context.Context) {
	type target struct {
		node string
		bmc  drivers.BMC
		gen  uint64
	}
	if s.cfg.Paused() {
		return
	}
	var targets []target
	s.mu.Lock()
	for node := range s.synce {
		b := s.bmcs[node]
		if b == nil || s.busy[node] > 0 {
			// A command runs on it: a reading now could race its power
			// change; the next round reads it.
			continue
		}
		targets = append(targets, target{node, b, s.gen[node]})
	}
	s.mu.Unlock()
	// A read may take up to the interval (at least 2 s, for a BMC that
	// must open a session; at most 30 s, so a dead BMC is noticed).
	timeout := min(max(s.cfg.PowerSyncInterval, 2*time.Second), 30*time.Second)
	sem := make(chan struct{}, s.cfg.PowerSyncConcurrency)
	var wg sync.WaitGroup
	for _, tg := range targets {
		select {
		case <-ctx.Done():
			return
		case sem <- struct{}{}:
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			rctx, cancel := context.WithTimeout(ctx, timeout)
			state, err := tg.bmc.PowerState(rctx)
			cancel()
			s.cfg.Observe(err)
			if ctx.Err() != nil {
				return
			}
			s.reportPower(tg.node, tg.bmc, tg.gen, state, err)
		}()
	}
	wg.Wait()
}

// reportPower sends a reading if it is a change or a failure, unless a
// command started on the node since the read began (the reading may
// predate its power change) or the node's BMC was replaced.
func (s *Set) reportPower(node string, b drivers.BMC, gen uint64, state string, err error) {
	msg := &protocol.Message{Kind: protocol.KindPower, ID: s.cfg.NewID(), Site: s.cfg.Site, Node: node, Sent: s.cfg.Clock.Now()}
	s.mu.Lock()
	seen := s.synce[node]
	if seen == nil || s.busy[node] > 0 || s.gen[node] != gen || s.bmcs[node] != b {
		s.mu.Unlock()
		return
	}
	if err != nil {
		msg.Error = err.Error()
		seen.known, seen.state, seen.failing = true, "", true
	} else {
		if seen.known && !seen.failing && seen.state == state {
			s.mu.Unlock()
			return
		}
		msg.PowerState = state
		seen.known, seen.state, seen.failing = true, state, false
	}
	s.mu.Unlock()
	s.cfg.Report(msg)
}
