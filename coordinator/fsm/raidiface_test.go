package fsm

import (
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/protocol"
)

// TestRAIDInterfaceRoutesSteps: a redfish node's raid_interface chooses
// its RAID steps. With redfish, raid.create_configuration is the
// driver's out-of-band step: the manual clean sends it to the edge agent
// at once (no ramdisk boot) with the node's target_raid_config, and the
// raid_config the result reports is stored; the steps view shows it out
// of band. With agent (the default) the same name is the ramdisk's
// in-band step. With no-raid every RAID step is refused at validation.
func TestRAIDInterfaceRoutesSteps(t *testing.T) {
	m := testMachine(t)
	now := time.Unix(1000, 0)
	target := map[string]any{"logical_disks": []any{map[string]any{"size_gb": 40.0, "raid_level": "1", "is_root_volume": true}}}
	n := &Node{UUID: "u1", Driver: "redfish", Site: "s1", ProvisionState: Manageable, RaidInterface: "redfish",
		DriverInfo: map[string]any{"redfish_address": "http://127.0.0.1:9"}, TargetRaidConfig: target,
		CachedCleanSteps: drivers.InbandCleanSteps(), StepsCachedAt: now}
	create := []map[string]any{{"interface": "raid", "step": "create_configuration"}}

	where := func() bool {
		t.Helper()
		steps, _, err := m.SortedStepsView(n, 0)
		if err != nil {
			t.Fatal(err)
		}
		found := 0
		var inband bool
		for _, s := range steps {
			if s.Name() == "raid.create_configuration" {
				found++
				inband = s.RequiresRamdisk
			}
		}
		if found != 1 {
			t.Fatalf("raid_interface %q: the steps view lists raid.create_configuration %d times", n.RaidInterface, found)
		}
		return inband
	}
	if where() {
		t.Fatal("raid_interface redfish: raid.create_configuration is listed in band")
	}
	applyInband := func() bool {
		t.Helper()
		known, err := m.knownDeploySteps(n)
		if err != nil {
			t.Fatal(err)
		}
		found, inband := 0, false
		for _, s := range known {
			if s.Name() == "raid.apply_configuration" {
				found++
				inband = s.RequiresRamdisk
			}
		}
		if found != 1 {
			t.Fatalf("raid_interface %q: the deploy steps have raid.apply_configuration %d times", n.RaidInterface, found)
		}
		return inband
	}
	if applyInband() {
		t.Fatal("raid_interface redfish: the deploy step raid.apply_configuration is in band")
	}
	out, r := m.Verb(n, VerbRequest{Verb: Clean, CleanSteps: create}, now)
	if r != nil {
		t.Fatalf("clean refused: %s", r.Msg)
	}
	if len(out.Send) != 1 || out.Send[0].Msg.Action != protocol.ActionOOBStep || out.Send[0].Msg.Step.Step != "create_configuration" {
		t.Fatalf("clean sent %+v; want the out-of-band raid.create_configuration first (no ramdisk boot)", out.Send)
	}
	cmd := out.Send[0].Msg
	if _, ok := cmd.Step.Args[drivers.ArgTargetRaidConfig].(map[string]any); !ok {
		t.Fatalf("the step's args %v lack the node's target_raid_config", cmd.Step.Args)
	}
	if n.CleanStep == nil || n.CleanStep.Args[drivers.ArgTargetRaidConfig] != nil {
		t.Fatalf("clean_step %+v shows target_raid_config", n.CleanStep)
	}
	rc := map[string]any{"logical_disks": []any{map[string]any{"id": "1", "raid_level": "1", "size_gb": 40.0, "controller": "RAID.Integrated.1", "is_root_volume": true}}}
	m.Result(n, &protocol.Message{Kind: protocol.KindResult, CommandID: cmd.ID, OK: true, Data: map[string]any{"raid_config": rc}}, now.Add(time.Second))
	if n.ProvisionState != Manageable || n.LastError != "" {
		t.Fatalf("after the step: %s, last_error %q", n.ProvisionState, n.LastError)
	}
	if lds, _ := n.RaidConfig["logical_disks"].([]any); len(lds) != 1 || n.RaidConfig["last_updated"] == nil || n.Properties["local_gb"] != int64(40) {
		t.Fatalf("raid_config %v, properties %v; want the reported volume stored and local_gb 40", n.RaidConfig, n.Properties)
	}

	// A raid_config over the bound is not stored, and the history says so.
	big := make([]any, drivers.MaxRAIDVolumes+1)
	for i := range big {
		big[i] = map[string]any{"raid_level": "0", "size_gb": 1.0}
	}
	out, r = m.Verb(n, VerbRequest{Verb: Clean, CleanSteps: create}, now)
	if r != nil {
		t.Fatal(r.Msg)
	}
	res := m.Result(n, &protocol.Message{Kind: protocol.KindResult, CommandID: out.Send[0].Msg.ID, OK: true,
		Data: map[string]any{"raid_config": map[string]any{"logical_disks": big}}}, now.Add(2*time.Second))
	if lds, _ := n.RaidConfig["logical_disks"].([]any); len(lds) != 1 || !strings.Contains(historyText(res), "raid_config not stored") {
		t.Fatalf("an oversized raid_config: stored %d logical disks, history %q", len(lds), historyText(res))
	}

	// Deleting empties it.
	out, r = m.Verb(n, VerbRequest{Verb: Clean, CleanSteps: []map[string]any{{"interface": "raid", "step": "delete_configuration"}}}, now)
	if r != nil || len(out.Send) != 1 || out.Send[0].Msg.Action != protocol.ActionOOBStep {
		t.Fatalf("delete_configuration: %v %+v", r, out.Send)
	}
	m.Result(n, &protocol.Message{Kind: protocol.KindResult, CommandID: out.Send[0].Msg.ID, OK: true, Data: map[string]any{"raid_config": map[string]any{"logical_disks": []any{}}}}, now)
	if len(n.RaidConfig) != 0 {
		t.Fatalf("after delete_configuration raid_config is %v", n.RaidConfig)
	}

	// agent: the ramdisk's step, which boots the ramdisk first.
	n.RaidInterface = ""
	if !where() || !applyInband() {
		t.Fatal("raid_interface agent: raid.create_configuration or the deploy step raid.apply_configuration is out of band")
	}
	out, r = m.Verb(n, VerbRequest{Verb: Clean, CleanSteps: create}, now)
	if r != nil || len(out.Send) != 1 || out.Send[0].Msg.Action != protocol.ActionPower {
		t.Fatalf("agent: clean %v sent %+v; want a power action booting the ramdisk", r, out.Send)
	}
	n.ProvisionState, n.Op, n.Pending, n.Reservation = Manageable, nil, nil, ""

	// no-raid: refused, for clean, service and deploy.
	n.RaidInterface = drivers.RAIDNone
	r = m.CheckVerb(n, VerbRequest{Verb: Clean, CleanSteps: create})
	if r == nil || r.Reason != Invalid || !strings.Contains(r.Msg, "does not support this clean step") || !strings.Contains(r.Msg, "--raid-interface") {
		t.Fatalf("no-raid clean: %+v", r)
	}
	steps, _, _ := m.SortedStepsView(n, 0)
	for _, s := range steps {
		if s.Interface == "raid" {
			t.Fatalf("no-raid: the steps view lists %s", s.Name())
		}
	}
	if v := m.Validate(n)["raid"]; v.Result != nil {
		t.Fatalf("no-raid: validate raid %+v; want unsupported", v)
	}
}

func historyText(o Output) string {
	var b strings.Builder
	for _, h := range o.History {
		b.WriteString(h.Event + "\n")
	}
	return b.String()
}
