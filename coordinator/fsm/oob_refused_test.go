package fsm

import (
	"strings"
	"testing"
)

// TestRedfishStepsRefusedUntilWired: the Redfish driver declares
// raid.apply_configuration (listed as Ironic's), but the edge agent does
// not run it yet, so a clean or deploy naming it is refused at validation
// with a 400 saying so, before anything starts. firmware.update runs at
// the edge: a clean or service naming it is accepted.
func TestRedfishStepsRefusedUntilWired(t *testing.T) {
	m := testMachine(t)
	n := &Node{UUID: "u1", Driver: "redfish", ProvisionState: Manageable, DriverInfo: map[string]any{"redfish_address": "http://127.0.0.1:9"}}
	fw := map[string]any{"interface": "firmware", "step": "update",
		"args": map[string]any{"settings": []any{map[string]any{"component": "bmc", "url": "http://127.0.0.1:9/bmc.bin"}}}}
	if r := m.CheckVerb(n, VerbRequest{Verb: Clean, CleanSteps: []map[string]any{fw}}); r != nil {
		t.Fatalf("clean with firmware.update refused: %+v", r)
	}
	raid := map[string]any{"interface": "raid", "step": "apply_configuration",
		"args": map[string]any{"raid_config": map[string]any{"logical_disks": []any{}}}}
	r := m.CheckVerb(n, VerbRequest{Verb: Clean, CleanSteps: []map[string]any{{"interface": "deploy", "step": "erase_devices_metadata"}, raid}})
	if r == nil || r.Reason != Invalid || !strings.Contains(r.Msg, "clean step 2 (raid.apply_configuration)") {
		t.Fatalf("clean with raid.apply_configuration: %+v", r)
	}
	n.ProvisionState = Available
	n.InstanceInfo = map[string]any{"image_source": "http://127.0.0.1:9/img.raw", "image_checksum": strings.Repeat("a", 64)}
	raid["priority"] = 50.0
	r = m.CheckVerb(n, VerbRequest{Verb: Deploy, DeploySteps: []map[string]any{raid}})
	if r == nil || r.Reason != Invalid || !strings.Contains(r.Msg, "not yet available at the edge") {
		t.Fatalf("deploy with raid.apply_configuration: %+v", r)
	}
	n.ProvisionState = Active
	if r := m.CheckVerb(n, VerbRequest{Verb: Service, ServiceSteps: []map[string]any{fw}}); r != nil {
		t.Fatalf("service with firmware.update refused: %+v", r)
	}
	// The software RAID steps of the ramdisk stay available to redfish nodes.
	n.ProvisionState = Manageable
	if r := m.CheckVerb(n, VerbRequest{Verb: Clean, CleanSteps: []map[string]any{{"interface": "raid", "step": "delete_configuration"}}}); r != nil {
		t.Fatalf("raid.delete_configuration (software RAID) refused: %v", r)
	}
}
