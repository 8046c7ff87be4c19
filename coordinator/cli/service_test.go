package cli

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestNodeService: node service sends the service verb with the steps of
// the file, --wait follows the node back to active and exits 0, a node
// that rests in service failed exits 1 with last_error, and without
// --service-steps the command is a usage error with no request.
func TestNodeService(t *testing.T) {
	steps := `[{"interface": "bios", "step": "apply_configuration", "args": {"settings": [{"name": "ProcTurboMode", "value": "Disabled"}]}}]`
	file := filepath.Join(t.TempDir(), "steps.json")
	if err := os.WriteFile(file, []byte(steps), 0o600); err != nil {
		t.Fatal(err)
	}
	f := &fakeAPI{states: []map[string]any{
		node("servicing", "active", "service_step", map[string]any{"interface": "bios", "step": "apply_configuration"}),
		node("active", ""),
	}}
	f.start(t)
	code, out, errOut := runHere(context.Background(), "node", "service", "n1", "--service-steps", file, "--wait")
	if code != 0 {
		t.Fatalf("exit %d; stdout %q stderr %q", code, out, errOut)
	}
	if !strings.Contains(out, "n1: servicing → active  [bios.apply_configuration]") {
		t.Errorf("--wait does not show the running service step:\n%s", out)
	}
	want := map[string]any{"target": "service", "service_steps": []any{map[string]any{"interface": "bios", "step": "apply_configuration",
		"args": map[string]any{"settings": []any{map[string]any{"name": "ProcTurboMode", "value": "Disabled"}}}}}}
	if len(f.bodies) != 1 || !reflect.DeepEqual(f.bodies[0], want) {
		t.Fatalf("sent %v, want %v", f.bodies, want)
	}

	f2 := &fakeAPI{states: []map[string]any{node("service failed", "active", "last_error", "BIOS setting refused")}}
	f2.start(t)
	code, _, errOut = runHere(context.Background(), "node", "service", "n1", "--service-steps", file, "--wait")
	if code != 1 || !strings.Contains(errOut, "service ended in service failed") || !strings.Contains(errOut, "BIOS setting refused") {
		t.Fatalf("failed service: exit %d, stderr %q", code, errOut)
	}

	noRequests(t)
	code, _, errOut = runHere(context.Background(), "node", "service", "n1")
	if code != 2 || !strings.Contains(errOut, "node service needs --service-steps FILE|-") {
		t.Fatalf("no steps: exit %d, stderr %q", code, errOut)
	}
}
