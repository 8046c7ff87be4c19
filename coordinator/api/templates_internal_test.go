package api

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/bmedge/bmedge/coordinator/fsm"
)

// TestStepArgsMasked: a step's secret-looking arguments, at any depth,
// are "******" in clean_step, deploy_step, service_step and the step
// lists of driver_internal_info (stepOf), and the step's own args are
// left as they were.
func TestStepArgsMasked(t *testing.T) {
	args := map[string]any{"bmc_password": "pw1", "settings": []any{map[string]any{"name": "A", "value": "B"}},
		"auth": map[string]any{"token": "tok1", "user": "u"}, "delay": 1.0}
	b, _ := json.Marshal(stepOf(&fsm.StepRun{Interface: "vendor", Step: "x", Args: args}))
	got := string(b)
	if strings.Contains(got, "pw1") || strings.Contains(got, "tok1") || !strings.Contains(got, `"bmc_password":"******"`) ||
		!strings.Contains(got, `"user":"u"`) || !strings.Contains(got, `"delay":1`) || !strings.Contains(got, `"value":"B"`) {
		t.Fatalf("step shown as %s", got)
	}
	if args["bmc_password"] != "pw1" || args["auth"].(map[string]any)["token"] != "tok1" {
		t.Fatalf("masking changed the step's own args: %v", args)
	}
	if b, _ := json.Marshal(stepOf(&fsm.StepRun{Interface: "deploy", Step: "y"})); !strings.Contains(string(b), `"args":{}`) {
		t.Fatalf("a step without args shows %s, want args {}", b)
	}
}
