package fsm

import (
	"time"

	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/protocol"
)

// Node is a node's whole record, as stored. The API shows most of it; the
// fields marked hidden never leave the coordinator.
type Node struct {
	UUID         string         `json:"uuid"`
	Name         string         `json:"name,omitempty"`
	Driver       string         `json:"driver"`
	Site         string         `json:"site"`
	DriverInfo   map[string]any `json:"driver_info,omitempty"`
	Properties   map[string]any `json:"properties,omitempty"`
	InstanceInfo map[string]any `json:"instance_info,omitempty"`
	Extra        map[string]any `json:"extra,omitempty"`
	// ConfigDrive is the config drive of the deploy (gzipped and
	// base64-encoded ISO, or an http(s) URL), handed to the ramdisk with
	// write_image; kept for a rebuild that gives none, as Ironic keeps
	// instance_info/configdrive, and dropped with the instance. A secret:
	// views show instance_info/configdrive as "******".
	ConfigDrive string `json:"configdrive,omitempty"`
	// NetworkData is the node's network_data (API 1.66): the static
	// network written into a config drive built from the JSON form when
	// the config drive gives none.
	NetworkData map[string]any `json:"network_data,omitempty"`
	// TargetRaidConfig is the RAID configuration raid.create_configuration
	// builds (API 1.12, Ironic's schema, set with PUT .../states/raid);
	// RaidConfig is the one the last RAID step reported, read-only.
	TargetRaidConfig map[string]any `json:"target_raid_config,omitempty"`
	RaidConfig       map[string]any `json:"raid_config,omitempty"`
	// RaidInterface is the node's raid_interface (drivers/raidiface.go):
	// "" for the default (agent), or one its driver supports.
	RaidInterface string `json:"raid_interface,omitempty"`
	// InspectInterface is the node's inspect_interface
	// (drivers/inspectiface.go): "" for the default (agent, the ramdisk),
	// or its driver's own when its BMC inspects out of band (redfish).
	InspectInterface string `json:"inspect_interface,omitempty"`
	// BootInterface and DeployInterface are the node's boot_interface and
	// deploy_interface (drivers/interfaces.go): "" for its driver's
	// default. DeployInterface fake (Ironic's fake deploy) deploys,
	// undeploys and cleans at once, booting nothing.
	BootInterface   string `json:"boot_interface,omitempty"`
	DeployInterface string `json:"deploy_interface,omitempty"`
	// ConsoleInterface is the node's console_interface: "" for its
	// driver's default (no-console); ConsoleEnabled is Ironic's
	// console_enabled: the site relays the node's serial console
	// (docs/console.md).
	ConsoleInterface string `json:"console_interface,omitempty"`
	ConsoleEnabled   bool   `json:"console_enabled,omitempty"`
	// AutomatedClean is the node's automated_clean (API 1.47): nil
	// follows the coordinator's setting, false skips automated cleaning
	// on provide and undeploy, true runs it.
	AutomatedClean *bool `json:"automated_clean,omitempty"`
	// DisablePowerOff is the node's disable_power_off (API 1.95): the
	// coordinator never powers it off; its operations reboot instead
	// (nopoweroff.go) and a power off request is refused.
	DisablePowerOff bool `json:"disable_power_off,omitempty"`
	// VMediaAttached are the virtual media device types the operator
	// attached (API 1.89, vmedia.go); VirtualMedia the BMC's devices as
	// read back after the last attach or detach, in Ironic's GET shape.
	VMediaAttached []string         `json:"vmedia_attached,omitempty"`
	VirtualMedia   []map[string]any `json:"virtual_media,omitempty"`
	// InstanceUUID is the node's instance_uuid (set by PATCH or by an
	// allocation); AllocationUUID the allocation that holds the node.
	InstanceUUID   string `json:"instance_uuid,omitempty"`
	AllocationUUID string `json:"allocation_uuid,omitempty"`
	// InstanceName is the node's instance_name (API 1.104), kept as
	// given and cleared with the instance.
	InstanceName string `json:"instance_name,omitempty"`

	ProvisionState       State  `json:"provision_state"`
	TargetProvisionState State  `json:"target_provision_state,omitempty"`
	PowerState           string `json:"power_state,omitempty"`
	TargetPowerState     string `json:"target_power_state,omitempty"`
	LastError            string `json:"last_error,omitempty"`
	Maintenance          bool   `json:"maintenance"`
	MaintenanceReason    string `json:"maintenance_reason,omitempty"`
	Fault                string `json:"fault,omitempty"`
	Retired              bool   `json:"retired"`
	// RetiredUnset is set when retired was removed (JSON Patch remove):
	// Ironic then shows retired as null, and ?retired=False does not
	// list the node. Retired is false then.
	RetiredUnset  bool   `json:"retired_unset,omitempty"`
	RetiredReason string `json:"retired_reason,omitempty"`
	// ResourceClass, Description and Owner are the operator's, kept and
	// shown as given (Ironic's fields; nothing here reads them).
	ResourceClass string `json:"resource_class,omitempty"`
	Description   string `json:"description,omitempty"`
	Owner         string `json:"owner,omitempty"`
	// Traits are the node's traits (API 1.37), sorted: deploy templates
	// and runbooks apply to a node by them.
	Traits []string `json:"traits,omitempty"`
	// AutoDiscovered marks a node enrolled by discovery (Ironic's
	// auto_discovered); Serial is the system serial number its inventory
	// gave, by which discovery knows the machine again.
	AutoDiscovered bool   `json:"auto_discovered,omitempty"`
	Serial         string `json:"serial,omitempty"`
	// BootDevice is the boot device the BMC was last told to use
	// (protocol.BootPXE or BootDisk), empty until one was set.
	BootDevice string `json:"boot_device,omitempty"`
	// BootMode ("uefi" or "bios") and SecureBoot are how the node last
	// booted the ramdisk, as its inventory said (Ironic's boot_mode and
	// secure_boot, API 1.75): empty and nil until an inspection read them.
	BootMode   string `json:"boot_mode,omitempty"`
	SecureBoot *bool  `json:"secure_boot,omitempty"`
	// Reservation is set while the coordinator works on the node (an
	// active -ING state or a power change): the node is locked.
	Reservation string `json:"reservation,omitempty"`
	// CleanStep and DeployStep show the step that runs now and, after a
	// failure, the step that failed.
	CleanStep  *StepRun `json:"clean_step,omitempty"`
	DeployStep *StepRun `json:"deploy_step,omitempty"`
	// ServiceStep is the service step that runs now or failed (API 1.87).
	ServiceStep *StepRun `json:"service_step,omitempty"`

	CreatedAt            time.Time  `json:"created_at"`
	UpdatedAt            time.Time  `json:"updated_at"`
	ProvisionUpdatedAt   time.Time  `json:"provision_updated_at"`
	InspectionStartedAt  *time.Time `json:"inspection_started_at,omitempty"`
	InspectionFinishedAt *time.Time `json:"inspection_finished_at,omitempty"`

	// Op is the operation in progress, nil when the node rests.
	Op *Operation `json:"op,omitempty"`
	// Pending is the outstanding command: resent until its result comes.
	Pending *Command `json:"pending,omitempty"`
	// CmdSeq is the Seq of the node's newest command (protocol.Message).
	CmdSeq uint64 `json:"cmd_seq,omitempty"`
	// Deadline is when the current wait (WAIT state or command) times out.
	Deadline time.Time `json:"deadline,omitzero"`

	// AgentToken is issued once per boot of the ramdisk. Hidden.
	AgentToken string `json:"agent_token,omitempty"`
	// BootNonce names the current boot's MQTT credential (minted with the
	// power command that boots the node, revoked when the boot ends); the
	// credential is derived from it and the coordinator's secret. Hidden.
	BootNonce string `json:"boot_nonce,omitempty"`
	BootID    string `json:"boot_id,omitempty"`
	// PastBoots are the last ramdisk boots whose token was withdrawn, so
	// that a late hello from one of them is not taken for a new boot.
	PastBoots     []string  `json:"past_boots,omitempty"`
	LastHeartbeat time.Time `json:"last_heartbeat,omitzero"`
	// FastTrackUntil is set while the node rests with the ramdisk its
	// last operation kept running (fast track): the next operation
	// until then may use it without a reboot, and at that time the node
	// is powered off if none did. Zero otherwise.
	FastTrackUntil time.Time `json:"fast_track_until,omitzero"`
	// Cached in-band steps, as the ramdisk reported them.
	CachedCleanSteps  []drivers.Step `json:"cached_clean_steps,omitempty"`
	CachedDeploySteps []drivers.Step `json:"cached_deploy_steps,omitempty"`
	StepsCachedAt     time.Time      `json:"steps_cached_at,omitzero"`
	// PowerFailures counts the edge agent's power-state readings that
	// failed in a row (power-state sync); at PowerFailureLimit the node
	// goes into maintenance with fault FaultPowerFailure.
	PowerFailures int `json:"power_failures,omitempty"`
	// PowerReadAt is when the last power report applied was read at the
	// edge: a resent or older report is ignored. Hidden.
	PowerReadAt time.Time `json:"power_read_at,omitzero"`
	// Health is the hardware's health as the node's BMC last told it
	// (API 1.109: "OK", "Warning", "Critical"; "" is null), and
	// HealthReadAt when that report was read at the site (health.go).
	Health       string    `json:"health,omitempty"`
	HealthReadAt time.Time `json:"health_read_at,omitzero"`
	// HealthQuarantined is set when the quarantine policy set the node
	// into maintenance, and cleared by a report better than the policy's
	// health: until then, an operator who unset maintenance is not
	// overruled by the next report of the same trouble. Hidden.
	HealthQuarantined bool `json:"health_quarantined,omitempty"`
	// Held is a result that arrived while the node was in maintenance; it
	// is applied when maintenance ends.
	Held *protocol.Message `json:"held,omitempty"`
	// PlanStop is the last stop_plan sent for the node's site plan: sent
	// again each time the site returns after being unreachable (a message
	// sent while the site could not hear may be lost), until the next
	// plan.
	PlanStop *PlanStop `json:"plan_stop,omitempty"`
}

// StepRun is a step as scheduled on a node: its declaration, its args and,
// while it runs in band, its progress.
type StepRun struct {
	Interface string         `json:"interface"`
	Step      string         `json:"step"`
	Priority  int            `json:"priority"`
	Abortable bool           `json:"abortable"`
	Args      map[string]any `json:"args"`
	InBand    bool           `json:"requires_ramdisk"`
	Progress  float64        `json:"progress,omitempty"`
	Detail    string         `json:"detail,omitempty"`
}

// setStep shows s as the node's current step of the operation's kind
// (clean_step, deploy_step or service_step).
func (n *Node) setStep(s *StepRun) {
	if n.Op == nil {
		return
	}
	switch n.Op.Phase.Info().Steps {
	case StepsDeploy:
		n.DeployStep = s
	case StepsClean:
		n.CleanStep = s
	case StepsService:
		n.ServiceStep = s
	}
}

// Name is "interface.step".
func (s *StepRun) Name() string { return s.Interface + "." + s.Step }

// Action kinds of an operation plan.
const (
	ActOOB        = "oob"         // a BMC command through the edge agent
	ActAwaitAgent = "await_agent" // wait for the ramdisk to boot and say hello
	ActPlanClean  = "plan_clean"  // compute the clean steps now that the ramdisk's are known
	ActPlanDeploy = "plan_deploy" // compute the deploy steps
	ActStep       = "step"        // run a clean or deploy step (in band or out of band)
)

// Action is one entry of an operation's plan.
type Action struct {
	Kind   string         `json:"kind"`
	Action string         `json:"action,omitempty"` // for ActOOB: protocol action
	Args   map[string]any `json:"args,omitempty"`
	Step   *StepRun       `json:"step,omitempty"`
	// EndsRamdisk marks the power-off that ends an inspection's or a
	// cleaning's ramdisk boot: fast track skips it and keeps the ramdisk.
	EndsRamdisk bool `json:"ends_ramdisk,omitempty"`
}

// Operation is what the node is doing: the verb that started it and the
// plan, with the index of the running action.
type Operation struct {
	Verb   Event    `json:"verb"`
	Target State    `json:"target"`
	Phase  Phase    `json:"phase"` // a row of Phases()
	Plan   []Action `json:"plan"`
	Index  int      `json:"index"`
	Manual bool     `json:"manual,omitempty"`
	// AbortAfter is set when abort was asked during a step that cannot be
	// aborted: the operation fails when that step ends.
	AbortAfter bool `json:"abort_after,omitempty"`
	// HashedRescuePassword is the SHA-crypt hash of the rescue password,
	// handed to the rescue ramdisk (Ironic's hashed_rescue_password; the
	// password itself is never kept). Hidden.
	HashedRescuePassword string    `json:"hashed_rescue_password,omitempty"`
	StartedAt            time.Time `json:"started_at"`
	// KeptRamdisk is set when fast track skipped the operation's closing
	// power-off: at its end the node rests with its ramdisk running.
	KeptRamdisk bool `json:"kept_ramdisk,omitempty"`
	// SitePlan is the plan of this operation's steps handed to the site's
	// edge agent (siteplan.go), nil when none was.
	SitePlan *SitePlan `json:"site_plan,omitempty"`
}

// StepList returns the clean or deploy steps of the operation's plan in
// the order they run, and the index among them of the step that runs now
// or, between steps, of the last one started (-1 before the first): what
// Ironic shows as clean_steps or deploy_steps and clean_step_index or
// deploy_step_index. Index counts every action of the plan (boot device,
// power, the ramdisk's boot), so it is not a step index.
func (o *Operation) StepList() (steps []*StepRun, index int) {
	index = -1
	for i, a := range o.Plan {
		if a.Kind != ActStep {
			continue
		}
		if i <= o.Index {
			index = len(steps)
		}
		steps = append(steps, a.Step)
	}
	return steps, index
}

// Command is an outstanding command: the message and its delivery state.
type Command struct {
	ID       string            `json:"id"`
	Topic    string            `json:"topic"`
	Msg      *protocol.Message `json:"msg"`
	LastSent time.Time         `json:"last_sent"`
	Attempts int               `json:"attempts"`
	// Accepted is set when the receiver said (heartbeat) it runs the
	// command: no more resends, the result will come.
	Accepted bool `json:"accepted,omitempty"`
	InBand   bool `json:"in_band,omitempty"`
}

// HistoryEntry is one line of a node's history: a transition or an error.
type HistoryEntry struct {
	Time      time.Time `json:"created_at"`
	Severity  string    `json:"severity"`
	Event     string    `json:"event"`
	EventType string    `json:"event_type"`
	From      State     `json:"from,omitempty"`
	To        State     `json:"to,omitempty"`
}
