package ui_test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/lib/webdriver"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// webDriver is the tests' side of a WebDriver session (lib/webdriver):
// a refusal fails the test.
type webDriver struct {
	t *testing.T
	s *webdriver.Session
}

func (d *webDriver) call(method, path string, body any) json.RawMessage {
	d.t.Helper()
	v, code, b := d.try(method, path, body)
	if code != 200 {
		d.t.Fatalf("webdriver %s %s: %d %s", method, path, code, b)
	}
	return v
}

// try is call that returns a refusal instead of failing the test.
func (d *webDriver) try(method, path string, body any) (json.RawMessage, int, []byte) {
	d.t.Helper()
	v, code, b, err := d.s.Do(method, path, body)
	if err != nil {
		d.t.Fatal(err)
	}
	return v, code, b
}

// js runs script in the page and returns its result as a string.
func (d *webDriver) js(script string, args ...any) string {
	d.t.Helper()
	if args == nil {
		args = []any{}
	}
	v := d.call("POST", "/execute/sync", map[string]any{"script": script, "args": args})
	var s string
	if json.Unmarshal(v, &s) != nil {
		return string(v)
	}
	return s
}

func (d *webDriver) open(url string) {
	d.t.Helper()
	d.call("POST", "/url", map[string]string{"url": url})
}

// waitJS waits until script returns want, or fails naming what it saw.
func (d *webDriver) waitJS(script, want string, timeout time.Duration) {
	d.t.Helper()
	deadline := time.Now().Add(timeout)
	var got string
	for time.Now().Before(deadline) {
		if got = d.js(script); got == want {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	d.t.Fatalf("%s: %q after %s, want %q", script, got, timeout, want)
}

// element finds one element by CSS selector and returns its id.
func (d *webDriver) element(css string) string {
	d.t.Helper()
	var el map[string]string
	_ = json.Unmarshal(d.call("POST", "/element", map[string]string{"using": "css selector", "value": css}), &el)
	for _, id := range el {
		return id
	}
	d.t.Fatalf("no element %s", css)
	return ""
}

// keys types text into an element as a keyboard would (it takes the
// focus first). The live part of a page may be made anew between finding
// the element and typing: it is found again then.
func (d *webDriver) keys(css, text string) {
	d.t.Helper()
	for i := 0; ; i++ {
		_, code, b := d.try("POST", "/element/"+d.element(css)+"/value", map[string]string{"text": text})
		if code == 200 {
			return
		}
		if i == 10 || !strings.Contains(string(b), "stale element") {
			d.t.Fatalf("typing into %s: %d %s", css, code, b)
		}
	}
}

// alert returns the text of the open confirmation and accepts it.
func (d *webDriver) alert() string {
	d.t.Helper()
	var text string
	_ = json.Unmarshal(d.call("GET", "/alert/text", nil), &text)
	d.call("POST", "/alert/accept", map[string]any{})
	return text
}

// unlabelled lists the page's visible form controls that have no
// accessible name (a label around or for them, or aria-label).
const unlabelled = `var bad = [];
	document.querySelectorAll("input, select, textarea").forEach(function (el) {
		if (el.type === "hidden" || el.closest("[hidden]")) return;
		if ((el.labels && el.labels.length) || el.getAttribute("aria-label")) return;
		bad.push(el.outerHTML.slice(0, 80));
	});
	return bad.join(" | ")`

func (d *webDriver) screenshot(dir, name string) {
	d.t.Helper()
	var b64 string
	_ = json.Unmarshal(d.call("GET", "/screenshot", nil), &b64)
	png, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(png) == 0 {
		d.t.Fatalf("screenshot %s: %v", name, err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, png, 0o644); err != nil {
		d.t.Fatal(err)
	}
	d.t.Logf("screenshot: %s (%d bytes)", p, len(png))
}

// startChrome starts chromedriver on loopback and a headless Chromium
// session; both end with the test.
func startChrome(t *testing.T) *webDriver {
	t.Helper()
	s, err := webdriver.Start(webdriver.Options{ProfileDir: t.TempDir(), Args: []string{"--hide-scrollbars"}, Output: os.Stderr, Logf: t.Logf})
	if errors.Is(err, webdriver.ErrNotInstalled) {
		msg := err.Error() + ": the browser test of the web view is skipped"
		if os.Getenv("BM_REQUIRE_ALL") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return &webDriver{t: t, s: s}
}

// TestUIBrowser (acceptance 1) drives Debian's headless Chromium through
// chromedriver against a coordinator with http_basic authentication and
// a simulated site of 8 nodes: the fleet page and the node list show the
// 8 nodes; provide, clicked on a node's page and confirmed, moves the
// node to cleaning and then available on that page without a reload
// (server-sent events); a failed node's last_error is shown. Screenshots
// of the fleet page and a node page are kept in $BM_ARTIFACTS (or the
// test's temporary folder).
func TestUIBrowser(t *testing.T) {
	d := startChrome(t)
	c := testrig.Coordinator(t, testrig.Options{Users: map[string]string{"operator": "browser test password"}})
	testrig.Site(t, c, "site1", agent.SimOptions{Nodes: 8, StepDuration: 400 * time.Millisecond})
	cl := testrig.NewClient(t, c)
	// A second site whose agent never connected: offline on the fleet page.
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "site2"}, nil); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	ids := make([]string, 8)
	for i := range ids {
		info := map[string]any{}
		if i == 7 {
			info["fake_fail_step"] = "erase_devices"
		}
		ids[i] = cl.CreateNode(fmt.Sprintf("node-%d", i), "site1", info)
		cl.MustVerb(ids[i], "manage", nil)
	}
	for _, id := range ids {
		if n := cl.WaitRest(id, 20*time.Second); n.State != "manageable" {
			t.Fatalf("manage %s: %q %q", id, n.State, n.LastError)
		}
	}
	cl.MustVerb(ids[7], "provide", nil)
	if n := cl.WaitRest(ids[7], 20*time.Second); n.State != "clean failed" || n.LastError == "" {
		t.Fatalf("failing node: %q %q", n.State, n.LastError)
	}
	failedErr := cl.Get(ids[7]).LastError

	// Log in: the browser sends the operator's HTTP Basic credentials
	// with every request of the page (fetch and EventSource too).
	auth := base64.StdEncoding.EncodeToString([]byte(cl.User + ":" + cl.Password))
	d.call("POST", "/goog/cdp/execute", map[string]any{"cmd": "Network.enable", "params": map[string]any{}})
	d.call("POST", "/goog/cdp/execute", map[string]any{"cmd": "Network.setExtraHTTPHeaders",
		"params": map[string]any{"headers": map[string]string{"Authorization": "Basic " + auth}}})

	art := os.Getenv("BM_ARTIFACTS")
	if art == "" {
		art = t.TempDir()
	} else if err := os.MkdirAll(art, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("web view screenshots go to %s", art)

	d.open(cl.Base + "/ui/")
	d.waitJS(`return document.getElementById("total-nodes") ? document.getElementById("total-nodes").textContent : "missing"`, "8", 30*time.Second)
	d.waitJS(`return document.getElementById("total-failed").textContent`, "1", 30*time.Second)
	d.waitJS(`return document.getElementById("live-status").textContent`, "live", 30*time.Second)
	if bad := d.js(unlabelled); bad != "" {
		t.Errorf("fleet page: controls without a label: %s", bad)
	}
	d.screenshot(art, "ui-fleet.png")
	if os.Getenv("BM_UI_DOCS_IMAGES") == "1" {
		// The README's picture: BM_UI_DOCS_IMAGES=1 go test -run TestUIBrowser ./coordinator/ui/
		b, err := os.ReadFile(filepath.Join(art, "ui-fleet.png"))
		if err == nil {
			err = os.WriteFile(filepath.Join("..", "..", "docs", "images", "ui-fleet.png"), b, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}

	// The site page, reached from the fleet page's link.
	d.js(`document.querySelector('#sites a[href="/ui/sites/site1"]').click(); return ""`)
	d.waitJS(`return document.getElementById("site-nodes") ? document.getElementById("site-nodes").textContent : "missing"`, "8", 30*time.Second)
	d.waitJS(`return String(document.querySelectorAll("#nodes tbody tr[data-uuid]").length)`, "8", 30*time.Second)
	if sw := d.js(`return document.getElementById("site-software").textContent`); !strings.HasPrefix(sw, "bmedge ") {
		t.Errorf("site page: the edge agent's software shows %q", sw)
	}
	if bad := d.js(unlabelled); bad != "" {
		t.Errorf("site page: controls without a label: %s", bad)
	}

	d.open(cl.Base + "/ui/nodes")
	d.waitJS(`return String(document.querySelectorAll("#nodes tbody tr[data-uuid]").length)`, "8", 30*time.Second)
	d.waitJS(`return document.querySelector('tr[data-uuid="`+ids[7]+`"] [data-f=last_error]').textContent`, failedErr, 30*time.Second)

	// The failed node's page shows its last_error.
	d.open(cl.Base + "/ui/nodes/" + ids[7])
	d.waitJS(`return document.querySelector("#live [data-f=last_error]").textContent`, failedErr, 30*time.Second)

	// Provide node-0 from its page.
	d.open(cl.Base + "/ui/nodes/" + ids[0])
	d.waitJS(`return document.getElementById("live-status").textContent`, "live", 30*time.Second)
	d.waitJS(`return document.querySelector("#live [data-f=provision_state]").textContent`, "manageable", 30*time.Second)
	// A mark that a reload would lose.
	d.js(`window.notReloaded = "yes"; return ""`)
	// Record every state the page shows, as the events bring them.
	d.js(`window.shownStates = [];
		var note = function () {
			var el = document.querySelector("#live [data-f=provision_state]");
			var s = el ? el.textContent : "";
			if (window.shownStates[window.shownStates.length - 1] !== s) window.shownStates.push(s);
		};
		note();
		new MutationObserver(note).observe(document.getElementById("live"), {subtree: true, childList: true, characterData: true});
		return ""`)
	d.js(`document.querySelector('button[data-action="provide"]').click(); return ""`)
	var text string
	_ = json.Unmarshal(d.call("GET", "/alert/text", nil), &text)
	if !strings.Contains(text, "cleaning erases the node's disks") {
		t.Fatalf("provide's confirmation says %q, not that cleaning erases the disks", text)
	}
	d.call("POST", "/alert/accept", map[string]any{})
	// Every state the page shows, as the events bring them.
	d.waitJS(`return document.getElementById("action-result").textContent`, "Provide: accepted; the state follows live.", 30*time.Second)
	d.waitJS(`return document.querySelector("#live [data-f=provision_state]").textContent`, "available", 3*time.Minute)
	var shown []string
	_ = json.Unmarshal([]byte(d.js(`return JSON.stringify(window.shownStates)`)), &shown)
	t.Logf("states the page showed: %q", shown)
	cleaning, after := -1, -1
	for i, st := range shown {
		if cleaning < 0 && (st == "cleaning" || st == "clean wait") {
			cleaning = i
		}
		if cleaning >= 0 && st == "available" {
			after = i
		}
	}
	if cleaning < 0 || after < 0 {
		t.Fatalf("the page did not show cleaning and then available: %q", shown)
	}
	if got := d.js(`return window.notReloaded || "reloaded"`); got != "yes" {
		t.Fatalf("the page was reloaded: %q", got)
	}
	// The history timeline follows too (refreshed in place).
	d.waitJS(`return String(document.getElementById("history").textContent.indexOf("available") >= 0)`, "true", 30*time.Second)
	if bad := d.js(unlabelled); bad != "" {
		t.Errorf("node page: controls without a label: %s", bad)
	}
	d.screenshot(art, "ui-node.png")
	if n := cl.Get(ids[0]); n.State != "available" {
		t.Fatalf("node-0 is %q by the API", n.State)
	}

	// Retire on a selection of the node list: node-1 ticked with the
	// keyboard, node-0 (available: the API refuses) and node-2 clicked.
	d.open(cl.Base + "/ui/nodes?site=site1")
	d.waitJS(`return String(document.querySelectorAll("#nodes tbody tr[data-uuid]").length)`, "8", 30*time.Second)
	if bad := d.js(unlabelled); bad != "" {
		t.Errorf("node list: controls without a label: %s", bad)
	}
	d.keys(`input.pick[value="`+ids[1]+`"]`, " ")
	d.js(`document.querySelector('input.pick[value="` + ids[0] + `"]').click();
		document.querySelector('input.pick[value="` + ids[2] + `"]').click(); return ""`)
	d.waitJS(`return document.getElementById("bulk-count").textContent`, "3", 30*time.Second)
	d.js(`var s = document.getElementById("bulk-action"); s.value = "retire"; s.dispatchEvent(new Event("change")); return ""`)
	// Deploy's fields show only for Deploy.
	if got := d.js(`return String(document.getElementById("bulk-deploy").offsetHeight)`); got != "0" {
		t.Errorf("the deploy fields show (%s px high) with Retire chosen", got)
	}
	d.js(`document.getElementById("bulk-apply").click(); return ""`)
	if text := d.alert(); !strings.HasPrefix(text, "Retire 3 nodes (node-0, node-1, node-2)") || !strings.Contains(text, "can no longer be provided") {
		t.Fatalf("retire's confirmation says %q", text)
	}
	d.waitJS(`var l = document.querySelectorAll("#bulk-results li"); return l.length ? l[l.length-1].textContent : ""`,
		"Retire: 2 accepted, 1 refused; the states in the table follow live.", 10*time.Second)
	results := d.js(`return Array.from(document.querySelectorAll("#bulk-results li")).map(function (l) { return l.textContent }).join("\n")`)
	t.Logf("answers per node:\n%s", results)
	if !strings.Contains(results, "node-0: refused: 409: ") || !strings.Contains(results, "node-1: accepted") || !strings.Contains(results, "node-2: accepted") {
		t.Fatalf("answers per node:\n%s", results)
	}
	for i, want := range []bool{false, true, true} {
		if n := cl.Get(ids[i]); n.Retired != want {
			t.Fatalf("node-%d retired %v by the API, want %v", i, n.Retired, want)
		}
	}
	// The table follows (the selection stays ticked).
	d.waitJS(`return String(document.querySelectorAll("#nodes th .tag").length)`, "2", 30*time.Second)
	if got := d.js(`return String(document.querySelectorAll("input.pick:checked").length)`); got != "3" {
		t.Errorf("after the live refresh %s boxes are ticked, want 3", got)
	}

	d.screenshot(art, "ui-nodes.png")

	// A phone's width: nothing wider than the screen but the tables'
	// own scrolling boxes.
	d.call("POST", "/window/rect", map[string]int{"width": 390, "height": 844})
	for _, p := range []string{"/ui/", "/ui/nodes", "/ui/nodes/" + ids[7], "/ui/sites/site1"} {
		d.open(cl.Base + p)
		d.waitJS(`return document.getElementById("live-status").textContent`, "live", 30*time.Second)
		if got := d.js(`return String(document.documentElement.scrollWidth <= window.innerWidth)`); got != "true" {
			t.Errorf("%s at 390 px: the page is %s px wide", p, d.js(`return String(document.documentElement.scrollWidth)`))
		}
	}
	d.screenshot(art, "ui-site-phone.png")
}
