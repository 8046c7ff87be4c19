package systest

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/drivers/redfish/recorded"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// dmtfSystem is the system of DMTF's public-rackmount1 mockup (DSP2043,
// BSD-3-Clause; drivers/redfish/recorded/testdata/dmtf-public-rackmount1
// says where it comes from).
const dmtfSystem = "/redfish/v1/Systems/437XR1138R2"

// TestOOBInspection (issue 28, acceptance 4): a redfish node with
// inspect_interface redfish, behind the recorded BMC serving DMTF's
// public-rackmount1 tree, is inspected through the coordinator and the
// edge agent in real mode with no ramdisk boot: the agent serves no
// ramdisk ISO at all, the BMC gets no reset and no virtual media request,
// the node never leaves power off. The properties are the tree's: 16
// logical CPUs (Processors' TotalThreads, LogicalProcessorCount), 96 GiB,
// x86_64, local_gb of the smallest drive of at least 4 GiB (4 TB SATA
// bay 2: 3725 GiB), boot_mode uefi; a port is made for each MAC of its
// EthernetInterfaces; the inventory endpoint shows the reading with
// plugin_data naming the redfish inspect interface. A second BMC of the
// same tree whose SecureBoot resource answers 404 is read all the same,
// with a WARNING naming the resource in the node's history and a count in
// /metrics. An agent inspection of the same node (inspect_interface
// agent) still boots the ramdisk, refused here for want of the ISO.
func TestOOBInspection(t *testing.T) {
	start := func(q recorded.Quirks) *recorded.Server {
		s, err := recorded.Start(recorded.Options{Fixture: "dmtf-public-rackmount1", Username: "admin", Password: "pa55word",
			Quirks: q})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	}
	q := recorded.Quirks{PatchMedia: true, InsertedRequired: true}
	whole := start(q)
	q.Missing = []string{dmtfSystem + "/SecureBoot"}
	partial := start(q)

	c := testrig.Coordinator(t, testrig.Options{})
	cl := testrig.NewClient(t, c)
	var creds agent.Credentials
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "rack1"}, &creds); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	testrig.StartAgentConfig(t, creds, agent.Config{})

	create := func(name string, s *recorded.Server) string {
		var n testrig.Node
		body := map[string]any{"name": name, "driver": "redfish", "conductor_group": "rack1", "inspect_interface": "redfish",
			"driver_info": map[string]any{"redfish_address": s.URL, "redfish_username": "admin", "redfish_password": "pa55word"}}
		if code := cl.Do("POST", "/v1/nodes", body, &n); code != 201 {
			t.Fatalf("create %s: %d", name, code)
		}
		cl.MustVerb(n.UUID, "manage", nil)
		if got := cl.WaitRest(n.UUID, 60*time.Second); got.State != "manageable" {
			t.Fatalf("manage %s: %q, last_error %q", name, got.State, got.LastError)
		}
		return n.UUID
	}
	inspect := func(id string, s *recorded.Server) testrig.Node {
		t.Helper()
		s.ResetRequests()
		cl.MustVerb(id, "inspect", nil)
		n := cl.WaitRest(id, 60*time.Second)
		if n.State != "manageable" || n.LastError != "" {
			t.Fatalf("inspect: %q, last_error %q", n.State, n.LastError)
		}
		for _, r := range s.Requests() {
			if !strings.HasPrefix(r, "GET ") && !strings.Contains(r, "/SessionService/Sessions") {
				t.Errorf("the inspection asked the BMC %s; want reads only (no reset, no virtual media, no boot override)", r)
			}
		}
		return n
	}

	id := create("dmtf", whole)
	// Manage's verify read the BMC's power (the tree's system is On).
	powerBefore := cl.Get(id).PowerState
	if powerBefore != "power on" {
		t.Errorf("power_state after manage %q; want the BMC's, power on", powerBefore)
	}
	n := inspect(id, whole)
	want := map[string]any{"cpus": 16.0, "memory_mb": 98304.0, "cpu_arch": "x86_64", "local_gb": 3725.0, "capabilities": "boot_mode:uefi"}
	for k, v := range want {
		if n.Properties[k] != v {
			t.Errorf("properties[%s] = %v, want %v (the tree's)", k, n.Properties[k], v)
		}
	}
	if n.PowerState != powerBefore {
		t.Errorf("power_state %q after the inspection, %q before; an out-of-band inspection leaves the power as it is", n.PowerState, powerBefore)
	}
	var inv struct {
		Inventory struct {
			CPU struct {
				Count int `json:"count"`
			} `json:"cpu"`
			Interfaces []struct {
				MAC string `json:"mac_address"`
			} `json:"interfaces"`
			Disks []map[string]any `json:"disks"`
		} `json:"inventory"`
		PluginData map[string]any `json:"plugin_data"`
	}
	if code := cl.Do("GET", "/v1/nodes/"+id+"/inventory", nil, &inv); code != 200 {
		t.Fatalf("inventory: %d", code)
	}
	if inv.Inventory.CPU.Count != 16 || len(inv.Inventory.Disks) == 0 || inv.PluginData["inspect_interface"] != "redfish" || inv.PluginData["source"] != "bmc" {
		t.Fatalf("inventory: %+v", inv)
	}
	var ports struct {
		Ports []struct {
			Address string `json:"address"`
		} `json:"ports"`
	}
	if code := cl.Do("GET", "/v1/nodes/"+id+"/ports", nil, &ports); code != 200 {
		t.Fatalf("ports: %d", code)
	}
	have := map[string]bool{}
	for _, p := range ports.Ports {
		have[p.Address] = true
	}
	for _, i := range inv.Inventory.Interfaces {
		if !have[strings.ToLower(i.MAC)] {
			t.Errorf("no port for the inventory's MAC %s (ports %v)", i.MAC, have)
		}
	}
	for _, mac := range []string{"12:44:6a:3b:04:11", "aa:bb:cc:dd:ee:00"} {
		if !have[mac] {
			t.Errorf("no port for the tree's MAC %s (ports %v)", mac, have)
		}
	}
	// Inspected again: the same ports, none twice.
	inspect(id, whole)
	var again struct {
		Ports []map[string]any `json:"ports"`
	}
	cl.Do("GET", "/v1/nodes/"+id+"/ports", nil, &again)
	if len(again.Ports) != len(ports.Ports) {
		t.Errorf("a second inspection left %d ports, the first %d", len(again.Ports), len(ports.Ports))
	}

	// A partial reading.
	before := coordMetric(t, cl, "bmedge_bmc_warnings_total")
	pid := create("dmtf-no-secureboot", partial)
	n = inspect(pid, partial)
	if n.Properties["cpus"] != 16.0 || n.Properties["local_gb"] != 3725.0 {
		t.Errorf("the partial reading lost more than the SecureBoot field: %v", n.Properties)
	}
	found := false
	for _, e := range historyOf(t, cl, pid) {
		found = found || e.Severity == "WARNING" && strings.Contains(e.Event, "SecureBoot") && strings.Contains(e.Event, partial.URL)
	}
	if !found {
		t.Errorf("no WARNING in the history names the SecureBoot resource that answered 404: %+v", historyOf(t, cl, pid))
	}
	if after := coordMetric(t, cl, "bmedge_bmc_warnings_total"); after <= before {
		t.Errorf("bmedge_bmc_warnings_total %v → %v; want it counted", before, after)
	}

	// inspect_interface agent: the ramdisk again (this agent has no ISO).
	if code := cl.Do("PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "replace", "path": "/inspect_interface", "value": "agent"}}, nil); code != 200 {
		t.Fatalf("PATCH inspect_interface agent: %d", code)
	}
	cl.MustVerb(id, "inspect", nil)
	if n := cl.WaitRest(id, 60*time.Second); n.State != "inspect failed" || !strings.Contains(n.LastError, "--ramdisk-iso") {
		t.Fatalf("agent inspection without an ISO: %q, %q; want the ramdisk boot refused", n.State, n.LastError)
	}
}

// TestNeverWedgedWithoutVirtualMedia (issue 28, acceptance 2, on a
// recorded tree): Intel's S2600BP tree offers no virtual media at all, so
// an agent inspection's ramdisk boot fails: the node ends in inspect
// failed with a last_error naming the BMC and what it lacks, its power
// recorded as the BMC's; then power off, boot device disk, power on and
// manage all succeed (what cannot be ejected is a warning, not a
// failure).
func TestNeverWedgedWithoutVirtualMedia(t *testing.T) {
	s, err := recorded.Start(recorded.Options{Fixture: "intel-s2600bp", Username: "admin", Password: "pa55word",
		Quirks: recorded.Quirks{NoSessionService: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	c := testrig.Coordinator(t, testrig.Options{})
	cl := testrig.NewClient(t, c)
	var creds agent.Credentials
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "rack1"}, &creds); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	iso := filepath.Join(t.TempDir(), "bmramdisk.iso")
	if err := os.WriteFile(iso, bytes.Repeat([]byte("not really an ISO "), 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	testrig.StartAgentConfig(t, creds, agent.Config{Ramdisk: agent.RamdiskOptions{ISO: iso, Listen: "127.0.0.1:0", BrokerURL: "mqtt://10.0.2.2:1883"}})
	var n testrig.Node
	body := map[string]any{"name": "intel", "driver": "redfish", "conductor_group": "rack1",
		"driver_info": map[string]any{"redfish_address": s.URL, "redfish_username": "admin", "redfish_password": "pa55word", "redfish_auth_type": "basic"}}
	if code := cl.Do("POST", "/v1/nodes", body, &n); code != 201 {
		t.Fatalf("create: %d", code)
	}
	id := n.UUID
	bmcPower := func() string {
		var sys map[string]any
		for _, p := range s.Paths() {
			if strings.HasPrefix(p, "/redfish/v1/Systems/") && strings.Count(p, "/") == 4 {
				sys = s.Doc(p)
			}
		}
		if sys["PowerState"] == "On" {
			return "power on"
		}
		return "power off"
	}
	step := func(what, state string, do func()) testrig.Node {
		t.Helper()
		do()
		got := cl.WaitRest(id, 60*time.Second)
		// Manage's verify reads the power state too, as Ironic's.
		if got.State != state || got.PowerState != bmcPower() {
			t.Fatalf("%s: %q (last_error %q), recorded %q while the BMC is %q", what, got.State, got.LastError, got.PowerState, bmcPower())
		}
		return got
	}
	power := func(target string) func() {
		return func() {
			if code := cl.Do("PUT", "/v1/nodes/"+id+"/states/power", map[string]string{"target": target}, nil); code != 202 {
				t.Fatalf("%s: %d", target, code)
			}
		}
	}
	step("manage", "manageable", func() { cl.MustVerb(id, "manage", nil) })
	step("power on", "manageable", power("power on"))
	got := step("inspect", "inspect failed", func() { cl.MustVerb(id, "inspect", nil) })
	for _, part := range []string{"virtual media", "offers no virtual CD", s.URL} {
		if !strings.Contains(got.LastError, part) {
			t.Fatalf("last_error %q lacks %q", got.LastError, part)
		}
	}
	t.Logf("inspect failed: %s", got.LastError)
	for _, v := range []struct {
		what, state string
		do          func()
	}{
		{"power off", "inspect failed", power("power off")},
		{"boot device disk", "inspect failed", func() {
			if code := cl.Do("PUT", "/v1/nodes/"+id+"/management/boot_device", map[string]any{"boot_device": "disk"}, nil); code/100 != 2 {
				t.Fatalf("boot device disk: %d", code)
			}
		}},
		{"power on", "inspect failed", power("power on")},
		{"reboot", "inspect failed", power("rebooting")},
		{"manage", "manageable", func() { cl.MustVerb(id, "manage", nil) }},
	} {
		if got := step(v.what, v.state, v.do); got.LastError != "" {
			t.Fatalf("%s: last_error %q", v.what, got.LastError)
		}
	}
}

// TestManagerMissingThroughTheAPI (issue 28, acceptance 3 through the
// API): DMTF's tree with its Manager answering 404: manage succeeds, the
// node's firmware lists the BIOS version from the system, and what could
// not be read (the Manager's URL and the BMC's answer) is a WARNING in the
// node's history and a count in /metrics, not only a line in the site's
// log.
func TestManagerMissingThroughTheAPI(t *testing.T) {
	s, err := recorded.Start(recorded.Options{Fixture: "dmtf-public-rackmount1", Username: "admin", Password: "pa55word",
		Quirks: recorded.Quirks{PatchMedia: true, InsertedRequired: true, Missing: []string{"/redfish/v1/Managers/BMC"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	c := testrig.Coordinator(t, testrig.Options{})
	cl := testrig.NewClient(t, c)
	var creds agent.Credentials
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "rack1"}, &creds); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	testrig.StartAgentConfig(t, creds, agent.Config{})
	var n testrig.Node
	body := map[string]any{"name": "dmtf", "driver": "redfish", "conductor_group": "rack1",
		"driver_info": map[string]any{"redfish_address": s.URL, "redfish_username": "admin", "redfish_password": "pa55word"}}
	if code := cl.Do("POST", "/v1/nodes", body, &n); code != 201 {
		t.Fatalf("create: %d", code)
	}
	before := coordMetric(t, cl, "bmedge_bmc_warnings_total")
	cl.MustVerb(n.UUID, "manage", nil)
	if got := cl.WaitRest(n.UUID, 60*time.Second); got.State != "manageable" || got.LastError != "" {
		t.Fatalf("manage: %q, %q", got.State, got.LastError)
	}
	var fw struct {
		Firmware []struct {
			Component string `json:"component"`
			Version   string `json:"current_version"`
		} `json:"firmware"`
	}
	if code := cl.Do("GET", "/v1/nodes/"+n.UUID+"/firmware", nil, &fw); code != 200 {
		t.Fatalf("firmware: %d", code)
	}
	bios := ""
	for _, f := range fw.Firmware {
		if f.Component == "bios" {
			bios = f.Version
		}
	}
	if bios != "P79 v1.45 (12/06/2017)" {
		t.Fatalf("firmware %+v; want the BIOS version from the system, P79 v1.45 (12/06/2017)", fw.Firmware)
	}
	found := false
	for _, e := range historyOf(t, cl, n.UUID) {
		found = found || e.Severity == "WARNING" && strings.Contains(e.Event, "/redfish/v1/Managers/BMC") && strings.Contains(e.Event, "404")
	}
	if !found {
		t.Fatalf("no WARNING in the history names the Manager that answered 404: %+v", historyOf(t, cl, n.UUID))
	}
	if after := coordMetric(t, cl, "bmedge_bmc_warnings_total"); after <= before {
		t.Fatalf("bmedge_bmc_warnings_total %v → %v", before, after)
	}
}
