package ui_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bmedge/bmedge/coordinator/cluster"
	"github.com/bmedge/bmedge/coordinator/ui"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestUIClusterSingle: a single coordinator's cluster page says it is
// one, and no page links to it.
func TestUIClusterSingle(t *testing.T) {
	c := testrig.Coordinator(t, testrig.Options{})
	cl := testrig.NewClient(t, c)
	code, body := get(t, cl, "/ui/cluster", false)
	if code != 200 || !strings.Contains(body, `id="cluster-single"`) || !strings.Contains(body, "Single coordinator") || strings.Contains(body, "cluster-members") {
		t.Fatalf("GET /ui/cluster of a single coordinator: %d\n%s", code, body)
	}
	if _, body := get(t, cl, "/ui/", false); strings.Contains(body, `href="/ui/cluster"`) {
		t.Errorf("a single coordinator's fleet page links to the cluster page")
	}
}

// TestUIClusterPage: with a cluster status provider (injected over a real
// engine), the cluster page shows every member's name, address, role,
// voter, last contact, applied index and term, marks the leader, escapes
// everything and shows no keys fingerprint; the fleet page links to it;
// the live part alone is served on X-UI-Fragment; a status that cannot be
// read is said so.
func TestUIClusterPage(t *testing.T) {
	c := testrig.Coordinator(t, testrig.Options{})
	contact := time.Now().Add(-7 * time.Second).UTC()
	st := cluster.Status{Member: "c2", Leader: "c1", Members: []cluster.MemberStatus{
		{Name: "c1", Address: "10.0.0.11:7000", Role: "leader", Voter: true, LastContact: &contact, AppliedIndex: 4211, Term: 5, Fingerprint: "fp-not-shown-1"},
		{Name: "c2", Address: "10.0.0.12:7000", Role: "follower", Voter: true, LastContact: &contact, AppliedIndex: 4209, Term: 5, Fingerprint: "fp-not-shown-2"},
		{Name: "c3<i>", Address: `10.0.0.13:7000"><script>alert(1)</script>`, Role: "unreachable", Voter: false, Error: "dial: <b>refused</b> & gone"},
		{Name: "c4", Address: "10.0.0.14:7000", Role: "candidate", Voter: true, AppliedIndex: 4100, Term: 6},
	}}
	var mu sync.Mutex
	var fail error
	h := ui.New(c.Engine, ui.Options{Cluster: func() (cluster.Status, error) { mu.Lock(); defer mu.Unlock(); return st, fail }})
	t.Cleanup(h.Close)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	fetch := func(path string, fragment bool) string {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		if fragment {
			req.Header.Set("X-UI-Fragment", "1")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
		}
		return string(b)
	}
	body := fetch("/ui/cluster", false)
	for _, want := range []string{
		`Leader: <b>c1</b>`, `as member c2 sees it`,
		`<tr data-member="c1" class="leader">`, `c1 <span class="ok">(leader)</span>`, `<code>10.0.0.11:7000</code>`, `<td class="applied">4211</td>`,
		`<tr data-member="c2">`, `<td class="role">follower</td>`, `<td class="applied">4209</td>`, `<time datetime="` + contact.Format(time.RFC3339) + `">7s ago</time>`,
		`c3&lt;i&gt;`, `10.0.0.13:7000&#34;&gt;&lt;script&gt;alert(1)&lt;/script&gt;`, `<span class="bad">unreachable</span>`, `no (catching up)`, `dial: &lt;b&gt;refused&lt;/b&gt; &amp; gone`,
		`<span class="bad">candidate</span>`, `<td class="applied">4100</td>`, `<td>6</td>`,
		`href="/ui/cluster" aria-current="page"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the cluster page lacks %s", want)
		}
	}
	for _, not := range []string{"<script>alert", "<b>refused", "c3<i>", "fp-not-shown"} {
		if strings.Contains(body, not) {
			t.Errorf("the cluster page shows %q", not)
		}
	}
	if got := strings.Count(body, `class="leader"`); got != 1 {
		t.Errorf("%d rows marked leader, want 1", got)
	}
	if frag := fetch("/ui/cluster", true); strings.Contains(frag, "<html") || !strings.Contains(frag, `<tr data-member="c1" class="leader">`) {
		t.Errorf("the cluster page's live part:\n%s", frag)
	}
	if fleet := fetch("/ui/", false); !strings.Contains(fleet, `href="/ui/cluster"`) {
		t.Errorf("a member's fleet page does not link to the cluster page")
	}
	mu.Lock()
	st.Leader = ""
	mu.Unlock()
	if body := fetch("/ui/cluster", false); !strings.Contains(body, `<span class="bad">No leader</span>`) || strings.Contains(body, `class="leader"`) {
		t.Errorf("with no leader the cluster page says:\n%s", body)
	}
	mu.Lock()
	fail = errors.New("raft: <shut down>")
	mu.Unlock()
	if body := fetch("/ui/cluster", false); !strings.Contains(body, `could not be read: raft: &lt;shut down&gt;`) || strings.Contains(body, "cluster-members") {
		t.Errorf("with a status that fails the cluster page says:\n%s", body)
	}
}
