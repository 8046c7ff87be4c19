package fsm

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/protocol"
)

// Config holds the knobs of the lifecycle. NewID and NewToken are injected
// so that the machine stays deterministic under test.
type Config struct {
	// WaitTimeout fails a WAIT state that hears nothing (reset by heartbeats).
	WaitTimeout time.Duration
	// CommandTimeout fails an out-of-band command without a result.
	CommandTimeout time.Duration
	// ResendInterval is how often an unanswered command is sent again.
	ResendInterval time.Duration
	// AutomatedClean runs priority > 0 clean steps on provide and undeploy.
	AutomatedClean bool
	// PriorityOverrides maps "interface.step" to a priority for automated
	// cleaning; 0 disables the step.
	PriorityOverrides map[string]int
	Drivers           *drivers.Registry
	// InspectionRules, when set, runs on every inspection's inventory
	// once it is applied to the node (in band and out of band; not on
	// the inspect_hardware step of a manual clean): the
	// inspection rules (coordinator/inspectrules). newPorts are the MAC
	// addresses the same Output creates ports for (Output.Ports). It may
	// change the node, and returns the history to record, the plugin
	// data to store with the inventory, the ports it changed
	// (Output.PortChanges), and an error that fails the inspection
	// (then nothing of its changes is kept).
	InspectionRules func(n *Node, inventory, pluginData map[string]any, newPorts []string, now time.Time) ([]HistoryEntry, map[string]any, []PortChange, error)
	NewID           func() string
	NewToken        func() string
	// BurninPair resolves deploy.burnin_network's partner_node (a name
	// or UUID) for node n to the partner's UUID and gives the pair's key
	// (the engine derives it from its secret); nil refuses the step.
	BurninPair func(n *Node, partnerNode string) (partnerUUID, secret string, err error)
	// Holder names the coordinator in reservations.
	Holder string
	// SitePlans tells whether the edge agent of a site runs plans
	// (run_plan): the rest of a clean, deploy or service phase is then
	// handed to it at once (siteplan.go). nil: never.
	SitePlans func(site string) bool
	// RequiredCleanSteps are the in-band steps ("interface.step") that
	// automated cleaning must run: a ramdisk that does not offer one of
	// them fails the cleaning instead of skipping it. Nil: the standard
	// ramdisk's clean steps of priority > 0 (after PriorityOverrides).
	RequiredCleanSteps []string
	// ForcePowerStateDuringSync (Ironic's force_power_state_during_sync;
	// serve defaults it to true): when the edge agent reports a resting
	// node's BMC in another power state than recorded, power it back to
	// the recorded state. Without it the reading is recorded instead.
	ForcePowerStateDuringSync bool
	// FastTrack (Ironic's [deploy]fast_track; serve's --fast-track):
	// an inspection or a cleaning leaves the node's ramdisk running,
	// powered on, and the next operation within FastTrackTimeout uses it
	// without a reboot (fasttrack.go). A node's driver_info/fast_track
	// overrides it.
	FastTrack bool
	// FastTrackTimeout (Ironic's [deploy]fast_track_timeout, default
	// DefaultFastTrackTimeout): a heartbeat older than this is no sign
	// of a running ramdisk, and a kept ramdisk that no operation used
	// this long after the last one ended is powered off.
	FastTrackTimeout time.Duration
	// AllowMD5Checksum (Ironic's [agent]allow_md5_checksum; serve's
	// --allow-md5-checksum): a deploy may give an md5 or sha1 image
	// checksum, which the ramdisk is then told to verify
	// (protocol.ArgAllowMD5Checksum). Without it such a deploy is
	// refused (400) naming the option.
	AllowMD5Checksum bool
	// QuarantineOn (serve's --quarantine-on): "" (off), or
	// protocol.HealthCritical or HealthWarning: an available node not in
	// maintenance whose health report says this or worse is set into
	// maintenance, with a reason naming the readings (health.go), so that
	// nothing hands it out. Nodes in other states are not touched.
	QuarantineOn string
}

// Check is the start-time check of the configuration, for the coordinator
// to call before it serves: a clean step priority override must be an
// "interface.step" with a priority >= 0 (0 disables the step), and the
// overrides must not give two clean steps of one interface the same
// non-zero priority, among any driver's steps and the standard ramdisk's:
// their order would be undefined, which the seeds make a load-time error,
// as for the drivers' own declarations.
func (c Config) Check() error {
	names := slices.Sorted(maps.Keys(c.PriorityOverrides))
	for _, name := range names {
		iface, step, ok := strings.Cut(name, ".")
		if p := c.PriorityOverrides[name]; !ok || iface == "" || step == "" || p < 0 {
			return fmt.Errorf("clean step priority override %s=%d: want interface.step=N with N >= 0 (0 disables the step)", name, p)
		}
	}
	decls := []drivers.Declaration{{}}
	if c.Drivers != nil {
		decls = nil
		for _, name := range c.Drivers.Names() {
			d, err := c.Drivers.Get(name)
			if err != nil {
				return err
			}
			decls = append(decls, d)
		}
	}
	for _, d := range decls {
		// A step the driver and the ramdisk both declare (the RAID steps:
		// the node's raid_interface picks one of them) is one step here;
		// the override sets both alike.
		var steps []drivers.Step
		have := map[string]bool{}
		for _, s := range slices.Concat(d.CleanSteps, drivers.InbandCleanSteps()) {
			if !have[s.Name()] {
				have[s.Name()] = true
				steps = append(steps, s)
			}
		}
		for i := range steps {
			if p, ok := c.PriorityOverrides[steps[i].Name()]; ok {
				steps[i].Priority = p
			}
		}
		if a, b, clash := samePriority(steps); clash {
			var set []string
			for _, s := range []drivers.Step{a, b} {
				if p, ok := c.PriorityOverrides[s.Name()]; ok {
					set = append(set, fmt.Sprintf("%s=%d", s.Name(), p))
				}
			}
			where := "the standard ramdisk's steps"
			if d.Name != "" {
				where = fmt.Sprintf("the clean steps of driver %s and the standard ramdisk", d.Name)
			}
			what := "clean step priority override " + strings.Join(set, "") + " gives"
			if len(set) > 1 {
				what = "clean step priority overrides " + strings.Join(set, " and ") + " give"
			}
			return fmt.Errorf("%s %s and %s, both of interface %s, the same priority %d (among %s): their order would be undefined; give them different priorities",
				what, a.Name(), b.Name(), a.Interface, a.Priority, where)
		}
	}
	return nil
}

// samePriority finds two steps of one interface with the same non-zero
// priority, the first such pair in the order of steps.
func samePriority(steps []drivers.Step) (a, b drivers.Step, clash bool) {
	seen := map[string]drivers.Step{}
	for _, s := range steps {
		if s.Priority <= 0 {
			continue
		}
		key := fmt.Sprintf("%s/%d", s.Interface, s.Priority)
		if first, ok := seen[key]; ok {
			return first, s, true
		}
		seen[key] = s
	}
	return a, b, false
}

// Machine applies events to nodes. It holds only configuration.
type Machine struct{ cfg Config }

// New returns a machine with cfg, filling unset durations with defaults.
func New(cfg Config) *Machine {
	if cfg.WaitTimeout == 0 {
		cfg.WaitTimeout = 30 * time.Minute
	}
	if cfg.CommandTimeout == 0 {
		cfg.CommandTimeout = 5 * time.Minute
	}
	if cfg.ResendInterval == 0 {
		cfg.ResendInterval = 10 * time.Second
	}
	if cfg.Holder == "" {
		cfg.Holder = "coordinator"
	}
	if cfg.FastTrackTimeout <= 0 {
		cfg.FastTrackTimeout = DefaultFastTrackTimeout
	}
	return &Machine{cfg: cfg}
}

// Config returns the machine's configuration.
func (m *Machine) Config() Config { return m.cfg }

// Outgoing is a message to publish.
type Outgoing struct {
	Topic string
	Msg   *protocol.Message
}

// Output is what the engine must do after an event: store the node if
// Changed, append History, store Inventory, publish Send.
type Output struct {
	Changed   bool
	Send      []Outgoing
	History   []HistoryEntry
	Inventory map[string]any
	// Reject is why an incoming message was not acted on (to be logged).
	Reject string
	// Late marks a Reject that is expected now and then: a message that
	// crossed the end of the ramdisk's boot (logged below warning level).
	Late bool
	// BMCWarnings counts the warnings an edge agent's result carried
	// (protocol.DataWarnings), each also a WARNING in History: /metrics
	// counts them (bmc_warnings_total).
	BMCWarnings int
	// Ports are the MAC addresses an out-of-band inspection found (the
	// system's EthernetInterfaces): the engine creates a port for each
	// that no port has yet. PluginData, with Inventory, says where the
	// inventory came from (GET /v1/nodes/{id}/inventory's plugin_data).
	Ports      []string
	PluginData map[string]any
	// PortChanges are the node's ports as the inspection rules changed
	// them: the engine writes them after it made the ports of Ports.
	PortChanges []PortChange
}

// PortChange is a port as the inspection rules left it: the fields
// named in Fields are written to the node's port of UUID, or, when UUID
// is "", to its port of MAC Address (one the same Output creates).
type PortChange struct {
	UUID, Address       string
	Fields              []string // physical_network, pxe_enabled, description, extra, local_link_connection
	PhysicalNetwork     string
	PXEEnabled          bool
	Description         string
	Extra               map[string]any
	LocalLinkConnection map[string]any
}

// Reason says why a request is refused. The API maps it to the HTTP
// status Ironic answers (coordinator/api); nothing else does.
type Reason int

const (
	// Invalid: the request cannot apply to the node as it is (a verb
	// its state does not take, a malformed step list): Ironic's 400.
	Invalid Reason = iota + 1
	// Conflict: the node is busy with an operation, or the request
	// conflicts with what it is (retired, say): Ironic's 409.
	Conflict
)

func (r Reason) String() string {
	switch r {
	case Invalid:
		return "invalid"
	case Conflict:
		return "conflict"
	}
	return fmt.Sprintf("reason(%d)", int(r))
}

// Refusal is a request refused, with its reason and a message for the
// operator.
type Refusal struct {
	Reason Reason
	Msg    string
}

func (r *Refusal) Error() string { return r.Msg }

func refuse(reason Reason, format string, a ...any) *Refusal {
	return &Refusal{Reason: reason, Msg: fmt.Sprintf(format, a...)}
}

// Ident names a node in messages: its name when it has one.
func (n *Node) Ident() string {
	if n.Name != "" {
		return n.Name
	}
	return n.UUID
}

// Locked tells whether the coordinator is working on the node.
func (n *Node) Locked() bool { return n.Reservation != "" }

func verbList(vs []Event) string {
	if len(vs) == 0 {
		return "none"
	}
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = string(v)
	}
	return strings.Join(s, ", ")
}

// AsObjects reads a JSON list of objects, as decoded or as built in code.
func AsObjects(v any) []map[string]any {
	switch l := v.(type) {
	case []map[string]any:
		return l
	case []any:
		out := make([]map[string]any, 0, len(l))
		for _, e := range l {
			o, _ := e.(map[string]any)
			out = append(out, o)
		}
		return out
	}
	return nil
}

// fire moves n along the table; a missing row is a bug in this package.
func (m *Machine) fire(n *Node, e Event, want State, now time.Time, out *Output) {
	to, ok := Next(n.ProvisionState, e, want)
	if !ok {
		panic(fmt.Sprintf("fsm: no transition from %q on %q to %q", n.ProvisionState, e, want))
	}
	from := n.ProvisionState
	n.ProvisionState = to
	n.ProvisionUpdatedAt = now
	n.UpdatedAt = now
	if Stable(to) {
		n.TargetProvisionState = ""
	}
	out.History = append(out.History, HistoryEntry{Time: now, Severity: "INFO", EventType: "provisioning",
		Event: fmt.Sprintf("%s: %s -> %s", e, from, to), From: from, To: to})
	out.Changed = true
}

func (m *Machine) current(n *Node) *Action {
	if n.Op == nil || n.Op.Index >= len(n.Op.Plan) {
		return nil
	}
	return &n.Op.Plan[n.Op.Index]
}

func eventType(op *Operation) string {
	if op == nil {
		return "power"
	}
	return op.Phase.Info().EventType
}

// withdrawToken ends the ramdisk boot: its agent token and its MQTT
// credential are revoked, and the boot is remembered.
func withdrawToken(n *Node) {
	if n.BootID != "" {
		n.PastBoots = appendBoot(n.PastBoots, n.BootID)
	}
	n.AgentToken, n.BootID, n.BootNonce = "", "", ""
	// No boot, nothing to fast-track.
	n.FastTrackUntil = time.Time{}
}

// appendBoot adds id to the last few boots remembered.
func appendBoot(past []string, id string) []string {
	const keep = 4
	if slices.Contains(past, id) {
		return past
	}
	past = append(past, id)
	if len(past) > keep {
		past = slices.Clone(past[len(past)-keep:])
	}
	return past
}

func describe(n *Node, a *Action) string {
	switch a.Kind {
	case ActStep:
		return fmt.Sprintf("%s step %s", n.Op.Phase, a.Step.Name())
	case ActOOB:
		if a.Action == protocol.ActionPower {
			// "power on", "power off", "rebooted" → "power on", "power off", "reboot".
			switch st := protocol.PowerArgsOf(a.Args).State; {
			case st == protocol.PowerReboot:
				return "reboot"
			case st == protocol.PowerSoftReboot:
				return "soft reboot"
			case strings.HasPrefix(st, "power "), st == protocol.PowerSoftOff:
				return st
			default:
				return "power " + st
			}
		}
		if a.Action == protocol.ActionBootDev {
			return "setting boot device " + protocol.BootDeviceArgsOf(a.Args).Device
		}
		if a.Action == protocol.ActionVMedia {
			v := protocol.VMediaArgsOf(a.Args)
			if v.Op == protocol.VMediaAttach {
				return "attaching virtual media " + v.DeviceType
			}
			return "detaching virtual media"
		}
		return "BMC " + a.Action
	}
	return a.Kind
}
