package cli_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/coordinator/cli"
	"github.com/bmedge/bmedge/drivers/redfish/vbmc"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestNodeFirmwareBIOSAndRAIDInterfaceCLI drives the CLI against a
// coordinator whose edge agent (real mode) manages a redfish node behind
// the virtual Redfish BMC, which reads the BMC's firmware and BIOS:
// node firmware lists the BMC's components with their versions (table
// and -f json), node bios lists a setting the BMC has (with --detail its
// registry fields), node bios NODE SETTING shows one, a setting the node
// lacks exits 1 with the API's message; node set --raid-interface
// redfish changes the node's raid_interface (read back with Go's client),
// node unset --raid-interface resets it to agent, and --raid-interface
// bogus, on set and on create, exits 1 with the API's 400 text.
func TestNodeFirmwareBIOSAndRAIDInterfaceCLI(t *testing.T) {
	b, err := vbmc.New(vbmc.Config{Username: "root", Password: "calvin",
		Systems: []vbmc.SystemConfig{{Machine: vbmc.NewMemoryMachine(vbmc.MemoryOptions{})}}})
	if err != nil {
		t.Fatal(err)
	}
	bmc, err := vbmc.Serve(b, vbmc.ServeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bmc.Close(); b.Close() })
	installed, _, err := b.Firmware(b.SystemIDs()[0])
	if err != nil || len(installed) == 0 {
		t.Fatalf("the virtual BMC reports no firmware: %v %v", installed, err)
	}

	c := testrig.Coordinator(t, testrig.Options{})
	api := testrig.NewClient(t, c)
	var creds agent.Credentials
	if code := api.Do("POST", "/v1/sites", map[string]string{"name": "rack1"}, &creds); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	testrig.StartAgentConfig(t, creds, agent.Config{})

	base := "http://" + c.APIAddr
	for _, k := range []string{"COORDINATOR_URL", "OS_USERNAME", "OS_PASSWORD", "OS_CACERT"} {
		t.Setenv(k, "")
	}
	run := func(args ...string) (int, string, string) {
		t.Helper()
		var out, errOut bytes.Buffer
		code := cli.Main(append([]string{"--url", base}, args...), strings.NewReader(""), &out, &errOut)
		t.Logf("coordinator %s: exit %d\n%s%s", strings.Join(args, " "), code, out.String(), errOut.String())
		return code, out.String(), errOut.String()
	}
	ok := func(args ...string) string {
		t.Helper()
		code, out, errOut := run(args...)
		if code != 0 {
			t.Fatalf("coordinator %s: exit %d: %s", strings.Join(args, " "), code, errOut)
		}
		return out
	}

	// The CLI creates the node; an unknown RAID interface is the API's 400.
	if code, _, errOut := run("node", "create", "--name", "rfx", "--driver", "redfish", "--site", "rack1", "--raid-interface", "bogus"); code != 1 ||
		!strings.Contains(errOut, "raid interface implementation 'bogus' is not supported by hardware type redfish") {
		t.Fatalf("node create --raid-interface bogus: exit %d, %q; want 1 with the API's 400 text", code, errOut)
	}
	ok("node", "create", "--name", "rf1", "--driver", "redfish", "--site", "rack1", "--raid-interface", "no-raid",
		"--driver-info", "redfish_address="+bmc.URL, "--driver-info", "redfish_username=root", "--driver-info", "redfish_password=calvin")
	raidOf := func() string {
		t.Helper()
		var n struct {
			RaidInterface string `json:"raid_interface"`
		}
		if code := api.Do("GET", "/v1/nodes/rf1", nil, &n); code != 200 {
			t.Fatalf("GET node: %d", code)
		}
		return n.RaidInterface
	}
	if got := raidOf(); got != "no-raid" {
		t.Fatalf("node create --raid-interface no-raid: the node has raid_interface %q", got)
	}
	api.MustVerb("rf1", "manage", nil)
	if got := api.WaitRest("rf1", 60*time.Second); got.State != "manageable" || got.LastError != "" {
		t.Fatalf("manage: %q, last_error %q", got.State, got.LastError)
	}

	// Firmware: every component of the BMC with its version.
	out := ok("node", "firmware", "rf1")
	if !strings.Contains(out, "COMPONENT") || !strings.Contains(out, "CURRENT VERSION") || !strings.Contains(out, "LAST VERSION FLASHED") {
		t.Errorf("node firmware: no table header:\n%s", out)
	}
	for comp, v := range installed {
		if !strings.Contains(out, comp) || !strings.Contains(out, v) {
			t.Errorf("node firmware does not show the BMC's %s %s:\n%s", comp, v, out)
		}
	}
	var fw []map[string]any
	if err := json.Unmarshal([]byte(ok("node", "firmware", "rf1", "-f", "json")), &fw); err != nil || len(fw) != len(installed) {
		t.Fatalf("node firmware -f json: %v, %v; want the BMC's %d components", fw, err, len(installed))
	}
	for _, f := range fw {
		comp, _ := f["component"].(string)
		comp, _, _ = strings.Cut(comp, ":") // a NIC is nic:<its Redfish Id>
		if f["current_version"] != installed[comp] || f["initial_version"] != installed[comp] || f["last_version_flashed"] != nil {
			t.Errorf("node firmware -f json: %v; the BMC has %s %s, nothing flashed", f, comp, installed[comp])
		}
	}
	if out := ok("node", "firmware", "rf1", "-c", "component", "-c", "current_version", "-f", "value"); !strings.Contains(out, "bmc "+installed["bmc"]+"\n") {
		t.Errorf("node firmware -c component -c current_version -f value: %q", out)
	}

	// BIOS: the list, --detail, one setting, a setting the node lacks.
	out = ok("node", "bios", "rf1")
	if !strings.Contains(out, "NAME") || !strings.Contains(out, "ProcVirtualization") || !strings.Contains(out, "Enabled") {
		t.Errorf("node bios does not list the BMC's ProcVirtualization Enabled:\n%s", out)
	}
	var detail []map[string]any
	if err := json.Unmarshal([]byte(ok("node", "bios", "rf1", "--detail", "-f", "json")), &detail); err != nil || len(detail) == 0 {
		t.Fatalf("node bios --detail -f json: %v %v", detail, err)
	}
	found := false
	for _, s := range detail {
		if s["name"] == "ProcVirtualization" {
			found = true
			if s["attribute_type"] != "Enumeration" || s["reset_required"] != true {
				t.Errorf("node bios --detail: %v; want the registry's Enumeration, reset_required", s)
			}
		}
	}
	if !found {
		t.Errorf("node bios --detail does not list ProcVirtualization: %v", detail)
	}
	if out := ok("node", "bios", "rf1", "ProcVirtualization", "-c", "value", "-f", "value"); out != "Enabled\n" {
		t.Errorf("node bios rf1 ProcVirtualization -c value -f value: %q, want Enabled", out)
	}
	if out := ok("node", "bios", "rf1", "ProcVirtualization"); !strings.Contains(out, "allowable_values") || !strings.Contains(out, "Disabled") {
		t.Errorf("node bios rf1 ProcVirtualization does not show the setting's fields:\n%s", out)
	}
	if code, _, errOut := run("node", "bios", "rf1", "NoSuchSetting"); code != 1 || !strings.Contains(errOut, "doesn't have a BIOS setting 'NoSuchSetting'") {
		t.Errorf("node bios rf1 NoSuchSetting: exit %d, %q; want 1 with the API's message", code, errOut)
	}

	// raid_interface: set, refused, reset.
	ok("node", "set", "rf1", "--raid-interface", "redfish")
	if got := raidOf(); got != "redfish" {
		t.Fatalf("node set --raid-interface redfish: the node has raid_interface %q", got)
	}
	if code, _, errOut := run("node", "set", "rf1", "--raid-interface", "bogus"); code != 1 ||
		!strings.Contains(errOut, "raid interface implementation 'bogus' is not supported by hardware type redfish") {
		t.Errorf("node set --raid-interface bogus: exit %d, %q; want 1 with the API's 400 text", code, errOut)
	}
	if got := raidOf(); got != "redfish" {
		t.Errorf("a refused --raid-interface changed the node's to %q", got)
	}
	ok("node", "unset", "rf1", "--raid-interface")
	if got := raidOf(); got != "agent" {
		t.Errorf("node unset --raid-interface: the node has raid_interface %q, want agent", got)
	}

	// The inspect interface: redfish (the BMC's reading) by node set, a
	// value the driver lacks refused with the API's text, unset back to
	// agent.
	inspectOf := func() string {
		t.Helper()
		var n struct {
			InspectInterface string `json:"inspect_interface"`
		}
		if code := api.Do("GET", "/v1/nodes/rf1", nil, &n); code != 200 {
			t.Fatalf("GET node: %d", code)
		}
		return n.InspectInterface
	}
	ok("node", "set", "rf1", "--inspect-interface", "redfish")
	if got := inspectOf(); got != "redfish" {
		t.Errorf("node set --inspect-interface redfish: the node has inspect_interface %q", got)
	}
	if code, _, errOut := run("node", "set", "rf1", "--inspect-interface", "bogus"); code != 1 || !strings.Contains(errOut, "bogus") {
		t.Errorf("node set --inspect-interface bogus: exit %d, %q; want 1 with the API's 400 naming it", code, errOut)
	}
	if got := inspectOf(); got != "redfish" {
		t.Errorf("a refused --inspect-interface changed the node's to %q", got)
	}
	ok("node", "unset", "rf1", "--inspect-interface")
	if got := inspectOf(); got != "agent" {
		t.Errorf("node unset --inspect-interface: the node has inspect_interface %q, want agent", got)
	}
}
