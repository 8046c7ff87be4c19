package drivers

import (
	"strings"
	"testing"
)

func TestSortPriorityThenInterface(t *testing.T) {
	steps := []Step{
		{Interface: "raid", Step: "r", Priority: 10},
		{Interface: "deploy", Step: "d", Priority: 10},
		{Interface: "vendor", Step: "v", Priority: 10},
		{Interface: "bios", Step: "b", Priority: 99},
		{Interface: "power", Step: "p", Priority: 10},
	}
	Sort(steps)
	var got []string
	for _, s := range steps {
		got = append(got, s.Step)
	}
	if strings.Join(got, "") != "bvpdr" {
		t.Fatalf("order %v", got)
	}
}

func TestCheckSet(t *testing.T) {
	if err := CheckSet([]Step{{Interface: "deploy", Step: "a", Priority: 10}, {Interface: "deploy", Step: "b", Priority: 10}}); err == nil ||
		!strings.Contains(err.Error(), "share priority 10") {
		t.Fatalf("duplicate priority: %v", err)
	}
	if err := CheckSet([]Step{{Interface: "deploy", Step: "a", Priority: 0}, {Interface: "deploy", Step: "b", Priority: 0}}); err != nil {
		t.Fatalf("priority 0 twice is allowed: %v", err)
	}
	if err := CheckSet([]Step{{Interface: "deploy", Step: "a", Priority: 10}, {Interface: "bios", Step: "b", Priority: 10}}); err != nil {
		t.Fatalf("same priority, other interface: %v", err)
	}
	if err := CheckSet([]Step{{Interface: "disk", Step: "a"}}); err == nil {
		t.Fatal("unknown interface accepted")
	}
	if _, err := NewRegistry(Declaration{Name: "bad", CleanSteps: []Step{{Interface: "bios", Step: "x", Priority: 5}, {Interface: "bios", Step: "y", Priority: 5}}}); err == nil {
		t.Fatal("registry accepted a driver with clashing priorities")
	}
	if _, err := NewRegistry(Builtin()...); err != nil {
		t.Fatal(err)
	}
}

func TestCheckArgs(t *testing.T) {
	d := Step{Interface: "bios", Step: "apply", ArgsInfo: map[string]ArgInfo{"settings": {Required: true}, "reset": {}}}
	if err := CheckArgs(d, map[string]any{}); err == nil || !strings.Contains(err.Error(), `"settings"`) {
		t.Fatalf("missing required: %v", err)
	}
	if err := CheckArgs(d, map[string]any{"settings": 1, "colour": 2}); err == nil || !strings.Contains(err.Error(), `"colour"`) {
		t.Fatalf("unknown arg: %v", err)
	}
	if err := CheckArgs(d, map[string]any{"settings": 1}); err != nil {
		t.Fatal(err)
	}
}
