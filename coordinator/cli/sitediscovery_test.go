package cli_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/bmedge/bmedge/coordinator/cli"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestSiteSetShowDiscovery: site set turns discovery on with its bounds
// and driver, site show and site list say so; a wrong value exits with
// the API's 400 text, a wrong --discovery with a usage error, nothing to
// change with one too; off turns it off.
func TestSiteSetShowDiscovery(t *testing.T) {
	c := testrig.Coordinator(t, testrig.Options{})
	api := testrig.NewClient(t, c)
	if code := api.Do("POST", "/v1/sites", map[string]string{"name": "rack1"}, nil); code != 201 {
		t.Fatalf("site add: %d", code)
	}
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
	if code, out, _ := run("site", "show", "rack1"); code != 0 || !strings.Contains(out, "discovery ") || !strings.Contains(out, "false") {
		t.Fatalf("site show: %d %s", code, out)
	}
	if code, out, _ := run("site", "set", "rack1", "--discovery", "on", "--discovery-max-nodes", "7", "--discovery-driver", "redfish"); code != 0 ||
		!strings.Contains(out, "discovery_max_nodes  7") || !strings.Contains(out, "discovery_driver     redfish") {
		t.Fatalf("site set: %d %s", code, out)
	}
	if code, out, _ := run("site", "show", "rack1", "-f", "json"); code != 0 || !strings.Contains(out, `"discovery": true`) || !strings.Contains(out, `"discovered_nodes": []`) {
		t.Fatalf("site show -f json: %d %s", code, out)
	}
	if code, out, _ := run("site", "list", "-c", "name", "-c", "discovery", "-f", "value"); code != 0 || !strings.Contains(out, "rack1 True") {
		t.Fatalf("site list: %d %s", code, out)
	}
	if code, _, errOut := run("site", "set", "rack1", "--discovery-rate", "100000"); code != 1 || !strings.Contains(errOut, "outside 1 to 600") {
		t.Fatalf("a rate too high: %d %s", code, errOut)
	}
	if code, _, errOut := run("site", "set", "rack1", "--discovery-driver", "bogus"); code != 1 || !strings.Contains(errOut, "bogus") {
		t.Fatalf("an unknown driver: %d %s", code, errOut)
	}
	if code, _, errOut := run("site", "set", "rack1", "--discovery", "maybe"); code != 2 || !strings.Contains(errOut, "on or off") {
		t.Fatalf("--discovery maybe: %d %s", code, errOut)
	}
	if code, _, errOut := run("site", "set", "rack1"); code != 2 || !strings.Contains(errOut, "needs something to change") {
		t.Fatalf("nothing to change: %d %s", code, errOut)
	}
	if code, _, errOut := run("site", "show", "nosuch"); code != 1 || !strings.Contains(errOut, "nosuch could not be found") {
		t.Fatalf("an unknown site: %d %s", code, errOut)
	}
	if code, out, _ := run("site", "set", "rack1", "--discovery", "off"); code != 0 || !strings.Contains(out, "discovery            false") {
		t.Fatalf("off: %d %s", code, out)
	}
}
