package bmc

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/protocol"
)

// PolledStore keeps the nodes power sync polls across an agent restart,
// in the agent's encrypted state folder (agent/outbox's Store): each
// record holds the node's driver_info, its BMC password included.
type PolledStore interface {
	// PutPolled writes a node's record (nil: removes it).
	PutPolled(node string, rec []byte)
	// LoadPolled returns the records kept, by node.
	LoadPolled() (map[string][]byte, error)
}

// polledRecord is a polled node as kept in the state folder.
type polledRecord struct {
	Driver     string         `json:"driver"`
	DriverInfo map[string]any `json:"driver_info"`
}

// Keep loads the polled nodes kept in st, builds their BMCs and polls
// them from the first round on, as the agent that began polling them
// did; from now on each change is kept in st. A node whose BMC cannot be
// built any more (a driver this agent lacks) is logged and left until
// its next command. Call it before PowerSyncLoop.
func (s *Set) Keep(st PolledStore) error {
	kept, err := st.LoadPolled()
	if err != nil {
		return fmt.Errorf("read the power-synced nodes in the state folder: %w", err)
	}
	s.mu.Lock()
	s.kept = st
	s.mu.Unlock()
	n := 0
	for node, raw := range kept {
		var rec polledRecord
		if err := json.Unmarshal(raw, &rec); err != nil || rec.Driver == "" {
			s.log.Warn("a power-synced node in the state folder is unreadable; it is polled again after its next command", "node", node)
			st.PutPolled(node, nil)
			continue
		}
		if _, err := s.Get(node, rec.Driver, rec.DriverInfo); err != nil {
			s.log.Warn("a power-synced node in the state folder has a BMC this agent cannot build; it is polled again after its next command", "node", node, "err", err)
			continue
		}
		s.mu.Lock()
		if !s.cfg.Builders[s.kind[node]].NoPowerSync && s.synce[node] == nil {
			s.synce[node] = &powerSeen{}
			s.keptInfo[node] = raw
			n++
		}
		s.mu.Unlock()
	}
	if n > 0 {
		s.log.Info("power sync resumes for the nodes kept in the state folder", "nodes", n)
	}
	return nil
}

// CommandDone starts power sync of a node whose real BMC just ran a
// command (its credentials work), and takes a power command's outcome as
// the last reading: the coordinator records it from the result, so
// reporting it again would only add a message. The node is kept in the
// state folder (Keep) with the driver_info that worked.
func (s *Set) CommandDone(m *protocol.Message) {
	s.mu.Lock()
	var keep []byte
	st := s.kept
	defer func() {
		s.mu.Unlock()
		if keep != nil && st != nil {
			st.PutPolled(m.Node, keep)
		}
	}()
	if s.bmcs[m.Node] == nil {
		return
	}
	if bd := s.cfg.Builders[s.kind[m.Node]]; bd.NoPowerSync {
		if bd.HealthSync {
			s.healthOnly[m.Node] = true
		}
		return
	}
	if st != nil && m.DriverInfo != nil {
		if b, err := json.Marshal(polledRecord{Driver: m.Driver, DriverInfo: m.DriverInfo}); err == nil && !bytes.Equal(b, s.keptInfo[m.Node]) {
			s.keptInfo[m.Node], keep = b, b
		}
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
		state = protocol.PowerArgsOf(m.Args).State
	case protocol.ActionOOBStep:
		if m.Step != nil && m.Step.Interface+"."+m.Step.Step == "deploy.tear_down_agent" && !keepsPower(m.Step) {
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
	var healthOnly []target
	for node := range s.healthOnly {
		if b := s.bmcs[node]; b != nil && s.busy[node] == 0 {
			healthOnly = append(healthOnly, target{node, b, s.gen[node]})
		}
	}
	s.mu.Unlock()
	// A read may take up to the interval (at least 2 s, for a BMC that
	// must open a session; at most 30 s, so a dead BMC is noticed).
	timeout := min(max(s.cfg.PowerSyncInterval, 2*time.Second), 30*time.Second)
	for _, tg := range healthOnly {
		s.syncHealth(ctx, tg.node, tg.bmc, timeout) // in the background, PowerSyncConcurrency at once
	}
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
			if err == nil {
				s.syncHealth(ctx, tg.node, tg.bmc, timeout)
			}
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
