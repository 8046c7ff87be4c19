package agent

import (
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/bmedge/bmedge/drivers"
)

// TestBuildersCoverRegistry: the agent builds exactly the drivers the
// registry declares (drivers.Builtin): a driver added there without a
// builder here, or a builder for no declared driver, fails.
func TestBuildersCoverRegistry(t *testing.T) {
	a := New(Config{Site: "s1", Log: slog.New(slog.DiscardHandler)})
	reg, err := drivers.NewRegistry(drivers.Builtin()...)
	if err != nil {
		t.Fatal(err)
	}
	var built []string
	for name := range a.builders() {
		built = append(built, name)
	}
	slices.Sort(built)
	if want := reg.Names(); !slices.Equal(built, want) {
		t.Fatalf("the agent builds %v, the registry declares %v", built, want)
	}
	// An alias of the registry reaches its driver's builder.
	if _, err := a.bmcs.Get("n1", "fake-hardware", map[string]any{}); err == nil {
		t.Fatal("a fake node was built with no simulated node free (Sim.Nodes 0)")
	} else if want := "simulates 0 nodes"; !contains(err.Error(), want) {
		t.Fatalf("fake-hardware: %v, want the fake builder's refusal (%q)", err, want)
	}
	if _, err := a.bmcs.Get("n2", "no-such", map[string]any{}); err == nil || !contains(err.Error(), "fake, ipmi, qemu-dev, redfish") {
		t.Fatalf("an unknown driver: %v, want a refusal naming the drivers this agent knows", err)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
