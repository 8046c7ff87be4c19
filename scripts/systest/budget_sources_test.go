package systest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/protocol"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestManySourcesLeaveRoom (issue 30, acceptance 2): 20 source addresses
// (127.0.0.20–39) hold connections that never send a CONNECT or a
// request header on the coordinator's broker, the site broker and the
// API, each a little over its pending share per source, so that
// together they are over every listener's pending cap (20 × 128 > 2048
// on the brokers, 20 × 32 > 512 on the API); before the per-source
// eviction 17 such addresses locked every MQTT client out. A site's
// login to the coordinator's broker and a ramdisk's to the site broker
// (mosquitto_sub, an independent client) and an API client still get
// in, and both /metrics count the refusals by listener and kind (the
// evictions are netbudget's TestEvictionLeavesRoomForOthers'). The
// rescue SSH part of the acceptance is lib/rescuessh's
// TestStrangersLeaveRoom.
func TestManySourcesLeaveRoom(t *testing.T) {
	if testing.Short() {
		t.Skip("floods three listeners from 20 addresses (-short)")
	}
	sub := requireTool(t, "mosquitto_sub")
	c := testrig.Coordinator(t, testrig.Options{Machine: fsm.Config{WaitTimeout: 10 * time.Minute}})
	cl := testrig.NewClient(t, c)
	var edge, other agent.Credentials
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "edge1"}, &edge); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "s2"}, &other); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	a := testrig.StartAgentConfig(t, edge, agent.Config{
		Sim:           agent.SimOptions{Nodes: 1, NoBoot: true},
		SiteBroker:    agent.SiteBrokerOptions{Listen: "127.0.0.1:0"},
		MetricsListen: "127.0.0.1:0",
	})
	if err := a.AwaitUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	id, user, pass := bootingNode(t, c, cl, "r1", "edge1")
	u, err := url.Parse(c.APIURL)
	if err != nil {
		t.Fatal(err)
	}
	var floods []*flood
	for i := range 20 {
		src := fmt.Sprintf("127.0.0.%d", 20+i)
		floods = append(floods, startFlood(t, src, c.Broker.Addr, 130), startFlood(t, src, a.SiteBrokerAddr(), 130),
			startFlood(t, src, u.Host, 34))
	}
	deadline := time.Now().Add(2 * time.Minute)
	for _, f := range floods {
		for f.dials.Load() < int64(f.n) {
			if time.Now().After(deadline) {
				t.Fatalf("the flood did not open its connections within 2 min: %d of %d", f.dials.Load(), f.n)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// The caps are full now: the floods hold what they are let hold.
	full := func(what string, pending func() int, want int) {
		t.Helper()
		for pending() < want {
			if time.Now().After(deadline) {
				t.Fatalf("%s holds %d pending connections under the flood, want its cap %d", what, pending(), want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	full("the coordinator's broker", func() int { return c.Broker.ConnStats().Pending }, 2048)
	full("the site broker", func() int { st, _ := a.SiteBrokerConnStats(); return st.Pending }, 2048)
	full("the API", func() int {
		for _, st := range c.Conns.Stats() {
			if st.Name == "api" {
				return st.Pending
			}
		}
		return 0
	}, 512)

	login := func(what, brokerURL, user, pass, clientID, topic string) {
		t.Helper()
		for i := range 3 {
			out, err := mosquitto(t, brokerURL, sub, user, pass, clientID, "-t", topic, "-E", "-W", "5")
			if err != nil {
				t.Fatalf("%s from 127.0.0.1 while 20 addresses flood it (try %d): %v %q", what, i+1, err, out)
			}
		}
	}
	login("a site's login to the coordinator's broker", c.BrokerURL, other.Username, other.Password, "edge-s2", protocol.BMCCmdTopic("s2"))
	login("a ramdisk's login to the site broker", "mqtt://"+a.SiteBrokerAddr(), user, pass, "ramdisk-"+id, protocol.NodeCmdTopic("edge1", id))
	for i := range 3 {
		// A new connection each time (no keep-alive left from before).
		code, text := scrape(t, c.APIURL+"/metrics", "", "")
		if code != 200 {
			t.Fatalf("an API client from 127.0.0.1 while 20 addresses flood the API (try %d): %d %s", i+1, code, text)
		}
	}
	_, text := scrape(t, c.APIURL+"/metrics", "", "")
	_, atext := scrape(t, "http://"+a.MetricsAddr()+"/metrics", "", "")
	for _, f := range floods {
		f.close()
	}
	for _, l := range []string{"mqtt", "api"} {
		ev := sample(text, `bmedge_listener_refused_total{kind="evicted",listener="`+l+`"}`)
		over := sample(text, `bmedge_listener_refused_total{kind="pending-per-source",listener="`+l+`"}`) +
			sample(text, `bmedge_listener_refused_total{kind="pending",listener="`+l+`"}`)
		// Whether a login had to evict depends on the flood's churn at
		// that moment (its sockets time out at 10 s and come back):
		// evictions are logged, refusals required.
		t.Logf("coordinator %s: %v evicted, %v refused over a pending cap", l, ev, over)
		if ev < 0 || over < 1 {
			t.Errorf("coordinator /metrics, listener %s: evicted %v, %v refused over a pending cap; want the series and refusals counted", l, ev, over)
		}
	}
	ev := sample(atext, `bmedge_agent_listener_refused_total{kind="evicted",listener="site-broker"}`)
	over := sample(atext, `bmedge_agent_listener_refused_total{kind="pending-per-source",listener="site-broker"}`) +
		sample(atext, `bmedge_agent_listener_refused_total{kind="pending",listener="site-broker"}`)
	t.Logf("site broker: %v evicted, %v refused over a pending cap", ev, over)
	if ev < 0 || over < 1 {
		t.Errorf("agent /metrics, site broker: evicted %v, %v refused over a pending cap; want the series and refusals counted", ev, over)
	}
}

// TestStrangerKeepAliveStaysPending: with http_basic, a connection that
// has only sent requests without credentials (GET /, which is served) or
// with a wrong password stays pending, however many requests it keeps
// alive: 32 such connections from 127.0.0.5 hold its whole pending share
// and a 33rd is refused; a connection whose request passed
// authentication is settled and no longer counts (the control).
func TestStrangerKeepAliveStaysPending(t *testing.T) {
	c := testrig.Coordinator(t, testrig.Options{Auth: "http_basic", HTPasswd: testrig.HTPasswd(t, map[string]string{"op": "pw"})})
	u, err := url.Parse(c.APIURL)
	if err != nil {
		t.Fatal(err)
	}
	get := func(cl *http.Client, user, pw string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", c.APIURL+"/", nil)
		if user != "" {
			req.SetBasicAuth(user, pw)
			req.URL.Path = "/v1/nodes"
		}
		resp, err := cl.Do(req)
		if err != nil {
			return -1
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	from := func(src string) *http.Client {
		return &http.Client{Transport: &http.Transport{DisableKeepAlives: false, MaxIdleConnsPerHost: 1,
			DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}).DialContext}}
	}
	pending := func() int {
		for _, st := range c.Conns.Stats() {
			if st.Name == "api" {
				return st.Pending
			}
		}
		return -1
	}
	base := pending()
	var held []*http.Client
	for i := range 32 {
		cl := from("127.0.0.5")
		held = append(held, cl)
		want := 200
		if i < 16 && i%2 == 1 { // 8 wrong passwords: under the login throttle's burst
			want = 401
			if got := get(cl, "op", "wrong"); got != want {
				t.Fatalf("stranger's request %d: %d, want %d", i, got, want)
			}
			continue
		}
		if got := get(cl, "", ""); got != want {
			t.Fatalf("stranger's request %d: %d, want %d", i, got, want)
		}
	}
	defer func() {
		for _, cl := range held {
			cl.CloseIdleConnections()
		}
	}()
	if got := pending() - base; got != 32 {
		t.Fatalf("%d pending connections after 32 strangers' keep-alive requests, want 32 (%s)", got, u.Host)
	}
	if got := get(from("127.0.0.5"), "", ""); got != -1 {
		t.Fatalf("a 33rd connection from 127.0.0.5 over its pending share: HTTP %d, want refused", got)
	}
	// The control: an authenticated request settles its connection.
	op := from("127.0.0.6")
	defer op.CloseIdleConnections()
	if got := get(op, "op", "pw"); got != 200 {
		t.Fatalf("operator: %d", got)
	}
	if got := pending() - base; got != 32 {
		t.Fatalf("%d pending after the operator's authenticated request, want still 32 (its connection settled)", got)
	}
}
