package ui_test

import (
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/protocol"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestUISitePage: a site's page shows its reachability, its edge agent's
// software (from the agent's presence), its nodes and no other site's,
// and the pre-seeds of its image cache without the URL's credentials or
// query; the fleet page links to it; an unknown site is a 404; an
// offline site says so.
func TestUISitePage(t *testing.T) {
	c := testrig.Coordinator(t, testrig.Options{})
	testrig.Site(t, c, "east", agent.SimOptions{Nodes: 2, StepDuration: 20 * time.Millisecond})
	cl := testrig.NewClient(t, c)
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "west"}, nil); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	cl.CreateNode("east-1", "east", nil)
	cl.CreateNode("west-1", "west", nil)
	const secret = "s3cret-token"
	var st struct {
		State string `json:"state"`
	}
	if code := cl.Do("POST", "/v1/sites/east/cache", map[string]string{"url": "http://op:pw-" + secret + "@127.0.0.1:9/img.raw?sig=" + secret,
		"checksum": "sha256:" + strings.Repeat("ab", 32)}, &st); code != 202 && code != 200 {
		t.Fatalf("site cache: %d", code)
	}
	var body string
	for deadline := time.Now().Add(10 * time.Second); ; {
		var code int
		code, body = get(t, cl, "/ui/sites/east", false)
		if code != 200 {
			t.Fatalf("GET /ui/sites/east: %d %s", code, body)
		}
		if strings.Contains(body, protocol.Software()) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the site page does not show the agent's software %q:\n%s", protocol.Software(), body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, want := range []string{`<span class="ok">online</span>`, `<b id="site-nodes">1</b>`, "east-1", "http://127.0.0.1:9/img.raw?…", "sha256:" + strings.Repeat("ab", 32)} {
		if !strings.Contains(body, want) {
			t.Errorf("the site page lacks %q", want)
		}
	}
	for _, not := range []string{"west-1", secret} {
		if strings.Contains(body, not) {
			t.Errorf("the site page shows %q", not)
		}
	}
	code, body := get(t, cl, "/ui/sites/west", false)
	if code != 200 || !strings.Contains(body, `<span class="bad">offline</span>`) || !strings.Contains(body, "not known") || strings.Contains(body, "east-1") {
		t.Errorf("GET /ui/sites/west: %d\n%s", code, body)
	}
	if code, _ := get(t, cl, "/ui/sites/nowhere", false); code != 404 {
		t.Errorf("GET /ui/sites/nowhere: %d, want 404", code)
	}
	if _, body := get(t, cl, "/ui/", false); !strings.Contains(body, `href="/ui/sites/east"`) {
		t.Errorf("the fleet page does not link to the site page")
	}
}

// TestUINodePageInventory: a node's page says it is not inspected yet,
// then, after inspect, shows its inventory (CPU, memory, disks,
// interfaces) and its clean steps with the ramdisk's in-band ones.
func TestUINodePageInventory(t *testing.T) {
	c := testrig.Coordinator(t, testrig.Options{})
	testrig.Site(t, c, "east", agent.SimOptions{Nodes: 1, StepDuration: 20 * time.Millisecond})
	cl := testrig.NewClient(t, c)
	id := cl.CreateNode("n1", "east", nil)
	cl.MustVerb(id, "manage", nil)
	cl.WaitRest(id, 20*time.Second)
	_, body := get(t, cl, "/ui/nodes/"+id, false)
	if !strings.Contains(body, "Not inspected yet") || !strings.Contains(body, "listed once it has booted") {
		t.Fatalf("before inspection the node page says:\n%s", body)
	}
	cl.MustVerb(id, "inspect", nil)
	if n := cl.WaitRest(id, 20*time.Second); n.State != "manageable" {
		t.Fatalf("inspect: %q %q", n.State, n.LastError)
	}
	_, body = get(t, cl, "/ui/nodes/"+id, false)
	for _, want := range []string{`<dl class="facts" id="inventory">`, "Simulated CPU", "<code>/dev/sda</code>", "eth0 <code>52:54:00:", "<code>deploy.erase_devices</code>", "in the ramdisk"} {
		if !strings.Contains(body, want) {
			t.Errorf("after inspection the node page lacks %q", want)
		}
	}
	if strings.Contains(body, "listed once it has booted") {
		t.Errorf("after inspection the node page still says the in-band steps are not known")
	}
}
