package drivers

import (
	"os"
	"strings"
	"testing"
)

// TestStepsDocFresh fails when docs/steps.md no longer matches the step
// declarations.
func TestStepsDocFresh(t *testing.T) {
	b, err := os.ReadFile("../docs/steps.md")
	if err != nil {
		t.Fatalf("docs/steps.md: %v; run 'make steps-doc'", err)
	}
	if string(b) != StepsMarkdown(Builtin()) {
		t.Fatal("docs/steps.md is stale: run 'make steps-doc' and commit it")
	}
}

// The catalogue says, for a step, where it runs, its arguments and what
// it needs from the BMC.
func TestStepsDocContents(t *testing.T) {
	md := StepsMarkdown(Builtin())
	for _, want := range []string{
		"| [`deploy.burnin_cpu`](#clean-step-deployburnin_cpu) | 0 | yes | in-band (ramdisk) |",
		"| `agent_burnin_cpu_timeout` | no | seconds to run",
		"### Clean step: `deploy.burnin_network`",
		"| `agent_burnin_fio_network_pairing_timeout` | no | seconds the writer waits",
		"| [`bios.apply_configuration`](#clean-step-biosapply_configuration) | 0 | no | out-of-band (edge agent) | redfish | Redfish Bios with a Settings resource |",
		"### Deploy step: `deploy.write_image`",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("docs/steps.md lacks %q", want)
		}
	}
}
