package systest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/coordinator/cli"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// siteOnline reads a site's online flag from GET /v1/sites; listed is
// false when the site is not there.
func siteOnline(cl *testrig.Client, name string) (online, listed bool) {
	var resp struct {
		Sites []map[string]any `json:"sites"`
	}
	cl.Do("GET", "/v1/sites", nil, &resp)
	for _, s := range resp.Sites {
		if s["name"] == name {
			return s["online"] == true, true
		}
	}
	return false, false
}

// TestSiteRotateAndDelete: a site's credential is replaced (site rotate):
// the old one is refused at once, for new connections (mosquitto_pub, an
// independent client) and for those already open (a mosquitto_sub
// connected with it is disconnected, and so is the edge agent, whose site
// goes offline); the edge agent restarted with the new credentials works
// the site's nodes again. A site with nodes cannot be deleted; one without
// is, and its credential is refused. A restarted coordinator keeps all of
// it.
func TestSiteRotateAndDelete(t *testing.T) {
	sub := requireTool(t, "mosquitto_sub")
	pub := requireTool(t, "mosquitto_pub")
	dir, mqttAddr := t.TempDir(), testrig.FreeAddr(t)
	c := testrig.Coordinator(t, testrig.Options{DataDir: dir, MQTT: mqttAddr})
	cl := testrig.NewClient(t, c)
	var old agent.Credentials
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "site1"}, &old); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	id := cl.CreateNode("n1", "site1", nil)
	var rot agent.Credentials

	t.Run("the old credential's connections end", func(t *testing.T) {
		testrig.StartAgent(t, old, agent.SimOptions{Nodes: 2})
		cl.MustVerb(id, "manage", nil)
		cl.WaitState(id, "manageable", 20*time.Second)
		// An independent client connected with the old credential.
		tap := startSub(t, c.BrokerURL, old.Username, old.Password, "edge-site1.tap", "bm/v1/site/site1/#")
		if !tap.connected {
			t.Fatalf("mosquitto_sub with the site's credential did not connect (the control): %q", tap.out)
		}

		if code := cl.Do("POST", "/v1/sites/site1/credentials", nil, &rot); code != 200 {
			t.Fatalf("site rotate: %d", code)
		}
		if rot.Username != old.Username || rot.Password == "" || rot.Password == old.Password || rot.BrokerURL == "" || rot.Site != "site1" {
			t.Fatalf("rotated credentials: %+v (old user %s)", rot, old.Username)
		}
		select {
		case s := <-tap.exited:
			t.Logf("mosquitto_sub connected with the old credential ended:\n%s", s)
		case <-time.After(15 * time.Second):
			t.Error("mosquitto_sub connected with the old credential still runs 15 s after the rotation")
		}
		// The edge agent was disconnected too, and cannot come back.
		deadline := time.Now().Add(15 * time.Second)
		for {
			if on, _ := siteOnline(cl, "site1"); !on {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("site1 is still online 15 s after its credential was replaced")
			}
			time.Sleep(100 * time.Millisecond)
		}
	})

	// New connections: the old credential refused, the new one taken.
	if out, err := mosquitto(t, c.BrokerURL, pub, old.Username, old.Password, "edge-site1.probe", "-t", "bm/v1/site/site1/bmc/evt", "-m", "x", "-q", "1"); err == nil || !refusedAtConnect(out) {
		t.Errorf("the old credential after the rotation: %v %q; want refused at CONNECT", err, out)
	}
	if out, err := mosquitto(t, c.BrokerURL, sub, rot.Username, rot.Password, "edge-site1.probe", "-t", "bm/v1/site/site1/bmc/cmd", "-W", "1"); refusedAtConnect(out) {
		t.Errorf("the new credential refused: %v %q", err, out)
	}
	// The edge agent with the new credentials file works the site again.
	testrig.StartAgent(t, rot, agent.SimOptions{Nodes: 2})
	cl.MustVerb(id, "provide", nil)
	if n := cl.WaitRest(id, 30*time.Second); n.State != "available" {
		t.Fatalf("provide with the new credential: %q (last_error %q)", n.State, n.LastError)
	}

	// Deleting: refused while the site has nodes.
	var e map[string]any
	if code := cl.Do("DELETE", "/v1/sites/site1", nil, &e); code != 409 || !strings.Contains(fmt.Sprint(e), "1 node") {
		t.Errorf("delete of a site with a node: %d %v; want 409 naming its node count", code, e)
	}
	if on, listed := siteOnline(cl, "site1"); !on || !listed {
		t.Errorf("site1 after the refused delete: online %v, listed %v", on, listed)
	}
	var s2 agent.Credentials
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "site2"}, &s2); code != 201 {
		t.Fatalf("site add site2: %d", code)
	}
	if out, err := mosquitto(t, c.BrokerURL, sub, s2.Username, s2.Password, "edge-site2", "-t", "bm/v1/site/site2/bmc/cmd", "-W", "1"); refusedAtConnect(out) {
		t.Fatalf("site2's credential refused before the delete (the control): %v %q", err, out)
	}
	if code := cl.Do("DELETE", "/v1/sites/site2", nil, nil); code != 204 {
		t.Fatalf("delete site2: %d", code)
	}
	if out, err := mosquitto(t, c.BrokerURL, sub, s2.Username, s2.Password, "edge-site2", "-t", "bm/v1/site/site2/bmc/cmd", "-W", "1"); err == nil || !refusedAtConnect(out) {
		t.Errorf("a deleted site's credential: %v %q; want refused at CONNECT", err, out)
	}
	if _, listed := siteOnline(cl, "site2"); listed {
		t.Error("site2 is still listed after its delete")
	}
	for _, r := range []struct{ method, path string }{{"DELETE", "/v1/sites/site2"}, {"POST", "/v1/sites/site2/credentials"}, {"POST", "/v1/sites/nosuch/credentials"}} {
		if code := cl.Do(r.method, r.path, nil, &e); code != 404 || !strings.Contains(fmt.Sprint(e), "site list") {
			t.Errorf("%s %s: %d %v; want 404 saying where the sites are listed", r.method, r.path, code, e)
		}
	}

	// A restarted coordinator keeps the new credential, refuses the old
	// one, and has no site2.
	c.Close()
	c = testrig.Coordinator(t, testrig.Options{DataDir: dir, MQTT: mqttAddr})
	cl = testrig.NewClient(t, c)
	if out, err := mosquitto(t, c.BrokerURL, sub, old.Username, old.Password, "edge-site1.probe", "-t", "bm/v1/site/site1/bmc/cmd", "-W", "1"); err == nil || !refusedAtConnect(out) {
		t.Errorf("the old credential after a restart: %v %q; want refused", err, out)
	}
	if out, err := mosquitto(t, c.BrokerURL, sub, s2.Username, s2.Password, "edge-site2", "-t", "bm/v1/site/site2/bmc/cmd", "-W", "1"); err == nil || !refusedAtConnect(out) {
		t.Errorf("the deleted site's credential after a restart: %v %q; want refused", err, out)
	}
	if _, listed := siteOnline(cl, "site2"); listed {
		t.Error("site2 is listed again after a restart")
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if on, _ := siteOnline(cl, "site1"); on {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the edge agent with the new credential did not reconnect to the restarted coordinator within 30 s")
		}
		time.Sleep(200 * time.Millisecond)
	}

	// The command line: site rotate writes the new credentials file with
	// mode 0600 even over a file that was readable by others, and its
	// credential is the one that works; site delete removes a site.
	file := filepath.Join(t.TempDir(), "site1.json")
	if err := os.WriteFile(file, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if rc := cli.Main([]string{"--url", "http://" + c.APIAddr, "site", "rotate", "site1", "--credentials-file", file}, nil, &out, &errb); rc != 0 ||
		!strings.Contains(out.String(), "the old one no longer works") {
		t.Fatalf("site rotate: exit %d, out %q, err %q", rc, out.String(), errb.String())
	}
	if st, err := os.Stat(file); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("credentials file after site rotate: %v, %v; want mode 0600", st.Mode(), err)
	}
	creds, err := agent.LoadCredentials(file)
	if err != nil || creds.Password == rot.Password || strings.Contains(out.String()+errb.String(), creds.Password) {
		t.Fatalf("credentials written by site rotate: %+v, %v (the password must be new, and not printed)", creds, err)
	}
	if o, err := mosquitto(t, c.BrokerURL, sub, creds.Username, creds.Password, "edge-site1.probe", "-t", "bm/v1/site/site1/bmc/cmd", "-W", "1"); refusedAtConnect(o) {
		t.Errorf("the credential site rotate wrote is refused: %v %q", err, o)
	}
	if o, err := mosquitto(t, c.BrokerURL, sub, rot.Username, rot.Password, "edge-site1.probe", "-t", "bm/v1/site/site1/bmc/cmd", "-W", "1"); err == nil || !refusedAtConnect(o) {
		t.Errorf("the credential before the CLI's rotation: %v %q; want refused", err, o)
	}
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "site3"}, nil); code != 201 {
		t.Fatalf("site add site3: %d", code)
	}
	out.Reset()
	errb.Reset()
	if rc := cli.Main([]string{"--url", "http://" + c.APIAddr, "site", "delete", "site3"}, nil, &out, &errb); rc != 0 || !strings.Contains(out.String(), "site site3 deleted") {
		t.Errorf("site delete: exit %d, out %q, err %q", rc, out.String(), errb.String())
	}
	if _, listed := siteOnline(cl, "site3"); listed {
		t.Error("site3 is still listed after site delete")
	}
	errb.Reset()
	if rc := cli.Main([]string{"--url", "http://" + c.APIAddr, "site", "delete", "site1"}, nil, &out, &errb); rc == 0 || !strings.Contains(errb.String(), "still has 1 node") {
		t.Errorf("site delete of a site with a node: exit %d, err %q", rc, errb.String())
	}
	// As the refusal says: the node moved to another site, the site goes.
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "site4"}, nil); code != 201 {
		t.Fatalf("site add site4: %d", code)
	}
	errb.Reset()
	if rc := cli.Main([]string{"--url", "http://" + c.APIAddr, "node", "set", "n1", "--site", "site4"}, nil, &out, &errb); rc != 0 {
		t.Fatalf("node set --site: exit %d, err %q", rc, errb.String())
	}
	if n := cl.Get(id); n.ConductorGroup != "site4" {
		t.Fatalf("node after node set --site site4: conductor_group %q", n.ConductorGroup)
	}
	if rc := cli.Main([]string{"--url", "http://" + c.APIAddr, "site", "delete", "site1"}, nil, &out, &errb); rc != 0 {
		t.Errorf("site delete once its node moved: exit %d, err %q", rc, errb.String())
	}
}
