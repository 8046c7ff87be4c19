// Package sim is the edge agent's simulator (agent --simulate): fake
// BMCs whose power-on boots a simulated ramdisk that speaks the real
// protocol (lib/session) through the relay. It is out of the
// production path: the agent builds its fake driver's BMCs here and
// nothing else of the agent depends on it.
package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/drivers/fake"
	"github.com/bmedge/bmedge/lib/clock"
	"github.com/bmedge/bmedge/lib/session"
	"github.com/bmedge/bmedge/protocol"
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
	// FailText, when set, is what a FailStep failure says (tests of
	// long errors); FailValidate, when set, is every simulated BMC's
	// validation failure (fake_fail_validate overrides it).
	FailText, FailValidate string
	DieStep                string // every node's ramdisk dies during this step
	RebootStep             string // every node's ramdisk reboots on its own during this step
	NoBoot                 bool   // no ramdisk ever boots
	// MACs are the NICs a node's ramdisk reports (set per boot from
	// Config.BootMACs; none: one NIC of a MAC made from the node's name).
	MACs []string
	// LLDP, when set, has each NIC hear an LLDP frame of a simulated
	// switch during inspection (the inventory's lldp, as the ramdisk's):
	// chassis 02:00:5e:xx:xx:xx of the site, port Ethernet1/N, system
	// name sim-switch-SITE.
	LLDP bool
	// Health, when set, has each simulated BMC tell its health, sensors
	// and event log (health.go; driver_info fake_fail_sensor and
	// fake_health change them per node), read with the agent's power
	// sync rounds.
	Health bool
	// Unknown are simulated machines that belong to no node (agent
	// --simulate-unknown N): when the site discovers, they boot into
	// discovery and report their inventories (unknown.go).
	Unknown int
	// PowerWatch, when set, is told of every power change of a
	// simulated BMC (state and boot device), as a test counts power-ons.
	PowerWatch func(node, state, bootDevice string)
	// StepWatch, when set, is told of every in-band step a simulated
	// ramdisk starts (node, which of its boots, interface.step), as a test
	// checks that no step runs twice.
	StepWatch func(node string, boot uint64, step string)
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
	// delays, step durations, rescue shells' uptime and the simulated
	// ramdisks' sessions (hello, heartbeats, resends).
	Clock clock.Clock
	// BootMACs are a node's MACs as its last boot command gave them (its
	// enrolled PXE-enabled ports, args.boot_macs); nil: none. A ramdisk
	// booted then reports one NIC per MAC in its inventory, as the
	// node's real NICs would be.
	BootMACs func(node string) []string
}

// Store keeps the simulated nodes' state (the edge agent's encrypted
// state folder, agent/outbox): what a real node keeps in its own
// hardware while the agent that drives it restarts — the BMC's power and
// boot device, and the running ramdisk's session (its boot, token,
// running step and unacknowledged results).
type Store interface {
	// PutSim writes a node's state (nil removes it); with wait it
	// returns once it is on disk, else it goes with the store's next
	// commit.
	PutSim(node string, state []byte, wait bool)
	LoadSims() (map[string][]byte, error)
}

// nodeState is what Store keeps of a simulated node.
type nodeState struct {
	Power      string `json:"power"`
	BootDevice string `json:"boot_device"`
	// Boot is the simulation options of the ramdisk boot (the site's,
	// with the node's driver_info overrides at power-on).
	Boot *bootOptions `json:"boot,omitempty"`
	// Session is the running ramdisk's, nil when none runs.
	Session *session.State `json:"session,omitempty"`
}

type bootOptions struct {
	StepDuration time.Duration `json:"step_duration"`
	Heartbeat    time.Duration `json:"heartbeat"`
	FailStep     string        `json:"fail_step,omitempty"`
	DieStep      string        `json:"die_step,omitempty"`
	RebootStep   string        `json:"reboot_step,omitempty"`
	MACs         []string      `json:"macs,omitempty"`
}

// simNode is a simulated node's state and the lock that keeps its
// writes to Store in order.
type simNode struct {
	wmu   sync.Mutex
	state nodeState
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
	// rescueClosed are the refusals of the rescue logins closed.
	rescueClosed map[string]int64
	// nodes are the simulated nodes' state, kept in store once Restore
	// set it.
	nodes map[string]*simNode
	store Store
	// failed is when each node's failed sensor (health.go) first read
	// failed.
	failed map[string]failure
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
	if cfg.BootMACs == nil {
		cfg.BootMACs = func(string) []string { return nil }
	}
	cfg.Clock = clock.Or(cfg.Clock)
	return &Sim{cfg: cfg, log: cfg.Log, sessions: map[string]*session.Session{}, boots: map[string]uint64{}, rescues: map[string]*rescueLogin{},
		rescueClosed: map[string]int64{}, nodes: map[string]*simNode{}}
}

// NewBMC builds a simulated BMC for node while the site has room (have:
// the simulated BMCs it holds already).
func (s *Sim) NewBMC(node string, info map[string]any, have int) (drivers.BMC, error) {
	if have >= s.cfg.Opts.Nodes {
		return nil, fmt.Errorf("site %s simulates %d nodes and all are taken; start the agent with a larger --simulate", s.cfg.Site, s.cfg.Opts.Nodes)
	}
	fv, _ := info["fake_fail_validate"].(string)
	if fv == "" {
		fv = s.cfg.Opts.FailValidate
	}
	opts := fake.Options{Delay: s.cfg.Opts.BMCDelay, FailValidate: fv}
	s.mu.Lock()
	if n := s.nodes[node]; n != nil {
		opts.Power, opts.BootDevice = n.state.Power, n.state.BootDevice
	}
	s.mu.Unlock()
	opts.OnPower = func(state, boot string) {
		if w := s.cfg.Opts.PowerWatch; w != nil {
			w(node, state, boot)
		}
		s.OnPower(node, state, boot)
	}
	opts.OnBootDevice = func(device string) { s.onBootDevice(node, device) }
	if s.cfg.Opts.Health {
		return &simBMC{BMC: fake.New(opts), s: s, node: node}, nil
	}
	return fake.New(opts), nil
}

// onBootDevice keeps a simulated node's boot device, on disk before the
// action is reported, as a BMC keeps it: a restarted agent's BMC boots
// the node from the device last set (a reboot after a boot device set
// to disk, across a restart, does not boot the ramdisk).
func (s *Sim) onBootDevice(node, device string) {
	s.mu.Lock()
	n := s.nodeLocked(node)
	changed := n.state.BootDevice != device
	n.state.BootDevice = device
	s.mu.Unlock()
	if changed {
		s.save(node, true)
	}
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
	// The node's options first: its driver_info is the BMC part's, whose
	// lock is held while it builds a BMC here (NewBMC takes s.mu).
	opts := s.options(node)
	opts.MACs = s.cfg.BootMACs(node)
	s.mu.Lock()
	if r := s.sessions[node]; r != nil {
		r.Stop()
		delete(s.sessions, node)
	}
	s.boots[node]++
	s.stopRescueLocked(node)
	n := s.nodeLocked(node)
	if state != protocol.PowerOff {
		state = protocol.PowerOn // on, or a reboot
	}
	n.state = nodeState{Power: state, BootDevice: boot}
	var booted chan struct{}
	bootID := ""
	if state == protocol.PowerOn && boot == protocol.BootPXE {
		if !opts.NoBoot {
			n.state.Boot = &bootOptions{StepDuration: opts.StepDuration, Heartbeat: opts.Heartbeat,
				FailStep: opts.FailStep, DieStep: opts.DieStep, RebootStep: opts.RebootStep, MACs: opts.MACs}
			booted = make(chan struct{})
			bootID = s.bootLocked(node, opts, nil, opts.BootDelay, booted)
		}
	}
	s.mu.Unlock()
	// A BMC keeps its power state: on disk before the action is reported,
	// and before the ramdisk it boots runs (an agent killed before this
	// write comes back to a node that did not boot).
	s.save(node, true)
	if booted != nil {
		// Each ramdisk boot a simulated BMC performed, counted where it
		// happens (scripts/soak counts these lines per node).
		s.log.Info(BootLog, "node", node, "boot", bootID)
		close(booted)
	}
}

// BootLog is the message of the agent's log line for each ramdisk boot
// of a simulated node (attributes node and boot), once the boot is kept.
const BootLog = "simulated node booted its ramdisk"

// ResumeLog is the message of the agent's log line for each simulated
// ramdisk a restarted agent resumes (attributes node and boot): the same
// boot as its BootLog line, if that was written before the kill.
const ResumeLog = "simulated node's ramdisk resumed"

// nodeLocked is node's state, made if needed; s.mu is held.
func (s *Sim) nodeLocked(node string) *simNode {
	n := s.nodes[node]
	if n == nil {
		n = &simNode{}
		s.nodes[node] = n
	}
	return n
}

// bootLocked starts node's ramdisk after delay, a new boot or (resume
// set) the one a previous agent ran; s.mu is held.
//
// A new boot waits for ready to close before its ramdisk runs (nil: it
// runs at once); bootLocked returns its boot ID.
func (s *Sim) bootLocked(node string, opts Options, resume *session.State, delay time.Duration, ready <-chan struct{}) string {
	ctx := s.cfg.Context()
	boot := s.boots[node]
	r := session.New(session.Config{Site: s.cfg.Site, Node: node, Heartbeat: opts.Heartbeat, ResendInterval: s.cfg.ResendInterval,
		Runner: s.runner(node, opts, boot), Transport: s.cfg.Transport, Log: s.log, Resume: resume, Clock: s.cfg.Clock,
		Save:          func(st session.State) { s.saveSession(node, boot, &st) },
		RescueRefused: func() map[string]int64 { return s.rescueRefusedOf(node, boot) }})
	s.sessions[node] = r
	if resume == nil {
		resume = &session.State{BootID: r.BootID()}
	}
	s.nodeLocked(node).state.Session = resume
	go func() {
		if ready != nil {
			select {
			case <-ctx.Done():
				return
			case <-r.Stopped():
				return
			case <-ready:
			}
		}
		t := s.cfg.Clock.NewTimer(delay)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return
		case <-r.Stopped():
			return
		case <-t.C():
		}
		r.Run(ctx)
		select {
		case <-ctx.Done():
		case <-r.Stopped():
		default:
			// Neither powered off nor the agent stopping: the ramdisk
			// died (failure injection); it does not come back.
			s.saveSession(node, boot, nil)
		}
	}()
	return r.BootID()
}

// saveSession keeps the session state of node's boot-th boot (nil: its
// ramdisk is gone), unless the node booted again meanwhile.
func (s *Sim) saveSession(node string, boot uint64, st *session.State) {
	s.mu.Lock()
	n := s.nodes[node]
	if n == nil || s.boots[node] != boot {
		s.mu.Unlock()
		return
	}
	// A new result must be on disk before it is published (the step
	// would run again after a restart); the rest (a welcome, a step's
	// start, an ack) may go with the next commit: lost to a crash, the
	// same boot says hello again, the step is handed out again, the
	// result is sent again.
	prev := n.state.Session
	wait := st != nil && (prev == nil || len(st.Results) > len(prev.Results))
	if st != nil && prev != nil && !wait && st.Token == prev.Token && st.Running == prev.Running && len(st.Outbox) < len(prev.Outbox) {
		// An ack only: not written (lost, the result is sent again and
		// the relay, which keeps it already, acks it again). The next
		// write carries it.
		n.state.Session = st
		s.mu.Unlock()
		return
	}
	n.state.Session = st
	s.mu.Unlock()
	s.save(node, wait)
}

// save writes node's state to the store (once Restore set one), its
// writes in order; wait: returns once it is on disk.
func (s *Sim) save(node string, wait bool) {
	s.mu.Lock()
	n, st := s.nodes[node], s.store
	s.mu.Unlock()
	if n == nil || st == nil {
		return
	}
	n.wmu.Lock()
	defer n.wmu.Unlock()
	s.mu.Lock()
	gone := s.nodes[node] != n
	b, err := json.Marshal(n.state)
	s.mu.Unlock()
	if gone {
		return
	}
	if err != nil {
		s.log.Error("simulated node state cannot be encoded", "node", node, "err", err)
		return
	}
	st.PutSim(node, b, wait)
}

// Restore loads the simulated nodes' state from st and keeps it there
// from now on: each node's BMC comes back with its power and boot
// device, and each ramdisk that ran goes on — its session with the same
// boot and token, its running step started again for what remains of
// it, its unacknowledged results sent again — as a real node's ramdisk
// goes on while the edge agent restarts. Call it once, when the agent
// runs.
func (s *Sim) Restore(st Store) error {
	saved, err := st.LoadSims()
	if err != nil {
		return fmt.Errorf("read the simulated nodes' state in the state folder: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.store = st
	resumed := 0
	for node, b := range saved {
		var ns nodeState
		if err := json.Unmarshal(b, &ns); err != nil {
			s.log.Warn("simulated node state unreadable; the node starts powered off", "node", node, "err", err)
			continue
		}
		n := s.nodeLocked(node)
		n.state = ns
		// Boot is set only by a power-on from the network: the running
		// boot's (BootDevice is the next boot's, set since maybe).
		if ns.Power != protocol.PowerOn || ns.Boot == nil {
			continue
		}
		opts := s.cfg.Opts
		opts.StepDuration, opts.Heartbeat = ns.Boot.StepDuration, ns.Boot.Heartbeat
		opts.FailStep, opts.DieStep, opts.RebootStep = ns.Boot.FailStep, ns.Boot.DieStep, ns.Boot.RebootStep
		opts.MACs = ns.Boot.MACs
		if ns.Session == nil {
			continue // its ramdisk died
		}
		delay := time.Duration(0)
		if ns.Session.Token == "" {
			delay = opts.BootDelay // it was booting: it boots
		}
		s.bootLocked(node, opts, ns.Session, delay, nil)
		// The boot's line once more: a kill between keeping the boot and
		// its BootLog line leaves it only here.
		s.log.Info(ResumeLog, "node", node, "boot", ns.Session.BootID)
		resumed++
	}
	if len(saved) > 0 {
		s.log.Info("simulated nodes loaded from the state folder", "nodes", len(saved), "ramdisks_resumed", resumed)
	}
	return nil
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
	n, st := s.nodes[node], s.store
	delete(s.nodes, node)
	delete(s.failed, node)
	s.mu.Unlock()
	if r != nil {
		r.Stop()
	}
	if n != nil && st != nil {
		n.wmu.Lock()
		st.PutSim(node, nil, false)
		n.wmu.Unlock()
	}
}

// StopAll stops every simulated ramdisk and rescue login (the agent
// stops). Their state stays in the store: Restore goes on with them.
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
