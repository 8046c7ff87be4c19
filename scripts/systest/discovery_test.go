package systest

import (
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
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
	testrig.StartAgentConfig(t, creds, agent.Config{Sim: agent.SimOptions{Unknown: 3, BootDelay: 100 * time.Millisecond}})
	time.Sleep(3 * time.Second)
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
