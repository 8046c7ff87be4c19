package api_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/coordinator/cli"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestCatalogCLI drives the coordinator's own CLI against a coordinator
// with a simulated site: node trait add/list/remove, deploy-template
// create/list/show/set/delete, runbook create/list/show/set/delete and
// node clean --runbook --wait (which ends in manageable having run the
// runbook's step), with the usage errors that send no request.
func TestCatalogCLI(t *testing.T) {
	c := testrig.Coordinator(t, testrig.Options{})
	testrig.Site(t, c, "site1", agent.SimOptions{Nodes: 1, StepDuration: 20 * time.Millisecond})
	api := testrig.NewClient(t, c)
	id := api.CreateNode("cl1", "site1", nil)
	api.MustVerb(id, "manage", nil)
	api.WaitRest(id, 60*time.Second)
	url := "http://" + c.APIAddr
	run := func(stdin string, args ...string) (int, string, string) {
		t.Helper()
		var out, errOut bytes.Buffer
		code := cli.Main(append([]string{"--url", url}, args...), strings.NewReader(stdin), &out, &errOut)
		t.Logf("coordinator %s: exit %d\n%s%s", strings.Join(args, " "), code, out.String(), errOut.String())
		return code, out.String(), errOut.String()
	}
	ok := func(args ...string) string {
		t.Helper()
		code, out, errOut := run("", args...)
		if code != 0 {
			t.Fatalf("coordinator %s: exit %d: %s", strings.Join(args, " "), code, errOut)
		}
		return out
	}

	// Traits.
	ok("node", "trait", "add", "cl1", "CUSTOM_BMC_RESET", "CUSTOM_BIOS_TUNED")
	if out := ok("node", "trait", "list", "cl1", "-f", "value"); out != "CUSTOM_BIOS_TUNED\nCUSTOM_BMC_RESET\n" {
		t.Fatalf("node trait list -f value: %q", out)
	}
	ok("node", "trait", "remove", "cl1", "CUSTOM_BIOS_TUNED")
	if code, _, errOut := run("", "node", "trait", "remove", "cl1", "CUSTOM_BIOS_TUNED"); code != 1 || !strings.Contains(errOut, "doesn't have a trait") {
		t.Fatalf("removing a trait the node lacks: exit %d, %q", code, errOut)
	}
	if code, _, errOut := run("", "node", "trait", "remove", "cl1"); code != 2 || !strings.Contains(errOut, "either TRAIT... or --all") {
		t.Fatalf("node trait remove without traits: exit %d, %q", code, errOut)
	}

	// Deploy templates, steps as JSON text and from standard input.
	steps := `[{"interface": "bios", "step": "apply_configuration", "args": {"settings": [{"name": "ProcTurboMode", "value": "Disabled"}]}, "priority": 150}]`
	var tmpl map[string]any
	if err := json.Unmarshal([]byte(ok("deploy-template", "create", "CUSTOM_BIOS_TUNED", "--steps", steps, "--extra", "team=hpc", "-f", "json")), &tmpl); err != nil || tmpl["name"] != "CUSTOM_BIOS_TUNED" {
		t.Fatalf("deploy-template create -f json: %v %v", tmpl, err)
	}
	if out := ok("deploy-template", "list"); !strings.Contains(out, "CUSTOM_BIOS_TUNED") || !strings.Contains(out, tmpl["uuid"].(string)) {
		t.Fatalf("deploy-template list: %s", out)
	}
	if code, _, errOut := run(strings.Replace(steps, "150", "160", 1), "deploy-template", "set", "CUSTOM_BIOS_TUNED", "--steps", "-", "--remove-extra", "team"); code != 0 {
		t.Fatalf("deploy-template set --steps -: %s", errOut)
	}
	if out := ok("deploy-template", "show", "CUSTOM_BIOS_TUNED", "-f", "json"); !strings.Contains(out, `"priority": 160`) || strings.Contains(out, "hpc") {
		t.Fatalf("deploy-template show after set: %s", out)
	}
	if code, _, errOut := run("", "deploy-template", "create", "CUSTOM_X"); code != 2 || !strings.Contains(errOut, "needs --steps") {
		t.Fatalf("deploy-template create without steps: exit %d, %q", code, errOut)
	}
	ok("deploy-template", "delete", "CUSTOM_BIOS_TUNED")

	// Runbooks, and a clean by runbook on the node with the trait.
	ok("runbook", "create", "CUSTOM_BMC_RESET", "--disable-ramdisk", "--steps", `[{"interface": "management", "step": "fake_reset_bmc", "args": {"delay": 0.01}, "order": 1}]`)
	if out := ok("runbook", "list", "--long", "-f", "json"); !strings.Contains(out, `"disable_ramdisk": true`) {
		t.Fatalf("runbook list --long: %s", out)
	}
	ok("runbook", "set", "CUSTOM_BMC_RESET", "--owner", "proj1")
	if out := ok("runbook", "show", "CUSTOM_BMC_RESET", "-c", "owner", "-f", "value"); strings.TrimSpace(out) != "proj1" {
		t.Fatalf("runbook show -c owner: %q", out)
	}
	if code, _, errOut := run("", "node", "clean", "cl1", "--runbook", "CUSTOM_BMC_RESET", "--clean-steps", "x.json"); code != 2 || !strings.Contains(errOut, "not both") {
		t.Fatalf("clean with both: exit %d, %q", code, errOut)
	}
	if out := ok("node", "clean", "cl1", "--runbook", "CUSTOM_BMC_RESET", "--wait"); !strings.Contains(out, "manageable") {
		t.Fatalf("node clean --runbook --wait: %s", out)
	}
	var hist struct {
		History []map[string]any `json:"history"`
	}
	api.Do("GET", "/v1/nodes/"+id+"/history?detail=True", nil, &hist)
	if b, _ := json.Marshal(hist); !strings.Contains(string(b), "management.fake_reset_bmc done") {
		t.Fatalf("the runbook's step is not in the history: %s", b)
	}
	ok("runbook", "delete", "CUSTOM_BMC_RESET")
}
