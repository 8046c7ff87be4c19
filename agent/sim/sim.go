// Package sim is the edge agent's simulator (agent --simulate): fake
// BMCs whose power-on boots a simulated ramdisk that speaks the real
// protocol (protocol/session) through the relay. It is out of the
// production path: the agent builds its fake driver's BMCs here and
// nothing else of the agent depends on it.
package sim

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/bmedge/bmedge/agent/clock"
	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/drivers/fake"
	"github.com/bmedge/bmedge/protocol"
	"github.com/bmedge/bmedge/protocol/session"
)

// Options shape the simulated nodes. Per node, driver_info keys
// fake_fail_step, fake_die_step, fake_reboot_step, fake_no_boot and
// fake_step_seconds override them (for failure injection in tests).
type Options struct {
	Nodes        int
	StepDuration time.Duration
	BootDelay    time.Duration
	Heartbeat    time.Duration
	BMCDelay     time.Duration
	FailStep     string // every node fails this in-band step
	DieStep      string // every node's ramdisk dies during this step
	RebootStep   string // every node's ramdisk reboots on its own during this step
	NoBoot       bool   // no ramdisk ever boots
	// PowerWatch, when set, is told of every power change of a
	// simulated BMC (state and boot device), as a test counts power-ons.
	PowerWatch func(node, state, bootDevice string)
}

// Config configures the simulator.
type Config struct {
	Site string
	Log  *slog.Logger
	Opts Options
	// ResendInterval is the simulated ramdisks' (as the agent's).
	ResendInterval time.Duration
	// Info is a node's last driver_info (the BMC part's).
	Info func(node string) map[string]any
	// Transport carries a simulated ramdisk's messages to the relay.
	Transport session.Transport
	// CacheBase is the URL prefix of the site image cache's images in
	// this process ("" without one): a simulated write_image fetches
	// such an image as a real ramdisk would.
	CacheBase func() string
	// Context is the context the simulated ramdisks run in (the
	// agent's, once it runs).
	Context func() context.Context
	// Clock is the clock (default clock.Real) of the simulated boot
	// delays, step durations and rescue shells' uptime.
	Clock clock.Clock
}

// Sim runs the simulated ramdisks of a site.
type Sim struct {
	cfg Config
	log *slog.Logger

	mu       sync.Mutex
	sessions map[string]*session.Session
	// boots counts each node's ramdisk boots; rescues are the running
	// rescue logins (rescue.go), each of one boot.
	boots   map[string]uint64
	rescues map[string]*rescueLogin
}

// New returns the simulator.
func New(cfg Config) *Sim {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Opts.Heartbeat == 0 {
		cfg.Opts.Heartbeat = 10 * time.Second
	}
	if cfg.Info == nil {
		cfg.Info = func(string) map[string]any { return nil }
	}
	if cfg.Context == nil {
		cfg.Context = context.Background
	}
	if cfg.CacheBase == nil {
		cfg.CacheBase = func() string { return "" }
	}
	cfg.Clock = clock.Or(cfg.Clock)
	return &Sim{cfg: cfg, log: cfg.Log, sessions: map[string]*session.Session{}, boots: map[string]uint64{}, rescues: map[string]*rescueLogin{}}
}

// NewBMC builds a simulated BMC for node while the site has room (have:
// the simulated BMCs it holds already).
func (s *Sim) NewBMC(node string, info map[string]any, have int) (drivers.BMC, error) {
	if have >= s.cfg.Opts.Nodes {
		return nil, fmt.Errorf("site %s simulates %d nodes and all are taken; start the agent with a larger --simulate", s.cfg.Site, s.cfg.Opts.Nodes)
	}
	fv, _ := info["fake_fail_validate"].(string)
	opts := fake.Options{Delay: s.cfg.Opts.BMCDelay, FailValidate: fv}
	opts.OnPower = func(state, boot string) {
		if w := s.cfg.Opts.PowerWatch; w != nil {
			w(node, state, boot)
		}
		s.OnPower(node, state, boot)
	}
	return fake.New(opts), nil
}

// options are the node's simulation options: the site's, with its
// driver_info's overrides.
func (s *Sim) options(node string) Options {
	opts := s.cfg.Opts
	info := s.cfg.Info(node)
	if v, _ := info["fake_fail_step"].(string); v != "" {
		opts.FailStep = v
	}
	if v, _ := info["fake_die_step"].(string); v != "" {
		opts.DieStep = v
	}
	if v, _ := info["fake_reboot_step"].(string); v != "" {
		opts.RebootStep = v
	}
	if v, _ := info["fake_no_boot"].(string); v == "true" {
		opts.NoBoot = true
	}
	if v, _ := info["fake_step_seconds"].(string); v != "" {
		var f float64
		if _, err := fmt.Sscanf(v, "%g", &f); err == nil {
			opts.StepDuration = time.Duration(f * float64(time.Second))
		}
	}
	return opts
}

// OnPower is a simulated node's power change: any ramdisk it ran stops,
// with its rescue login, and a power-on from the network boots a new one
// after BootDelay.
func (s *Sim) OnPower(node, state, boot string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.sessions[node]; r != nil {
		r.Stop()
		delete(s.sessions, node)
	}
	s.boots[node]++
	s.stopRescueLocked(node)
	if state == protocol.PowerOff || boot != protocol.BootPXE {
		return
	}
	opts := s.options(node)
	if opts.NoBoot {
		return
	}
	ctx := s.cfg.Context()
	r := session.New(session.Config{Site: s.cfg.Site, Node: node, Heartbeat: opts.Heartbeat, ResendInterval: s.cfg.ResendInterval,
		Runner: s.runner(node, opts, s.boots[node]), Transport: s.cfg.Transport, Log: s.log})
	s.sessions[node] = r
	go func() {
		delay := s.cfg.Clock.NewTimer(opts.BootDelay)
		defer delay.Stop()
		select {
		case <-ctx.Done():
			return
		case <-r.Stopped():
			return
		case <-delay.C():
		}
		r.Run(ctx)
	}()
}

// Runner is the hardware of a simulated node's ramdisk with opts: a
// ramdisk that reboots on its own starts a new boot of the node.
func (s *Sim) Runner(node string, opts Options) session.Runner {
	s.mu.Lock()
	boot := s.boots[node]
	s.mu.Unlock()
	return s.runner(node, opts, boot)
}

// runner is node's ramdisk of its boot-th boot.
func (s *Sim) runner(node string, opts Options, boot uint64) *simRunner {
	return &simRunner{s: s, node: node, opts: opts, boot: boot, reboot: func() {
		// As a crash-only agent does: the node reboots into a new
		// ramdisk boot that the coordinator did not ask for.
		go s.OnPower(node, protocol.PowerOn, protocol.BootPXE)
	}}
}

// Deliver hands a message to the node's simulated ramdisk and tells
// whether one runs.
func (s *Sim) Deliver(node string, m *protocol.Message) bool {
	s.mu.Lock()
	r := s.sessions[node]
	s.mu.Unlock()
	if r != nil {
		r.Deliver(m)
	}
	return r != nil
}

// Forget stops a deleted node's simulated ramdisk.
func (s *Sim) Forget(node string) {
	s.mu.Lock()
	r := s.sessions[node]
	delete(s.sessions, node)
	s.boots[node]++
	s.stopRescueLocked(node)
	s.mu.Unlock()
	if r != nil {
		r.Stop()
	}
}

// StopAll stops every simulated ramdisk and rescue login (the agent
// stops).
func (s *Sim) StopAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for node, r := range s.sessions {
		r.Stop()
		s.boots[node]++
	}
	for node := range s.rescues {
		s.boots[node]++
		s.stopRescueLocked(node)
	}
}
