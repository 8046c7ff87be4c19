package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

const curlPath = "/usr/bin/curl"

// curlResult is one curl run: the HTTP status, the answer's body, and
// curl's own exit status and stderr.
type curlResult struct {
	status int
	body   string
	exit   int
	stderr string
}

// curl runs curl with args, printing the status on its last line of
// stdout; the body goes to a file.
func curl(t *testing.T, args ...string) curlResult {
	t.Helper()
	out := filepath.Join(t.TempDir(), "body")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	full := append([]string{"-sS", "--noproxy", "*", "-o", out, "-w", "%{http_code}"}, args...)
	cmd := exec.CommandContext(ctx, curlPath, full...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	r := curlResult{stderr: stderr.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.exit = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("curl %v: %v", args, err)
	}
	fmt.Sscan(string(stdout), &r.status)
	b, _ := os.ReadFile(out)
	r.body = string(b)
	return r
}

// fault returns the faultstring of an Ironic error body, or "".
func fault(body string) string {
	var outer struct {
		ErrorMessage string `json:"error_message"`
	}
	var inner struct {
		Faultstring string `json:"faultstring"`
	}
	if json.Unmarshal([]byte(body), &outer) != nil || json.Unmarshal([]byte(outer.ErrorMessage), &inner) != nil {
		return ""
	}
	return inner.Faultstring
}

// TestRequestHygiene sends, with curl, what a browser's form post, a
// careless script or an attacker would: bodies that are not JSON, too
// big, too deep, fields too large, and names Ironic refuses. Every answer
// is in Ironic's error shape and nothing is created or changed.
func TestRequestHygiene(t *testing.T) {
	requireTool(t, curlPath, "curl")
	c := testrig.Coordinator(t, testrig.Options{})
	api := testrig.NewClient(t, c)
	if code := api.Do("POST", "/v1/sites", map[string]string{"name": "site1"}, nil); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	nodes := api.Base + "/v1/nodes"
	count := func() int {
		t.Helper()
		var l struct {
			Nodes []map[string]any `json:"nodes"`
		}
		if code := api.Do("GET", "/v1/nodes", nil, &l); code != 200 {
			t.Fatalf("list: %d", code)
		}
		return len(l.Nodes)
	}
	post := func(contentType, body string) curlResult {
		t.Helper()
		args := []string{"-X", "POST", "--data-binary", body, nodes}
		if contentType != "" {
			args = append([]string{"-H", "Content-Type: " + contentType}, args...)
		}
		return curl(t, args...)
	}
	check := func(what string, r curlResult, status int, msg string) {
		t.Helper()
		f := fault(r.body)
		if r.exit != 0 || r.status != status || !strings.Contains(f, msg) {
			t.Errorf("%s: curl exit %d (%s), HTTP %d, faultstring %q; want HTTP %d with a message containing %q (body %.200s)",
				what, r.exit, strings.TrimSpace(r.stderr), r.status, f, status, msg, r.body)
		}
	}

	// Not JSON: a browser's text/plain post, and curl's default form type.
	check("text/plain POST", post("text/plain", `{"driver":"fake","name":"tp"}`), 415, "Content-Type text/plain is not accepted")
	check("form POST", post("", `{"driver":"fake","name":"form"}`), 415, "application/x-www-form-urlencoded")
	check("JSON in another charset", post("application/json; charset=latin1", `{"driver":"fake","name":"l1"}`), 415, "application/json")
	check("JSON Patch type on POST", post("application/json-patch+json", `{"driver":"fake","name":"jp"}`), 415, "not accepted")
	if n := count(); n != 0 {
		t.Fatalf("%d nodes exist after refused posts", n)
	}
	// JSON with a charset, as some clients send it, is fine.
	if r := post("application/json; charset=UTF-8", `{"driver":"fake","name":"ok1"}`); r.status != 201 {
		t.Fatalf("application/json; charset=UTF-8: HTTP %d %s", r.status, r.body)
	}

	// Too big: a 2 MiB body (through a file, as a script would send it).
	big := filepath.Join(t.TempDir(), "big.json")
	if err := os.WriteFile(big, []byte(`{"driver":"fake","extra":{"x":"`+strings.Repeat("A", 2<<20)+`"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	check("2 MiB body", post("application/json", "@"+big), 400, "Request body is too large")
	// A field over 64 KiB in a body under 1 MiB.
	check("100 KiB extra", post("application/json", `{"driver":"fake","name":"big","extra":{"x":"`+strings.Repeat("B", 100<<10)+`"}}`), 400, "extra is too large")
	check("100 KiB driver_info", post("application/json", `{"driver":"fake","name":"big","driver_info":{"x":"`+strings.Repeat("B", 100<<10)+`"}}`), 400, "driver_info is too large")
	// 40 levels of nesting.
	deep := `{"driver":"fake","name":"deep","extra":{"a":` + strings.Repeat("[", 38) + strings.Repeat("]", 38) + `}}`
	check("40-deep body", post("application/json", deep), 400, "nested deeper than 32 levels")

	// Names Ironic refuses.
	for name, msg := range map[string]string{
		"":                                     "cannot be empty",
		"detail":                               "reserved word",
		"states":                               "reserved word",
		"3f2b7c1e-9a4d-4e8b-b6f0-2d5c8a1e7b90": "must not look like a UUID",
		"3f2b7c1e9a4d4e8bb6f02d5c8a1e7b90":     "must not look like a UUID",
		"with space":                           "may only contain",
		strings.Repeat("n", 256):               "at most 255",
	} {
		b, _ := json.Marshal(map[string]any{"driver": "fake", "name": name})
		check(fmt.Sprintf("name %.20q", name), post("application/json", string(b)), 400, msg)
	}
	if n := count(); n != 1 {
		t.Fatalf("%d nodes exist, want only ok1", n)
	}

	// PATCH: the same name rules; JSON Patch's own type is accepted.
	patch := func(contentType, body string) curlResult {
		return curl(t, "-X", "PATCH", "-H", "Content-Type: "+contentType, "--data-binary", body, nodes+"/ok1")
	}
	check("PATCH name detail", patch("application/json", `[{"op":"replace","path":"/name","value":"detail"}]`), 400, "reserved word")
	check("PATCH name empty", patch("application/json", `[{"op":"replace","path":"/name","value":""}]`), 400, "cannot be empty")
	check("PATCH text/plain", patch("text/plain", `[{"op":"replace","path":"/name","value":"x"}]`), 415, "not accepted")
	check("PATCH extra too big", patch("application/json", `[{"op":"add","path":"/extra/x","value":"`+strings.Repeat("C", 70<<10)+`"}]`), 400, "extra is too large")
	if n := api.Get("ok1"); n.Name != "ok1" {
		t.Fatalf("refused patches renamed the node to %q", n.Name)
	}
	if r := patch("application/json-patch+json", `[{"op":"replace","path":"/name","value":"ok-2.b_c~d"}]`); r.status != 200 {
		t.Fatalf("PATCH with application/json-patch+json: HTTP %d %s", r.status, r.body)
	}
	if n := api.Get("ok-2.b_c~d"); n.Name != "ok-2.b_c~d" {
		t.Fatalf("rename: %+v", n)
	}
	// A PUT without a body needs the JSON Content-Type too (an empty
	// form is a request a web page can make); with it, it is served.
	check("PUT without a body or Content-Type", curl(t, "-X", "PUT", nodes+"/ok-2.b_c~d/maintenance"), 415, "even without a body")
	if r := curl(t, "-X", "PUT", "-H", "Content-Type: application/json", nodes+"/ok-2.b_c~d/maintenance"); r.status != 202 {
		t.Fatalf("PUT maintenance without a body: HTTP %d %s", r.status, r.body)
	}
	check("maintenance reason too long", curl(t, "-X", "PUT", "-H", "Content-Type: application/json", "--data-binary",
		`{"reason":"`+strings.Repeat("r", 5000)+`"}`, nodes+"/ok-2.b_c~d/maintenance"), 400, "reason is too large")
}
