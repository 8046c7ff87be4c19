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
	// raid.apply_configuration is the ramdisk's (raid_interface agent,
	// the default) or the BMC's (redfish): both run; no-raid refuses it.
	raid := map[string]any{"interface": "raid", "step": "apply_configuration",
		"args": map[string]any{"raid_config": map[string]any{"logical_disks": []any{}}}}
	for _, iface := range []string{"", "redfish"} {
		n.RaidInterface = iface
		if r := m.CheckVerb(n, VerbRequest{Verb: Clean, CleanSteps: []map[string]any{{"interface": "deploy", "step": "erase_devices_metadata"}, raid}}); r != nil {
			t.Fatalf("raid_interface %q: clean with raid.apply_configuration refused: %s", iface, r.Msg)
		}
	}
	n.RaidInterface = "no-raid"
	if rr := m.CheckVerb(n, VerbRequest{Verb: Clean, CleanSteps: []map[string]any{{"interface": "deploy", "step": "erase_devices_metadata"}, raid}}); rr == nil || rr.Reason != Invalid || !strings.Contains(rr.Msg, "clean step 2 (raid.apply_configuration)") {
		t.Fatalf("no-raid: clean with raid.apply_configuration: %+v", rr)
	}
	n.ProvisionState = Available
	n.InstanceInfo = map[string]any{"image_source": "http://127.0.0.1:9/img.raw", "image_checksum": strings.Repeat("a", 64)}
	raid["priority"] = 50.0
	if rr := m.CheckVerb(n, VerbRequest{Verb: Deploy, DeploySteps: []map[string]any{raid}}); rr == nil || rr.Reason != Invalid || !strings.Contains(rr.Msg, "does not support this deploy step") {
		t.Fatalf("no-raid: deploy with raid.apply_configuration: %+v", rr)
	}
	n.RaidInterface = ""
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
