package systest

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// scrape GETs url and returns the body; user, when set, logs in.
func scrape(t *testing.T, url, user, password string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if user != "" {
		req.SetBasicAuth(user, password)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == 200 && !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Errorf("GET %s: Content-Type %q, want Prometheus' text format", url, resp.Header.Get("Content-Type"))
	}
	return resp.StatusCode, string(b)
}

// sample returns the value of the series line that starts with series
// (name and labels as written), or -1.
func sample(text, series string) float64 {
	for _, l := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(l, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err == nil {
				return v
			}
		}
	}
	return -1
}

// promtool runs `promtool check metrics` on text. A missing promtool
// skips the check, unless BM_REQUIRE_ALL=1 (make test) makes it fail.
func promtool(t *testing.T, what, text string) {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("BM_REQUIRE_ALL") == "1" {
			t.Fatalf("promtool is missing (Debian package prometheus; scripts/install-test-deps.sh installs it)")
		}
		t.Logf("promtool is missing (Debian package prometheus): %s's output is not checked by it", what)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "check", "metrics")
	cmd.Stdin = strings.NewReader(text)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Errorf("promtool check metrics on the %s's /metrics: %v\n%s", what, err, out.String())
	}
}

// TestMetrics runs a node of a simulated site through manage and provide
// (automated cleaning), then reads both programs' /metrics: the series
// the activity must have made are there, and promtool accepts both.
func TestMetrics(t *testing.T) {
	c := testrig.Coordinator(t, testrig.Options{})
	var creds agent.Credentials
	cl := testrig.NewClient(t, c)
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "site1"}, &creds); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	a := testrig.StartAgentConfig(t, creds, agent.Config{MetricsListen: "127.0.0.1:0",
		Sim: agent.SimOptions{Nodes: 2, StepDuration: 50 * time.Millisecond}})
	if a.MetricsAddr() == "" {
		t.Fatal("the agent serves no metrics with MetricsListen set")
	}
	id := cl.CreateNode("n1", "site1", nil)
	cl.CreateNode("n2", "site1", nil)
	cl.MustVerb(id, "manage", nil)
	if n := cl.WaitRest(id, 10*time.Second); n.State != "manageable" {
		t.Fatalf("manage: %q %q", n.State, n.LastError)
	}
	cl.MustVerb(id, "provide", nil)
	if n := cl.WaitRest(id, 20*time.Second); n.State != "available" {
		t.Fatalf("provide: %q %q", n.State, n.LastError)
	}
	if code, _ := cl.Verb(id, "rescue", nil); code != 400 && code != 409 {
		t.Fatalf("rescue of an available node without rescue_password: %d, want a refusal", code)
	}

	code, text := scrape(t, c.APIURL+"/metrics", "", "")
	if code != 200 {
		t.Fatalf("coordinator GET /metrics: %d\n%s", code, text)
	}
	for _, s := range []string{
		`bmedge_nodes{provision_state="available",site="site1"}`,
		`bmedge_nodes{provision_state="enroll",site="site1"}`,
		`bmedge_site_online{site="site1"}`,
		`bmedge_transitions_total{from="enroll",to="verifying"}`,
		`bmedge_transitions_total{from="verifying",to="manageable"}`,
		`bmedge_transitions_total{from="cleaning",to="clean wait"}`,
		`bmedge_transitions_total{from="cleaning",to="available"}`,
		`bmedge_verb_requests_total{outcome="accepted",verb="manage"}`,
		`bmedge_verb_requests_total{outcome="accepted",verb="provide"}`,
		`bmedge_verb_duration_seconds_count{verb="provide"}`,
		`bmedge_step_duration_seconds_count{outcome="done",step="deploy.erase_devices_metadata"}`,
		`bmedge_step_duration_seconds_count{outcome="done",step="deploy.erase_devices"}`,
		`bmedge_commands_sent_total`,
		`bmedge_commands_acked_total`,
		`bmedge_store_commit_duration_seconds_count`,
	} {
		if v := sample(text, s); v < 1 {
			t.Errorf("coordinator /metrics: %s is %v, want at least 1", s, v)
		}
	}
	if v := sample(text, `bmedge_commands_resent_total`); v < 0 {
		t.Errorf("coordinator /metrics: no bmedge_commands_resent_total")
	}
	if !regexp.MustCompile(`(?m)^bmedge_verb_requests_total\{outcome="(invalid|conflict)",verb="rescue"\} 1$`).MatchString(text) {
		t.Errorf("coordinator /metrics: the refused rescue is not counted")
	}
	// No series is labelled with a node (the simulated BMCs here tell no
	// health: TestHealthMetrics checks the per-node health series).
	if strings.Contains(text, id) || strings.Contains(text, `"n1"`) {
		t.Errorf("coordinator /metrics names a node")
	}
	promtool(t, "coordinator", text)

	code, atext := scrape(t, "http://"+a.MetricsAddr()+"/metrics", "", "")
	if code != 200 {
		t.Fatalf("agent GET /metrics: %d\n%s", code, atext)
	}
	for _, s := range []string{
		`bmedge_agent_bmc_operations_total{action="power",driver="fake",outcome="ok"}`,
		`bmedge_agent_bmc_operations_total{action="validate",driver="fake",outcome="ok"}`,
		`bmedge_agent_bmc_operation_duration_seconds_count{action="power",driver="fake"}`,
	} {
		if v := sample(atext, s); v < 1 {
			t.Errorf("agent /metrics: %s is %v, want at least 1", s, v)
		}
	}
	for _, s := range []string{`bmedge_agent_outbox_depth`, `bmedge_agent_results_resent_total`} {
		if v := sample(atext, s); v < 0 {
			t.Errorf("agent /metrics: no %s", s)
		}
	}
	promtool(t, "edge agent", atext)
}

// TestMetricsAuth: with http_basic, /metrics asks for the API's
// credentials as every other path does.
func TestMetricsAuth(t *testing.T) {
	c := testrig.Coordinator(t, testrig.Options{Users: map[string]string{"ops": "pw1"}})
	if code, _ := scrape(t, c.APIURL+"/metrics", "", ""); code != 401 {
		t.Errorf("GET /metrics without credentials: %d, want 401", code)
	}
	if code, _ := scrape(t, c.APIURL+"/metrics", "ops", "wrong"); code != 401 {
		t.Errorf("GET /metrics with a wrong password: %d, want 401", code)
	}
	code, text := scrape(t, c.APIURL+"/metrics", "ops", "pw1")
	if code != 200 || !strings.Contains(text, "bmedge_store_commit_duration_seconds") {
		t.Errorf("GET /metrics with credentials: %d\n%.300s", code, text)
	}
	req, _ := http.NewRequest("POST", c.APIURL+"/metrics", nil)
	req.SetBasicAuth("ops", "pw1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 {
		t.Errorf("POST /metrics: %d, want 405", resp.StatusCode)
	}
}
