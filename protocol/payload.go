package protocol

import "fmt"

// The payload of each command action, one type per action with its own
// check. A command's payload travels in the envelope's "args" (and, for
// the step and plan actions, in "step", "steps" and "plan"): the wire
// format is protocol v1's, unchanged, and the types here are the only
// code that reads an "args" key. Validate checks a command with its
// action's check (commandChecks); the readers (PowerArgsOf, ...) read
// what is there, a key of the wrong type as its zero value, for
// messages that Validate accepted or that the coordinator built itself.
//
// Unknown keys are ignored, as every receiver of v1 always did: a newer
// sender may add a key an older receiver does not know.

// Keys of "args" (the wire names) that only the payload types read.
const (
	argState     = "state"
	argDevice    = "device"
	argCommandID = "command_id"
	argURL       = "url"
	argChecksum  = "checksum"
	argPlanID    = "plan_id"
	argMode      = "mode"
)

// PowerArgs is a power command's payload (ActionPower).
type PowerArgs struct {
	// State is the power state asked: PowerOn, PowerOff, PowerReboot,
	// PowerSoftOff or PowerSoftReboot.
	State string
	// BootDevice, when not empty, is set before the power (BootPXE or
	// BootDisk; ArgBootDevice).
	BootDevice string
	// ReadHardware asks for the firmware and BIOS reading once the power
	// changed (ArgReadHardware).
	ReadHardware bool
	// SecureBoot asks the boot with UEFI Secure Boot (ArgSecureBoot).
	SecureBoot bool
	// The boot's ramdisk credential (ArgAgentUsername, ArgAgentPassword),
	// on the wire only; the coordinator keeps BootNonce (ArgBootNonce)
	// instead, which never goes on the wire.
	AgentUsername, AgentPassword string
	BootNonce                    string
	// BootMACs are the node's PXE-enabled port MACs (ArgBootMACs).
	BootMACs []string
}

// PowerArgsOf reads a power command's args.
func PowerArgsOf(args map[string]any) PowerArgs {
	var p PowerArgs
	p.State, _ = args[argState].(string)
	p.BootDevice, _ = args[ArgBootDevice].(string)
	p.ReadHardware, _ = args[ArgReadHardware].(bool)
	p.SecureBoot, _ = args[ArgSecureBoot].(bool)
	p.AgentUsername, _ = args[ArgAgentUsername].(string)
	p.AgentPassword, _ = args[ArgAgentPassword].(string)
	p.BootNonce, _ = args[ArgBootNonce].(string)
	switch l := args[ArgBootMACs].(type) {
	case []string:
		p.BootMACs = l
	case []any:
		for _, x := range l {
			if s, ok := x.(string); ok {
				p.BootMACs = append(p.BootMACs, s)
			}
		}
	}
	return p
}

// Args is the payload in its wire form (the keys of its set fields).
func (p PowerArgs) Args() map[string]any {
	a := map[string]any{argState: p.State}
	if p.BootDevice != "" {
		a[ArgBootDevice] = p.BootDevice
	}
	if p.ReadHardware {
		a[ArgReadHardware] = true
	}
	if p.SecureBoot {
		a[ArgSecureBoot] = true
	}
	if p.AgentUsername != "" {
		a[ArgAgentUsername] = p.AgentUsername
	}
	if p.AgentPassword != "" {
		a[ArgAgentPassword] = p.AgentPassword
	}
	if p.BootNonce != "" {
		a[ArgBootNonce] = p.BootNonce
	}
	if len(p.BootMACs) > 0 {
		l := make([]any, len(p.BootMACs))
		for i, s := range p.BootMACs {
			l[i] = s
		}
		a[ArgBootMACs] = l
	}
	return a
}

// Boots tells whether the command leaves the node powered (a boot).
func (p PowerArgs) Boots() bool { return !PowerIsOff(p.State) }

// Reboots tells whether the command reboots the node.
func (p PowerArgs) Reboots() bool { return p.State == PowerReboot || p.State == PowerSoftReboot }

func checkPower(m *Message) error {
	s, _ := m.Args[argState].(string)
	if s != PowerOn && s != PowerOff && s != PowerReboot && s != PowerSoftOff && s != PowerSoftReboot {
		return fmt.Errorf("power command %q has state %q; want %q, %q, %q, %q or %q", m.ID, s, PowerOn, PowerOff, PowerReboot, PowerSoftOff, PowerSoftReboot)
	}
	if d, set := m.Args[ArgBootDevice]; set && d != BootPXE && d != BootDisk {
		return fmt.Errorf("power command %q has boot_device %v; want %q or %q", m.ID, d, BootPXE, BootDisk)
	}
	return nil
}

// BootDeviceArgs is a boot_device command's payload (ActionBootDev).
type BootDeviceArgs struct {
	// Device is BootPXE, BootDisk or BootISO.
	Device string
	// ISOURL is the ISO of device BootISO (ArgISOURL).
	ISOURL string
	// EjectISO, with device BootDisk, ejects the virtual media first
	// (ArgEjectISO).
	EjectISO bool
	// KernelURL, RamdiskURL and KernelParams, with device BootISO and no
	// ISOURL: the edge agent builds the ISO from a kernel and a ramdisk
	// (ArgKernelURL, ArgRamdiskURL, ArgKernelParams; Ironic's ramdisk
	// deploy of instance_info kernel and ramdisk).
	KernelURL, RamdiskURL, KernelParams string
}

// BootDeviceArgsOf reads a boot_device command's args.
func BootDeviceArgsOf(args map[string]any) BootDeviceArgs {
	var b BootDeviceArgs
	b.Device, _ = args[argDevice].(string)
	b.ISOURL, _ = args[ArgISOURL].(string)
	b.EjectISO, _ = args[ArgEjectISO].(bool)
	b.KernelURL, _ = args[ArgKernelURL].(string)
	b.RamdiskURL, _ = args[ArgRamdiskURL].(string)
	b.KernelParams, _ = args[ArgKernelParams].(string)
	return b
}

// Args is the payload in its wire form.
func (b BootDeviceArgs) Args() map[string]any {
	a := map[string]any{argDevice: b.Device}
	if b.ISOURL != "" {
		a[ArgISOURL] = b.ISOURL
	}
	if b.EjectISO {
		a[ArgEjectISO] = true
	}
	for k, v := range map[string]string{ArgKernelURL: b.KernelURL, ArgRamdiskURL: b.RamdiskURL, ArgKernelParams: b.KernelParams} {
		if v != "" {
			a[k] = v
		}
	}
	return a
}

func checkBootDevice(m *Message) error {
	d, _ := m.Args[argDevice].(string)
	if d != BootPXE && d != BootDisk && d != BootISO {
		return fmt.Errorf("boot_device command %q has device %q; want %q, %q or %q", m.ID, d, BootPXE, BootDisk, BootISO)
	}
	b := BootDeviceArgsOf(m.Args)
	built := b.KernelURL != "" || b.RamdiskURL != "" || b.KernelParams != ""
	switch {
	case built && (d != BootISO || b.ISOURL != ""):
		return fmt.Errorf("boot_device command %q: %s and %s go with device %q and no %s", m.ID, ArgKernelURL, ArgRamdiskURL, BootISO, ArgISOURL)
	case built && (b.KernelURL == "" || b.RamdiskURL == "" || len(b.KernelURL) > MaxISOURLBytes || len(b.RamdiskURL) > MaxISOURLBytes):
		return fmt.Errorf("boot_device command %q needs both %s and %s, http(s) URLs of at most %d bytes", m.ID, ArgKernelURL, ArgRamdiskURL, MaxISOURLBytes)
	case built:
		if err := CheckKernelParams(b.KernelParams); err != nil {
			return fmt.Errorf("boot_device command %q: %s: %w", m.ID, ArgKernelParams, err)
		}
	case d == BootISO && (b.ISOURL == "" || len(b.ISOURL) > MaxISOURLBytes):
		return fmt.Errorf("boot_device command %q of device %q needs %s, an http(s) URL of at most %d bytes", m.ID, BootISO, ArgISOURL, MaxISOURLBytes)
	}
	if e, set := m.Args[ArgEjectISO]; set && (d != BootDisk || e != true) {
		return fmt.Errorf("boot_device command %q: %s is true, with device %q only", m.ID, ArgEjectISO, BootDisk)
	}
	return nil
}

// AbortArgs is an abort_step command's payload (ActionAbort): the
// run_step command whose step to abort.
type AbortArgs struct {
	CommandID string
}

// AbortArgsOf reads an abort_step command's args.
func AbortArgsOf(args map[string]any) AbortArgs {
	id, _ := args[argCommandID].(string)
	return AbortArgs{CommandID: id}
}

// Args is the payload in its wire form.
func (a AbortArgs) Args() map[string]any { return map[string]any{argCommandID: a.CommandID} }

// CacheImageArgs is a cache_image command's payload (ActionCacheImage).
type CacheImageArgs struct {
	URL, Checksum string
}

// CacheImageArgsOf reads a cache_image command's args.
func CacheImageArgsOf(args map[string]any) CacheImageArgs {
	var c CacheImageArgs
	c.URL, _ = args[argURL].(string)
	c.Checksum, _ = args[argChecksum].(string)
	return c
}

// Args is the payload in its wire form.
func (c CacheImageArgs) Args() map[string]any {
	return map[string]any{argURL: c.URL, argChecksum: c.Checksum}
}

func checkCacheImage(m *Message) error {
	if CacheImageArgsOf(m.Args).URL == "" {
		return fmt.Errorf("cache_image command %q lacks args.url", m.ID)
	}
	return nil
}

// PlanStopArgs is a stop_plan command's payload (ActionPlanStop).
type PlanStopArgs struct {
	PlanID string
	// Mode is PlanStopAbort or PlanStopFinish.
	Mode string
}

// PlanStopArgsOf reads a stop_plan command's args.
func PlanStopArgsOf(args map[string]any) PlanStopArgs {
	var p PlanStopArgs
	p.PlanID, _ = args[argPlanID].(string)
	p.Mode, _ = args[argMode].(string)
	return p
}

// Args is the payload in its wire form.
func (p PlanStopArgs) Args() map[string]any {
	return map[string]any{argPlanID: p.PlanID, argMode: p.Mode}
}

func checkPlanStop(m *Message) error {
	p := PlanStopArgsOf(m.Args)
	if p.PlanID == "" {
		return fmt.Errorf("stop_plan command %q lacks args.plan_id", m.ID)
	}
	if p.Mode != PlanStopAbort && p.Mode != PlanStopFinish {
		return fmt.Errorf("stop_plan command %q has mode %v; want %q or %q", m.ID, m.Args[argMode], PlanStopAbort, PlanStopFinish)
	}
	return nil
}

// checkSteps checks an oob_step or run_step command's payload: its step
// (Step) and, for oob_step, the run of steps it starts (Steps).
func checkSteps(m *Message) error {
	if m.Step == nil || m.Step.Step == "" || m.Step.Interface == "" {
		return fmt.Errorf("%s command %q lacks a step with interface and name", m.Action, m.ID)
	}
	if len(m.Steps) > 0 && m.Action != ActionOOBStep {
		return fmt.Errorf("%s command %q has steps; only oob_step runs several", m.Action, m.ID)
	}
	if len(m.Steps) > MaxOOBSteps {
		return fmt.Errorf("oob_step command %q has %d steps; at most %d", m.ID, len(m.Steps), MaxOOBSteps)
	}
	for i, s := range m.Steps {
		if s.Step == "" || s.Interface == "" {
			return fmt.Errorf("oob_step command %q: step %d lacks interface or name", m.ID, i+1)
		}
	}
	if len(m.Steps) > 0 && (m.Steps[0].Interface != m.Step.Interface || m.Steps[0].Step != m.Step.Step) {
		return fmt.Errorf("oob_step command %q: its first step is not its step", m.ID)
	}
	return nil
}

// checkPlan checks a run_plan command's payload (Plan): 1 to
// MaxPlanSteps valid step commands of the same node, each with a span.
func checkPlan(m *Message) error {
	if len(m.Plan) == 0 || len(m.Plan) > MaxPlanSteps {
		return fmt.Errorf("run_plan command %q has %d steps; want 1 to %d", m.ID, len(m.Plan), MaxPlanSteps)
	}
	for i, c := range m.Plan {
		if c == nil || c.Kind != KindCommand || (c.Action != ActionInbandRun && c.Action != ActionOOBStep) {
			return fmt.Errorf("run_plan command %q: step %d is not a run_step or oob_step command", m.ID, i+1)
		}
		if c.Node != m.Node || len(c.Plan) > 0 || c.SpanSeconds <= 0 {
			return fmt.Errorf("run_plan command %q: step %d must be a command of the same node, with a span and no plan of its own", m.ID, i+1)
		}
		if err := c.Validate(); err != nil {
			return fmt.Errorf("run_plan command %q: step %d: %w", m.ID, i+1, err)
		}
	}
	return nil
}

// commandCheck is what Validate checks of a command of one action: its
// payload (check, nil when it has none) and whether it names a node.
type commandCheck struct {
	check func(*Message) error
	node  bool
}

// commandChecks holds every action of protocol v1; a command of any
// other action is refused. (Set in init: checkPlan validates the plan's
// commands with it.)
var commandChecks map[string]commandCheck

func init() {
	commandChecks = map[string]commandCheck{
		ActionValidate:   {node: true},
		ActionAbort:      {node: true},
		ActionForget:     {node: true},
		ActionEndBoot:    {node: true},
		ActionPower:      {check: checkPower, node: true},
		ActionBootDev:    {check: checkBootDevice, node: true},
		ActionVMedia:     {check: checkVMedia, node: true},
		ActionOOBStep:    {check: checkSteps, node: true},
		ActionInbandRun:  {check: checkSteps, node: true},
		ActionPlanRun:    {check: checkPlan, node: true},
		ActionPlanStop:   {check: checkPlanStop, node: true},
		ActionCacheImage: {check: checkCacheImage}, // site-wide: no node
	}
}

// Keys of the in-band step deploy.write_image's args that cross the edge
// agent, which reads them and may point them at its site cache.
const (
	stepArgImageSource   = "image_source"
	stepArgImageChecksum = "image_checksum"
	stepArgHashAlgo      = "image_os_hash_algo"
	stepArgHashValue     = "image_os_hash_value"
	stepArgDiskFormat    = "image_disk_format"
	stepArgConfigDrive   = "configdrive"
)

// WriteImageArgs is what a deploy.write_image step's args say of its
// image (Ironic's instance_info fields, as the coordinator copies them):
// the edge agent's site cache reads and rewrites ImageSource and
// ConfigDrive, the ramdisk writes the image.
type WriteImageArgs struct {
	ImageSource   string
	ImageChecksum string // the legacy form: "sha256:hex", or a bare md5
	HashAlgo      string // image_os_hash_algo
	HashValue     string // image_os_hash_value
	DiskFormat    string // image_disk_format
	// ConfigDrive is the config drive when it is a string (a URL, or
	// base64 of a gzipped ISO); a JSON config drive reads as "".
	ConfigDrive string
	// AllowMD5Checksum is ArgAllowMD5Checksum.
	AllowMD5Checksum bool
}

// WriteImageArgsOf reads a write_image step's args.
func WriteImageArgsOf(args map[string]any) WriteImageArgs {
	var w WriteImageArgs
	w.ImageSource, _ = args[stepArgImageSource].(string)
	w.ImageChecksum, _ = args[stepArgImageChecksum].(string)
	w.HashAlgo, _ = args[stepArgHashAlgo].(string)
	w.HashValue, _ = args[stepArgHashValue].(string)
	w.DiskFormat, _ = args[stepArgDiskFormat].(string)
	w.ConfigDrive, _ = args[stepArgConfigDrive].(string)
	w.AllowMD5Checksum, _ = args[ArgAllowMD5Checksum].(bool)
	return w
}

// WithImageSource is a copy of a write_image step's args with another
// image source (args itself is not changed).
func WithImageSource(args map[string]any, url string) map[string]any {
	return withArg(args, stepArgImageSource, url)
}

// WithConfigDrive is a copy of a write_image step's args with another
// config drive (args itself is not changed).
func WithConfigDrive(args map[string]any, drive string) map[string]any {
	return withArg(args, stepArgConfigDrive, drive)
}

func withArg(args map[string]any, k string, v any) map[string]any {
	c := make(map[string]any, len(args)+1)
	for x, y := range args {
		c[x] = y
	}
	c[k] = v
	return c
}

// Checksum is the image's checksum and its algorithm as the ramdisk
// takes them: image_os_hash_value with image_os_hash_algo when set, else
// image_checksum (whose form names its algorithm; algo is then "").
func (w WriteImageArgs) Checksum() (sum, algo string) {
	if w.HashValue != "" {
		return w.HashValue, w.HashAlgo
	}
	return w.ImageChecksum, ""
}
