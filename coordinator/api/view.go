package api

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/drivers"
)

// nodeView is a node as the API shows it, in Ironic's shape. Its fields
// are in the byte order of their JSON names, the order in which
// encoding/json writes a map's keys: a node encodes exactly as the
// map-based view of earlier versions did (view_test.go checks it), and
// clients that compare answers see no change. A nil `any` field is
// Ironic's null for a field this API does not have.
type nodeView struct {
	AllocationUUID       any            `json:"allocation_uuid"`
	AutomatedClean       any            `json:"automated_clean"`
	BiosInterface        string         `json:"bios_interface"`
	BootInterface        string         `json:"boot_interface"`
	BootMode             any            `json:"boot_mode"`
	ChassisUUID          any            `json:"chassis_uuid"`
	CleanStep            any            `json:"clean_step"`
	Conductor            string         `json:"conductor"`
	ConductorGroup       string         `json:"conductor_group"`
	ConsoleEnabled       bool           `json:"console_enabled"`
	ConsoleInterface     string         `json:"console_interface"`
	CreatedAt            time.Time      `json:"created_at"`
	DeployInterface      string         `json:"deploy_interface"`
	DeployStep           any            `json:"deploy_step"`
	Description          any            `json:"description"`
	DisablePowerOff      bool           `json:"disable_power_off"`
	Driver               string         `json:"driver"`
	DriverInfo           map[string]any `json:"driver_info"`
	DriverInternalInfo   *internalView  `json:"driver_internal_info"`
	Extra                map[string]any `json:"extra"`
	Fault                *string        `json:"fault"`
	FirmwareInterface    string         `json:"firmware_interface"`
	Health               any            `json:"health"`
	InspectInterface     string         `json:"inspect_interface"`
	InspectionFinishedAt *time.Time     `json:"inspection_finished_at"`
	InspectionStartedAt  *time.Time     `json:"inspection_started_at"`
	InstanceInfo         map[string]any `json:"instance_info"`
	InstanceName         any            `json:"instance_name"`
	InstanceUUID         any            `json:"instance_uuid"`
	LastError            *string        `json:"last_error"`
	Lessee               any            `json:"lessee"`
	Links                []linkView     `json:"links"`
	Maintenance          bool           `json:"maintenance"`
	MaintenanceReason    *string        `json:"maintenance_reason"`
	ManagementInterface  string         `json:"management_interface"`
	Name                 *string        `json:"name"`
	NetworkData          map[string]any `json:"network_data"`
	NetworkInterface     string         `json:"network_interface"`
	Owner                any            `json:"owner"`
	ParentNode           any            `json:"parent_node"`
	Portgroups           []linkView     `json:"portgroups"`
	Ports                []linkView     `json:"ports"`
	PowerInterface       string         `json:"power_interface"`
	PowerState           *string        `json:"power_state"`
	Properties           map[string]any `json:"properties"`
	Protected            bool           `json:"protected"`
	ProtectedReason      *string        `json:"protected_reason"`
	ProvisionState       string         `json:"provision_state"`
	ProvisionUpdatedAt   *time.Time     `json:"provision_updated_at"`
	RaidConfig           map[string]any `json:"raid_config"`
	RaidInterface        string         `json:"raid_interface"`
	RescueInterface      string         `json:"rescue_interface"`
	Reservation          *string        `json:"reservation"`
	ResourceClass        any            `json:"resource_class"`
	Retired              *bool          `json:"retired"`
	RetiredReason        *string        `json:"retired_reason"`
	SecureBoot           any            `json:"secure_boot"`
	ServiceStep          any            `json:"service_step"`
	Shard                any            `json:"shard"`
	SiteOnline           bool           `json:"site_online"`
	States               []linkView     `json:"states"`
	StorageInterface     string         `json:"storage_interface"`
	TargetPowerState     *string        `json:"target_power_state"`
	TargetProvisionState *string        `json:"target_provision_state"`
	TargetRaidConfig     map[string]any `json:"target_raid_config"`
	Traits               []string       `json:"traits"`
	UpdatedAt            time.Time      `json:"updated_at"`
	UUID                 string         `json:"uuid"`
	VendorInterface      string         `json:"vendor_interface"`
	Volume               []linkView     `json:"volume"`
}

// internalView is driver_internal_info; a nil field is left out.
type internalView struct {
	AbortAfter             bool         `json:"abort_after,omitempty"`
	AgentCachedCleanSteps  any          `json:"agent_cached_clean_steps,omitempty"`
	AgentCachedDeploySteps any          `json:"agent_cached_deploy_steps,omitempty"`
	AgentLastHeartbeat     *time.Time   `json:"agent_last_heartbeat,omitempty"`
	AutoDiscovered         bool         `json:"auto_discovered,omitempty"`
	CleanStepIndex         any          `json:"clean_step_index,omitempty"`
	CleanSteps             any          `json:"clean_steps,omitempty"`
	Deadline               *time.Time   `json:"deadline,omitempty"`
	DeployStepIndex        any          `json:"deploy_step_index,omitempty"`
	DeploySteps            any          `json:"deploy_steps,omitempty"`
	Operation              any          `json:"operation,omitempty"`
	OutstandingCommand     *commandView `json:"outstanding_command,omitempty"`
	ServiceStepIndex       any          `json:"service_step_index,omitempty"`
	ServiceSteps           any          `json:"service_steps,omitempty"`
}

type commandView struct {
	Accepted bool   `json:"accepted"`
	Attempts int    `json:"attempts"`
	ID       string `json:"id"`
}

// stepJSON is a step as clean_step, deploy_step and the step lists show
// it; a node without a step shows {} (noStep).
type stepJSON struct {
	Abortable       bool           `json:"abortable"`
	Args            map[string]any `json:"args"`
	Interface       string         `json:"interface"`
	Priority        int            `json:"priority"`
	Progress        float64        `json:"progress,omitempty"`
	RequiresRamdisk bool           `json:"requires_ramdisk"`
	Step            string         `json:"step"`
}

type linkView struct {
	Href string `json:"href"`
	Rel  string `json:"rel"`
}

var noStep = struct{}{}

func stepOf(s *fsm.StepRun) any {
	if s == nil {
		return noStep
	}
	// Secret-looking arguments (a deploy template's or runbook's BIOS
	// password, say) are masked, as Ironic masks them in its step lists.
	v := stepJSON{Interface: s.Interface, Step: s.Step, Priority: s.Priority, Abortable: s.Abortable, Args: maskArgs(s.Args), RequiresRamdisk: s.InBand}
	if s.Progress > 0 {
		v.Progress = s.Progress
	}
	return v
}

// nstr is a string field that Ironic shows as null when empty.
func nstr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func links(base, path string) []linkView {
	return []linkView{{Href: base + path, Rel: "self"}, {Href: base + path, Rel: "bookmark"}}
}

// view builds the view of n; base is the API's URL as the client reached
// it (baseURL), for the links. Secrets are masked or left out. It runs
// under the engine's read lock: the view shares n's maps and slices that
// it shows unchanged (the engine replaces those, never changes them in
// place), and copies the rest.
func (s *Server) view(base string, n *fsm.Node, online bool) *nodeView {
	decl, _ := s.e.Machine().Config().Drivers.Get(n.Driver)
	internal := &internalView{AutoDiscovered: n.AutoDiscovered}
	if !n.LastHeartbeat.IsZero() {
		t := n.LastHeartbeat
		internal.AgentLastHeartbeat = &t
	}
	if len(n.CachedCleanSteps) > 0 {
		internal.AgentCachedCleanSteps = n.CachedCleanSteps
		internal.AgentCachedDeploySteps = n.CachedDeploySteps
	}
	if n.Op != nil {
		// The index is into the step list (as Ironic's), not the plan,
		// which has BMC actions between the steps; none before the
		// first step.
		list, at := n.Op.StepList()
		steps := make([]any, 0, len(list))
		for _, st := range list {
			steps = append(steps, stepOf(st))
		}
		var index any
		if at >= 0 {
			index = at
		}
		switch n.Op.Phase.Info().Steps {
		case fsm.StepsDeploy:
			internal.DeploySteps, internal.DeployStepIndex = steps, index
		case fsm.StepsService:
			internal.ServiceSteps, internal.ServiceStepIndex = steps, index
		default:
			internal.CleanSteps, internal.CleanStepIndex = steps, index
		}
		internal.Operation = string(n.Op.Phase)
		internal.AbortAfter = n.Op.AbortAfter
	}
	if n.Pending != nil {
		internal.OutstandingCommand = &commandView{ID: n.Pending.ID, Attempts: n.Pending.Attempts, Accepted: n.Pending.Accepted}
	}
	if !n.Deadline.IsZero() {
		t := n.Deadline
		internal.Deadline = &t
	}
	ii := make(map[string]any, len(n.InstanceInfo)+2)
	for k, v := range n.InstanceInfo {
		if strings.Contains(k, "password") || k == "configdrive" {
			v = "******"
		}
		ii[k] = v
	}
	if n.ConfigDrive != "" {
		// Ironic shows a config drive masked, whichever its form.
		ii["configdrive"] = "******"
	}
	// While a rescue was asked and not undone, Ironic keeps the rescue
	// password and its hash in instance_info and shows both masked; the
	// password itself is only in the operation here, never in a view.
	if rescuePasswordSet(n.ProvisionState) {
		ii["rescue_password"], ii["hashed_rescue_password"] = "******", "******"
	}
	ifaces := nodeInterfaces(n, decl)
	v := &nodeView{
		UUID: n.UUID, Name: nstr(n.Name), Driver: n.Driver, ConductorGroup: n.Site, Conductor: "coordinator",
		DriverInfo: Mask(n.DriverInfo, decl), Properties: orEmpty(n.Properties), InstanceInfo: ii,
		Extra: orEmpty(n.Extra), DriverInternalInfo: internal,
		ProvisionState: string(n.ProvisionState), TargetProvisionState: nstr(string(n.TargetProvisionState)),
		PowerState: nstr(n.PowerState), TargetPowerState: nstr(n.TargetPowerState),
		Maintenance: n.Maintenance, MaintenanceReason: nstr(n.MaintenanceReason), Fault: nstr(n.Fault),
		LastError: nstr(n.LastError), Reservation: nstr(n.Reservation), RetiredReason: nstr(n.RetiredReason),
		ResourceClass: nullable(n.ResourceClass), Description: nullable(n.Description), Owner: nullable(n.Owner),
		CleanStep: stepOf(n.CleanStep), DeployStep: stepOf(n.DeployStep), ServiceStep: stepOf(n.ServiceStep),
		CreatedAt: n.CreatedAt, UpdatedAt: n.UpdatedAt,
		NetworkInterface: ifaces.Network, BootInterface: ifaces.Boot, DeployInterface: ifaces.Deploy,
		PowerInterface: ifaces.Power, ManagementInterface: ifaces.Management, InspectInterface: ifaces.Inspect,
		BiosInterface: ifaces.Bios, ConsoleInterface: ifaces.Console, RaidInterface: ifaces.Raid,
		RescueInterface: ifaces.Rescue, StorageInterface: ifaces.Storage, VendorInterface: ifaces.Vendor,
		FirmwareInterface: ifaces.Firmware, NetworkData: orEmpty(n.NetworkData), RaidConfig: orEmpty(n.RaidConfig), TargetRaidConfig: orEmpty(n.TargetRaidConfig),
		Traits: traitsOf(n), SiteOnline: online,
		DisablePowerOff: n.DisablePowerOff, ConsoleEnabled: n.ConsoleEnabled,
		InstanceUUID: nullable(n.InstanceUUID), AllocationUUID: nullable(n.AllocationUUID), InstanceName: nullable(n.InstanceName), Health: nullable(n.Health),
		Links: links(base, "/v1/nodes/"+n.UUID), Ports: links(base, "/v1/nodes/"+n.UUID+"/ports"),
		States: links(base, "/v1/nodes/"+n.UUID+"/states"), Portgroups: links(base, "/v1/nodes/"+n.UUID+"/portgroups"),
		Volume: links(base, "/v1/nodes/"+n.UUID+"/volume"),
	}
	if n.AutomatedClean != nil {
		v.AutomatedClean = *n.AutomatedClean
	}
	// Retired as Ironic shows it: null once removed.
	if !n.RetiredUnset {
		r := n.Retired
		v.Retired = &r
	}
	if !n.ProvisionUpdatedAt.IsZero() {
		t := n.ProvisionUpdatedAt
		v.ProvisionUpdatedAt = &t
	}
	if n.InspectionStartedAt != nil {
		t := *n.InspectionStartedAt
		v.InspectionStartedAt = &t
	}
	if n.InspectionFinishedAt != nil {
		t := *n.InspectionFinishedAt
		v.InspectionFinishedAt = &t
	}
	// boot_mode and secure_boot as the ramdisk's inventory last said;
	// null until then.
	if n.BootMode != "" {
		v.BootMode = n.BootMode
	}
	if n.SecureBoot != nil {
		v.SecureBoot = *n.SecureBoot
	}
	return v
}

// rescuePasswordSet says whether Ironic holds a rescue password in the
// instance_info of a node in state st: from the rescue verb until
// unrescue ends (a failed rescue removes it).
func rescuePasswordSet(st fsm.State) bool {
	return st == fsm.Rescuing || st == fsm.RescueWait || st == fsm.Rescue || st == fsm.Unrescuing
}

// nodeIfaces are the hardware interfaces of a node, in Ironic's names:
// one implementation per interface and driver, the driver's own for
// power and management (and bios, when it has BIOS steps), the
// coordinator's for the rest, and Ironic's no-* where there is none.
type nodeIfaces struct {
	Bios, Boot, Console, Deploy, Firmware, Inspect, Management, Network, Power, Raid, Rescue, Storage, Vendor string
}

// interfacesOf is the default interfaces of a node of driver (as the
// node names it: fake-hardware has Ironic's fake ones), declared by decl
// (drivers/interfaces.go).
func interfacesOf(driver string, decl drivers.Declaration) nodeIfaces {
	d := decl.InterfacesFor(driver)
	return nodeIfaces{Bios: d.Default("bios"), Boot: d.Default("boot"), Console: d.Default("console"), Deploy: d.Default("deploy"),
		Firmware: d.Default("firmware"), Inspect: "agent", Management: d.Default("management"), Network: d.Default("network"),
		Power: d.Default("power"), Raid: d.Default("raid"), Rescue: d.Default("rescue"), Storage: d.Default("storage"), Vendor: d.Default("vendor")}
}

// nodeInterfaces is the interfaces of node n: its driver's defaults and
// the implementations it chose.
func nodeInterfaces(n *fsm.Node, decl drivers.Declaration) nodeIfaces {
	i := interfacesOf(n.Driver, decl)
	i.Raid = drivers.ShownImpl(n.Driver, "raid", drivers.RAIDInterfaceOf(n.RaidInterface))
	i.Inspect = drivers.InspectInterfaceOf(n.InspectInterface)
	if n.BootInterface != "" {
		i.Boot = n.BootInterface
	}
	if n.DeployInterface != "" {
		i.Deploy = n.DeployInterface
	}
	if n.ConsoleInterface != "" {
		i.Console = n.ConsoleInterface
	}
	return i
}

// byName is the interface named iface ("deploy", ...), and whether it is
// one.
func (i nodeIfaces) byName(iface string) (string, bool) {
	switch iface {
	case "bios":
		return i.Bios, true
	case "boot":
		return i.Boot, true
	case "console":
		return i.Console, true
	case "deploy":
		return i.Deploy, true
	case "firmware":
		return i.Firmware, true
	case "inspect":
		return i.Inspect, true
	case "management":
		return i.Management, true
	case "network":
		return i.Network, true
	case "power":
		return i.Power, true
	case "raid":
		return i.Raid, true
	case "rescue":
		return i.Rescue, true
	case "storage":
		return i.Storage, true
	case "vendor":
		return i.Vendor, true
	}
	return "", false
}

// fieldSince is the API minor version from which Ironic shows each node
// field (its utils.VERSIONED_FIELDS, and the links of
// node_convert_with_links); the fields not listed are in 1.1. site_online
// is this API's own and always shown.
var fieldSince = map[string]int{
	"driver_internal_info": 3, "name": 5, "inspection_finished_at": 6, "inspection_started_at": 6, "clean_step": 7,
	"raid_config": 12, "target_raid_config": 12, "states": 14, "network_interface": 20, "resource_class": 21,
	"portgroups": 24, "volume": 32, "storage_interface": 33, "traits": 37, "rescue_interface": 38, "bios_interface": 40,
	"fault": 42, "deploy_step": 44, "conductor_group": 46, "automated_clean": 47, "protected": 48, "protected_reason": 48,
	"conductor": 49, "owner": 50, "description": 51, "allocation_uuid": 52, "retired": 61, "retired_reason": 61,
	"lessee": 65, "network_data": 66, "boot_mode": 75, "secure_boot": 75, "shard": 82,
	"parent_node": 83, "firmware_interface": 86, "service_step": 87, "disable_power_off": 95, "instance_name": 104, "health": 109,
	"boot_interface": 31, "console_interface": 31, "deploy_interface": 31, "inspect_interface": 31,
	"management_interface": 31, "power_interface": 31, "raid_interface": 31, "vendor_interface": 31,
}

// fieldAt says whether the node field f is shown at API version 1.minor.
func fieldAt(f string, minor int) bool { return fieldSince[f] <= minor }

// fieldsAt is fieldsOf at API version 1.minor, below the newest: the
// fields of later versions are left out (a client that asks for one with
// ?fields= was refused with 406 before), and provision states are named
// as that version named them (Ironic's update_state_in_older_versions:
// available was null before 1.2, inspect wait was inspecting before 1.39).
func (v *nodeView) fieldsAt(minor int, fields []string) map[string]any {
	out := v.fieldsOf(fields)
	for f := range out {
		if !fieldAt(f, minor) {
			delete(out, f)
		}
	}
	if ps, ok := out["provision_state"]; ok {
		switch {
		case minor < 2 && ps == string(fsm.Available):
			out["provision_state"] = nil
		case minor < 39 && ps == string(fsm.InspectWait):
			out["provision_state"] = string(fsm.Inspecting)
		}
	}
	return out
}

// viewFields maps each JSON name of nodeView to its field.
var viewFields = func() map[string]int {
	m := map[string]int{}
	t := reflect.TypeFor[nodeView]()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		m[name] = i
	}
	return m
}()

// fieldsOf is a map of the view's fields named in fields, and links,
// which Ironic always keeps (all of them when fields is nil). It encodes
// as the view does, field for field.
func (v *nodeView) fieldsOf(fields []string) map[string]any {
	rv := reflect.ValueOf(v).Elem()
	if fields == nil {
		out := make(map[string]any, len(viewFields))
		for name, i := range viewFields {
			out[name] = rv.Field(i).Interface()
		}
		return out
	}
	out := make(map[string]any, len(fields)+1)
	for _, f := range fields {
		if i, ok := viewFields[f]; ok {
			out[f] = rv.Field(i).Interface()
		}
	}
	out["links"] = v.Links
	return out
}

// render is the node's view as a map (for answers that add or pick
// fields).
func (s *Server) render(r *http.Request, n *fsm.Node, online bool) map[string]any {
	return s.view(baseURL(r), n, online).pickAt(apiMinor(r), nil)
}

// pickAt is fieldsOf (fields, or all when nil) at API version 1.minor.
func (v *nodeView) pickAt(minor int, fields []string) map[string]any {
	if minor < maxMinor {
		return v.fieldsAt(minor, fields)
	}
	return v.fieldsOf(fields)
}

// viewKey and viewFinish are what getNode and detail lists pass to
// engine.Views for whole nodes at r's version: the kept JSON is the
// version's (the key names it below the newest).
func (s *Server) viewKey(r *http.Request) (key string, finish func(any) any) {
	base, minor := baseURL(r), apiMinor(r)
	if minor == maxMinor {
		return base, encodeView
	}
	return base + " 1." + strconv.Itoa(minor), func(v any) any { return encodeView(v.(*nodeView).fieldsAt(minor, nil)) }
}

// encodeView is the JSON of a view, as writeJSON writes it inside an
// answer (HTML characters escaped, no newline).
func encodeView(v any) any {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	if err := enc.Encode(v); err != nil {
		// Only a value that JSON cannot hold (a NaN in a client's
		// map) gets here; Marshal says the same for the whole answer.
		return err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// listWriters buffer a node list's answer on its way out: 64 KiB each,
// so that a detail list of 1000 nodes (about 4 MB) goes out in about 64
// writes without being copied whole into memory first (32 clients
// listing at once held 32 such copies).
var listWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 64<<10) }}

// writeNodeList writes {"next": next, "nodes": [...]} from the nodes'
// kept JSON as writeJSON would write it (next is left out when empty; nil
// views, of nodes deleted meanwhile, are skipped), with its exact
// Content-Length.
func writeNodeList(w http.ResponseWriter, next string, views []any) {
	var nb []byte
	if next != "" {
		nb, _ = json.Marshal(next)
	}
	size, count := 1+len(`"nodes":[`)+len("]}\n"), 0
	if nb != nil {
		size += len(`"next":`) + len(nb) + 1
	}
	for _, v := range views {
		switch v := v.(type) {
		case []byte:
			size += len(v)
			count++
		case error:
			writeError(w, 500, "cannot encode a node: "+v.Error())
			return
		}
	}
	if count > 1 {
		size += count - 1
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(size))
	w.WriteHeader(200)
	bw := listWriters.Get().(*bufio.Writer)
	bw.Reset(w)
	defer func() {
		bw.Reset(nil)
		listWriters.Put(bw)
	}()
	bw.WriteByte('{')
	if nb != nil {
		bw.WriteString(`"next":`)
		bw.Write(nb)
		bw.WriteByte(',')
	}
	bw.WriteString(`"nodes":[`)
	first := true
	for _, v := range views {
		if b, ok := v.([]byte); ok {
			if !first {
				bw.WriteByte(',')
			}
			first = false
			bw.Write(b)
		}
	}
	bw.WriteString("]}\n")
	_ = bw.Flush()
}

// writeJSONBytes writes one value's JSON (from encodeView) as writeJSON
// would.
func writeJSONBytes(w http.ResponseWriter, code int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(code)
	_, _ = w.Write(b)
	_, _ = w.Write([]byte("\n"))
}
