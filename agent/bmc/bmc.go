// Package bmc is the edge agent's part that owns the site's BMCs: it
// builds each node's BMC from the driver registry (drivers.Registry: one
// builder per declared driver, no other list of drivers), runs BMC
// commands within the site's concurrency bound, and polls the power
// state of the real BMCs (power sync), reporting only changes and
// failures. Booting the ramdisk (virtual media, network boot) is not
// its business: a command's boot device and power changes go through
// the Booter it is given.
package bmc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/lib/clock"
	"github.com/bmedge/bmedge/protocol"
)

// Builder builds a node's BMC for one driver.
type Builder struct {
	// New builds the BMC from the node's driver_info; have is how many
	// BMCs of this driver the site holds already. It runs under the
	// set's lock and must not call the set.
	New func(node string, info map[string]any, have int) (drivers.BMC, error)
	// NoPowerSync: BMCs of this driver are not polled (simulated ones:
	// a simulated site of thousands of nodes stays quiet and cheap).
	NoPowerSync bool
	// HealthSync: BMCs of this driver that are not polled for power
	// (NoPowerSync) are still read for health in the power-sync rounds
	// once a command succeeded on them (simulated BMCs with sensors).
	HealthSync bool
}

// Booter does what a command's boot device and power changes need
// besides the BMC call: virtual media, network boot (agent/boot).
type Booter interface {
	SetBootDevice(ctx context.Context, node string, b drivers.BMC, device string) error
	SetPower(ctx context.Context, node string, b drivers.BMC, state string) error
	// NoteArgs takes a command's ramdisk boot arguments (its boot
	// credential, MACs) before it runs.
	NoteArgs(node string, args map[string]any)
}

// Config configures the BMC set.
type Config struct {
	Site string
	Log  *slog.Logger
	// Clock is the clock (default clock.Real): power reports' times and
	// the power sync's ticker.
	Clock clock.Clock
	// Registry is the driver registry (default drivers.Builtin()).
	Registry *drivers.Registry
	// Builders, by the registry's driver name, build the BMCs; a driver
	// of the registry without one is refused at use, saying so.
	Builders map[string]Builder
	// Concurrency bounds the BMC commands run at once (default 32).
	Concurrency int
	// PowerSyncInterval: how often the polled BMCs are read (0: never);
	// PowerSyncConcurrency bounds the reads at once (default 8).
	PowerSyncInterval    time.Duration
	PowerSyncConcurrency int
	// HealthInterval: a polled BMC that tells the hardware's health
	// (drivers.HealthReader) is read after its power reading when its
	// last health reading is at least this old (0: every power sync
	// round, as Ironic's enable_health_monitoring). SensorInterval: the
	// sensors are sent at least this often even when no status changed
	// (default DefaultSensorInterval). See healthsync.go.
	HealthInterval time.Duration
	SensorInterval time.Duration
	// Withdraw takes an unacked message back out of the outbox (true:
	// it was there); a newer health report then carries its events.
	Withdraw func(id string) bool
	// Report sends a power report (the outbox); Paused tells power sync
	// to take no reading (the outbox is full); Observe counts a read.
	Report  func(m *protocol.Message)
	Paused  func() bool
	Observe func(err error)
	// NewID makes a message id.
	NewID func() string
	// BlobURL fetches a firmware image into the site's image cache,
	// verifies its checksum and returns the URL the BMCs fetch it from
	// (agent/sitecache); nil: no cache, firmware.update is refused.
	BlobURL func(ctx context.Context, url, checksum string) (string, error)
	// MediaURL fetches a ramdisk deploy's boot ISO into the site's image
	// cache (no checksum: Ironic's boot_iso has none) and returns the
	// URL the BMCs fetch it from (agent/sitecache); nil: no cache, the
	// ISO boot is refused.
	MediaURL func(ctx context.Context, url string) (string, error)
	// BootISOURL builds a ramdisk deploy's boot ISO of a kernel and a
	// ramdisk (fetched into the site's image cache) with the kernel
	// parameters, and returns the URL the BMCs fetch it from
	// (agent/sitecache); nil: no cache, refused.
	BootISOURL func(ctx context.Context, kernel, ramdisk, params string) (string, error)
}

// ISOBooter is a Booter that boots a given ISO from a BMC's virtual
// media (agent/boot): the ramdisk deploy interface's live ISO.
type ISOBooter interface {
	// BootISO inserts the ISO at isoURL (the site cache's copy) as the
	// node's virtual CD and makes the CD its persistent boot device.
	BootISO(ctx context.Context, node string, b drivers.BMC, isoURL string) error
	// EjectISO ejects the node's virtual media.
	EjectISO(ctx context.Context, node string, b drivers.BMC) error
}

// Set holds the site's BMCs.
type Set struct {
	cfg   Config
	log   *slog.Logger
	slots chan struct{}

	mu    sync.Mutex
	bmcs  map[string]drivers.BMC
	kind  map[string]string         // node → its BMC's driver
	info  map[string]map[string]any // node → last driver_info seen
	busy  map[string]int            // BMC commands running per node
	gen   map[string]uint64         // BMC commands started per node
	synce map[string]*powerSeen     // polled nodes and what was last reported
	// netboot marks the nodes whose last BMC command's boot interface
	// boots the ramdisk by network boot (ipxe, pxe) although their BMC
	// may have virtual media.
	netboot map[string]bool
	// httpboot marks the nodes whose last BMC command's boot interface
	// is UEFI HTTP boot (redfish-https).
	httpboot map[string]bool
	// healthOnly are the nodes read for health only (Builder.HealthSync).
	healthOnly map[string]bool
	// kept keeps the polled nodes in the state folder (Keep); keptInfo
	// is the driver and driver_info last kept of each.
	kept     PolledStore
	keptInfo map[string][]byte
	// hs is health sync's memory of each polled node (healthsync.go).
	hs healthSync
	// media is what the operator attached as virtual media, per node and
	// device kind (vmedia.go).
	media map[string]map[string]attached
}

// powerSeen is the last power reading reported for a node.
type powerSeen struct {
	known   bool   // a reading was reported
	state   string // its power state, "" for a failure
	failing bool
}

// New returns an empty set.
func New(cfg Config) *Set {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.Registry == nil {
		r, err := drivers.NewRegistry(drivers.Builtin()...)
		if err != nil {
			panic(err) // the built-in declarations are checked by drivers' tests
		}
		cfg.Registry = r
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 32
	}
	if cfg.PowerSyncConcurrency <= 0 {
		cfg.PowerSyncConcurrency = 8
	}
	if cfg.SensorInterval <= 0 {
		cfg.SensorInterval = DefaultSensorInterval
	}
	if cfg.Report == nil {
		cfg.Report = func(*protocol.Message) {}
	}
	if cfg.Paused == nil {
		cfg.Paused = func() bool { return false }
	}
	if cfg.Observe == nil {
		cfg.Observe = func(error) {}
	}
	if cfg.NewID == nil {
		cfg.NewID = func() string {
			b := make([]byte, 12)
			_, _ = rand.Read(b)
			return hex.EncodeToString(b)
		}
	}
	return &Set{cfg: cfg, log: cfg.Log, slots: make(chan struct{}, cfg.Concurrency),
		bmcs: map[string]drivers.BMC{}, kind: map[string]string{}, info: map[string]map[string]any{}, netboot: map[string]bool{}, httpboot: map[string]bool{},
		busy: map[string]int{}, gen: map[string]uint64{}, synce: map[string]*powerSeen{}, healthOnly: map[string]bool{}, keptInfo: map[string][]byte{}, media: map[string]map[string]attached{}}
}

// Drivers lists the registry's drivers this set can build, sorted.
func (s *Set) Drivers() []string {
	var out []string
	for _, n := range s.cfg.Registry.Names() {
		if _, ok := s.cfg.Builders[n]; ok {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// DriverOf is the registry's name of the driver named name (an alias
// such as idrac or fake-hardware gives its driver's), name itself when
// the registry has none.
func (s *Set) DriverOf(name string) string {
	if d, err := s.cfg.Registry.Get(name); err == nil {
		return d.Name
	}
	return name
}

// known lists the registry's drivers this set can build, for messages.
func (s *Set) known() string { return strings.Join(s.Drivers(), ", ") }

// Get returns the node's BMC, built for driver from info (nil info: the
// last seen). A BMC built from older driver_info (say, before the
// operator fixed a password) is replaced.
func (s *Set) Get(node, driver string, info map[string]any) (drivers.BMC, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if info != nil {
		s.info[node] = info
	}
	if b, ok := s.bmcs[node]; ok {
		if si, ok := b.(interface{ SameInfo(map[string]any) bool }); !ok || info == nil || si.SameInfo(info) {
			return b, nil
		}
		// Closing waits for the old BMC's running operation and logs
		// out, which a slow BMC makes long: not under the lock.
		go closeBMC(b)
		delete(s.bmcs, node)
		delete(s.kind, node)
	}
	decl, err := s.cfg.Registry.Get(driver)
	build, ok := s.cfg.Builders[decl.Name]
	if err != nil || !ok {
		return nil, fmt.Errorf("this edge agent does not drive %q BMCs yet (it knows %s)", driver, s.known())
	}
	have := 0
	for _, k := range s.kind {
		if k == decl.Name {
			have++
		}
	}
	b, err := build.New(node, s.info[node], have)
	if err != nil {
		return nil, err
	}
	s.bmcs[node] = b
	s.kind[node] = decl.Name
	return b, nil
}

// Put sets a node's BMC, built elsewhere (tests), as of driver.
func (s *Set) Put(node, driver string, b drivers.BMC) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bmcs[node] = b
	s.kind[node] = driver
}

// NetworkBoot tells whether the node's last BMC command named a boot
// interface that boots the ramdisk by network boot (ipxe, pxe): the boot
// part then arms network boot and sets the BMC's boot device pxe, even
// where the BMC has virtual media.
func (s *Set) NetworkBoot(node string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.netboot[node]
}

// HTTPBoot tells whether the node boots the ramdisk by UEFI HTTP boot
// (its boot interface redfish-https).
func (s *Set) HTTPBoot(node string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.httpboot[node]
}

// noteBootInterface takes a BMC command's boot interface (every command
// for the node carries it: absent, the driver's default).
func (s *Set) noteBootInterface(m *protocol.Message) {
	if m.Driver == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if m.NetworkBoot() {
		s.netboot[m.Node] = true
	} else {
		delete(s.netboot, m.Node)
	}
	if m.HTTPBoot() {
		s.httpboot[m.Node] = true
	} else {
		delete(s.httpboot, m.Node)
	}
}

// Info is the node's last driver_info seen (nil if none).
func (s *Set) Info(node string) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.info[node]
}

// Gen is how many BMC commands started on the node, and whether the set
// counts any for it.
func (s *Set) Gen(node string) (uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g, ok := s.gen[node]
	return g, ok
}

// SetGen sets the node's command count (tests).
func (s *Set) SetGen(node string, g uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen[node] = g
}

// Begin notes a BMC command starting on the node: power sync does not
// read a node's BMC while a command runs on it, and drops a reading a
// command crossed. End notes its end.
func (s *Set) Begin(node string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.busy[node]++
	s.gen[node]++
}

// End: see Begin.
func (s *Set) End(node string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy[node]--; s.busy[node] <= 0 {
		delete(s.busy, node)
	}
}

// Forget drops the node's BMC (closed, in the background), its
// driver_info, power polling and command count.
func (s *Set) Forget(node string) {
	s.mu.Lock()
	b := s.bmcs[node]
	delete(s.bmcs, node)
	delete(s.kind, node)
	delete(s.info, node)
	delete(s.netboot, node)
	delete(s.httpboot, node)
	delete(s.synce, node)
	delete(s.healthOnly, node)
	delete(s.gen, node)
	s.hs.forget(node)
	delete(s.media, node)
	_, wasKept := s.keptInfo[node]
	delete(s.keptInfo, node)
	st := s.kept
	s.mu.Unlock()
	if wasKept && st != nil {
		st.PutPolled(node, nil)
	}
	if b != nil {
		go closeBMC(b)
	}
}

// CloseAll powers off every VM the set started and ends its BMC
// sessions. Not under the lock: a BMC's Close waits for its running
// operation, which may need the set (a qemu-dev power-on asks for the
// ramdisk's command line, which reads the node's driver_info).
func (s *Set) CloseAll() {
	s.mu.Lock()
	bmcs := make([]drivers.BMC, 0, len(s.bmcs))
	for _, b := range s.bmcs {
		bmcs = append(bmcs, b)
	}
	s.mu.Unlock()
	for _, b := range bmcs {
		closeBMC(b)
	}
}

// closeBMC ends a BMC's session or VM, whichever kind of Close it has.
func closeBMC(b drivers.BMC) {
	switch c := b.(type) {
	case interface{ Close() }:
		c.Close()
	case interface{ Close() error }:
		_ = c.Close()
	}
}

// Limited runs fn when one of the site's BMC slots is free
// (Config.Concurrency), or fails when ctx ends first.
func (s *Set) Limited(ctx context.Context, fn func() error) error {
	select {
	case s.slots <- struct{}{}:
		defer func() { <-s.slots }()
		return fn()
	case <-ctx.Done():
		return fmt.Errorf("edge agent of site %s: %d BMC operations were running (its limit, agent --bmc-concurrency) until this command's deadline", s.cfg.Site, cap(s.slots))
	}
}

// Exec runs a BMC command's action on the node's BMC. After a
// validation, a power action, and after any failure of a command that may have changed the
// power (power, boot device, out-of-band steps), the BMC's power state
// is read back into the result data (protocol.DataPowerState): the
// coordinator records the BMC's state, not the one the command aimed at.
func (s *Set) Exec(ctx context.Context, m *protocol.Message, boot Booter) error {
	b, err := s.Get(m.Node, m.Driver, m.DriverInfo)
	if err != nil {
		return err
	}
	s.noteBootInterface(m)
	if protocol.PowerArgsOf(m.Args).AgentUsername != "" {
		boot.NoteArgs(m.Node, m.Args)
	}
	err = s.exec(ctx, m, b, boot)
	if s.readsBack(m, err) {
		s.readBack(ctx, m.Node, b)
	}
	return err
}

// readsBack tells whether a command's outcome calls for reading the
// power state back: a validation that succeeded (manage's verify: as
// Ironic's, it records the BMC's power state), a power action, a step
// that powers the node, or a failure of a command that may have changed
// the power half way. BMCs that are not polled (simulated ones) are read
// back only after a validation or a failure: a simulated site stays
// cheap.
func (s *Set) readsBack(m *protocol.Message, err error) bool {
	if m.Action == protocol.ActionValidate {
		return err == nil
	}
	switch m.Action {
	case protocol.ActionPower, protocol.ActionBootDev, protocol.ActionOOBStep:
	default:
		return false
	}
	if err != nil {
		return true
	}
	s.mu.Lock()
	quiet := s.cfg.Builders[s.kind[m.Node]].NoPowerSync
	s.mu.Unlock()
	if quiet {
		return false
	}
	if m.Action == protocol.ActionPower {
		return true
	}
	for _, st := range m.OOBSteps() {
		switch st.Interface + "." + st.Step {
		case "deploy.tear_down_agent", "deploy.boot_instance":
			return true
		}
	}
	return false
}

// readBack reads the BMC's power state into the result data, within at
// most 5 s of the command's time: a command whose time ran out reads
// nothing, since its result must reach the coordinator before the
// command's deadline. A reading that fails leaves nothing: the
// coordinator keeps what it recorded, and power sync reads again.
func (s *Set) readBack(ctx context.Context, node string, b drivers.BMC) {
	if ctx.Err() != nil {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := b.PowerState(rctx)
	if err != nil {
		s.log.Info("power state not read back after the command", "node", node, "err", err)
		return
	}
	putData(ctx, protocol.DataPowerState, st)
}

func (s *Set) exec(ctx context.Context, m *protocol.Message, b drivers.BMC, boot Booter) error {
	switch m.Action {
	case protocol.ActionValidate:
		if err := b.Validate(ctx); err != nil {
			return err
		}
		// As Ironic's verify: the firmware and BIOS caches (firmware.go).
		s.readHardware(ctx, m.Node, b)
		return nil
	case protocol.ActionPower:
		p := protocol.PowerArgsOf(m.Args)
		if d := p.BootDevice; d != "" {
			if err := boot.SetBootDevice(ctx, m.Node, b, d); err != nil {
				return fmt.Errorf("setting boot device %s: %w", d, err)
			}
		}
		if err := boot.SetPower(ctx, m.Node, b, p.State); err != nil {
			return err
		}
		if off, given := m.Args[protocol.ArgSecureBoot].(bool); given && !off && protocol.PowerIsOff(p.State) {
			// The instance's tear down (Ironic's clean_up_instance).
			if err := setSecureBoot(ctx, b, false); err != nil {
				return err
			}
		}
		if p.ReadHardware {
			s.readHardware(ctx, m.Node, b)
		}
		return nil
	case protocol.ActionBootDev:
		bd := protocol.BootDeviceArgsOf(m.Args)
		d, eject := bd.Device, bd.EjectISO
		if d != protocol.BootISO && !eject {
			return boot.SetBootDevice(ctx, m.Node, b, d)
		}
		ib, ok := boot.(ISOBooter)
		if !ok {
			return fmt.Errorf("this edge agent cannot boot an ISO on node %s", m.Node)
		}
		if eject {
			if err := ib.EjectISO(ctx, m.Node, b); err != nil {
				return fmt.Errorf("eject the boot ISO: %w", err)
			}
			return boot.SetBootDevice(ctx, m.Node, b, d)
		}
		return s.bootISO(ctx, m, b, ib)
	case protocol.ActionVMedia:
		return s.vmedia(ctx, m, b)
	case protocol.ActionOOBStep:
		steps := m.OOBSteps()
		for i := range steps {
			if err := s.runOOBStep(ctx, m.Node, b, boot, &steps[i]); err != nil {
				if len(steps) == 1 {
					return err
				}
				return &StepsError{Done: i, Err: fmt.Errorf("step %s.%s: %w", steps[i].Interface, steps[i].Step, err)}
			}
		}
		return nil
	}
	return fmt.Errorf("edge agent cannot run action %q", m.Action)
}

// bootISO runs a boot_device command of device iso: the ISO fetched
// into the site's image cache (under the fetch rule), then inserted from
// there as the node's virtual CD, the CD its persistent boot device.
func (s *Set) bootISO(ctx context.Context, m *protocol.Message, b drivers.BMC, ib ISOBooter) error {
	bd := protocol.BootDeviceArgsOf(m.Args)
	if bd.KernelURL != "" {
		if s.cfg.BootISOURL == nil {
			return fmt.Errorf("the edge agent of site %s has no image cache (start it with --image-cache-dir and --image-cache-listen): a ramdisk deploy's kernel and ramdisk reach the BMCs only through it", s.cfg.Site)
		}
		local, err := s.cfg.BootISOURL(ctx, bd.KernelURL, bd.RamdiskURL, bd.KernelParams)
		if err != nil {
			return fmt.Errorf("boot ISO of instance_info kernel and ramdisk: %w", err)
		}
		return ib.BootISO(ctx, m.Node, b, local)
	}
	src := bd.ISOURL
	if s.cfg.MediaURL == nil {
		return fmt.Errorf("the edge agent of site %s has no image cache (start it with --image-cache-dir and --image-cache-listen): a ramdisk deploy's boot_iso reaches the BMCs only through it", s.cfg.Site)
	}
	local, err := s.cfg.MediaURL(ctx, src)
	if err != nil {
		return fmt.Errorf("boot_iso: %w", err)
	}
	return ib.BootISO(ctx, m.Node, b, local)
}

// StepsError is the failure of one step of a run of several: Done steps
// succeeded before it.
type StepsError struct {
	Done int
	Err  error
}

func (e *StepsError) Error() string { return e.Err.Error() }
func (e *StepsError) Unwrap() error { return e.Err }

// StepsDone is how many of m's out-of-band steps succeeded, given the
// command's outcome err.
func StepsDone(m *protocol.Message, err error) int {
	var se *StepsError
	if errors.As(err, &se) {
		return se.Done
	}
	return len(m.OOBSteps())
}

// keepsPower tells whether step s is of a node with disable_power_off
// (protocol.ArgDisablePowerOff): it is never powered off.
func keepsPower(s *protocol.Step) bool {
	v, _ := s.Args[protocol.ArgDisablePowerOff].(bool)
	return v
}

// runOOBStep runs the deploy steps every driver shares on the BMC
// interface, and hands the rest to the driver.
func (set *Set) runOOBStep(ctx context.Context, node string, b drivers.BMC, boot Booter, s *protocol.Step) error {
	switch s.Interface + "." + s.Step {
	case "deploy.prepare_instance_boot":
		if err := boot.SetBootDevice(ctx, node, b, protocol.BootDisk); err != nil {
			return err
		}
		if on, _ := s.Args[protocol.ArgSecureBoot].(bool); on {
			// Ironic's prepare_instance: the instance boots with Secure
			// Boot on.
			return setSecureBoot(ctx, b, true)
		}
		return nil
	case "deploy.tear_down_agent":
		if keepsPower(s) {
			// disable_power_off: the ramdisk's boot ends (its credential
			// is dropped with this step's success) and the power stays
			// on; boot_instance reboots the node.
			return nil
		}
		return boot.SetPower(ctx, node, b, protocol.PowerOff)
	case "deploy.boot_instance":
		state := protocol.PowerOn
		if keepsPower(s) {
			state = protocol.PowerReboot
		}
		if err := boot.SetPower(ctx, node, b, state); err != nil {
			return err
		}
		// The instance's start applies BIOS settings a deploy step
		// staged: read them now, as Ironic caches them after the
		// reboot that applies them (a BMC that applies them later in
		// POST shows them at the next read: manage, a BIOS step).
		set.readBIOS(ctx, node, b)
		return nil
	case "raid.create_configuration", "raid.apply_configuration", "raid.delete_configuration":
		return runRAIDStep(ctx, b, s)
	case "firmware.update":
		return set.updateFirmware(ctx, node, b, s.Args)
	case drivers.OOBInspectInterface + "." + drivers.OOBInspectStep:
		return set.inspectOOB(ctx, node, b, s.Args)
	}
	if err := b.RunStep(ctx, s.Interface, s.Step, s.Args); err != nil {
		return err
	}
	if s.Interface == "bios" {
		set.readBIOS(ctx, node, b)
	}
	return nil
}

// secureBooter is a BMC that turns UEFI Secure Boot on and off for the
// system's next boot (redfish: the SecureBoot resource).
type secureBooter interface {
	SetSecureBoot(ctx context.Context, enable bool) error
}

// setSecureBoot turns Secure Boot on or off for an instance, as Ironic's
// configure_secure_boot_if_needed and deconfigure_secure_boot_if_needed:
// a BMC that cannot set it (ipmi: Ironic's ipmitool has no
// set_secure_boot_state) is not asked, and the firmware keeps the
// operator's setting; a BMC that can and fails fails the step.
func setSecureBoot(ctx context.Context, b drivers.BMC, enable bool) error {
	sb, ok := b.(secureBooter)
	if !ok {
		return nil
	}
	if err := sb.SetSecureBoot(ctx, enable); err != nil {
		if enable {
			return fmt.Errorf("turn UEFI Secure Boot on for the instance: %w", err)
		}
		return fmt.Errorf("turn UEFI Secure Boot off at the instance's tear down: %w", err)
	}
	return nil
}
