package fsm

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/bmedge/bmedge/drivers"
)

// In-band steps get their declared arguments from driver_info when the
// clean step does not set them (IPA's agent_burnin_*), never anything
// else from driver_info; verify_hardware gets the properties it checks.
func TestInbandArgs(t *testing.T) {
	n := &Node{
		DriverInfo: map[string]any{"agent_burnin_cpu_timeout": "60", "agent_burnin_cpu_cpu": 2.0, "redfish_password": "secret", "agent_burnin_vm_timeout": 5.0},
		Properties: map[string]any{"cpus": 4.0, "memory_mb": 1024.0, "capabilities": "boot_mode:uefi", "root_device": map[string]any{"serial": "D0"}},
	}
	// inbandArgs is the machine's one filler of a step's arguments.
	inbandArgs := func(n *Node, s *StepRun, args map[string]any) map[string]any {
		s.Args, s.InBand = args, true
		got, err := New(Config{}).stepArgs(n, s)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	got := inbandArgs(n, &StepRun{Interface: "deploy", Step: "burnin_cpu"}, map[string]any{"agent_burnin_cpu_cpu": 1.0})
	want := map[string]any{"agent_burnin_cpu_timeout": "60", "agent_burnin_cpu_cpu": 1.0}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("burnin_cpu args = %v, want %v", got, want)
	}
	got = inbandArgs(n, &StepRun{Interface: "deploy", Step: "verify_hardware"}, nil)
	want = map[string]any{drivers.ArgNodeProperties: map[string]any{"cpus": 4.0, "memory_mb": 1024.0, "root_device": map[string]any{"serial": "D0"}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("verify_hardware args = %v, want %v", got, want)
	}
	if got := inbandArgs(n, &StepRun{Interface: "deploy", Step: "erase_devices_metadata"}, nil); got != nil {
		t.Fatalf("erase_devices_metadata args = %v, want none", got)
	}
}

// The steps a ramdisk offered carry the standard declaration's argsinfo,
// so that a manual clean's arguments are checked against it.
func TestWithStandardArgs(t *testing.T) {
	offered := []drivers.Step{{Interface: "deploy", Step: "burnin_disk", RequiresRamdisk: true}, {Interface: "deploy", Step: "vendor_thing", RequiresRamdisk: true}}
	got := withStandardArgs(offered)
	if _, ok := got[0].ArgsInfo["agent_burnin_fio_disk_runtime"]; !ok || got[1].ArgsInfo != nil || offered[0].ArgsInfo != nil {
		t.Fatalf("argsinfo %v / %v (offered changed: %v)", got[0].ArgsInfo, got[1].ArgsInfo, offered[0].ArgsInfo)
	}
}

// Service never runs the destructive in-band steps.
func TestServiceRefusesDestructiveSteps(t *testing.T) {
	for _, step := range []string{"burnin_disk", "erase_devices_express"} {
		err := CheckServiceSteps("n1", []map[string]any{{"interface": "deploy", "step": step}})
		if err == nil || !strings.Contains(err.Error(), "is not allowed as a service step") {
			t.Errorf("service with %s: %v", step, err)
		}
	}
	if err := CheckServiceSteps("n1", []map[string]any{{"interface": "deploy", "step": "burnin_cpu"}}); err != nil {
		t.Errorf("service with burnin_cpu: %v", err)
	}
}

// TestStepArgsFromDeclarations: a step's arguments come from what its
// declaration names (drivers.Step.ArgsFrom), in band or out of band: the
// BMC's raid.create_configuration gets the node's target_raid_config, the
// rescue step only the password's hash, and a step that names no source
// its own args, unchanged.
func TestStepArgsFromDeclarations(t *testing.T) {
	m := testMachine(t)
	raid := map[string]any{"logical_disks": []any{map[string]any{"size_gb": 100.0, "raid_level": "1"}}}
	n := &Node{Driver: "redfish", TargetRaidConfig: raid, DriverInfo: map[string]any{"create_root_volume": false},
		Op: &Operation{HashedRescuePassword: "$6$x$y"}}
	got, err := m.stepArgs(n, &StepRun{Interface: "raid", Step: "create_configuration", Args: map[string]any{"delete_existing": true}})
	if err != nil || !reflect.DeepEqual(got, map[string]any{"delete_existing": true, drivers.ArgTargetRaidConfig: raid}) {
		t.Fatalf("out-of-band raid.create_configuration args %v (%v): want its own and target_raid_config, no driver_info", got, err)
	}
	got, _ = m.stepArgs(n, &StepRun{Interface: "rescue", Step: "finalize_rescue", InBand: true, Args: map[string]any{"x": 1.0}})
	if !reflect.DeepEqual(got, map[string]any{"rescue_password": "$6$x$y", "hashed": true}) {
		t.Fatalf("finalize_rescue args %v", got)
	}
	own := map[string]any{"settings": []any{}}
	got, _ = m.stepArgs(n, &StepRun{Interface: "bios", Step: "apply_configuration", Args: own})
	if !reflect.DeepEqual(got, own) {
		t.Fatalf("bios.apply_configuration args %v, want its own", got)
	}
	for _, s := range append(drivers.InbandCleanSteps(), drivers.InbandDeploySteps()...) {
		for _, src := range s.ArgsFrom {
			if !slices.Contains(drivers.ArgSources, src) {
				t.Errorf("step %s names source %q, which stepArgs does not fill", s.Name(), src)
			}
		}
	}
}
