package engine

import (
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/bmedge/bmedge/coordinator/fsm"
)

// TestClashingPrioritiesRefusedAtStart: clean step priority overrides
// that give two steps of one interface the same priority stop the
// coordinator at start with an error naming both, as the cleaning seed
// says (fsm.Config.Check), instead of failing the first cleaning.
func TestClashingPrioritiesRefusedAtStart(t *testing.T) {
	_, err := New(Config{DataDir: t.TempDir(), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Machine: fsm.Config{PriorityOverrides: map[string]int{"deploy.erase_devices": 50, "deploy.erase_devices_metadata": 50}}})
	if err == nil || !strings.Contains(err.Error(), "erase_devices_metadata") || !strings.Contains(err.Error(), "erase_devices") {
		t.Fatalf("engine.New with two deploy steps at priority 50: %v; want an error naming both", err)
	}
}
