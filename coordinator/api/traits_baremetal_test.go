package api_test

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestBaremetalCLITraitsTemplates drives node traits and deploy templates
// with the Debian `baremetal` CLI (python3-ironicclient 5.0.1, which has
// no runbook commands): node add trait, node trait list, node remove
// trait; deploy template create, list, show, set, unset, delete. What it
// changes is read back through the API.
func TestBaremetalCLITraitsTemplates(t *testing.T) {
	if _, err := os.Stat(baremetalPath); err != nil {
		if os.Getenv("BM_REQUIRE_ALL") == "1" {
			t.Fatalf("%s is missing (package python3-ironicclient); run scripts/install-test-deps.sh", baremetalPath)
		}
		t.Skipf("%s is missing: install Debian's python3-ironicclient (scripts/install-test-deps.sh, which make test runs)", baremetalPath)
	}
	c := testrig.Coordinator(t, testrig.Options{})
	testrig.Site(t, c, "site1", agent.SimOptions{Nodes: 1})
	api := testrig.NewClient(t, c)
	bm := newBMCLI(t, "http://"+c.APIAddr)
	id := api.CreateNode("bt1", "site1", nil)
	apiTraits := func() []string {
		t.Helper()
		var resp struct {
			Traits []string `json:"traits"`
		}
		if code := api.Do("GET", "/v1/nodes/"+id+"/traits", nil, &resp); code != 200 {
			t.Errorf("GET traits: %d", code)
		}
		return resp.Traits
	}

	// The node's traits and the deploy templates, side by side (each
	// baremetal command takes seconds to start).
	parallel(t, func() {
		if _, ok := bm.ok("node", "add", "trait", "bt1", "CUSTOM_BIOS_TUNED", "HW_CPU_X86_AVX2"); !ok {
			return
		}
		if got := apiTraits(); !slices.Equal(got, []string{"CUSTOM_BIOS_TUNED", "HW_CPU_X86_AVX2"}) {
			t.Errorf("after node add trait, the API shows %v", got)
			return
		}
		var listed []map[string]any
		if !bm.json(&listed, "node", "trait", "list", "bt1", "-f", "json") {
			return
		}
		if len(listed) != 2 || listed[0]["Traits"] != "CUSTOM_BIOS_TUNED" {
			t.Errorf("node trait list printed %v", listed)
			return
		}
		if r := bm.run("node", "add", "trait", "bt1", "not_a_trait"); r.code == 0 || !strings.Contains(r.stderr, "CUSTOM_") {
			t.Errorf("a bad trait: exit %d, stderr %q", r.code, r.stderr)
			return
		}
		if _, ok := bm.ok("node", "remove", "trait", "bt1", "HW_CPU_X86_AVX2"); !ok {
			return
		}
		if got := apiTraits(); !slices.Equal(got, []string{"CUSTOM_BIOS_TUNED"}) {
			t.Errorf("after node remove trait: %v", got)
			return
		}
	}, func() {
		steps := `[{"interface": "bios", "step": "apply_configuration", "args": {"settings": [{"name": "ProcTurboMode", "value": "Disabled"}]}, "priority": 150}]`
		var created map[string]any
		if !bm.json(&created, "deploy", "template", "create", "CUSTOM_BIOS_TUNED", "--steps", steps, "--extra", "team=hpc", "-f", "json") {
			return
		}
		if created["name"] != "CUSTOM_BIOS_TUNED" || created["uuid"] == nil {
			t.Errorf("deploy template create printed %v", created)
			return
		}
		var listed []map[string]any
		if !bm.json(&listed, "deploy", "template", "list", "-f", "json") {
			return
		}
		if len(listed) != 1 || listed[0]["Name"] != "CUSTOM_BIOS_TUNED" {
			t.Errorf("deploy template list printed %v", listed)
			return
		}
		if _, ok := bm.ok("deploy", "template", "set", "CUSTOM_BIOS_TUNED", "--extra", "owner=ops"); !ok {
			return
		}
		if _, ok := bm.ok("deploy", "template", "unset", "CUSTOM_BIOS_TUNED", "--extra", "team"); !ok {
			return
		}
		var shown map[string]any
		if !bm.json(&shown, "deploy", "template", "show", "CUSTOM_BIOS_TUNED", "-f", "json") {
			return
		}
		if ex, _ := shown["extra"].(map[string]any); ex["owner"] != "ops" || ex["team"] != nil || !strings.Contains(fmtJSON(shown["steps"]), "ProcTurboMode") {
			t.Errorf("deploy template show printed %v", shown)
			return
		}
		// (A second template of the name is 409, which ironicclient retries
		// for 10 s as it retries a locked node: TestDeployTemplates checks it
		// through curl.)
		if _, ok := bm.ok("deploy", "template", "delete", "CUSTOM_BIOS_TUNED"); !ok {
			return
		}
	})
	if code := api.Do("GET", "/v1/deploy_templates/CUSTOM_BIOS_TUNED", nil, nil); code != 404 {
		t.Fatalf("deleted template: GET %d", code)
	}
}

func fmtJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
