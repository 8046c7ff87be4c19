package engine

import (
	"reflect"
	"testing"
	"time"

	"github.com/bmedge/bmedge/coordinator/fsm"
)

// cloneFields are fsm.Node's fields that cloneDirect knows how to copy. A
// new field fails this test until cloneDirect copies it as JSON would
// (and the field is added here).
var cloneFields = []string{"UUID", "Name", "Driver", "Site", "DriverInfo", "Properties", "InstanceInfo", "Extra", "ConfigDrive",
	"NetworkData", "TargetRaidConfig", "RaidConfig", "RaidInterface", "InspectInterface", "BootInterface", "DeployInterface",
	"ConsoleInterface", "ConsoleEnabled", "AutomatedClean", "DisablePowerOff", "VMediaAttached", "VirtualMedia", "InstanceUUID",
	"AllocationUUID", "InstanceName", "ProvisionState", "TargetProvisionState", "PowerState", "TargetPowerState", "LastError",
	"Maintenance", "MaintenanceReason", "Fault", "Retired", "RetiredUnset", "RetiredReason", "ResourceClass", "Description",
	"Owner", "Traits", "AutoDiscovered", "Serial", "BootDevice", "BootMode", "SecureBoot", "Reservation", "CleanStep",
	"DeployStep", "ServiceStep", "CreatedAt", "UpdatedAt", "ProvisionUpdatedAt", "InspectionStartedAt", "InspectionFinishedAt",
	"Op", "Pending", "CmdSeq", "Deadline", "AgentToken", "BootNonce", "BootID", "PastBoots", "LastHeartbeat", "FastTrackUntil",
	"CachedCleanSteps", "CachedDeploySteps", "StepsCachedAt", "PowerFailures", "PowerReadAt", "Health", "HealthReadAt",
	"HealthQuarantined", "Held", "PlanStop"}

func TestCloneKnowsEveryField(t *testing.T) {
	known := map[string]bool{}
	for _, f := range cloneFields {
		known[f] = true
	}
	typ := reflect.TypeFor[fsm.Node]()
	for i := range typ.NumField() {
		if !known[typ.Field(i).Name] {
			t.Errorf("fsm.Node.%s is new: make cloneDirect copy it as a JSON round trip would, then add it to cloneFields", typ.Field(i).Name)
		}
	}
	if typ.NumField() != len(cloneFields) {
		t.Errorf("fsm.Node has %d fields, cloneFields %d", typ.NumField(), len(cloneFields))
	}
}

// fillNode sets every field of a resting node to a value that is not
// its zero (maps and lists with nested JSON values, times with a
// monotonic reading and in the local zone).
func fillNode() *fsm.Node {
	n := &fsm.Node{}
	v := reflect.ValueOf(n).Elem()
	now := time.Now()
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Interface().(type) {
		case string:
			f.SetString("s" + v.Type().Field(i).Name)
		case fsm.State:
			f.SetString(string(fsm.Manageable))
		case bool:
			f.SetBool(true)
		case int:
			f.SetInt(3)
		case uint64:
			f.SetUint(7)
		case time.Time:
			f.Set(reflect.ValueOf(now.Add(time.Duration(i) * time.Millisecond)))
		case *time.Time:
			t := now.Add(-time.Hour)
			f.Set(reflect.ValueOf(&t))
		case *bool:
			b := false
			f.Set(reflect.ValueOf(&b))
		case map[string]any:
			f.Set(reflect.ValueOf(map[string]any{"a": "x", "n": 1.5, "z": -0.0, "t": true, "nil": nil,
				"o": map[string]any{"l": []any{1.0, "two", nil, map[string]any{}, []any{}}, "e": map[string]any{}}}))
		case []string:
			f.Set(reflect.ValueOf([]string{"a", "b"}))
		case []map[string]any:
			f.Set(reflect.ValueOf([]map[string]any{{"device_type": "cdrom"}, nil, {}}))
		case *fsm.StepRun:
			f.Set(reflect.ValueOf(&fsm.StepRun{Interface: "deploy", Step: "erase", Priority: 10, Abortable: true,
				Args: map[string]any{"k": []any{"v"}}, InBand: true, Progress: 0.5, Detail: "d"}))
		case *fsm.PlanStop:
			f.Set(reflect.ValueOf(&fsm.PlanStop{ID: "p", Mode: "abort"}))
		}
	}
	n.Op, n.Pending, n.Held = nil, nil, nil
	n.CachedCleanSteps, n.CachedDeploySteps = nil, nil
	return n
}

func TestCloneDirectMatchesJSON(t *testing.T) {
	full := fillNode()
	empty := &fsm.Node{UUID: "u", ProvisionState: fsm.Available, CreatedAt: time.Now()}
	emptyMaps := fillNode()
	emptyMaps.Extra, emptyMaps.DriverInfo, emptyMaps.Traits, emptyMaps.VirtualMedia = map[string]any{}, nil, []string{}, []map[string]any{}
	emptyMaps.CleanStep.Args = nil
	emptyMaps.DeployStep.Args = map[string]any{}
	emptyMaps.ServiceStep = nil
	utc := fillNode()
	utc.CreatedAt, utc.UpdatedAt = time.Unix(1700000000, 123456789).UTC(), time.Time{}
	for name, n := range map[string]*fsm.Node{"full": full, "empty": empty, "empty maps": emptyMaps, "utc": utc} {
		d, ok := cloneDirect(n)
		if !ok {
			if _, off := time.Now().Zone(); off == 0 {
				t.Errorf("%s: not copied directly", name)
			}
			continue
		}
		if j := cloneJSON(n); !reflect.DeepEqual(d, j) {
			t.Errorf("%s: direct copy\n%#v\nJSON copy\n%#v", name, d, j)
		}
		// The copy is deep: changing it leaves the node as it was.
		if len(n.Extra) > 0 {
			d.Extra["a"] = "changed"
			if n.Extra["a"] == "changed" {
				t.Errorf("%s: the copy shares its maps with the node", name)
			}
		}
	}
}

func TestCloneDirectRefusesWhatJSONChanges(t *testing.T) {
	for name, change := range map[string]func(n *fsm.Node){
		"int in a map":      func(n *fsm.Node) { n.Extra["i"] = 1 },
		"[]string in a map": func(n *fsm.Node) { n.Properties["l"] = []string{"a"} },
		"bad UTF-8 string":  func(n *fsm.Node) { n.Description = "\xff" },
		"bad UTF-8 key":     func(n *fsm.Node) { n.Extra["\xff"] = "x" },
		"operation":         func(n *fsm.Node) { n.Op = &fsm.Operation{} },
		"pending":           func(n *fsm.Node) { n.Pending = &fsm.Command{} },
	} {
		n := fillNode()
		change(n)
		if _, ok := cloneDirect(n); ok {
			t.Errorf("%s: copied directly", name)
		}
		if c := clone(n); c.UUID != n.UUID {
			t.Errorf("%s: clone lost the node", name)
		}
	}
}

// TestQuietKnowsEveryOutputField: quiet must look at every field of
// fsm.Output (a new one fails this test until quiet checks it).
func TestQuietKnowsEveryOutputField(t *testing.T) {
	typ := reflect.TypeFor[fsm.Output]()
	if typ.NumField() != 10 {
		t.Errorf("fsm.Output has %d fields, quiet checks 10: make quiet check the new one", typ.NumField())
	}
	for i := range typ.NumField() {
		var o fsm.Output
		f := reflect.ValueOf(&o).Elem().Field(i)
		switch f.Kind() {
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Int:
			f.SetInt(1)
		case reflect.String:
			f.SetString("x")
		case reflect.Slice:
			f.Set(reflect.MakeSlice(f.Type(), 1, 1))
		case reflect.Map:
			f.Set(reflect.MakeMap(f.Type()))
		}
		if quiet(&o) {
			t.Errorf("an output with %s set is quiet", typ.Field(i).Name)
		}
	}
	if !quiet(&fsm.Output{}) {
		t.Error("the empty output is not quiet")
	}
}
