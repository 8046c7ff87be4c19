package ui_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/coordinator/ui"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

func get(t *testing.T, cl *testrig.Client, path string, auth bool) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", cl.Base+path, nil)
	if auth {
		req.SetBasicAuth(cl.User, cl.Password)
	}
	// An events stream never ends: the body is read for at most 5 s.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestUIAuthAndCSRF: with --auth http_basic every page, data endpoint,
// asset and the events stream of the web view answer 401 without
// credentials; a cross-site form POST to an action URL the node page
// uses is refused (415) and changes nothing; the view itself takes no
// POST.
func TestUIAuthAndCSRF(t *testing.T) {
	c := testrig.Coordinator(t, testrig.Options{Users: map[string]string{"op": "correct horse battery"}})
	cl := testrig.NewClient(t, c)
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "site1"}, nil); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	id := cl.CreateNode("n1", "site1", nil)
	for _, p := range []string{"/ui/", "/ui", "/ui/nodes", "/ui/nodes?state=enroll", "/ui/nodes/" + id, "/ui/api/nodes/" + id,
		"/ui/sites/site1", "/ui/events", "/ui/events?node=" + id, "/ui/static/ui.js", "/ui/static/ui.css", "/ui/nope"} {
		if code, _ := get(t, cl, p, false); code != 401 {
			t.Errorf("GET %s without credentials: %d, want 401", p, code)
		}
	}
	for _, p := range []string{"/ui/", "/ui/nodes", "/ui/nodes/" + id, "/ui/sites/site1", "/ui/api/nodes/" + id, "/ui/static/ui.js"} {
		if code, _ := get(t, cl, p, true); code != 200 {
			t.Errorf("GET %s with credentials: %d, want 200", p, code)
		}
	}
	// A form on another site posting to the action URL: the browser
	// would send the cached credentials, so they are sent here too.
	for _, path := range []string{"/v1/nodes/" + id + "/states/provision", "/v1/nodes/" + id + "/maintenance"} {
		for _, method := range []string{"POST", "PUT"} {
			req, _ := http.NewRequest(method, cl.Base+path, strings.NewReader(url.Values{"target": {"manage"}}.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Origin", "http://evil.example")
			req.SetBasicAuth(cl.User, cl.Password)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if want := 415; method == "PUT" && resp.StatusCode != want {
				t.Errorf("cross-site form %s %s: %d, want %d", method, path, resp.StatusCode, want)
			} else if method == "POST" && resp.StatusCode < 400 {
				t.Errorf("cross-site form %s %s: %d, want a refusal", method, path, resp.StatusCode)
			}
		}
	}
	// The view's own URLs take no POST.
	req, _ := http.NewRequest("POST", cl.Base+"/ui/nodes/"+id, strings.NewReader("target=manage"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(cl.User, cl.Password)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 {
		t.Errorf("POST to the web view: %d, want 405", resp.StatusCode)
	}
	if n := cl.Get(id); n.State != "enroll" || n.Maintenance {
		t.Fatalf("the refused requests changed the node: %q maintenance %v", n.State, n.Maintenance)
	}
}

type sse struct {
	resp *http.Response
	rd   *bufio.Reader
}

func openEvents(t *testing.T, base, path, user, pass string) *sse {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", base+path, nil)
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); resp.Body.Close() })
	return &sse{resp: resp, rd: bufio.NewReader(resp.Body)}
}

// next returns the next event's name and data.
func (s *sse) next() (string, string, error) {
	var ev, data string
	for {
		line, err := s.rd.ReadString('\n')
		if err != nil {
			return "", "", err
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "" && ev != "":
			return ev, data, nil
		case strings.HasPrefix(line, "event: "):
			ev = line[7:]
		case strings.HasPrefix(line, "data: "):
			data += line[6:]
		}
	}
}

// TestUIEventsFollowVerb: an events client receives a node's new
// summary as a verb moves it, without asking; a node's secrets are in
// none of what the view sends.
func TestUIEventsFollowVerb(t *testing.T) {
	c := testrig.Coordinator(t, testrig.Options{Users: map[string]string{"op": "correct horse battery"}})
	testrig.Site(t, c, "site1", agent.SimOptions{Nodes: 2, StepDuration: 50 * time.Millisecond})
	cl := testrig.NewClient(t, c)
	const secret = "pa55-not-for-eyes"
	id := cl.CreateNode("n1", "site1", map[string]any{"ipmi_password": secret, "redfish_password": secret})
	other := cl.CreateNode("n2", "site1", nil)
	ev := openEvents(t, cl.Base, "/ui/events?node="+id, cl.User, cl.Password)
	if ev.resp.StatusCode != 200 || !strings.HasPrefix(ev.resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("events: %d %s", ev.resp.StatusCode, ev.resp.Header.Get("Content-Type"))
	}
	all := openEvents(t, cl.Base, "/ui/events", cl.User, cl.Password)
	cl.MustVerb(other, "manage", nil)
	cl.MustVerb(id, "manage", nil)
	seen := map[string]bool{}
	deadline := time.AfterFunc(20*time.Second, func() { ev.resp.Body.Close() })
	defer deadline.Stop()
	for !seen["manageable"] {
		name, data, err := ev.next()
		if err != nil {
			t.Fatalf("events ended before the node was manageable (seen %v): %v", seen, err)
		}
		if strings.Contains(data, secret) {
			t.Fatalf("an event shows the node's password: %s", data)
		}
		if name != "node" {
			continue
		}
		var s ui.Summary
		if err := json.Unmarshal([]byte(data), &s); err != nil {
			t.Fatal(err)
		}
		if s.UUID != id {
			t.Fatalf("a stream for %s sent %s", id, s.UUID)
		}
		seen[s.State] = true
	}
	// The unfiltered stream sends both nodes.
	nodes := map[string]bool{}
	deadline2 := time.AfterFunc(20*time.Second, func() { all.resp.Body.Close() })
	defer deadline2.Stop()
	for !nodes[id] || !nodes[other] {
		name, data, err := all.next()
		if err != nil {
			t.Fatalf("unfiltered events ended having sent %v: %v", nodes, err)
		}
		if name == "node" {
			var s ui.Summary
			_ = json.Unmarshal([]byte(data), &s)
			nodes[s.UUID] = true
		}
	}
	for _, p := range []string{"/ui/nodes/" + id, "/ui/api/nodes/" + id, "/ui/nodes", "/ui/"} {
		code, body := get(t, cl, p, true)
		if code != 200 || strings.Contains(body, secret) {
			t.Fatalf("GET %s: %d, secret shown: %v", p, code, strings.Contains(body, secret))
		}
	}
}

// TestUIEventsBounded: a watcher that never reads does not hold the
// engine (its changes are dropped and Lost says so, for a resync), and
// events streams beyond the cap are refused with 503.
func TestUIEventsBounded(t *testing.T) {
	c := testrig.Coordinator(t, testrig.Options{})
	testrig.Site(t, c, "site1", agent.SimOptions{Nodes: 1, StepDuration: 20 * time.Millisecond})
	cl := testrig.NewClient(t, c)
	id := cl.CreateNode("n1", "site1", nil)
	sub, cancel := c.Engine.SubscribeViews(1)
	defer cancel()
	cl.MustVerb(id, "manage", nil)
	if n := cl.WaitRest(id, 20*time.Second); n.State != "manageable" {
		t.Fatalf("manage with a stuck watcher: %q %q", n.State, n.LastError)
	}
	if !sub.Lost() {
		t.Fatalf("a watcher with room for one change was not told it lost some")
	}
	if len(sub.C) != 1 {
		t.Fatalf("the watcher holds %d changes, want its buffer's 1", len(sub.C))
	}

	h := ui.New(c.Engine, ui.Options{Log: testrig.Logger(t), MaxEventClients: 2})
	srv := httptest.NewServer(h)
	defer srv.Close()
	defer h.Close()
	for i := 0; i < 2; i++ {
		if s := openEvents(t, srv.URL, "/ui/events", "", ""); s.resp.StatusCode != 200 {
			t.Fatalf("events client %d: %d", i, s.resp.StatusCode)
		}
	}
	over := openEvents(t, srv.URL, "/ui/events", "", "")
	if over.resp.StatusCode != 503 || over.resp.Header.Get("Retry-After") == "" {
		t.Fatalf("third events client with a cap of 2: %d Retry-After %q", over.resp.StatusCode, over.resp.Header.Get("Retry-After"))
	}
}

// TestUINodeListPages: the node list shows one page of PageSize nodes
// with links to the others, and filters by state, site, maintenance and
// name.
func TestUINodeListPages(t *testing.T) {
	c := testrig.Coordinator(t, testrig.Options{})
	cl := testrig.NewClient(t, c)
	for _, s := range []string{"east", "west"} {
		if code := cl.Do("POST", "/v1/sites", map[string]string{"name": s}, nil); code != 201 {
			t.Fatalf("site add: %d", code)
		}
	}
	const total = ui.PageSize*2 + 7
	var last string
	for i := 0; i < total; i++ {
		site := "east"
		if i%3 == 0 {
			site = "west"
		}
		last = cl.CreateNode(fmt.Sprintf("rack-%03d", i), site, nil)
	}
	if code := cl.Do("PUT", "/v1/nodes/"+last+"/maintenance", map[string]string{"reason": "disk"}, nil); code != 202 {
		t.Fatalf("maintenance: %d", code)
	}
	rows := func(body string) int { return strings.Count(body, "<tr data-uuid=") }
	cases := []struct {
		query string
		rows  int
		text  string
	}{
		{"", ui.PageSize, fmt.Sprintf("Nodes 1–%d of %d", ui.PageSize, total)},
		{"?page=3", 7, fmt.Sprintf("Nodes %d–%d of %d", 2*ui.PageSize+1, total, total)},
		{"?site=west", 36, "Nodes 1–36 of 36"},
		{"?maintenance=true", 1, "rack-106"},
		{"?q=RACK-01", 10, "Nodes 1–10 of 10"},
		{"?state=available", 0, "No node matches."},
		{"?state=enroll&site=west&page=2", 0, "Page 2 is past the end: 36 nodes match"},
	}
	for _, cs := range cases {
		code, body := get(t, cl, "/ui/nodes"+cs.query, false)
		if code != 200 || rows(body) != cs.rows || !strings.Contains(body, cs.text) {
			t.Errorf("GET /ui/nodes%s: %d, %d rows (want %d), %q shown: %v", cs.query, code, rows(body), cs.rows, cs.text, strings.Contains(body, cs.text))
		}
	}
	code, body := get(t, cl, "/ui/", false)
	if code != 200 || !strings.Contains(body, `<b id="total-nodes">107</b>`) || !strings.Contains(body, `<b id="total-maintenance">1</b>`) {
		t.Errorf("fleet page: %d\n%s", code, body)
	}
}

// TestUIEventsPerUserShare (issue 30): one user holds at most
// DefaultMaxEventClientsPerUser live-view streams of the coordinator's
// DefaultMaxEventClients; one more of theirs is refused (503, Retry-After,
// saying so), and another user still gets one.
func TestUIEventsPerUserShare(t *testing.T) {
	c := testrig.Coordinator(t, testrig.Options{Users: map[string]string{"greedy": "greedy password", "other": "other password"}})
	cl := testrig.NewClient(t, c)
	for i := 0; i < ui.DefaultMaxEventClientsPerUser; i++ {
		if s := openEvents(t, cl.Base, "/ui/events", "greedy", "greedy password"); s.resp.StatusCode != 200 {
			t.Fatalf("greedy's stream %d: %d", i+1, s.resp.StatusCode)
		}
	}
	over := openEvents(t, cl.Base, "/ui/events", "greedy", "greedy password")
	body, _ := io.ReadAll(over.resp.Body)
	if over.resp.StatusCode != 503 || over.resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "the most one user may") {
		t.Fatalf("greedy's stream %d: %d Retry-After %q %q; want 503 naming the per-user share", ui.DefaultMaxEventClientsPerUser+1,
			over.resp.StatusCode, over.resp.Header.Get("Retry-After"), body)
	}
	if s := openEvents(t, cl.Base, "/ui/events", "other", "other password"); s.resp.StatusCode != 200 {
		t.Fatalf("another user's stream while greedy holds their share: %d", s.resp.StatusCode)
	}
}
