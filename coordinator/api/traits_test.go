package api_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestNodeTraits: /v1/nodes/{node}/traits through curl as Ironic's
// NodeTraitsController answers: 404 below 1.37 (and no traits field in
// the node); PUT of the whole list, PUT of one trait (204, Location),
// GET, DELETE of one and of all; refusals: a name that is neither a
// standard nor a CUSTOM_ trait, more than 50, a body with PUT of one
// trait, a trait the node does not have (404), a PATCH of /traits. And
// port name (1.88) and local_link_connection (1.90), which ports here do
// not keep, refused (400) rather than ignored.
func TestNodeTraits(t *testing.T) {
	c := testrig.Coordinator(t, testrig.Options{})
	testrig.Site(t, c, "site1", agent.SimOptions{Nodes: 1})
	api := testrig.NewClient(t, c)
	id := api.CreateNode("tr1", "site1", nil)
	base := api.Base
	do := func(ver, method, path, body string, want int) vAnswer {
		t.Helper()
		var a vAnswer
		if body == "" && method == "PUT" {
			a = vcurlNoBody(t, base, ver, method, "/v1/nodes/tr1"+path)
		} else {
			a = vcurl(t, base, ver, method, "/v1/nodes/tr1"+path, body)
		}
		if a.status != want {
			t.Fatalf("%s %s %s at %s: %d, want %d: %.400s", method, path, body, ver, a.status, want, a.body)
		}
		return a
	}
	traits := func() []string {
		t.Helper()
		var out []string
		for _, v := range do("1.37", "GET", "/traits", "", 200).obj(t)["traits"].([]any) {
			out = append(out, v.(string))
		}
		return out
	}

	do("1.36", "GET", "/traits", "", 404)
	do("1.36", "PUT", "/traits/CUSTOM_A", "", 404)
	if f := do("1.36", "GET", "", "", 200).obj(t); hasKey(f, "traits") {
		t.Fatalf("traits shown at 1.36")
	}
	if got := traits(); len(got) != 0 {
		t.Fatalf("new node has traits %v", got)
	}

	do("1.37", "PUT", "/traits", `{"traits": ["CUSTOM_RAID", "HW_CPU_X86_AVX2", "CUSTOM_RAID"]}`, 204)
	a := do("1.37", "PUT", "/traits/CUSTOM_BIOS_TUNED", "", 204)
	if !strings.HasSuffix(a.header["location"], "/v1/nodes/tr1/traits/CUSTOM_BIOS_TUNED") {
		t.Fatalf("Location %q", a.header["location"])
	}
	do("1.37", "PUT", "/traits/CUSTOM_BIOS_TUNED", "", 204) // again: no change
	want := []string{"CUSTOM_BIOS_TUNED", "CUSTOM_RAID", "HW_CPU_X86_AVX2"}
	if got := traits(); !slices.Equal(got, want) {
		t.Fatalf("traits %v, want %v", got, want)
	}
	// The node shows them (from 1.37), by UUID too.
	f := vcurl(t, base, "1.37", "GET", "/v1/nodes/"+id, "").obj(t)
	if fmt.Sprint(f["traits"]) != fmt.Sprint(want) {
		t.Fatalf("node traits field %v, want %v", f["traits"], want)
	}

	// Refusals.
	for _, bad := range []string{"custom_lower", "CUSTOM_", "HW_NOT_A_STANDARD_TRAIT", "CUSTOM_A-B"} {
		if a := do("1.37", "PUT", "/traits/"+bad, "", 400); !strings.Contains(a.body, "CUSTOM_") {
			t.Fatalf("refusal of %s does not say what a trait is: %s", bad, a.body)
		}
	}
	do("1.37", "PUT", "/traits", `{"traits": ["CUSTOM_OK", "bad"]}`, 400)
	do("1.37", "PUT", "/traits", `{"trait": ["CUSTOM_OK"]}`, 400)
	do("1.37", "PUT", "/traits", `{"traits": "CUSTOM_OK"}`, 400)
	do("1.37", "PUT", "/traits/CUSTOM_X", `{"traits": ["CUSTOM_Y"]}`, 400)
	many := make([]string, 51)
	for i := range many {
		many[i] = fmt.Sprintf(`"CUSTOM_T%d"`, i)
	}
	if a := do("1.37", "PUT", "/traits", `{"traits": [`+strings.Join(many, ",")+`]}`, 400); !strings.Contains(a.body, "(51 vs. 50)") {
		t.Fatalf("51 traits: %s", a.body)
	}
	if a := do("1.37", "DELETE", "/traits/CUSTOM_ABSENT", "", 404); !strings.Contains(a.body, "doesn't have a trait 'CUSTOM_ABSENT'") {
		t.Fatalf("absent trait: %s", a.body)
	}
	do("1.37", "PATCH", "", `[{"op": "add", "path": "/traits", "value": ["CUSTOM_Z"]}]`, 400)
	if got := traits(); !slices.Equal(got, want) {
		t.Fatalf("refusals changed the traits: %v", got)
	}

	do("1.37", "DELETE", "/traits/CUSTOM_RAID", "", 204)
	if got := traits(); !slices.Equal(got, []string{"CUSTOM_BIOS_TUNED", "HW_CPU_X86_AVX2"}) {
		t.Fatalf("after removing one: %v", got)
	}
	do("1.37", "DELETE", "/traits", "", 204)
	if got := traits(); len(got) != 0 {
		t.Fatalf("after removing all: %v", got)
	}

	// What 1.88 and 1.90 add to ports is not kept here: refused, not
	// ignored (the maximum version, 1.92, rests on it).
	for _, body := range []string{
		`{"address": "52:54:00:00:00:01", "node_uuid": "` + id + `", "name": "eth0"}`,
		`{"address": "52:54:00:00:00:01", "node_uuid": "` + id + `", "local_link_connection": {"port_id": "1", "switch_id": "aa:bb:cc:dd:ee:ff"}}`,
	} {
		if a := vcurl(t, base, "1.92", "POST", "/v1/ports", body); a.status != 400 {
			t.Fatalf("port create %s: %d, want 400: %s", body, a.status, a.body)
		}
	}
	if a := vcurl(t, base, "1.92", "GET", "/v1/ports?node="+id, ""); a.status != 200 || strings.Contains(a.body, "52:54:00:00:00:01") {
		t.Fatalf("a refused port was created: %d %s", a.status, a.body)
	}
}

// vcurlNoBody is vcurl for a request without a body that still says
// Content-Type: application/json, as Ironic's clients send every request
// (ironicclient's json_request).
func vcurlNoBody(t *testing.T, base, ver, method, path string) vAnswer {
	t.Helper()
	requireTool(t, curlPath, "curl")
	dir := t.TempDir()
	hdr, out := filepath.Join(dir, "h"), filepath.Join(dir, "b")
	args := []string{"-sS", "--noproxy", "*", "-X", method, "-D", hdr, "-o", out, "-w", "%{http_code}",
		"-H", "X-OpenStack-Ironic-API-Version: " + ver, "-H", "Content-Type: application/json", base + path}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code, err := exec.CommandContext(ctx, curlPath, args...).Output()
	if err != nil {
		t.Fatalf("curl %s %s: %v", method, path, err)
	}
	a := vAnswer{header: map[string]string{}}
	if _, err := fmt.Sscan(string(code), &a.status); err != nil {
		t.Fatalf("curl %s %s: status %q", method, path, code)
	}
	h, _ := os.ReadFile(hdr)
	for _, line := range strings.Split(string(h), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			a.header[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
		}
	}
	b, _ := os.ReadFile(out)
	a.body = string(b)
	return a
}
