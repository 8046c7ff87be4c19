package api_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/coordinator/server"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// mellanoxRule is the acceptance's rule: on memory_mb and the
// inventory's NIC vendor, a trait and a property.
const nicRule = `{"description": "big Intel nodes", "priority": 20,
	"conditions": [
		{"op": "!lt", "args": {"values": ["{node.properties[memory_mb]}", 16384]}},
		{"op": "eq", "args": {"values": ["{item[vendor]}", "0x8086"]}, "loop": "{inventory[interfaces]}", "multiple": "any"}],
	"actions": [
		{"op": "add-trait", "args": {"name": "CUSTOM_INTEL_NIC"}},
		{"op": "set-attribute", "args": {"path": "/properties/nic_vendor", "value": "intel"}},
		{"op": "set-capability", "args": {"name": "memory_class", "value": "big"}}]}`

func keys(m map[string]any) string {
	var k []string
	for x := range m {
		k = append(k, x)
	}
	sort.Strings(k)
	return strings.Join(k, ",")
}

// TestInspectionRulesAPI: /v1/inspection_rules with curl at 1.96 in
// Ironic's shapes (create 201 with Location, list of uuid, priority,
// phase, description and links, detail, show, PATCH, delete 204), 404
// to GET and 405 to the other methods at 1.95, 400s that say what is
// wrong, a sensitive rule's conditions and actions null and its flag
// kept; and the rules run on an inspection: a rule on memory_mb and the
// NIC vendor adds a trait and sets a property and a capability, a rule
// that fails the inspection fails it with its message.
func TestInspectionRulesAPI(t *testing.T) {
	r := newVersionRig(t)
	base := r.api.Base
	for _, c := range []struct {
		method, path string
		want         int
	}{{"GET", "/v1/inspection_rules", 404}, {"POST", "/v1/inspection_rules", 405},
		{"GET", "/v1/inspection_rules/1be26c0b-03f2-4d2e-ae87-c02d7f33c123", 404},
		{"PATCH", "/v1/inspection_rules/1be26c0b-03f2-4d2e-ae87-c02d7f33c123", 405},
		{"DELETE", "/v1/inspection_rules/1be26c0b-03f2-4d2e-ae87-c02d7f33c123", 405}} {
		body := ""
		if c.method == "POST" {
			body = nicRule
		}
		if a := vcurl(t, base, "1.95", c.method, c.path, body); a.status != c.want || !strings.Contains(fault(a.body), "1.96") {
			t.Errorf("%s %s at 1.95: %d %.200s, want %d naming 1.96", c.method, c.path, a.status, a.body, c.want)
		}
	}
	if a := vcurl(t, base, "1.95", "GET", "/v1", ""); strings.Contains(a.body, "inspection_rules") {
		t.Errorf("GET /v1 at 1.95 links inspection_rules")
	}
	if a := vcurl(t, base, "1.96", "GET", "/v1", ""); !strings.Contains(a.body, "/v1/inspection_rules") {
		t.Errorf("GET /v1 at 1.96 does not link inspection_rules: %.300s", a.body)
	}
	for body, want := range map[string]string{
		`{"conditions": []}`: "'actions' is a required property",
		`{"actions": [{"op": "set-attribute", "args": {"path": "/provision_state", "value": "x"}}]}`:         `node field "provision_state" cannot be changed`,
		`{"priority": 10000, "actions": [{"op": "fail", "args": {"msg": "x"}}]}`:                             "Priority must be between 0 and 9999",
		`{"conditions": [{"op": "similar", "args": {}}], "actions": [{"op": "fail", "args": {"msg": "x"}}]}`: "Unsupported operator 'similar'",
		`{"actions": [{"op": "api-call", "args": {"url": "http://192.0.2.1/"}}]}`:                            "api-call is not supported",
		`{"actions": [{"op": "fail", "args": {"msg": "x"}}], "owner": "me"}`:                                 `additional property "owner"`,
		`[1]`: "Invalid JSON",
	} {
		a := vcurl(t, base, "1.96", "POST", "/v1/inspection_rules", body)
		if a.status != 400 || !strings.Contains(fault(a.body), want) {
			t.Errorf("POST %s: %d %.300s, want 400 saying %q", body, a.status, a.body, want)
		}
	}

	c := vcurl(t, base, "1.96", "POST", "/v1/inspection_rules", nicRule)
	rule := c.obj(t)
	id, _ := rule["uuid"].(string)
	if c.status != 201 || id == "" || c.header["location"] != base+"/v1/inspection_rules/"+id {
		t.Fatalf("create: %d %v %.300s", c.status, c.header["location"], c.body)
	}
	if k := keys(rule); k != "actions,conditions,created_at,description,links,phase,priority,sensitive,updated_at,uuid" ||
		rule["phase"] != "main" || rule["priority"] != float64(20) || rule["sensitive"] != false || rule["updated_at"] != nil {
		t.Fatalf("created rule: %s %v", k, rule)
	}
	conds, _ := rule["conditions"].([]any)
	if len(conds) != 2 || keys(conds[1].(map[string]any)) != "args,loop,multiple,op" || keys(conds[0].(map[string]any)) != "args,op" {
		t.Fatalf("conditions %v", rule["conditions"])
	}
	list := vcurl(t, base, "1.96", "GET", "/v1/inspection_rules", "").obj(t)
	items, _ := list["inspection_rules"].([]any)
	if len(items) != 1 || keys(items[0].(map[string]any)) != "description,links,phase,priority,uuid" {
		t.Fatalf("list %v", list)
	}
	if d := vcurl(t, base, "1.96", "GET", "/v1/inspection_rules?detail=True", "").obj(t)["inspection_rules"].([]any); len(d) != 1 || d[0].(map[string]any)["actions"] == nil {
		t.Fatalf("detail list %v", d)
	}
	if a := vcurl(t, base, "1.96", "GET", "/v1/inspection_rules?fields=uuid,actions", "").obj(t)["inspection_rules"].([]any); keys(a[0].(map[string]any)) != "actions,links,uuid" {
		t.Fatalf("fields list %v", a)
	}
	if a := vcurl(t, base, "1.96", "GET", "/v1/inspection_rules?fields=owner", ""); a.status != 400 {
		t.Fatalf("fields=owner: %d", a.status)
	}
	if a := vcurl(t, base, "1.96", "GET", "/v1/inspection_rules/"+id, ""); a.status != 200 || a.obj(t)["description"] != "big Intel nodes" {
		t.Fatalf("show: %d %.200s", a.status, a.body)
	}

	// A sensitive rule: conditions and actions hidden, the flag kept.
	sens := vcurl(t, base, "1.96", "POST", "/v1/inspection_rules", `{"sensitive": true, "priority": 5,
		"actions": [{"op": "set-attribute", "args": {"path": "/driver_info/ipmi_password", "value": "site-secret"}}]}`)
	sid, _ := sens.obj(t)["uuid"].(string)
	if o := sens.obj(t); sens.status != 201 || o["conditions"] != nil || o["actions"] != nil || strings.Contains(sens.body, "site-secret") {
		t.Fatalf("sensitive create: %d %.300s", sens.status, sens.body)
	}
	if a := vcurl(t, base, "1.96", "GET", "/v1/inspection_rules/"+sid, ""); strings.Contains(a.body, "site-secret") || a.obj(t)["actions"] != nil {
		t.Fatalf("sensitive show: %.300s", a.body)
	}
	if a := vcurl(t, base, "1.96", "GET", "/v1/inspection_rules?detail=True", ""); strings.Contains(a.body, "site-secret") {
		t.Fatalf("sensitive rule in the detailed list: %.300s", a.body)
	}
	if a := vcurl(t, base, "1.96", "PATCH", "/v1/inspection_rules/"+sid, `[{"op": "replace", "path": "/sensitive", "value": false}]`); a.status != 400 || !strings.Contains(fault(a.body), "cannot have the sensitive flag unset") {
		t.Fatalf("unset sensitive: %d %.200s", a.status, a.body)
	}
	if a := vcurl(t, base, "1.96", "DELETE", "/v1/inspection_rules/"+sid, ""); a.status != 204 {
		t.Fatalf("delete: %d", a.status)
	}
	if a := vcurl(t, base, "1.96", "GET", "/v1/inspection_rules/"+sid, ""); a.status != 404 || !strings.Contains(fault(a.body), "could not be found") {
		t.Fatalf("deleted rule: %d %.200s", a.status, a.body)
	}

	// PATCH: the rule changes, a wrong one is 400 and changes nothing.
	if a := vcurl(t, base, "1.96", "PATCH", "/v1/inspection_rules/"+id, `[{"op": "replace", "path": "/priority", "value": -3}]`); a.status != 400 || !strings.Contains(fault(a.body), "Priority cannot be negative") {
		t.Fatalf("patch to a negative priority: %d %.200s", a.status, a.body)
	}
	if a := vcurl(t, base, "1.96", "PATCH", "/v1/inspection_rules/"+id, `[{"op": "replace", "path": "/uuid", "value": "x"}]`); a.status != 400 {
		t.Fatalf("patch of uuid: %d %.200s", a.status, a.body)
	}
	p := vcurl(t, base, "1.96", "PATCH", "/v1/inspection_rules/"+id, `[{"op": "replace", "path": "/priority", "value": 30}, {"op": "remove", "path": "/description"}]`)
	if o := p.obj(t); p.status != 200 || o["priority"] != float64(30) || o["description"] != nil || o["updated_at"] == nil {
		t.Fatalf("patch: %d %.300s", p.status, p.body)
	}

	// The rules run on an inspection. The simulated machines' NICs are
	// Intel's (0x8086) and their memory 16 GiB or more.
	n := r.node("site1", "manageable")
	r.api.MustVerb(n, "inspect", nil)
	got := r.settle(n, "manageable")
	var traits struct {
		Traits []string `json:"traits"`
	}
	r.api.Do("GET", "/v1/nodes/"+n+"/traits", nil, &traits)
	var node struct {
		Properties map[string]any `json:"properties"`
	}
	r.api.Do("GET", "/v1/nodes/"+n, nil, &node)
	if !slices.Contains(traits.Traits, "CUSTOM_INTEL_NIC") || node.Properties["nic_vendor"] != "intel" ||
		!strings.Contains(fmt.Sprint(node.Properties["capabilities"]), "memory_class:big") {
		t.Fatalf("after inspection (%s): traits %v, properties %v", got.State, traits.Traits, node.Properties)
	}
	if h := r.historyText(n); !strings.Contains(h, "inspection rule "+id+" matched") {
		t.Fatalf("history does not say the rule matched:\n%s", h)
	}

	// A rule that fails the inspection.
	f := vcurl(t, base, "1.96", "POST", "/v1/inspection_rules", `{"priority": 1,
		"conditions": [{"op": "eq", "args": {"values": ["{inventory[system_vendor][manufacturer]}", "bmedge"]}}],
		"actions": [{"op": "fail", "args": {"msg": "simulated machines are not welcome"}}]}`)
	if f.status != 201 {
		t.Fatalf("fail rule: %d %.200s", f.status, f.body)
	}
	n2 := r.node("site1", "manageable")
	r.api.MustVerb(n2, "inspect", nil)
	got = r.settle(n2, "inspect failed")
	if !strings.Contains(str(got.LastErr), "Failed to inspect hardware. Reason: simulated machines are not welcome") {
		t.Fatalf("last_error %q", str(got.LastErr))
	}
	// A manual clean's inspect_hardware step is no inspection: the rules
	// do not run (the failing one would fail it).
	r.api.MustVerb(n, "clean", map[string]any{"clean_steps": []map[string]any{{"interface": "deploy", "step": "inspect_hardware"}}})
	if got = r.settle(n, ""); got.State != "manageable" || str(got.LastErr) != "" {
		t.Fatalf("clean with inspect_hardware: %s %q", got.State, str(got.LastErr))
	}
}

// historyText is the node's history events, one a line.
func (r *compatRig) historyText(id string) string {
	var h struct {
		History []struct {
			Event string `json:"event"`
		} `json:"history"`
	}
	r.api.Do("GET", "/v1/nodes/"+id+"/history?detail=True", nil, &h)
	var out []string
	for _, e := range h.History {
		out = append(out, e.Event)
	}
	return strings.Join(out, "\n")
}

// TestInspectionRulesAuth: with http_basic, inspection rules need the
// login like every other resource: no or wrong credentials are 401 to
// every method, and nothing is created.
func TestInspectionRulesAuth(t *testing.T) {
	requireTool(t, curlPath, "curl")
	const user, password = "op", "the-right-password"
	c, err := server.Start(context.Background(), server.Options{DataDir: t.TempDir(), APIListen: "127.0.0.1:0", MQTTListen: testrig.FreeAddr(t),
		Machine:      fsm.Config{WaitTimeout: 30 * time.Second, CommandTimeout: 20 * time.Second, ResendInterval: 500 * time.Millisecond},
		TickInterval: 100 * time.Millisecond, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Auth: "http_basic", HTPasswd: testrig.HTPasswd(t, map[string]string{user: password})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	base := "http://" + c.APIAddr
	run := func(login, method, path, body string) (int, string) {
		args := []string{"-sS", "--noproxy", "*", "-X", method, "-w", "\n%{http_code}", "-H", "X-OpenStack-Ironic-API-Version: 1.96"}
		if login != "" {
			args = append(args, "-u", login)
		}
		if body != "" {
			args = append(args, "-H", "Content-Type: application/json", "--data-binary", body)
		}
		out, err := exec.Command(curlPath, append(args, base+path)...).Output()
		if err != nil {
			t.Fatalf("curl: %v", err)
		}
		s := string(out)
		i := strings.LastIndex(s, "\n")
		var code int
		fmt.Sscan(s[i+1:], &code)
		return code, s[:i]
	}
	rule := `{"actions": [{"op": "add-trait", "args": {"name": "CUSTOM_X"}}]}`
	for _, login := range []string{"", user + ":wrong"} {
		for _, m := range []struct{ method, path, body string }{{"GET", "/v1/inspection_rules", ""}, {"POST", "/v1/inspection_rules", rule},
			{"PATCH", "/v1/inspection_rules/1be26c0b-03f2-4d2e-ae87-c02d7f33c123", `[{"op":"replace","path":"/priority","value":1}]`},
			{"DELETE", "/v1/inspection_rules/1be26c0b-03f2-4d2e-ae87-c02d7f33c123", ""}} {
			if code, body := run(login, m.method, m.path, m.body); code != 401 {
				t.Errorf("%s %s with login %q: %d %.200s, want 401", m.method, m.path, login, code, body)
			}
		}
	}
	if code, body := run(user+":"+password, "GET", "/v1/inspection_rules", ""); code != 200 || !strings.Contains(body, `"inspection_rules":[]`) {
		t.Fatalf("list with the login: %d %.200s (nothing may have been created)", code, body)
	}
	if code, body := run(user+":"+password, "POST", "/v1/inspection_rules", rule); code != 201 {
		t.Fatalf("create with the login: %d %.200s", code, body)
	}
}

// TestInspectionRulesListQueries: the rules list takes the catalog
// lists' query handling (curl at 1.96): sort keys of a rule (priority,
// both directions) but not a template's name nor conditions or actions,
// ?phase=, pages of ?limit= after ?marker= with a next link, an unknown
// marker 404 naming an inspection rule, an unknown parameter 400 naming
// the ones it takes; the deploy templates' list still sorts by name and
// refuses a rule's priority.
func TestInspectionRulesListQueries(t *testing.T) {
	c := testrig.Coordinator(t, testrig.Options{})
	base := testrig.NewClient(t, c).Base
	var ids []string
	for _, p := range []int{30, 10, 20} {
		a := vcurl(t, base, "1.96", "POST", "/v1/inspection_rules", fmt.Sprintf(`{"priority": %d, "description": "rule %d", "actions": [{"op": "add-trait", "args": {"name": "CUSTOM_P%d"}}]}`, p, p, p))
		if a.status != 201 {
			t.Fatalf("create rule %d: %d %s", p, a.status, a.body)
		}
		ids = append(ids, a.obj(t)["uuid"].(string))
	}
	list := func(query string) (int, []string, map[string]any) {
		t.Helper()
		a := vcurl(t, base, "1.96", "GET", "/v1/inspection_rules"+query, "")
		m := a.obj(t)
		var descr []string
		items, _ := m["inspection_rules"].([]any)
		for _, x := range items {
			descr = append(descr, fmt.Sprint(x.(map[string]any)["description"]))
		}
		return a.status, descr, m
	}
	for _, c := range []struct {
		query string
		want  []string
	}{
		{"", []string{"rule 30", "rule 10", "rule 20"}},
		{"?sort_key=priority", []string{"rule 10", "rule 20", "rule 30"}},
		{"?sort_key=priority&sort_dir=desc", []string{"rule 30", "rule 20", "rule 10"}},
		{"?sort_key=description&sort_dir=desc", []string{"rule 30", "rule 20", "rule 10"}},
		{"?phase=main&sort_key=priority", []string{"rule 10", "rule 20", "rule 30"}},
		{"?phase=other", nil},
		{"?sort_key=priority&marker=" + ids[1], []string{"rule 20", "rule 30"}},
	} {
		if code, got, _ := list(c.query); code != 200 || !slices.Equal(got, c.want) {
			t.Errorf("GET /v1/inspection_rules%s: %d %v, want 200 %v", c.query, code, got, c.want)
		}
	}
	code, got, page := list("?sort_key=priority&limit=2")
	next, _ := page["next"].(string)
	if code != 200 || !slices.Equal(got, []string{"rule 10", "rule 20"}) || !strings.Contains(next, "marker="+ids[2]) || !strings.Contains(next, "limit=2") {
		t.Fatalf("limit=2: %d %v next %q; want the first two and a next link after %s", code, got, next, ids[2])
	}
	for _, c := range []struct {
		query string
		code  int
		want  string
	}{
		{"?sort_key=name", 400, "is an invalid field for sorting; use one of created_at, description, id, phase, priority, sensitive, updated_at, uuid"},
		{"?sort_key=actions", 400, "invalid field for sorting"},
		{"?sort_key=conditions", 400, "invalid field for sorting"},
		{"?sort_dir=up", 400, "Invalid sort direction"},
		{"?limit=-1", 400, "Invalid limit"},
		{"?owner=x", 400, `Unknown query parameter "owner" for inspection_rules; this list takes detail, fields, limit, marker, sort_key, sort_dir, phase`},
		{"?marker=1be26c0b-03f2-4d2e-ae87-c02d7f33c123", 404, `Inspection rule "1be26c0b-03f2-4d2e-ae87-c02d7f33c123" could not be found.`},
	} {
		if a := vcurl(t, base, "1.96", "GET", "/v1/inspection_rules"+c.query, ""); a.status != c.code || !strings.Contains(fault(a.body), c.want) {
			t.Errorf("GET /v1/inspection_rules%s: %d %q, want %d %q", c.query, a.status, fault(a.body), c.code, c.want)
		}
	}
	for _, name := range []string{"CUSTOM_B", "CUSTOM_A"} {
		if a := vcurl(t, base, "1.55", "POST", "/v1/deploy_templates", `{"name": "`+name+`", "steps": [{"interface": "bios", "step": "apply_configuration", "args": {"settings": []}, "priority": 10}]}`); a.status != 201 {
			t.Fatalf("create template %s: %d %s", name, a.status, a.body)
		}
	}
	a := vcurl(t, base, "1.55", "GET", "/v1/deploy_templates?sort_key=name", "")
	items, _ := a.obj(t)["deploy_templates"].([]any)
	if a.status != 200 || len(items) != 2 || items[0].(map[string]any)["name"] != "CUSTOM_A" {
		t.Fatalf("deploy templates by name: %d %s", a.status, a.body)
	}
	if a := vcurl(t, base, "1.55", "GET", "/v1/deploy_templates?sort_key=priority", ""); a.status != 400 || !strings.Contains(fault(a.body), "use one of created_at, id, name, updated_at, uuid") {
		t.Fatalf("deploy templates by priority: %d %s", a.status, a.body)
	}
}
