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

// TestInspectionRuleCLI drives coordinator inspection-rule
// create/list/show/set/delete against a coordinator: conditions from
// text and actions from standard input, the list's columns, a
// sensitive rule's null conditions, the API's 400 as exit 1 with its
// message, usage errors as exit 2 with no request sent; then an
// inspection through the rig applies the rule made here.
func TestInspectionRuleCLI(t *testing.T) {
	c := testrig.Coordinator(t, testrig.Options{})
	testrig.Site(t, c, "site1", agent.SimOptions{Nodes: 1, StepDuration: 20 * time.Millisecond})
	api := testrig.NewClient(t, c)
	url := "http://" + c.APIAddr
	run := func(stdin string, args ...string) (int, string, string) {
		t.Helper()
		var out, errOut bytes.Buffer
		code := cli.Main(append([]string{"--url", url}, args...), strings.NewReader(stdin), &out, &errOut)
		t.Logf("coordinator %s: exit %d\n%s%s", strings.Join(args, " "), code, out.String(), errOut.String())
		return code, out.String(), errOut.String()
	}
	ok := func(stdin string, args ...string) string {
		t.Helper()
		code, out, errOut := run(stdin, args...)
		if code != 0 {
			t.Fatalf("coordinator %s: exit %d: %s", strings.Join(args, " "), code, errOut)
		}
		return out
	}
	var rule map[string]any
	out := ok(`[{"op": "add-trait", "args": {"name": "CUSTOM_CLI_RULE"}}, {"op": "set-attribute", "args": {"path": "/extra/rack", "value": "r{inventory[cpu][count]}"}}]`,
		"inspection-rule", "create", "--priority", "40", "--description", "from the CLI",
		"--conditions", `[{"op": "eq", "args": {"values": ["{inventory[cpu][architecture]}", "x86_64"]}}]`, "--actions", "-", "-f", "json")
	if err := json.Unmarshal([]byte(out), &rule); err != nil || rule["priority"] != float64(40) || rule["description"] != "from the CLI" {
		t.Fatalf("create -f json: %v %v", rule, err)
	}
	id := rule["uuid"].(string)
	if out := ok("", "inspection-rule", "list"); !strings.Contains(out, id) || !strings.Contains(out, "from the CLI") || strings.Contains(out, "CUSTOM_CLI_RULE") {
		t.Fatalf("list: %s", out)
	}
	if out := ok("", "inspection-rule", "list", "--long"); !strings.Contains(out, "CUSTOM_CLI_RULE") {
		t.Fatalf("list --long: %s", out)
	}
	if out := ok("", "inspection-rule", "set", id, "--priority", "41", "--description", ""); !strings.Contains(out, "41") {
		t.Fatalf("set: %s", out)
	}
	if out := ok("", "inspection-rule", "show", id, "-f", "json"); !strings.Contains(out, `"priority": 41`) || !strings.Contains(out, `"description": null`) {
		t.Fatalf("show after set: %s", out)
	}
	sens := ok("", "inspection-rule", "create", "--sensitive", "--actions", `[{"op": "set-attribute", "args": {"path": "/driver_info/ipmi_password", "value": "pw-123"}}]`, "-f", "json")
	if strings.Contains(sens, "pw-123") || !strings.Contains(sens, `"actions": null`) {
		t.Fatalf("sensitive create: %s", sens)
	}
	var s map[string]any
	_ = json.Unmarshal([]byte(sens), &s)
	if code, _, errOut := run("", "inspection-rule", "set", s["uuid"].(string), "--sensitive=false"); code != 1 || !strings.Contains(errOut, "cannot have the sensitive flag unset") {
		t.Fatalf("set --sensitive=false: exit %d %s", code, errOut)
	}
	ok("", "inspection-rule", "delete", s["uuid"].(string))
	if code, _, errOut := run("", "inspection-rule", "create", "--actions", `[{"op": "add-trait", "args": {"name": "lowercase"}}]`); code != 1 || !strings.Contains(errOut, "Invalid trait") {
		t.Fatalf("create with a bad trait: exit %d %s", code, errOut)
	}
	for _, a := range [][]string{{"inspection-rule", "create"}, {"inspection-rule", "set", id}, {"inspection-rule", "delete"},
		{"inspection-rule", "create", "--actions", "-", "--conditions", "-"}} {
		if code, _, errOut := run("", a...); code != 2 || errOut == "" {
			t.Fatalf("coordinator %s: exit %d %s, want a usage error", strings.Join(a, " "), code, errOut)
		}
	}

	n := api.CreateNode("cli1", "site1", nil)
	api.MustVerb(n, "manage", nil)
	api.WaitRest(n, 60*time.Second)
	api.MustVerb(n, "inspect", nil)
	if got := api.WaitRest(n, 60*time.Second); got.State != "manageable" {
		t.Fatalf("inspection: %s %s", got.State, got.LastError)
	}
	if out := ok("", "node", "trait", "list", "cli1", "-f", "value"); out != "CUSTOM_CLI_RULE\n" {
		t.Fatalf("traits after inspection: %q", out)
	}
	if out := ok("", "node", "show", "cli1", "-f", "json"); !strings.Contains(out, `"rack": "r`) {
		t.Fatalf("extra after inspection: %s", out)
	}
	ok("", "inspection-rule", "delete", id)
	if code, _, errOut := run("", "inspection-rule", "show", id); code != 1 || !strings.Contains(errOut, "could not be found") {
		t.Fatalf("show of a deleted rule: exit %d %s", code, errOut)
	}
}
