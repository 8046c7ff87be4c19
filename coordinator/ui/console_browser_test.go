package ui_test

import (
	"encoding/base64"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestUIConsoleBrowser: the node page's terminal (xterm.js, served by
// the coordinator) in headless Chromium shows the simulated console's
// login prompt, and a line typed in it reaches the node: the node's
// echo and answer are in the console log the API keeps.
func TestUIConsoleBrowser(t *testing.T) {
	d := startChrome(t)
	c := testrig.Coordinator(t, testrig.Options{Users: map[string]string{"operator": "console browser password"}})
	testrig.Site(t, c, "site1", agent.SimOptions{Nodes: 1, NoBoot: true})
	cl := testrig.NewClient(t, c)
	id := cl.CreateNode("con-1", "site1", nil)
	if code := cl.Do("PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "replace", "path": "/console_interface", "value": "fake"}}, nil); code != 200 {
		t.Fatalf("PATCH console_interface: %d", code)
	}
	if code := cl.Do("PUT", "/v1/nodes/"+id+"/states/console", map[string]any{"enabled": true}, nil); code != 202 {
		t.Fatalf("enable the console: %d", code)
	}
	auth := base64.StdEncoding.EncodeToString([]byte(cl.User + ":" + cl.Password))
	d.call("POST", "/goog/cdp/execute", map[string]any{"cmd": "Network.enable", "params": map[string]any{}})
	d.call("POST", "/goog/cdp/execute", map[string]any{"cmd": "Network.setExtraHTTPHeaders",
		"params": map[string]any{"headers": map[string]string{"Authorization": "Basic " + auth}}})
	d.open(cl.Base + "/ui/nodes/" + id)
	// The terminal's text, from xterm.js's buffer.
	screen := `var b = document.getElementById("console-term"), t = b && b.xterm, out = [];
		if (!t) return "no terminal";
		var buf = t.buffer.active;
		for (var i = 0; i < buf.length; i++) out.push(buf.getLine(i).translateToString(true));
		return b.received + " bytes: " + out.join("\n")`
	has := func(s string) string {
		return `var b = document.getElementById("console-term"), t = b && b.xterm;
		if (!t) return "false";
		var buf = t.buffer.active, out = [];
		for (var i = 0; i < buf.length; i++) out.push(buf.getLine(i).translateToString(true));
		return String(out.join("\n").indexOf(` + jsString(s) + `) >= 0)`
	}
	d.waitJS(`return document.getElementById("console-status").textContent`, "Connected to the console.", 30*time.Second)
	logOf := func() string {
		req, _ := http.NewRequest("GET", cl.Base+"/v1/nodes/"+id+"/console/log", nil)
		req.SetBasicAuth(cl.User, cl.Password)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	for end := time.Now().Add(60 * time.Second); d.js(has("login:")) != "true"; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("no login prompt in the browser's terminal: %q; the console log: %q", d.js(screen), logOf())
		}
	}
	// Only the actions an enroll node allows: manage, not provide.
	if got := d.js(`return String(!!document.querySelector('button[data-action="manage"]')) + " " + String(!!document.querySelector('button[data-action="provide"]'))`); got != "true false" {
		t.Errorf("an enroll node's page offers manage, provide: %s, want true false", got)
	}
	const enter = "\uE007"
	d.keys("#console-term .xterm-helper-textarea", "root"+enter)
	d.waitJS(has("Password:"), "true", 30*time.Second)
	d.keys("#console-term .xterm-helper-textarea", "pw"+enter)
	d.waitJS(has("root@"), "true", 30*time.Second)
	d.keys("#console-term .xterm-helper-textarea", "echo from-the-browser"+enter)
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequest("GET", cl.Base+"/v1/nodes/"+id+"/console/log", nil)
		req.SetBasicAuth(cl.User, cl.Password)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(b), "echo from-the-browser\r\nfrom-the-browser\r\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the line typed in the browser did not reach the node; screen: %q", d.js(screen))
		}
		time.Sleep(200 * time.Millisecond)
	}
	d.waitJS(has("from-the-browser"), "true", 10*time.Second)
}

func jsString(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}
