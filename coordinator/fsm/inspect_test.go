package fsm

import (
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/protocol"
)

// TestOOBInspection: a redfish node with inspect_interface redfish is
// inspected by one out-of-band step at its site (inspect.inspect_hardware,
// with the node's root device hints), no power action and no ramdisk
// boot; its result fills the properties, merges boot_mode into the
// capabilities, hands the engine the inventory, its plugin data and the
// MACs of the enabled interfaces to make ports of, takes the BMC's
// volumes as raid_config (raid_interface redfish), and the node ends
// manageable. A failure ends in
// inspect failed. An inspect_interface the driver lacks is refused, and
// agent (the default) boots the ramdisk as before.
func TestOOBInspection(t *testing.T) {
	t0 := time.Unix(9000, 0)
	node := func(iface string) *Node {
		return &Node{UUID: "u1", Name: "n1", Driver: "redfish", Site: "s1", ProvisionState: Manageable, PowerState: protocol.PowerOff,
			InspectInterface: iface, Properties: map[string]any{"root_device": map[string]any{"size": ">= 100"}, "capabilities": "secure_boot:true,boot_mode:bios"},
			DriverInfo: map[string]any{"redfish_address": "http://127.0.0.1:1"}}
	}
	m := testMachine(t)
	n := node("redfish")
	n.RaidInterface = "redfish" // the BMC's volumes become raid_config
	out, r := m.Verb(n, VerbRequest{Verb: Inspect}, t0)
	if r != nil || len(out.Send) != 1 {
		t.Fatalf("inspect: %v, %d sent", r, len(out.Send))
	}
	cmd := out.Send[0].Msg
	if cmd.Action != protocol.ActionOOBStep || cmd.Step == nil || cmd.Step.Interface != drivers.OOBInspectInterface || cmd.Step.Step != drivers.OOBInspectStep ||
		n.ProvisionState != Inspecting || n.BootNonce != "" || n.TargetPowerState != "" {
		t.Fatalf("inspect sent %s %+v (state %s, boot nonce %q, power target %q); want the out-of-band step and no boot", cmd.Action, cmd.Step, n.ProvisionState, n.BootNonce, n.TargetPowerState)
	}
	if rd, _ := cmd.Step.Args["root_device"].(map[string]any); rd["size"] != ">= 100" {
		t.Fatalf("the step's args %v lack the root device hints", cmd.Step.Args)
	}
	res := &protocol.Message{Kind: protocol.KindResult, ID: "r1", CommandID: cmd.ID, OK: true, Sent: t0.Add(time.Second), Data: map[string]any{
		"inventory": map[string]any{"cpu": map[string]any{"count": 4.0}, "interfaces": []any{map[string]any{"mac_address": "52:54:00:AA:BB:01"}, map[string]any{"mac_address": "bogus"}, map[string]any{"mac_address": "52:54:00:aa:bb:01"},
			map[string]any{"mac_address": "52:54:00:aa:bb:02", "enabled": false}}},
		"raid_config":  map[string]any{"logical_disks": []any{map[string]any{"volume_id": "v1", "raid_level": "1", "size_gb": 446.0}}},
		"properties":   map[string]any{"cpus": 4.0, "memory_mb": 487424.0, "local_gb": 1800.0, "cpu_arch": "x86_64"},
		"capabilities": map[string]any{"boot_mode": "uefi"},
		"plugin_data":  map[string]any{"inspect_interface": "redfish"},
	}}
	out = m.Result(n, res, t0.Add(time.Second))
	if n.ProvisionState != Manageable || n.Locked() || n.InspectionFinishedAt == nil {
		t.Fatalf("after the result: %s, locked %v, finished %v", n.ProvisionState, n.Locked(), n.InspectionFinishedAt)
	}
	if n.Properties["cpus"] != 4.0 || n.Properties["local_gb"] != 1800.0 || n.Properties["capabilities"] != "secure_boot:true,boot_mode:uefi" || n.Properties["root_device"] == nil {
		t.Fatalf("properties %v", n.Properties)
	}
	if out.Inventory == nil || out.PluginData["inspect_interface"] != "redfish" || len(out.Ports) != 1 || out.Ports[0] != "52:54:00:aa:bb:01" {
		t.Fatalf("output: inventory %v, plugin data %v, ports %v", out.Inventory != nil, out.PluginData, out.Ports)
	}
	if lds, _ := n.RaidConfig["logical_disks"].([]any); len(lds) != 1 {
		t.Fatalf("raid_config %v; want the BMC's volume", n.RaidConfig)
	}
	for _, o := range out.Send {
		if o.Msg.Action == protocol.ActionPower {
			t.Fatalf("the inspection sent a power command: %+v", o.Msg)
		}
	}

	// A failure.
	n = node("redfish")
	out, _ = m.Verb(n, VerbRequest{Verb: Inspect}, t0)
	m.Result(n, &protocol.Message{Kind: protocol.KindResult, ID: "r2", CommandID: out.Send[0].Msg.ID, Error: "redfish BMC http://127.0.0.1:1: HTTP 500", Sent: t0.Add(time.Second)}, t0.Add(time.Second))
	if n.ProvisionState != InspectFailed || !strings.Contains(n.LastError, "HTTP 500") {
		t.Fatalf("failed inspection: %s, %q", n.ProvisionState, n.LastError)
	}

	// Refused, and the default.
	n = node("")
	n.Driver = "ipmi"
	n.InspectInterface = "redfish"
	if _, r := m.Verb(n, VerbRequest{Verb: Inspect}, t0); r == nil || !strings.Contains(r.Msg, "inspect-interface agent") {
		t.Fatalf("ipmi node with inspect_interface redfish: %+v", r)
	}
	n = node("")
	out, r = m.Verb(n, VerbRequest{Verb: Inspect}, t0)
	if r != nil || len(out.Send) != 1 || out.Send[0].Msg.Action != protocol.ActionPower || out.Send[0].Msg.Args[protocol.ArgBootDevice] != protocol.BootPXE {
		t.Fatalf("agent inspection: %v, %+v; want the ramdisk boot", r, out.Send)
	}
}

// TestMergeCapabilities: boot_mode replaces the old value in place and
// new keys come after the others.
func TestMergeCapabilities(t *testing.T) {
	for _, c := range []struct {
		cur  string
		set  map[string]any
		want string
	}{
		{"", map[string]any{"boot_mode": "uefi"}, "boot_mode:uefi"},
		{"boot_mode:bios,secure_boot:true", map[string]any{"boot_mode": "uefi"}, "boot_mode:uefi,secure_boot:true"},
		{"cpu_vt:true", map[string]any{"boot_mode": "bios"}, "cpu_vt:true,boot_mode:bios"},
	} {
		if got := mergeCapabilities(c.cur, c.set); got != c.want {
			t.Errorf("merge %q with %v: %q, want %q", c.cur, c.set, got, c.want)
		}
	}
}
