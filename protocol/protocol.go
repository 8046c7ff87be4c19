// Package protocol is the wire contract between the coordinator, the edge
// agents and the ramdisk agents: MQTT topics, message types, versions and
// their validation. It is the only package the three programs share for
// talking to each other; it must never do I/O or hold state.
package protocol

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Version is the message format version carried in every message ("v").
const Version = 1

// TopicPrefix is the root of every topic of this protocol version.
const TopicPrefix = "bm/v1"

// Kinds of messages. Commands flow to the agents, events flow back.
const (
	// KindCommand is a coordinator request to an edge agent (BMC action,
	// out-of-band step) or to a ramdisk agent (in-band step).
	KindCommand = "command"
	// KindResult ends a command; it names the command id.
	KindResult = "result"
	// KindAck tells an agent that the coordinator stored the listed results
	// or events, so the agent can drop them from its outbox.
	KindAck = "ack"
	// KindHello is the first message of a booted ramdisk agent (lookup).
	KindHello = "hello"
	// KindWelcome answers a hello with the agent token for this boot.
	KindWelcome = "welcome"
	// KindHeartbeat says a ramdisk agent is alive and what it is running.
	KindHeartbeat = "heartbeat"
	// KindPresence is the retained online/offline state of an agent; the
	// offline form is the agent's last will.
	KindPresence = "presence"
	// KindPower is an edge agent's power-state sync report on its site's
	// bmc/evt topic: a node's BMC reading (power_state) or why it could
	// not be read (error). Only changes and failures are sent; like a
	// result it sits in the agent's outbox until the coordinator acks it.
	KindPower = "power"
	// KindBeats is an edge agent's heartbeat summary on its site's
	// bmc/evt topic: one message per interval carrying the latest
	// heartbeat of every node whose ramdisk beat since the last summary
	// (beats), and how many messages wait in the agent's outbox (queued).
	// Heartbeats do not cross the WAN one by one. Like a result it sits
	// in the agent's outbox until acked; a newer summary replaces an
	// unsent older one.
	KindBeats = "heartbeats"
)

// MaxOOBSteps bounds the steps of one oob_step command.
const MaxOOBSteps = 8

// OOBSteps are the out-of-band steps an oob_step command runs, in order.
func (m *Message) OOBSteps() []Step {
	if len(m.Steps) > 0 {
		return m.Steps
	}
	if m.Step != nil {
		return []Step{*m.Step}
	}
	return nil
}

// StepsDone is the result data key of a failed run of several
// out-of-band steps: how many succeeded before the one that failed.
const StepsDone = "steps_done"

// Result data keys of BMC commands that read a node's firmware and BIOS
// (the edge agent reads them at manage, after firmware.update and after
// the BIOS steps): DataFirmware holds the components read,
// [{"component", "current_version"}]; DataBIOS the BIOS settings,
// [{"name", "value", and the registry fields of Ironic's API 1.74}].
// Both are bounded: at most MaxFirmwareComponents components and
// MaxBIOSSettings settings of at most MaxBIOSBytes encoded.
const (
	DataFirmware          = "firmware"
	DataBIOS              = "bios"
	MaxFirmwareComponents = 64
	MaxBIOSSettings       = 2048
	MaxBIOSBytes          = 512 << 10
)

// Result data keys every BMC command's result may carry:
// DataPowerState is the power state the edge agent read back from the
// BMC after a power action and after a failure ("power on" or "power
// off"), which the coordinator records as the node's, so that the
// recorded state is the BMC's whatever the command's outcome;
// DataWarnings lists what a command that succeeded left undone or
// unread (drivers.Warn), each of which goes into the node's history as a
// WARNING.
const (
	DataPowerState = "power_state"
	DataWarnings   = "warnings"
)

// MaxBeats bounds the heartbeats in one summary.
const MaxBeats = 4096

// Command actions for the edge agent (out of band) and the ramdisk (in band).
const (
	ActionValidate  = "validate"    // check that the BMC answers with these credentials
	ActionPower     = "power"       // args.state: "power on", "power off", "rebooted"
	ActionBootDev   = "boot_device" // args.device: "pxe" or "disk"
	ActionOOBStep   = "oob_step"    // run a driver step: step, args
	ActionInbandRun = "run_step"    // ramdisk: run an in-band step
	ActionAbort     = "abort_step"  // ramdisk: stop the running abortable step
	// ActionCacheImage asks a site's edge agent to download an image into
	// its image cache (args.url, args.checksum), ahead of deploys; it has
	// no node, and its result has none either.
	ActionCacheImage = "cache_image"
	// ActionForget tells the edge agent that the node was deleted: it
	// drops the node's BMC session, power polling, boot credential and
	// simulated slot. No result answers it.
	ActionForget = "forget"
	// ActionEndBoot tells the edge agent that the node's ramdisk boot
	// ended without a power command that would say so (the operation
	// failed or was aborted, the node left powered on): the agent drops
	// the boot's credential from its site broker, its parameters image
	// and its network boot. No result answers it.
	ActionEndBoot = "end_boot"
	// ActionPlanRun, on a node's cmd topic of a site whose edge agent
	// runs plans (presence Plans), hands the agent the rest of a clean,
	// deploy or service phase: Plan holds the commands of its steps, in
	// order, each exactly as the coordinator would send it alone (run_step
	// for the ramdisk, oob_step for the BMC) with its own id and Seq, and
	// SpanSeconds, the time the step has once the agent starts it. The
	// agent runs them one after the other without waiting for the
	// coordinator (its link may be down), keeps its progress on disk, and
	// stops at the first failure; each step's result goes to the
	// coordinator as if the step had been sent alone, and the coordinator
	// applies them in order, as it would have. It stays the authority: a
	// command it sends for a step of the plan is the same command (same
	// id), which the site answers once. No result answers the plan itself.
	ActionPlanRun = "run_plan"
	// ActionPlanStop stops a node's plan (args.plan_id): args.mode
	// "abort" (an operator's abort, a failure, a deletion) stops it at
	// the first abortable point (an abortable running step is aborted, a
	// step that is not abortable finishes first); "finish" (maintenance)
	// lets the running step finish and starts no other. No result
	// answers it.
	ActionPlanStop = "stop_plan"
)

// MaxPlanSteps bounds the steps of one run_plan command.
const MaxPlanSteps = 100

// Modes of a stop_plan command (args.mode).
const (
	PlanStopAbort  = "abort"
	PlanStopFinish = "finish"
)

// Arguments of a power command that boots a node: the MQTT credential of
// that one boot, which the edge agent hands to the ramdisk. The
// coordinator keeps only ArgBootNonce and replaces it by the other two
// when it sends the command; ArgBootNonce never goes on the wire.
const (
	ArgAgentUsername = "agent_username"
	ArgAgentPassword = "agent_password"
	ArgBootNonce     = "boot_nonce"
	// ArgBootMACs lists the node's PXE-enabled port addresses (Ironic's
	// ports with pxe_enabled) with the credential: the edge agent answers
	// network boot requests (DHCP, TFTP, HTTP) from these MACs only, and
	// only while it is booting the node.
	ArgBootMACs = "boot_macs"
	// ArgAllowMD5Checksum, true on a write_image step's args when the
	// coordinator allows md5 and sha1 image checksums (serve
	// --allow-md5-checksum, Ironic's [agent]allow_md5_checksum, which
	// Ironic passes to its ramdisk as agent_md5_checksum_enable): the
	// ramdisk verifies such a digest only then. The coordinator sets or
	// removes it on every write_image, whatever a deploy step's args say.
	ArgAllowMD5Checksum = "allow_md5_checksum"
	// ArgSecureBoot, true on a power command that boots a node asked to
	// boot with UEFI Secure Boot (Ironic's capability secure_boot:true):
	// network boot gives its UEFI firmware the signed chain (shim, GRUB,
	// the signed kernel) instead of iPXE. True on the args of the
	// deploy.prepare_instance_boot step of such a node: the edge agent
	// turns Secure Boot on for the instance's boot (Ironic's
	// prepare_instance). False on the power-off that tears such a node's
	// instance down: the edge agent turns Secure Boot off after it
	// (Ironic's clean_up_instance). The BMCs that cannot set it (ipmi)
	// are not asked: the firmware keeps the operator's setting.
	ArgSecureBoot = "secure_boot"
	// ArgBootDevice, on a power command, is the boot device ("pxe" or
	// "disk") the edge agent sets before it changes the power: booting
	// the ramdisk takes one command, not two.
	ArgBootDevice = "boot_device"
	// ArgReadHardware, true on an inspection's power command, asks the
	// edge agent to read the BMC's firmware versions and BIOS settings
	// once the power changed and return them in the result's data
	// (DataFirmware, DataBIOS), as manage does.
	ArgReadHardware = "read_firmware_bios"
	// ArgISOURL, on a boot_device command of device BootISO, is the
	// ISO's URL (Ironic's instance_info boot_iso): the edge agent
	// fetches it through the site's image cache (under its fetch rule)
	// and has the BMC insert the cache's copy as its virtual CD.
	ArgISOURL = "iso_url"
	// ArgEjectISO, true on a boot_device command of device BootDisk,
	// ejects the virtual media first (the ramdisk deploy's tear down).
	ArgEjectISO = "eject_iso"
	// ArgDisablePowerOff, true on the deploy steps tear_down_agent and
	// boot_instance of a node with disable_power_off (Ironic's API
	// 1.95): tear_down_agent ends the ramdisk's boot without powering
	// the node off, and boot_instance reboots it into its instance
	// instead of powering it on.
	ArgDisablePowerOff = "disable_power_off"
	// ArgKernelURL, ArgRamdiskURL and ArgKernelParams, on a boot_device
	// command of device BootISO without ArgISOURL: the edge agent fetches
	// the kernel and the ramdisk through the site's image cache (under its
	// fetch rule), builds a bootable ISO of them with the kernel
	// parameters, and has the BMC insert it (Ironic's ramdisk deploy of
	// instance_info kernel and ramdisk, its prepare_boot_iso).
	ArgKernelURL    = "kernel_url"
	ArgRamdiskURL   = "ramdisk_url"
	ArgKernelParams = "kernel_params"
)

// MaxKernelParams bounds ArgKernelParams.
const MaxKernelParams = 2048

// CheckKernelParams checks the kernel parameters of an ISO the edge agent
// builds: at most MaxKernelParams bytes of printable ASCII without the
// characters a boot loader's configuration would read as syntax (quotes,
// backslash, $, ;, braces, |, &, <, >, #) and without line breaks.
func CheckKernelParams(p string) error {
	if len(p) > MaxKernelParams {
		return fmt.Errorf("%d bytes; at most %d are taken", len(p), MaxKernelParams)
	}
	for _, r := range p {
		if r < 0x20 || r > 0x7e || strings.ContainsRune("\"'\\$;{}|&<>#`", r) {
			return fmt.Errorf("character %q is not taken (printable ASCII without quotes, backslash, $ ; { } | & < > # and backquote)", r)
		}
	}
	return nil
}

// Power states, with Ironic's spelling.
const (
	PowerOn     = "power on"
	PowerOff    = "power off"
	PowerReboot = "rebooted"
	// PowerSoftOff asks the operating system to shut down and forces the
	// power off when it has not within its time (Ironic's soft power
	// off); PowerSoftReboot is that, then power on.
	PowerSoftOff    = "soft power off"
	PowerSoftReboot = "soft rebooting"
)

// PowerIsOff tells whether a power command's state ends with the node off.
func PowerIsOff(state string) bool { return state == PowerOff || state == PowerSoftOff }

// Boot devices.
const (
	BootPXE  = "pxe"
	BootDisk = "disk"
	// BootISO: the ISO of the command's ArgISOURL on the BMC's virtual
	// CD, the CD the persistent boot device (the ramdisk deploy
	// interface's boot of a live ISO).
	BootISO = "iso"
)

// Boot interfaces (Message.BootInterface) that boot the ramdisk by
// network boot on a BMC with virtual media: Ironic's ipxe and pxe.
const (
	BootIfaceIPXE = "ipxe"
	BootIfacePXE  = "pxe"
	// BootIfaceHTTPS: Ironic's redfish-https, UEFI HTTP boot: the BMC's
	// boot source override UefiHttp with an HttpBootUri the edge agent
	// serves (a per-boot ISO of the ramdisk), no virtual media.
	BootIfaceHTTPS = "redfish-https"
)

// HTTPBoot tells whether a BMC command's boot interface boots the ramdisk
// by UEFI HTTP boot (redfish-https).
func (m *Message) HTTPBoot() bool { return m.BootInterface == BootIfaceHTTPS }

// NetworkBoot tells whether a BMC command's boot interface boots the
// ramdisk by network boot (ipxe or pxe).
func (m *Message) NetworkBoot() bool {
	return m.BootInterface == BootIfaceIPXE || m.BootInterface == BootIfacePXE
}

// MaxISOURLBytes bounds a boot_device command's ISO URL.
const MaxISOURLBytes = 4096

// NodeCmdTopic is where the coordinator sends commands to a node's ramdisk agent.
func NodeCmdTopic(site, node string) string {
	return TopicPrefix + "/site/" + site + "/node/" + node + "/cmd"
}

// NodeEvtTopic is where a node's ramdisk agent sends hello, heartbeats and results.
func NodeEvtTopic(site, node string) string {
	return TopicPrefix + "/site/" + site + "/node/" + node + "/evt"
}

// NodePresenceTopic holds a ramdisk agent's retained presence.
func NodePresenceTopic(site, node string) string {
	return TopicPrefix + "/site/" + site + "/node/" + node + "/presence"
}

// BMCCmdTopic is where the coordinator sends out-of-band commands to a site.
func BMCCmdTopic(site string) string { return TopicPrefix + "/site/" + site + "/bmc/cmd" }

// BMCEvtTopic is where an edge agent sends results of out-of-band commands.
func BMCEvtTopic(site string) string { return TopicPrefix + "/site/" + site + "/bmc/evt" }

// SitePresenceTopic holds an edge agent's retained presence (last will: offline).
func SitePresenceTopic(site string) string { return TopicPrefix + "/site/" + site + "/presence" }

// SiteTree is the subtree an edge agent of site may use.
func SiteTree(site string) string { return TopicPrefix + "/site/" + site + "/#" }

// NodeTree is the subtree a ramdisk agent of node may use.
func NodeTree(site, node string) string {
	return TopicPrefix + "/site/" + site + "/node/" + node + "/#"
}

// Filters the coordinator subscribes to.
const (
	AllNodeEvents = TopicPrefix + "/site/+/node/+/evt"
	AllBMCEvents  = TopicPrefix + "/site/+/bmc/evt"
	AllPresence   = TopicPrefix + "/site/+/presence"
)

// ParseTopic splits a topic of this protocol into its site, node (empty for
// site topics) and leaf ("cmd", "evt", "presence"; "bmc/cmd" and "bmc/evt"
// for the BMC topics).
func ParseTopic(topic string) (site, node, leaf string, err error) {
	rest, ok := strings.CutPrefix(topic, TopicPrefix+"/site/")
	if !ok {
		return "", "", "", fmt.Errorf("topic %q is not under %s/site/", topic, TopicPrefix)
	}
	parts := strings.Split(rest, "/")
	if parts[0] == "" || len(parts) == 4 && parts[2] == "" {
		// An empty site or node would attribute a message to nobody (and
		// "site//node//presence" would read as the site presence of "").
		return "", "", "", fmt.Errorf("topic %q has an empty site or node name", topic)
	}
	switch {
	case len(parts) == 2 && parts[1] == "presence":
		return parts[0], "", "presence", nil
	case len(parts) == 2 && parts[1] == "discovery":
		return parts[0], "", "discovery", nil
	case len(parts) == 3 && parts[1] == "bmc" && (parts[2] == "cmd" || parts[2] == "evt"):
		return parts[0], "", "bmc/" + parts[2], nil
	case len(parts) == 3 && parts[1] == "console" && (parts[2] == "cmd" || parts[2] == "evt"):
		return parts[0], "", "console/" + parts[2], nil
	case len(parts) == 4 && parts[1] == "node" && (parts[3] == "cmd" || parts[3] == "evt" || parts[3] == "presence"):
		return parts[0], parts[2], parts[3], nil
	}
	return "", "", "", fmt.Errorf("topic %q does not match any topic of protocol v%d", topic, Version)
}

// Step names one step on the wire, with its arguments.
type Step struct {
	Interface string         `json:"interface"`
	Step      string         `json:"step"`
	Args      map[string]any `json:"args,omitempty"`
	Priority  int            `json:"priority,omitempty"`
	Abortable bool           `json:"abortable,omitempty"`
}

// Message is the one envelope of every message. Which fields are set
// depends on Kind; Validate says which are required.
type Message struct {
	V    int    `json:"v"`
	Kind string `json:"kind"`
	// ID identifies a command, result or event; receivers deduplicate by it.
	ID   string    `json:"id"`
	Site string    `json:"site,omitempty"`
	Node string    `json:"node,omitempty"`
	Sent time.Time `json:"sent"`

	// Token is the node's agent token; every in-band message after the
	// welcome carries it.
	Token string `json:"token,omitempty"`

	// Term, on what a coordinator cluster's leader sends a site, is the
	// leader's raft term: the edge agent keeps the highest it has seen and
	// refuses what comes with a lower one (a deposed leader that has not
	// noticed yet). 0: a coordinator that is not a cluster member.
	Term uint64 `json:"term,omitempty"`

	// Command fields.
	//
	// Seq, in a node's command, increases with every new command the
	// coordinator makes for that node (a resend keeps it): a receiver
	// that has started a command of the node with a higher Seq knows that
	// this one is a stale copy and never runs it, so it need not remember
	// older commands to refuse their duplicates. A result carries the Seq
	// of the command it answers. 0: not stamped (an older coordinator, a
	// site-wide command).
	Seq      uint64         `json:"seq,omitempty"`
	Action   string         `json:"action,omitempty"`
	Deadline time.Time      `json:"deadline,omitzero"`
	Args     map[string]any `json:"args,omitempty"`
	Step     *Step          `json:"step,omitempty"`
	// Steps, in an oob_step command, are consecutive out-of-band steps
	// the edge agent runs in order, stopping at the first failure (Step
	// is the first of them): a deploy's prepare_instance_boot,
	// tear_down_agent and boot_instance cost one WAN round trip, not
	// three. A failed run's result says in data.steps_done how many
	// steps succeeded before the one that failed.
	Steps []Step `json:"steps,omitempty"`
	// Plan, in a run_plan command, are the commands of the plan's steps
	// in order (see ActionPlanRun); SpanSeconds, in each of them, is how
	// long its step may run once the edge agent starts it (its Deadline
	// is then the start plus the span).
	Plan        []*Message `json:"plan,omitempty"`
	SpanSeconds int64      `json:"span_seconds,omitempty"`
	// Driver and DriverInfo let the edge agent reach the BMC. DriverInfo
	// may hold a password: commands are never retained and never logged.
	Driver     string         `json:"driver,omitempty"`
	DriverInfo map[string]any `json:"driver_info,omitempty"`
	// BootInterface, in BMC commands, is the node's boot_interface when
	// it was set (Ironic's name, e.g. ipxe or redfish-virtual-media;
	// absent: the driver's default). A node whose BMC has virtual media
	// (redfish, idrac) boots the ramdisk by network boot when it is
	// BootIfaceIPXE or BootIfacePXE, from virtual media otherwise.
	BootInterface string `json:"boot_interface,omitempty"`

	// Result fields.
	CommandID string         `json:"command_id,omitempty"`
	OK        bool           `json:"ok,omitempty"`
	Error     string         `json:"error,omitempty"`
	Data      map[string]any `json:"data,omitempty"`

	// Ack: ids of results and events the coordinator has stored.
	AckIDs []string `json:"ack_ids,omitempty"`

	// Hello: a boot id, unique per boot of the ramdisk, and the in-band
	// steps this ramdisk offers on this hardware.
	BootID      string `json:"boot_id,omitempty"`
	CleanSteps  []Step `json:"clean_steps,omitempty"`
	DeploySteps []Step `json:"deploy_steps,omitempty"`

	// Heartbeat: the command being run and its progress (0..1).
	Running  string  `json:"running,omitempty"`
	Progress float64 `json:"progress,omitempty"`
	Detail   string  `json:"detail,omitempty"`
	// RescueRefused, in a heartbeat of a ramdisk whose rescue login
	// runs, counts what that login refused since it started, by kind
	// (RescueRefusalKinds; kinds with none left out): the coordinator
	// adds them up on its /metrics.
	RescueRefused map[string]int64 `json:"rescue_refused,omitempty"`

	// Presence. Relay, in an edge agent's online presence, says that the
	// agent relays every ramdisk of its site (site broker, or simulated
	// ramdisks): the coordinator may then send everything for the site
	// in bundles on its bmc/cmd topic (see EncodeBundle). SiteBroker, in
	// an online presence, says that the agent runs the site's broker: its
	// ramdisks use that, and the coordinator's broker refuses their
	// credentials.
	Online     bool `json:"online,omitempty"`
	Relay      bool `json:"relay,omitempty"`
	SiteBroker bool `json:"site_broker,omitempty"`
	// Plans, in an online presence of an agent that relays, says that it
	// runs plans (run_plan, stop_plan).
	Plans bool `json:"plans,omitempty"`
	// Software, in an edge agent's presence, names its build (Software()),
	// for the operator's eyes only (the web view's site page).
	Software string `json:"software,omitempty"`

	// Power report: the BMC's reading ("power on" or "power off"); a
	// failed reading has Error instead. Sent is when it was read, which
	// orders a node's reports (a resent older one is ignored).
	PowerState string `json:"power_state,omitempty"`

	// Health report (KindHealth): see HealthReport.
	HealthReport *HealthReport `json:"health_report,omitempty"`

	// Heartbeat summary: the latest heartbeat of each node (each a valid
	// heartbeat of this site), and the sender's outbox depth.
	Beats  []Message `json:"beats,omitempty"`
	Queued int       `json:"queued,omitempty"`

	// Discovery configuration (KindDiscoveryConfig).
	Discovery *DiscoveryConfig `json:"discovery,omitempty"`

	// Console command or output (KindConsole, KindConsoleOutput).
	Console *ConsoleData `json:"console,omitempty"`
}

// MaxMessageBytes bounds a message; larger ones are rejected unread.
const MaxMessageBytes = 1 << 20

// Decode parses and validates one message. Any error says what was wrong.
func Decode(b []byte) (*Message, error) {
	if len(b) > MaxMessageBytes {
		return nil, fmt.Errorf("message of %d bytes is larger than the limit of %d", len(b), MaxMessageBytes)
	}
	var m Message
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("message is not valid JSON of protocol v%d: %v", Version, err)
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

// Encode validates and serialises a message.
func Encode(m *Message) ([]byte, error) {
	if m.V == 0 {
		m.V = Version
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return json.Marshal(m)
}

// Validate checks the fields a message of its kind must have: the
// envelope here, the rest with its kind's check (kindChecks), and a
// command's payload with its action's (commandChecks, payload.go).
func (m *Message) Validate() error {
	if m.V != Version {
		return fmt.Errorf("message version %d is not supported (this program speaks v%d)", m.V, Version)
	}
	if m.Kind != KindPresence && m.Kind != KindAck {
		if err := m.need(m.ID != "", "id"); err != nil {
			return err
		}
	}
	if m.Kind == "" {
		return fmt.Errorf("message %q has no kind", m.ID)
	}
	check, ok := kindChecks[m.Kind]
	if !ok {
		return fmt.Errorf("message %q has unknown kind %q", m.ID, m.Kind)
	}
	if len(m.RescueRefused) > 0 && m.Kind != KindHeartbeat {
		return fmt.Errorf("%s message %q carries rescue_refused; only a heartbeat does", m.Kind, m.ID)
	}
	return check(m)
}

// need says that a message lacks a required field when ok is false.
func (m *Message) need(ok bool, field string) error {
	if !ok {
		return fmt.Errorf("%s message %q lacks required field %q", m.Kind, m.ID, field)
	}
	return nil
}

// needAll is the first of the required fields a message lacks.
func (m *Message) needAll(fields ...need) error {
	for _, f := range fields {
		if err := m.need(f.ok, f.field); err != nil {
			return err
		}
	}
	return nil
}

type need struct {
	ok    bool
	field string
}

// kindChecks checks each kind of message beyond the envelope. (Set in
// init: the heartbeat summary validates its heartbeats with it.)
var kindChecks map[string]func(*Message) error

func init() {
	kindChecks = map[string]func(*Message) error{
		KindCommand:         checkCommand,
		KindResult:          checkResult,
		KindAck:             func(m *Message) error { return m.need(len(m.AckIDs) > 0, "ack_ids") },
		KindHello:           checkHello,
		KindWelcome:         func(m *Message) error { return m.needAll(need{m.Node != "", "node"}, need{m.Token != "", "token"}) },
		KindHeartbeat:       checkHeartbeat,
		KindPresence:        func(m *Message) error { return m.need(m.Site != "", "site") },
		KindBeats:           checkBeats,
		KindPower:           checkPowerReport,
		KindHealth:          checkHealthReport,
		KindDiscovery:       checkDiscovery,
		KindDiscoveryConfig: checkDiscoveryConfig,
		KindConsole:         checkConsole,
		KindConsoleOutput:   checkConsoleOutput,
	}
}

// checkCommand checks a command's envelope, then its action's payload.
func checkCommand(m *Message) error {
	if err := m.needAll(need{m.Action != "", "action"}, need{!m.Deadline.IsZero(), "deadline"}); err != nil {
		return err
	}
	c, ok := commandChecks[m.Action]
	if !ok {
		return fmt.Errorf("command %q has unknown action %q", m.ID, m.Action)
	}
	if c.check != nil {
		if err := c.check(m); err != nil {
			return err
		}
	}
	return m.need(!c.node || m.Node != "", "node")
}

// checkResult: a result names its command, and a failure says why. A
// site-wide command's result (cache_image) names no node.
func checkResult(m *Message) error {
	if err := m.need(m.CommandID != "", "command_id"); err != nil {
		return err
	}
	if !m.OK && m.Error == "" {
		return fmt.Errorf("result %q for command %q is a failure without an error text", m.ID, m.CommandID)
	}
	return nil
}

// checkHello: the coordinator caches the offered steps and later sends
// them back in run_step commands, which need an interface and a name: a
// step without them could be planned but never sent.
func checkHello(m *Message) error {
	if err := m.needAll(need{m.Node != "", "node"}, need{m.BootID != "", "boot_id"}); err != nil {
		return err
	}
	for _, l := range []struct {
		kind  string
		steps []Step
	}{{"clean", m.CleanSteps}, {"deploy", m.DeploySteps}} {
		for i, s := range l.steps {
			if s.Interface == "" || s.Step == "" {
				return fmt.Errorf("hello %q offers %s step %d without an interface and a name", m.ID, l.kind, i+1)
			}
		}
	}
	return nil
}

func checkHeartbeat(m *Message) error {
	if err := m.need(m.Node != "", "node"); err != nil {
		return err
	}
	if m.Progress < 0 || m.Progress > 1 {
		return fmt.Errorf("heartbeat %q has progress %v outside 0..1", m.ID, m.Progress)
	}
	if err := checkRescueRefused(m); err != nil {
		return err
	}
	return m.need(m.Token != "", "token")
}

// Kinds of refusal of a rescue login (Message.RescueRefused): its
// listener's, at accept (a connection over its cap, over its source's
// share, over the cap or the source's share of those not logged in yet,
// closed to make room for a source that held fewer, over the descriptor
// pool or into its reserve), and its logins' and sessions' (a try
// refused unchecked with the source's failure budget spent, a wrong user
// or password, a session over the session budget).
var RescueRefusalKinds = []string{"total", "per-source", "pending", "pending-per-source", "evicted", "fd-pool", "fd-reserve",
	"login-budget", "login-failed", "sessions"}

// checkRescueRefused: known kinds only (so the coordinator's series stay
// bounded), none negative.
func checkRescueRefused(m *Message) error {
	for k, n := range m.RescueRefused {
		if !slices.Contains(RescueRefusalKinds, k) {
			return fmt.Errorf("heartbeat %q counts rescue refusals of unknown kind %q; the kinds are %s", m.ID, k, strings.Join(RescueRefusalKinds, ", "))
		}
		if n < 0 {
			return fmt.Errorf("heartbeat %q counts %d rescue refusals of kind %q; a count is at least 0", m.ID, n, k)
		}
	}
	return nil
}

// checkBeats: a summary of at most MaxBeats valid heartbeats of its site.
func checkBeats(m *Message) error {
	if err := m.need(m.Site != "", "site"); err != nil {
		return err
	}
	if len(m.Beats) > MaxBeats {
		return fmt.Errorf("heartbeat summary %q carries %d heartbeats; at most %d", m.ID, len(m.Beats), MaxBeats)
	}
	if m.Queued < 0 {
		return fmt.Errorf("heartbeat summary %q has queued %d < 0", m.ID, m.Queued)
	}
	for i := range m.Beats {
		b := &m.Beats[i]
		if b.Kind != KindHeartbeat || len(b.Beats) > 0 {
			return fmt.Errorf("heartbeat summary %q: entry %d is a %q, not a heartbeat", m.ID, i+1, b.Kind)
		}
		if b.Site != m.Site {
			return fmt.Errorf("heartbeat summary %q of site %q: entry %d is of site %q", m.ID, m.Site, i+1, b.Site)
		}
		if err := b.Validate(); err != nil {
			return fmt.Errorf("heartbeat summary %q: entry %d: %w", m.ID, i+1, err)
		}
	}
	return nil
}

// checkPowerReport: a reading ("power on" or "power off") or the error
// of a failed one, never both.
func checkPowerReport(m *Message) error {
	if err := m.needAll(need{m.Node != "", "node"}, need{!m.Sent.IsZero(), "sent"}); err != nil {
		return err
	}
	if m.Error != "" {
		if m.PowerState != "" {
			return fmt.Errorf("power report %q has both power_state %q and error %q; a failed reading has only the error", m.ID, m.PowerState, m.Error)
		}
		return nil
	}
	if m.PowerState != PowerOn && m.PowerState != PowerOff {
		return fmt.Errorf("power report %q has power_state %q; want %q or %q, or an error", m.ID, m.PowerState, PowerOn, PowerOff)
	}
	return nil
}
