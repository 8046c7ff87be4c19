package systest

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestClusterWebView fetches the web view's cluster page from a follower
// of three coordinator processes: it names every member with its address
// and role, marks the leader (the one every member's GET /v1/cluster
// names), and shows applied indexes; without credentials it is 401.
func TestClusterWebView(t *testing.T) {
	t.Parallel()
	ms, htpasswd := testrig.NewCluster(t, 3)
	peers := testrig.Peers(ms)
	for _, m := range ms {
		m.Start(t, peers, htpasswd)
	}
	leader := testrig.Settled(t, ms, 3, time.Minute)
	var follower *testrig.Member
	for _, m := range ms {
		if m.Name != leader {
			follower = m
			break
		}
	}
	page := func(user, pass string) (int, string) {
		req, _ := http.NewRequest("GET", "http://"+follower.API+"/ui/cluster", nil)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := page("", ""); code != 401 {
		t.Errorf("the cluster page through follower %s without credentials: %d, want 401", follower.Name, code)
	}
	var body string
	// The page is the leader's (the follower passes it on); roles settle
	// as the members' reports come in: poll until all three are there.
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, b := page(testrig.ClusterUser, testrig.ClusterPassword)
		body = b
		if code == 200 && strings.Count(body, `<td class="role">follower</td>`) == 2 && strings.Contains(body, `<td class="role">leader</td>`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cluster page through follower %s: %d\n%s", follower.Name, code, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !strings.Contains(body, "Leader: <b>"+leader+"</b>") || !strings.Contains(body, `<tr data-member="`+leader+`" class="leader">`) || strings.Count(body, `class="leader"`) != 1 {
		t.Errorf("the cluster page does not name %s as the one leader:\n%s", leader, body)
	}
	for _, m := range ms {
		if !strings.Contains(body, `<tr data-member="`+m.Name+`"`) || !strings.Contains(body, "<code>"+m.Link+"</code>") {
			t.Errorf("the cluster page lacks member %s at %s", m.Name, m.Link)
		}
	}
	// Applied indexes: each member's, as GET /v1/cluster has them (a
	// number in each row; the cluster is idle, but an index may move
	// between the two reads, so only their presence is compared).
	var st testrig.ClusterStatus
	if code := follower.Client(t).Do("GET", "/v1/cluster", nil, &st); code != 200 {
		t.Fatalf("GET /v1/cluster: %d", code)
	}
	for _, x := range st.Members {
		if x.AppliedIndex == 0 {
			t.Errorf("member %s reports applied index 0", x.Name)
		}
	}
	if n := strings.Count(body, `<td class="applied">`); n != 3 {
		t.Errorf("%d applied indexes on the page, want 3", n)
	}
	for _, field := range strings.Split(body, `<td class="applied">`)[1:] {
		v := field[:strings.Index(field, "<")]
		if i, err := strconv.ParseUint(v, 10, 64); err != nil || i == 0 {
			t.Errorf("an applied index on the page reads %q", v)
		}
	}
}
