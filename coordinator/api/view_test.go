package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/coordinator/engine"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/protocol"
)

// The map-based node view that the typed view (view.go) replaced, kept
// as the reference that TestViewEncodesAsMapView compares with.

func oldStepView(s *fsm.StepRun) map[string]any {
	if s == nil {
		return map[string]any{}
	}
	args := s.Args
	if args == nil {
		args = map[string]any{}
	}
	v := map[string]any{"interface": s.Interface, "step": s.Step, "priority": s.Priority, "abortable": s.Abortable, "args": args,
		"requires_ramdisk": s.InBand}
	if s.Progress > 0 {
		v["progress"] = s.Progress
	}
	return v
}

// oldRender shows a node in Ironic's shape; secrets are masked or left out.
func (s *Server) oldRender(r *http.Request, n *fsm.Node, online bool) map[string]any {
	decl, _ := s.e.Machine().Config().Drivers.Get(n.Driver)
	internal := map[string]any{}
	if !n.LastHeartbeat.IsZero() {
		internal["agent_last_heartbeat"] = n.LastHeartbeat
	}
	if len(n.CachedCleanSteps) > 0 {
		internal["agent_cached_clean_steps"] = n.CachedCleanSteps
		internal["agent_cached_deploy_steps"] = n.CachedDeploySteps
	}
	if n.Op != nil {
		steps := []map[string]any{}
		for _, a := range n.Op.Plan {
			if a.Kind == fsm.ActStep {
				steps = append(steps, oldStepView(a.Step))
			}
		}
		key, idx := "clean_steps", "clean_step_index"
		if n.Op.Phase == "deploy" {
			key, idx = "deploy_steps", "deploy_step_index"
		} else if n.Op.Phase == "service" {
			key, idx = "service_steps", "service_step_index"
		}
		internal[key] = steps
		if _, at := n.Op.StepList(); at >= 0 {
			internal[idx] = at
		}
		internal["operation"] = n.Op.Phase
		if n.Op.AbortAfter {
			internal["abort_after"] = true
		}
	}
	if n.Pending != nil {
		internal["outstanding_command"] = map[string]any{"id": n.Pending.ID, "attempts": n.Pending.Attempts, "accepted": n.Pending.Accepted}
	}
	if !n.Deadline.IsZero() {
		internal["deadline"] = n.Deadline
	}
	ii := map[string]any{}
	for k, v := range n.InstanceInfo {
		if strings.Contains(k, "password") || k == "configdrive" {
			v = "******"
		}
		ii[k] = v
	}
	switch n.ProvisionState {
	case fsm.Rescuing, fsm.RescueWait, fsm.Rescue, fsm.Unrescuing:
		ii["rescue_password"], ii["hashed_rescue_password"] = "******", "******"
	}
	bios, firmware := "no-bios", "no-firmware"
	boot, power := map[string]string{"ipmi": "ipxe", "redfish": "redfish-virtual-media"}[n.Driver], n.Driver
	if boot == "" {
		boot = "pxe"
	}
	if n.Driver == "ipmi" {
		power = "ipmitool"
	}
	for _, st := range decl.CleanSteps {
		if st.Interface == "bios" {
			bios = n.Driver
		}
		if st.Interface == "firmware" {
			firmware = n.Driver
		}
	}
	var provUpdated any
	if !n.ProvisionUpdatedAt.IsZero() {
		provUpdated = n.ProvisionUpdatedAt
	}
	var insStart, insEnd any
	if n.InspectionStartedAt != nil {
		insStart = *n.InspectionStartedAt
	}
	if n.InspectionFinishedAt != nil {
		insEnd = *n.InspectionFinishedAt
	}
	return map[string]any{
		"uuid": n.UUID, "name": nullable(n.Name), "driver": n.Driver, "conductor_group": n.Site, "conductor": "coordinator",
		"driver_info": Mask(n.DriverInfo, decl), "properties": orEmpty(n.Properties), "instance_info": ii,
		"extra": orEmpty(n.Extra), "driver_internal_info": internal,
		"provision_state": string(n.ProvisionState), "target_provision_state": nullable(string(n.TargetProvisionState)),
		"power_state": nullable(n.PowerState), "target_power_state": nullable(n.TargetPowerState),
		"maintenance": n.Maintenance, "maintenance_reason": nullable(n.MaintenanceReason), "fault": nullable(n.Fault),
		"last_error": nullable(n.LastError), "reservation": nullable(n.Reservation),
		"retired": oldRetiredView(n), "retired_reason": nullable(n.RetiredReason), "shard": nil,
		"clean_step": oldStepView(n.CleanStep), "deploy_step": oldStepView(n.DeployStep),
		"service_step": oldStepView(n.ServiceStep), "parent_node": nil, "firmware_interface": firmware,
		"created_at": n.CreatedAt, "updated_at": n.UpdatedAt, "provision_updated_at": provUpdated,
		"inspection_started_at": insStart, "inspection_finished_at": insEnd,
		"console_enabled": false, "protected": false, "automated_clean": nil, "resource_class": nullable(n.ResourceClass),
		"instance_uuid": nil, "chassis_uuid": nil, "owner": nullable(n.Owner), "lessee": nil, "description": nullable(n.Description), "allocation_uuid": nil,
		"boot_mode": nil, "secure_boot": nil, "network_interface": "noop", "boot_interface": boot, "deploy_interface": "direct",
		"power_interface": power, "management_interface": power, "inspect_interface": "agent",
		// Added with issue 29: Ironic's interface names per hardware type.
		"disable_power_off": false, "instance_name": nil, "health": nil,
		"traits": []any{}, "site_online": online,
		"links": link(r, "/v1/nodes/"+n.UUID), "ports": link(r, "/v1/nodes/"+n.UUID+"/ports"),
		"states": link(r, "/v1/nodes/"+n.UUID+"/states"),
		// Added with issue 21: the rest of Ironic's node fields.
		"bios_interface": bios, "console_interface": "no-console", "raid_interface": "agent", "rescue_interface": "agent",
		"storage_interface": "noop", "vendor_interface": "no-vendor", "protected_reason": nil,
		"network_data": map[string]any{}, "raid_config": map[string]any{}, "target_raid_config": map[string]any{},
		"portgroups": link(r, "/v1/nodes/"+n.UUID+"/portgroups"), "volume": link(r, "/v1/nodes/"+n.UUID+"/volume"),
	}
}

// oldRetiredView is retired as Ironic shows it: null once removed.
func oldRetiredView(n *fsm.Node) any {
	if n.RetiredUnset {
		return nil
	}
	return n.Retired
}

type viewPublisher struct{}

func (viewPublisher) Publish(context.Context, string, []byte, bool) error { return nil }

// viewNodes are nodes in varied states: resting, busy in cleaning and in
// deploying, failed, retired, retired removed, in maintenance, with
// secrets, with characters that JSON escapes, with and without names,
// maps, steps and timestamps.
func viewNodes() []*fsm.Node {
	t0 := time.Date(2026, 11, 23, 20, 1, 2, 345678901, time.UTC)
	t1 := t0.Add(90 * time.Second)
	t2 := t0.Add(3 * time.Hour).In(time.FixedZone("X", 3600))
	steps := []drivers.Step{{Interface: "deploy", Step: "erase_devices", Priority: 10, Abortable: true, RequiresRamdisk: true,
		ArgsInfo: map[string]drivers.ArgInfo{"x": {Description: "d <&>", Required: true}}}}
	return []*fsm.Node{
		{UUID: "00000000-0000-0000-0000-000000000001", Driver: "fake", Site: "s1", ProvisionState: fsm.Enroll, CreatedAt: t0, UpdatedAt: t0},
		{UUID: "00000000-0000-0000-0000-000000000002", Name: "n-2", Driver: "fake", Site: "s1", ProvisionState: fsm.Available, PowerState: "power off",
			DriverInfo:   map[string]any{"bmc_address": "10.0.0.1", "bmc_password": "pw", "redfish_password": "x", "api_token": "t", "n": 3.5},
			Properties:   map[string]any{"cpus": 8, "capabilities": "boot_mode:uefi", "nested": map[string]any{"a": []any{1, "b", nil, true}}},
			InstanceInfo: map[string]any{"image_source": "http://i/img?a=1&b=<2>", "configdrive": "secret", "root_password": "p"},
			Extra:        map[string]any{"html": "<script>&amp;</script>", "unicode": "é\u2028ü", "empty": map[string]any{}},
			CreatedAt:    t0, UpdatedAt: t1, ProvisionUpdatedAt: t1, LastHeartbeat: t2,
			CachedCleanSteps: steps, StepsCachedAt: t1},
		{UUID: "00000000-0000-0000-0000-000000000003", Name: "busy", Driver: "fake", Site: "s2", ProvisionState: fsm.CleanWait,
			TargetProvisionState: fsm.Available, PowerState: "power on", TargetPowerState: "power on", Reservation: "coordinator",
			CleanStep: &fsm.StepRun{Interface: "deploy", Step: "erase_devices", Priority: 10, Abortable: true, InBand: true, Progress: 0.25,
				Args: map[string]any{"k": "v"}},
			Op: &fsm.Operation{Verb: fsm.Provide, Target: fsm.Available, Phase: "clean", Index: 2, AbortAfter: true, Plan: []fsm.Action{
				{Kind: fsm.ActOOB, Action: protocol.ActionPower}, {Kind: fsm.ActStep, Step: &fsm.StepRun{Interface: "deploy", Step: "erase_devices_metadata"}},
				{Kind: fsm.ActStep, Step: &fsm.StepRun{Interface: "deploy", Step: "erase_devices", Priority: 10, Args: map[string]any{"a": 1}}},
				{Kind: fsm.ActStep}}},
			Pending:  &fsm.Command{ID: "c-1", Attempts: 3, Accepted: true},
			Deadline: t2, CreatedAt: t0, UpdatedAt: t1, ProvisionUpdatedAt: t1, LastHeartbeat: t1,
			CachedCleanSteps: steps, CachedDeploySteps: steps},
		{UUID: "00000000-0000-0000-0000-000000000004", Name: "deploying", Driver: "fake", Site: "s1", ProvisionState: fsm.DeployWait,
			TargetProvisionState: fsm.Active, DeployStep: &fsm.StepRun{Interface: "deploy", Step: "write_image", Progress: -1},
			Op:      &fsm.Operation{Verb: fsm.Deploy, Phase: "deploy", Plan: []fsm.Action{{Kind: fsm.ActStep, Step: &fsm.StepRun{Interface: "deploy", Step: "write_image"}}}},
			Pending: &fsm.Command{ID: "c-2"}, CreatedAt: t0, UpdatedAt: t0},
		{UUID: "00000000-0000-0000-0000-000000000005", Driver: "ipmi", Site: "s1", ProvisionState: fsm.CleanFailed, LastError: "step \"x\" failed: <oops> & more",
			Maintenance: true, MaintenanceReason: "clean failed", Fault: "clean failure", Retired: true, RetiredReason: "old",
			CleanStep: &fsm.StepRun{Interface: "deploy", Step: "erase_devices"}, InspectionStartedAt: &t0, InspectionFinishedAt: &t2,
			Op: &fsm.Operation{Phase: ""}, CreatedAt: t0, UpdatedAt: t2, ProvisionUpdatedAt: t2},
		{UUID: "00000000-0000-0000-0000-000000000006", Name: "unretired", Driver: "redfish", Site: "s1", ProvisionState: fsm.Manageable,
			RetiredUnset: true, DriverInfo: map[string]any{}, Properties: map[string]any{}, InstanceInfo: map[string]any{}, Extra: map[string]any{},
			CachedDeploySteps: steps, CreatedAt: t0, UpdatedAt: t0},
	}
}

// TestViewEncodesAsMapView checks that the typed node view encodes
// exactly as the map-based view did, byte for byte, for nodes in varied
// states: as a whole node, as a map (render, for answers that pick
// fields), and with ?fields= picked.
// TestStepIndexCountsSteps: driver_internal_info's deploy_step_index is
// the running step's place in deploy_steps (Ironic's), not its place in
// the plan, whose BMC actions come between the steps; before the first
// step there is none.
func TestStepIndexCountsSteps(t *testing.T) {
	e, err := engine.New(engine.Config{DataDir: t.TempDir(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	s := New(e, slog.New(slog.NewTextHandler(io.Discard, nil)), "")
	write := &fsm.StepRun{Interface: "deploy", Step: "write_image", Priority: 80}
	boot := &fsm.StepRun{Interface: "deploy", Step: "boot_instance", Priority: 20}
	plan := []fsm.Action{{Kind: fsm.ActOOB, Action: "power"}, {Kind: fsm.ActOOB, Action: "boot_device"}, {Kind: fsm.ActStep, Step: write},
		{Kind: fsm.ActOOB, Action: "power"}, {Kind: fsm.ActStep, Step: boot}}
	for _, c := range []struct {
		at   int
		want any
	}{{0, nil}, {1, nil}, {2, float64(0)}, {3, float64(0)}, {4, float64(1)}} {
		n := &fsm.Node{UUID: "u1", ProvisionState: fsm.Deploying, Op: &fsm.Operation{Phase: "deploy", Plan: plan, Index: c.at}}
		b, err := json.Marshal(s.view("http://x", n, true))
		if err != nil {
			t.Fatal(err)
		}
		var v struct {
			Internal map[string]any `json:"driver_internal_info"`
		}
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		if got := v.Internal["deploy_step_index"]; got != c.want {
			t.Errorf("plan action %d running: deploy_step_index %v, want %v", c.at, got, c.want)
		}
		if l, _ := v.Internal["deploy_steps"].([]any); len(l) != 2 {
			t.Errorf("deploy_steps: %v, want the two steps", v.Internal["deploy_steps"])
		}
	}
}

func TestViewEncodesAsMapView(t *testing.T) {
	e, err := engine.New(engine.Config{DataDir: t.TempDir(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(viewPublisher{}); err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	s := New(e, slog.New(slog.NewTextHandler(io.Discard, nil)), "")
	enc := func(v any) string {
		var b bytes.Buffer
		if err := json.NewEncoder(&b).Encode(v); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	for _, host := range []string{"127.0.0.1:6385", "example.org"} {
		r := httptest.NewRequest("GET", "http://"+host+"/v1/nodes/detail", nil)
		for _, n := range viewNodes() {
			for _, online := range []bool{true, false} {
				want := enc(s.oldRender(r, n, online))
				got, ok := encodeView(s.view(baseURL(r), n, online)).([]byte)
				if !ok || string(got)+"\n" != want {
					t.Errorf("node %s (online %v): typed view encodes\n%s\nthe map view\n%s", n.UUID, online, got, want)
				}
				if got := enc(s.render(r, n, online)); got != want {
					t.Errorf("node %s: render encodes\n%s\nthe map view\n%s", n.UUID, got, want)
				}
				for _, fields := range [][]string{listFields, {"uuid"}, {"name", "driver_internal_info", "clean_step", "retired", "links"},
					{"provision_updated_at", "inspection_started_at", "traits", "ports", "states", "extra"}} {
					if got, want := enc(s.view(baseURL(r), n, online).fieldsOf(fields)), enc(pick(s.oldRender(r, n, online), fields)); got != want {
						t.Errorf("node %s, fields %v: typed view gives\n%s\nthe map view\n%s", n.UUID, fields, got, want)
					}
				}
			}
		}
	}
	// Every field a client may ask for that the view has is a field of
	// the map view, and the other way round.
	old := s.oldRender(httptest.NewRequest("GET", "/", nil), viewNodes()[0], true)
	for f := range viewFields {
		if _, ok := old[f]; !ok {
			t.Errorf("view field %s is not in the map view", f)
		}
	}
	if len(viewFields) != len(old) {
		t.Errorf("the view has %d fields, the map view %d", len(viewFields), len(old))
	}
}

// TestDetailListKeptViews checks that a detail list shows a node's change
// at once although the engine keeps the nodes' JSON between lists: after
// a maintenance change and after a PATCH, and with another base URL.
func TestDetailListKeptViews(t *testing.T) {
	e, err := engine.New(engine.Config{DataDir: t.TempDir(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(viewPublisher{}); err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if _, _, err := e.AddSite("s1"); err != nil {
		t.Fatal(err)
	}
	s := New(e, slog.New(slog.NewTextHandler(io.Discard, nil)), "")
	var ids []string
	for i := 0; i < 150; i++ {
		n, err := e.CreateNode(engine.NodeSpec{Driver: "fake", Site: "s1"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, n.UUID)
	}
	list := func(host string) []map[string]any {
		t.Helper()
		w := httptest.NewRecorder()
		s.ServeHTTP(w, httptest.NewRequest("GET", "http://"+host+"/v1/nodes/detail", nil))
		var body struct {
			Nodes []map[string]any `json:"nodes"`
		}
		if w.Code != 200 || json.Unmarshal(w.Body.Bytes(), &body) != nil {
			t.Fatalf("detail list: %d %s", w.Code, w.Body)
		}
		return body.Nodes
	}
	find := func(nodes []map[string]any, id string) map[string]any {
		for _, n := range nodes {
			if n["uuid"] == id {
				return n
			}
		}
		t.Fatalf("node %s not listed", id)
		return nil
	}
	if got := len(list("a:1")); got != 150 {
		t.Fatalf("listed %d nodes, want 150", got)
	}
	if err := e.SetMaintenance(ids[100], true, "why"); err != nil {
		t.Fatal(err)
	}
	if n := find(list("a:1"), ids[100]); n["maintenance"] != true || n["maintenance_reason"] != "why" {
		t.Fatalf("after maintenance: %v", n)
	}
	if err := e.UpdateNode(ids[7], func(n *fsm.Node) error { n.Extra = map[string]any{"k": "v"}; return nil }); err != nil {
		t.Fatal(err)
	}
	if n := find(list("a:1"), ids[7]); n["extra"].(map[string]any)["k"] != "v" {
		t.Fatalf("after update: %v", n)
	}
	links := find(list("b:2"), ids[3])["links"].([]any)
	if href := links[0].(map[string]any)["href"].(string); !strings.HasPrefix(href, "http://b:2/") {
		t.Fatalf("links with another base URL: %s", href)
	}
	// One node, with and without fields, from the kept JSON and not.
	for _, path := range []string{"/v1/nodes/" + ids[100], "/v1/nodes/" + ids[100] + "?fields=maintenance_reason"} {
		w := httptest.NewRecorder()
		s.ServeHTTP(w, httptest.NewRequest("GET", "http://a:1"+path, nil))
		if w.Code != 200 || !strings.Contains(w.Body.String(), `"maintenance_reason":"why"`) {
			t.Fatalf("GET %s: %d %s", path, w.Code, w.Body)
		}
	}
	w := httptest.NewRecorder()
	s.ServeHTTP(w, httptest.NewRequest("GET", "http://a:1/v1/nodes/nope", nil))
	if w.Code != 404 {
		t.Fatalf("GET of an unknown node: %d %s", w.Code, w.Body)
	}
	// Lists while nodes change and one is deleted (for -race), then a
	// list shows the last state of each.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 60; i++ {
			if err := e.SetMaintenance(ids[i%6], i%2 == 0, fmt.Sprint("r", i)); err != nil {
				t.Error(err)
				return
			}
		}
		if err := e.DeleteNode(ids[149]); err != nil {
			t.Error(err)
		}
	}()
	for busy := true; busy; {
		select {
		case <-done:
			busy = false
		default:
			list("a:1")
		}
	}
	nodes := list("a:1")
	if len(nodes) != 149 {
		t.Fatalf("listed %d nodes after a delete, want 149", len(nodes))
	}
	for i := 0; i < 6; i++ {
		n := find(nodes, ids[i])
		last := 54 + i
		if n["maintenance"] != (last%2 == 0) || (last%2 == 0 && n["maintenance_reason"] != fmt.Sprint("r", last)) {
			t.Fatalf("node %d after the changes: maintenance %v reason %v, want the change %d's", i, n["maintenance"], n["maintenance_reason"], last)
		}
	}
}
