package systest

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// unknownMAC is the NIC of a site's simulated unknown machine i (as
// agent/sim makes it).
func unknownMAC(site string, i int) string {
	h := 0
	for _, c := range site {
		h = h*31 + int(c)
	}
	return net.HardwareAddr{0x02, 0xb3, byte(h >> 8), byte(h), byte(i >> 8), byte(i)}.String()
}

type siteShow struct {
	Discovery         bool   `json:"discovery"`
	DiscoveryMaxNodes int    `json:"discovery_max_nodes"`
	DiscoveryDriver   string `json:"discovery_driver"`
	Discovered        int    `json:"discovered"`
	DiscoveredNodes   []struct {
		UUID           string `json:"uuid"`
		ProvisionState string `json:"provision_state"`
		Driver         string `json:"driver"`
	} `json:"discovered_nodes"`
}

func showSite(t *testing.T, cl *testrig.Client, site string) siteShow {
	t.Helper()
	var s siteShow
	if code := cl.Do("GET", "/v1/sites/"+site, nil, &s); code != 200 {
		t.Fatalf("GET /v1/sites/%s: %d", site, code)
	}
	return s
}

// curlJSON sends a request with curl (an independent client) and
// returns its status and body.
func curlJSON(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("needs curl")
	}
	out, err := exec.Command("curl", "-s", "-o", "-", "-w", "\n%{http_code}", "-X", method, "-H", "Content-Type: application/json",
		"-H", "X-OpenStack-Ironic-API-Version: 1.96", "--data", body, url).Output()
	if err != nil {
		t.Fatalf("curl: %v", err)
	}
	s := strings.TrimSpace(string(out))
	i := strings.LastIndexByte(s, '\n')
	var code int
	fmt.Sscan(s[i+1:], &code)
	return code, s[:max(i, 0)]
}

// TestDiscoverySimulated: a simulated site with three machines that
// belong to no node, one of whose MAC is a node's port already. Off, the
// site discovers nothing; on (site set --discovery on, the PATCH of the
// site), the two unknown machines become nodes: in enroll, the site's
// discovery driver, a PXE port of their MAC, auto_discovered, the BMC
// address read in band, powered off, their inventory and properties,
// the inspection rules run on them (a trait), listed by site show; the
// third, a node's already, is not enrolled again. A field PATCH does not
// know is a 400, to curl.
func TestDiscoverySimulated(t *testing.T) {
	t.Parallel()
	c := testrig.Coordinator(t, testrig.Options{})
	cl := testrig.NewClient(t, c)
	var creds agent.Credentials
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "disc1"}, &creds); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	var rule map[string]any
	if code := cl.Do("POST", "/v1/inspection_rules", jsonDoc(t, `{"conditions": [
		{"op": "eq", "args": {"values": ["{inventory[system_vendor][product_name]}", "simulated machine"]}}],
		"actions": [{"op": "add-trait", "args": {"name": "CUSTOM_DISCOVERED_SIM"}}]}`), &rule); code != 201 {
		t.Fatalf("rule: %d %v", code, rule)
	}
	known := cl.CreateNode("known", "disc1", nil)
	if code := cl.Do("POST", "/v1/ports", map[string]any{"address": unknownMAC("disc1", 2), "node_uuid": known}, nil); code != 201 {
		t.Fatalf("port: %d", code)
	}
	a := testrig.StartAgentConfig(t, creds, agent.Config{MetricsListen: "127.0.0.1:0", Sim: agent.SimOptions{Unknown: 3, BootDelay: 100 * time.Millisecond}})
	// The two machines of no node asked twice each (every 2 s) and were
	// turned away: nothing is enrolled while discovery is off.
	waitFor(t, time.Minute, "the unknown machines are turned away twice", func() (bool, string) {
		v, err := agentMetric(t, a.MetricsAddr(), "bmedge_agent_discovery_total", `outcome="discovery_off"`)
		return err == nil && v >= 4, fmt.Sprintf("%v turned away (%v)", v, err)
	})
	if s := showSite(t, cl, "disc1"); s.Discovery || s.Discovered != 0 {
		t.Fatalf("discovery off: %+v", s)
	}

	code, body := curlJSON(t, "PATCH", cl.Base+"/v1/sites/disc1", `{"discovery": true, "discovery_cap": 3}`)
	if code != 400 || !strings.Contains(body, "discovery_cap") {
		t.Fatalf("PATCH of an unknown field: %d %s", code, body)
	}
	code, body = curlJSON(t, "PATCH", cl.Base+"/v1/sites/disc1", `{"discovery": true, "discovery_max_nodes": 5, "discovery_driver": "fake-hardware"}`)
	if code != 200 || !strings.Contains(body, `"discovery":true`) {
		t.Fatalf("PATCH: %d %s", code, body)
	}
	var s siteShow
	waitFor(t, 30*time.Second, "two machines discovered", func() (bool, string) {
		s = showSite(t, cl, "disc1")
		return s.Discovered == 2 && len(s.DiscoveredNodes) == 2, fmt.Sprintf("%+v", s)
	})
	macs := map[string]bool{}
	for _, dn := range s.DiscoveredNodes {
		n := cl.Get(dn.UUID)
		if n.State != "enroll" || dn.Driver != "fake-hardware" || n.ConductorGroup != "disc1" || n.PowerState != "power off" || n.InternalInfo["auto_discovered"] != true {
			t.Fatalf("discovered node %+v (%+v)", n, dn)
		}
		if n.Properties["memory_mb"] == nil || n.Properties["cpus"] == nil {
			t.Fatalf("discovered node's properties %v", n.Properties)
		}
		var traits struct {
			Traits []string `json:"traits"`
		}
		cl.Do("GET", "/v1/nodes/"+dn.UUID+"/traits", nil, &traits)
		if !slices.Contains(traits.Traits, "CUSTOM_DISCOVERED_SIM") {
			t.Fatalf("the inspection rule did not run on the discovered node: traits %v", traits.Traits)
		}
		var ports struct {
			Ports []struct {
				Address string `json:"address"`
				PXE     bool   `json:"pxe_enabled"`
			} `json:"ports"`
		}
		cl.Do("GET", "/v1/nodes/"+dn.UUID+"/ports?detail=True", nil, &ports)
		if len(ports.Ports) != 1 || !ports.Ports[0].PXE {
			t.Fatalf("ports %+v", ports)
		}
		macs[ports.Ports[0].Address] = true
		var inv map[string]any
		if code := cl.Do("GET", "/v1/nodes/"+dn.UUID+"/inventory", nil, &inv); code != 200 {
			t.Fatalf("inventory: %d", code)
		}
		if pd, _ := inv["plugin_data"].(map[string]any); pd["auto_discovered"] != true {
			t.Fatalf("plugin_data %v", inv["plugin_data"])
		}
		if bmc, _ := inv["inventory"].(map[string]any)["bmc_address"].(string); !strings.HasPrefix(bmc, "10.254.") {
			t.Fatalf("inventory's bmc_address %q", bmc)
		}
		hist := historyOf(t, cl, dn.UUID)
		if len(hist) == 0 || !strings.Contains(hist[0].Event, "enrolled by discovery") {
			t.Fatalf("history %+v", hist)
		}
	}
	if !macs[unknownMAC("disc1", 0)] || !macs[unknownMAC("disc1", 1)] {
		t.Fatalf("discovered MACs %v", macs)
	}
	// The web view's site page says discovery is on and lists them.
	resp, err := http.Get(cl.Base + "/ui/sites/disc1")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`<dd id="site-discovery"><span class="ok">on</span>: 2 of at most 5 nodes discovered`, s.DiscoveredNodes[0].UUID, s.DiscoveredNodes[1].UUID} {
		if !strings.Contains(string(page), want) {
			t.Fatalf("the site page lacks %q:\n%s", want, page)
		}
	}
	// The known machine's node is the only one with its MAC, and stays.
	time.Sleep(2 * time.Second)
	if s := showSite(t, cl, "disc1"); s.Discovered != 2 {
		t.Fatalf("later: %+v", s)
	}
	var all struct {
		Nodes []testrig.Node `json:"nodes"`
	}
	cl.Do("GET", "/v1/nodes", nil, &all)
	if len(all.Nodes) != 3 {
		b, _ := json.Marshal(all)
		t.Fatalf("nodes: %s", b)
	}
}

// TestDiscoveryWANCut: discovery goes on while the site's WAN is down.
// The site (its edge agent, the real binary, in a network namespace
// behind a link the test cuts) has three simulated unknown machines;
// discovery is turned on and the link cut before they report. Their
// reports wait in the agent's outbox; the agent is killed and started
// again while the link is still down (the configuration it goes by is
// in its state folder), and the machines boot and report again. When
// the link returns the coordinator enrolls three nodes, not six: each
// machine's second report is the same machine, seen again.
func TestDiscoveryWANCut(t *testing.T) {
	// The waits are for a loaded machine (the race detector, QEMU beside
	// it): polls, so they cost only when something is wrong.
	t.Parallel()
	needWAN(t)
	w := newWAN(t, wanVeth)
	bin := buildAgent(t)
	c := testrig.Coordinator(t, testrig.Options{MQTT: w.FreePort()})
	cl := testrig.NewClient(t, c)
	var creds agent.Credentials
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "site1"}, &creds); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	dir := t.TempDir()
	credFile := filepath.Join(dir, "site1.json")
	b, _ := json.Marshal(creds)
	if err := os.WriteFile(credFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "agent.log")
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("agent.log:\n%s", b)
		}
	})
	logCount := func(s string) int {
		b, _ := os.ReadFile(logPath)
		return strings.Count(string(b), s)
	}
	ip, args := w.Command(bin, "--credentials-file", credFile, "--state-dir", filepath.Join(dir, "state"), "--power-sync-interval", "0",
		"--simulate-unknown", "3", "--boot-delay", "6s", "--resend-interval", "1s")
	p := startAgentProcess(t, ip, logPath, args...)
	waitFor(t, 2*time.Minute, "the agent in the namespace connects", func() (bool, string) {
		return logCount("edge agent connected") == 1, "no 'edge agent connected' in its log"
	})
	if code := cl.Do("PATCH", "/v1/sites/site1", map[string]any{"discovery": true, "discovery_driver": "fake-hardware"}, nil); code != 200 {
		t.Fatalf("PATCH: %d", code)
	}
	waitFor(t, time.Minute, "the agent takes the configuration", func() (bool, string) {
		return logCount("site discovery on") == 1, "no 'site discovery on' in its log"
	})
	w.Cut()
	cut := time.Now()
	waitFor(t, 90*time.Second, "three machines reported at the site", func() (bool, string) {
		return logCount("machine discovered") == 3, fmt.Sprintf("%d", logCount("machine discovered"))
	})
	p.kill()
	p = startAgentProcess(t, ip, logPath, args...)
	waitFor(t, 2*time.Minute, "the restarted agent's machines report again", func() (bool, string) {
		return logCount("machine discovered") == 6, fmt.Sprintf("%d", logCount("machine discovered"))
	})
	if s := showSite(t, cl, "site1"); s.Discovered != 0 {
		t.Fatalf("the coordinator enrolled %d nodes while the link was down", s.Discovered)
	}
	w.Restore()
	t.Logf("link down %s", time.Since(cut).Round(time.Second))
	var s siteShow
	waitFor(t, 3*time.Minute, "three nodes enrolled after the link returned", func() (bool, string) {
		s = showSite(t, cl, "site1")
		return s.Discovered == 3 && len(s.DiscoveredNodes) == 3, fmt.Sprintf("%d discovered, %d listed", s.Discovered, len(s.DiscoveredNodes))
	})
	// Every report reached it: each node was seen again once.
	waitFor(t, 90*time.Second, "each machine seen again", func() (bool, string) {
		again := 0
		s = showSite(t, cl, "site1")
		if len(s.DiscoveredNodes) != 3 {
			return false, fmt.Sprintf("%d nodes listed", len(s.DiscoveredNodes))
		}
		for _, dn := range s.DiscoveredNodes {
			for _, h := range historyOf(t, cl, dn.UUID) {
				if strings.Contains(h.Event, "seen again") {
					again++
				}
			}
		}
		return again == 3, fmt.Sprintf("%d seen-again events", again)
	})
	if s := showSite(t, cl, "site1"); s.Discovered != 3 {
		t.Fatalf("later: %d discovered", s.Discovered)
	}
}
