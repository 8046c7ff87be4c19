package engine

import (
	"testing"

	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/protocol"
)

// TestFirmwareAndBIOSKept: the firmware and BIOS a BMC result carries
// are kept as Ironic's caches keep them: initial_version the first seen,
// a changed version the last flashed, BIOS values as strings, a setting's
// created_at kept and updated_at set when its value changed, settings no
// longer reported dropped. A result that does not answer the node's
// pending command (stale, resent) changes nothing; deleting the node
// deletes them.
func TestFirmwareAndBIOSKept(t *testing.T) {
	e, rec := newEngine(t, Config{})
	a, _ := e.CreateNode(NodeSpec{Name: "a", Driver: "fake"})
	if err := e.Verb("a", fsm.VerbRequest{Verb: fsm.Manage}); err != nil {
		t.Fatal(err)
	}
	cmd, seen := rec.next(t, a.UUID, 0)
	fw := func(bmc string) []any {
		return []any{map[string]any{"component": "bios", "current_version": "1.0.0"}, map[string]any{"component": "bmc", "current_version": bmc}}
	}
	result := func(cmdID string, data map[string]any) {
		e.HandleMessage(protocol.BMCEvtTopic("s1"), mustJSON(&protocol.Message{Kind: protocol.KindResult, ID: "r-" + cmdID, Node: a.UUID, CommandID: cmdID, OK: true, Data: data}))
	}
	result(cmd.ID, map[string]any{
		protocol.DataFirmware: fw("1.0"),
		protocol.DataBIOS: []any{map[string]any{"name": "NumLock", "value": "On", "read_only": true}, map[string]any{"name": "Turbo", "value": true},
			map[string]any{"name": "BootDelaySeconds", "value": 5.0, "lower_bound": 0.0, "upper_bound": 30.0}},
	})
	waitState(t, e, a.UUID, fsm.Manageable)
	comps, _, err := e.Firmware("a")
	if err != nil || len(comps) != 2 || comps[1].Component != "bmc" || comps[1].InitialVersion != "1.0" || comps[1].CurrentVersion != "1.0" || comps[1].LastVersionFlashed != nil {
		t.Fatalf("firmware after manage: %+v %v", comps, err)
	}
	bios, _, _ := e.BIOS("a")
	if len(bios) != 3 || bios[0].Name != "BootDelaySeconds" || *bios[0].Value != "5" || *bios[0].UpperBound != 30 || *bios[1].Value != "On" || !*bios[1].ReadOnly || *bios[2].Value != "True" {
		t.Fatalf("BIOS after manage: %+v", bios)
	}
	created := bios[1].CreatedAt

	steps := []map[string]any{{"interface": "management", "step": "fake_reset_bmc"}}
	if err := e.Verb("a", fsm.VerbRequest{Verb: fsm.Clean, CleanSteps: steps}); err != nil {
		t.Fatal(err)
	}
	cmd, _ = rec.next(t, a.UUID, seen)
	result("stale", map[string]any{protocol.DataFirmware: fw("9.9")})
	if err := e.do(func(*tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if comps, _, _ := e.Firmware("a"); comps[1].CurrentVersion != "1.0" {
		t.Fatalf("a stale result's firmware was kept: %+v", comps)
	}
	result(cmd.ID, map[string]any{
		protocol.DataFirmware: fw("2.0"),
		protocol.DataBIOS:     []any{map[string]any{"name": "NumLock", "value": "On"}, map[string]any{"name": "BootDelaySeconds", "value": 7.0}},
	})
	waitState(t, e, a.UUID, fsm.Manageable)
	comps, _, _ = e.Firmware("a")
	if b := comps[1]; b.InitialVersion != "1.0" || b.CurrentVersion != "2.0" || b.LastVersionFlashed == nil || *b.LastVersionFlashed != "2.0" || b.UpdatedAt == nil {
		t.Fatalf("bmc after the update: %+v", b)
	}
	if comps[0].LastVersionFlashed != nil || comps[0].UpdatedAt != nil {
		t.Fatalf("bios firmware unchanged but marked: %+v", comps[0])
	}
	bios, _, _ = e.BIOS("a")
	if len(bios) != 2 || *bios[0].Value != "7" || bios[0].UpdatedAt == nil || !bios[1].CreatedAt.Equal(created) || bios[1].UpdatedAt != nil {
		t.Fatalf("BIOS after the second reading: %+v", bios)
	}

	if err := e.DeleteNode("a"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"fw/", "bios/"} {
		if _, found, _ := e.st.Get(id + a.UUID); found {
			t.Fatalf("%s record left after the node was deleted", id)
		}
	}
}
