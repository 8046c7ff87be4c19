package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// The tests of this file check the answers of issue 21's replay of an
// Ironic 21.4 transcript (items 4 and 5): the node fields Ironic clients
// read, each at Ironic's microversion (its utils.VERSIONED_FIELDS), PATCH
// refused at older versions (406) and for fields Ironic does not patch
// (400), names resolved from 1.5, hardware interfaces patched as Ironic's
// conductor allows, validate in Ironic's shape, the rescue password
// masked, and GET /v1 in Ironic's shape. The requests that set a version
// and every refusal go through curl, a client of its own.

// newVersionRig is a smaller compatRig: a coordinator with site1, where
// everything works, and faild, where write_image fails.
func newVersionRig(t *testing.T) *compatRig {
	c := testrig.Coordinator(t, testrig.Options{})
	fast := agent.SimOptions{Nodes: 4, StepDuration: 20 * time.Millisecond}
	testrig.Site(t, c, "site1", fast)
	faild := fast
	faild.FailStep = "write_image"
	testrig.Site(t, c, "faild", faild)
	return &compatRig{t: t, api: testrig.NewClient(t, c)}
}

// vAnswer is one curl answer: status, headers (lower-case names) and body.
type vAnswer struct {
	status int
	header map[string]string
	body   string
}

// vcurl sends method path (with a JSON body when body is not "") at API
// version ver ("" sends no version header) with curl.
func vcurl(t *testing.T, base, ver, method, path, body string) vAnswer {
	t.Helper()
	requireTool(t, curlPath, "curl")
	dir := t.TempDir()
	hdr, out := filepath.Join(dir, "h"), filepath.Join(dir, "b")
	args := []string{"-sS", "--noproxy", "*", "-X", method, "-D", hdr, "-o", out, "-w", "%{http_code}"}
	if ver != "" {
		args = append(args, "-H", "X-OpenStack-Ironic-API-Version: "+ver)
	}
	if body != "" {
		args = append(args, "-H", "Content-Type: application/json", "--data-binary", body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code, err := exec.CommandContext(ctx, curlPath, append(args, base+path)...).Output()
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

// obj is the answer's body as a JSON object.
func (a vAnswer) obj(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(a.body), &m); err != nil {
		t.Fatalf("answer %d is not a JSON object: %.300s", a.status, a.body)
	}
	return m
}

func keysOf(m map[string]any) []string {
	var k []string
	for x := range m {
		k = append(k, x)
	}
	sort.Strings(k)
	return k
}

// ironicFieldsSince is Ironic 21.4's node fields by the version that
// brought them (utils.VERSIONED_FIELDS, V31_FIELDS, and the states,
// portgroups and volume links of node_convert_with_links).
var ironicFieldsSince = map[int][]string{
	1: {"uuid", "instance_uuid", "chassis_uuid", "driver", "driver_info", "extra", "instance_info", "properties",
		"power_state", "target_power_state", "provision_state", "target_provision_state", "provision_updated_at",
		"maintenance", "maintenance_reason", "console_enabled", "last_error", "reservation", "created_at", "updated_at",
		"links", "ports"},
	3: {"driver_internal_info"}, 5: {"name"}, 6: {"inspection_started_at", "inspection_finished_at"}, 7: {"clean_step"},
	12: {"raid_config", "target_raid_config"}, 14: {"states"}, 20: {"network_interface"}, 21: {"resource_class"},
	24: {"portgroups"}, 31: {"boot_interface", "console_interface", "deploy_interface", "inspect_interface",
		"management_interface", "power_interface", "raid_interface", "vendor_interface"},
	32: {"volume"}, 33: {"storage_interface"}, 37: {"traits"}, 38: {"rescue_interface"}, 40: {"bios_interface"},
	42: {"fault"}, 44: {"deploy_step"}, 46: {"conductor_group"}, 47: {"automated_clean"},
	48: {"protected", "protected_reason"}, 49: {"conductor"}, 50: {"owner"}, 51: {"description"}, 52: {"allocation_uuid"},
	61: {"retired", "retired_reason"}, 65: {"lessee"}, 66: {"network_data"}, 75: {"boot_mode", "secure_boot"}, 82: {"shard"},
	83: {"parent_node"}, 86: {"firmware_interface"}, 87: {"service_step"},
}

// fieldsAt is the node fields Ironic shows at 1.minor, with this API's
// own site_online.
func fieldsAt(minor int) []string {
	out := []string{"site_online"}
	for v, fs := range ironicFieldsSince {
		if v <= minor {
			out = append(out, fs...)
		}
	}
	sort.Strings(out)
	return out
}

// TestNodeFieldsByMicroversion: a node shows exactly Ironic's fields at
// each version that brought one (at 1.1 only the 1.1 fields), the twelve
// fields the replay missed with Ironic's values for the node's driver,
// names resolve from 1.5 (404 at 1.1, as Ironic), ?fields= naming a
// later field is 406, and a version above the maximum is 406 with
// X-OpenStack-Ironic-API-Maximum-Version.
func TestNodeFieldsByMicroversion(t *testing.T) {
	r := newVersionRig(t)
	id := r.node("site1", "manageable")
	name := r.get(id).Name
	base := r.api.Base
	var drv map[string]any
	if code := r.api.Do("GET", "/v1/drivers/fake", nil, &drv); code != 200 {
		t.Fatalf("GET /v1/drivers/fake: %d", code)
	}

	var versions []int
	for v := range ironicFieldsSince {
		versions = append(versions, v, v-1)
	}
	versions = append(versions, 82, 87)
	for _, v := range versions {
		if v < 1 {
			continue
		}
		ver := "1." + strconv.Itoa(v)
		a := vcurl(t, base, ver, "GET", "/v1/nodes/"+id, "")
		if a.status != 200 || a.header["x-openstack-ironic-api-version"] != ver {
			t.Fatalf("GET at %s: %d (version header %q) %.200s", ver, a.status, a.header["x-openstack-ironic-api-version"], a.body)
		}
		if got, want := keysOf(a.obj(t)), fieldsAt(v); !slices.Equal(got, want) {
			t.Errorf("fields at %s:\n got %v\nwant %v", ver, got, want)
		}
		// The detail list shows the same fields.
		d := vcurl(t, base, ver, "GET", "/v1/nodes/detail", "")
		var list struct {
			Nodes []map[string]any `json:"nodes"`
		}
		if d.status != 200 || json.Unmarshal([]byte(d.body), &list) != nil || len(list.Nodes) == 0 {
			t.Fatalf("detail list at %s: %d %.200s", ver, d.status, d.body)
		}
		if got, want := keysOf(list.Nodes[0]), fieldsAt(v); !slices.Equal(got, want) {
			t.Errorf("detail list fields at %s:\n got %v\nwant %v", ver, got, want)
		}
	}

	// The twelve fields of the replay, with Ironic's values for a fake
	// node: the driver's interfaces as GET /v1/drivers/fake lists them.
	n := vcurl(t, base, "1.82", "GET", "/v1/nodes/"+id, "").obj(t)
	for _, iface := range []string{"bios", "console", "raid", "rescue", "storage", "vendor", "boot", "deploy", "inspect", "management", "network", "power"} {
		if got, want := n[iface+"_interface"], drv["default_"+iface+"_interface"]; got != want || got == nil {
			t.Errorf("%s_interface = %v, want the driver's default %v", iface, got, want)
		}
	}
	for f, want := range map[string]string{"console_interface": "no-console", "raid_interface": "agent", "rescue_interface": "agent",
		"storage_interface": "noop", "vendor_interface": "no-vendor"} {
		if n[f] != want {
			t.Errorf("%s = %v, want %s", f, n[f], want)
		}
	}
	for _, f := range []string{"network_data", "raid_config", "target_raid_config"} {
		if m, ok := n[f].(map[string]any); !ok || len(m) != 0 {
			t.Errorf("%s = %#v, want {}", f, n[f])
		}
	}
	if v, ok := n["protected_reason"]; !ok || v != nil || n["protected"] != false {
		t.Errorf("protected %v, protected_reason %#v (present %v); want false and null", n["protected"], v, ok)
	}
	for _, l := range []string{"portgroups", "volume"} {
		links, _ := n[l].([]any)
		if len(links) != 2 || !strings.HasSuffix(links[0].(map[string]any)["href"].(string), "/v1/nodes/"+id+"/"+l) {
			t.Errorf("%s links: %v", l, n[l])
		}
	}

	// Names resolve from 1.5; before, a name is a node that does not
	// exist (the UUID works).
	for _, c := range []struct {
		ver, ident string
		want       int
	}{{"1.1", name, 404}, {"1.4", name, 404}, {"1.5", name, 200}, {"1.1", id, 200}} {
		if a := vcurl(t, base, c.ver, "GET", "/v1/nodes/"+c.ident, ""); a.status != c.want {
			t.Errorf("GET /v1/nodes/%s at %s: %d, want %d (%.200s)", c.ident, c.ver, a.status, c.want, a.body)
		}
	}
	if a := vcurl(t, base, "1.1", "PUT", "/v1/nodes/"+name+"/maintenance", `{"reason":"x"}`); a.status != 404 {
		t.Errorf("PUT maintenance by name at 1.1: %d, want 404", a.status)
	}
	if n := r.get(id); n.Maintenance {
		t.Errorf("the node went into maintenance through a name at 1.1")
	}

	// ?fields= naming a field of a later version is 406.
	for _, c := range []struct {
		ver, fields string
		want        int
	}{{"1.60", "retired", 406}, {"1.61", "retired", 200}, {"1.7", "uuid", 406}, {"1.8", "uuid", 200}, {"1.65", "uuid,network_data", 406}} {
		a := vcurl(t, base, c.ver, "GET", "/v1/nodes/"+id+"?fields="+c.fields, "")
		if a.status != c.want {
			t.Errorf("?fields=%s at %s: %d, want %d (%.200s)", c.fields, c.ver, a.status, c.want, a.body)
		}
		if l := vcurl(t, base, c.ver, "GET", "/v1/nodes?fields="+c.fields, ""); l.status != c.want {
			t.Errorf("list ?fields=%s at %s: %d, want %d", c.fields, c.ver, l.status, c.want)
		}
	}

	// Above the maximum: 406, the maximum in its header.
	a := vcurl(t, base, "1.111", "GET", "/v1/nodes/"+id, "")
	if a.status != 406 || a.header["x-openstack-ironic-api-maximum-version"] != "1.110" {
		t.Errorf("GET at 1.111: %d, maximum %q; want 406 and 1.110", a.status, a.header["x-openstack-ironic-api-maximum-version"])
	}
	// At 1.1 available was shown as null (Ironic's NOSTATE).
	av := r.node("site1", "available")
	if p := vcurl(t, base, "1.1", "GET", "/v1/nodes/"+av, "").obj(t); p["provision_state"] != nil {
		t.Errorf("available at 1.1: provision_state %v, want null", p["provision_state"])
	}
	if p := vcurl(t, base, "1.2", "GET", "/v1/nodes/"+av, "").obj(t); p["provision_state"] != "available" {
		t.Errorf("available at 1.2: provision_state %v", p["provision_state"])
	}
}

// TestPatchByMicroversion: PATCH of a field newer than the request's
// version is 406 and changes nothing (Ironic: PATCH /retired at 1.60 →
// 406), the same PATCH at the field's version is 200; PATCH
// /maintenance_reason is 400 (not a field Ironic's PATCH takes) and
// /maintenance is 200; network_data is 406 before 1.66 (kept from 1.66:
// TestConfigDriveAPI).
func TestPatchByMicroversion(t *testing.T) {
	r := newVersionRig(t)
	id := r.node("site1", "manageable")
	base := r.api.Base
	retire := `[{"op":"add","path":"/retired","value":"True"},{"op":"add","path":"/retired_reason","value":"old"}]`
	if a := vcurl(t, base, "1.60", "PATCH", "/v1/nodes/"+id, retire); a.status != 406 {
		t.Errorf("PATCH /retired at 1.60: %d %.200s, want 406", a.status, a.body)
	} else if !strings.Contains(faultstring(t, a.obj(t)), "1.61") {
		t.Errorf("the 406 does not name the version to ask for: %s", a.body)
	}
	if n := r.get(id); n.RetiredRaw != false {
		t.Fatalf("after the refused PATCH retired is %v", n.RetiredRaw)
	}
	if a := vcurl(t, base, "1.61", "PATCH", "/v1/nodes/"+id, retire); a.status != 200 || a.obj(t)["retired"] != true {
		t.Errorf("PATCH /retired at 1.61: %d %.200s, want 200 and retired", a.status, a.body)
	}
	// The answer of a PATCH has the request's version's fields.
	if a := vcurl(t, base, "1.31", "PATCH", "/v1/nodes/"+id, `[{"op":"add","path":"/extra/a","value":"b"}]`); a.status != 200 ||
		!slices.Equal(keysOf(a.obj(t)), fieldsAt(31)) {
		t.Errorf("PATCH at 1.31: %d, fields %v", a.status, keysOf(a.obj(t)))
	}
	for _, c := range []struct {
		ver, patch string
		want       int
		msg        string
	}{
		{"1.82", `[{"op":"replace","path":"/maintenance_reason","value":"disk"}]`, 400, "maintenance"},
		{"1.82", `[{"op":"add","path":"/maintenance","value":true},{"op":"add","path":"/maintenance_reason","value":"disk"}]`, 400, "/maintenance_reason"},
		{"1.65", `[{"op":"add","path":"/network_data","value":{"links":[]}}]`, 406, "1.66"},
		{"1.30", `[{"op":"add","path":"/deploy_interface","value":"direct"}]`, 406, "1.31"},
		{"1.49", `[{"op":"add","path":"/owner","value":"me"}]`, 406, "1.50"},
	} {
		a := vcurl(t, base, c.ver, "PATCH", "/v1/nodes/"+id, c.patch)
		if a.status != c.want {
			t.Errorf("PATCH %s at %s: %d %.200s, want %d", c.patch, c.ver, a.status, a.body, c.want)
			continue
		}
		if msg := faultstring(t, a.obj(t)); !strings.Contains(msg, c.msg) {
			t.Errorf("PATCH %s at %s: %q does not mention %q", c.patch, c.ver, msg, c.msg)
		}
	}
	if n := vcurl(t, base, "1.82", "GET", "/v1/nodes/"+id, "").obj(t); n["maintenance"] != false || n["owner"] != nil {
		t.Errorf("a refused PATCH changed the node: maintenance %v, owner %v", n["maintenance"], n["owner"])
	}
	if a := vcurl(t, base, "1.82", "PATCH", "/v1/nodes/"+id, `[{"op":"replace","path":"/maintenance","value":true}]`); a.status != 200 || a.obj(t)["maintenance"] != true {
		t.Errorf("PATCH /maintenance: %d %.200s", a.status, a.body)
	}
}

// TestInterfacePatch: PATCH of deploy_interface (and the other hardware
// interfaces) as Ironic's update_node allows it: the node's own value is
// 200 in manageable and in deploy failed (no change); another is 400 in
// manageable (not supported by the hardware type here), 409 in deploy
// failed (interfaces change only in enroll, inspecting, inspect wait,
// manageable, available or in maintenance), 400 in deploy failed under
// maintenance; nothing changes.
func TestInterfacePatch(t *testing.T) {
	r := newVersionRig(t)
	base := r.api.Base
	m := r.node("site1", "manageable")
	set := func(iface, v string) string {
		return `[{"op":"replace","path":"/` + iface + `_interface","value":"` + v + `"}]`
	}
	for _, c := range []struct {
		id, patch string
		want      int
	}{
		{m, set("deploy", "direct"), 200}, {m, set("deploy", "ramdisk"), 400}, {m, set("bios", "no-bios"), 200},
		{m, set("console", "ipmitool-socat"), 400}, {m, `[{"op":"remove","path":"/deploy_interface"}]`, 200},
	} {
		if a := vcurl(t, base, "1.82", "PATCH", "/v1/nodes/"+c.id, c.patch); a.status != c.want {
			t.Errorf("manageable: PATCH %s: %d %.200s, want %d", c.patch, a.status, a.body, c.want)
		}
	}
	f := r.node("faild", "available")
	r.api.MustVerb(f, "active", nil)
	if n := r.settle(f, ""); n.State != "deploy failed" {
		t.Fatalf("node in %q, want deploy failed", n.State)
	}
	if a := vcurl(t, base, "1.82", "PATCH", "/v1/nodes/"+f, set("deploy", "ramdisk")); a.status != 409 ||
		!strings.Contains(faultstring(t, a.obj(t)), "deploy_interface") {
		t.Errorf("deploy failed: PATCH deploy_interface ramdisk: %d %.200s, want 409", a.status, a.body)
	}
	if a := vcurl(t, base, "1.82", "PATCH", "/v1/nodes/"+f, set("deploy", "direct")); a.status != 200 {
		t.Errorf("deploy failed: PATCH deploy_interface direct (unchanged): %d %.200s, want 200", a.status, a.body)
	}
	if code := r.api.Do("PUT", "/v1/nodes/"+f+"/maintenance", map[string]any{"reason": "fix"}, nil); code != 202 {
		t.Fatalf("maintenance: %d", code)
	}
	if a := vcurl(t, base, "1.82", "PATCH", "/v1/nodes/"+f, set("deploy", "ramdisk")); a.status != 400 {
		t.Errorf("deploy failed in maintenance: PATCH deploy_interface ramdisk: %d %.200s, want 400", a.status, a.body)
	}
	if n := vcurl(t, base, "1.82", "GET", "/v1/nodes/"+f, "").obj(t); n["deploy_interface"] != "direct" {
		t.Errorf("deploy_interface is %v after the refusals", n["deploy_interface"])
	}
}

// TestValidateIronicShape: validate answers for every non-vendor
// interface of Ironic 21.4, each {"result": true} or {"result": false,
// "reason": ...}: storage (noop) and raid (agent: the ramdisk's software
// RAID) pass, console (no-console) fails with Ironic's
// UnsupportedDriverExtension message.
func TestValidateIronicShape(t *testing.T) {
	r := newVersionRig(t)
	id := r.node("site1", "manageable")
	a := vcurl(t, r.api.Base, "1.82", "GET", "/v1/nodes/"+id+"/validate", "")
	v := a.obj(t)
	want := []string{"bios", "boot", "console", "deploy", "inspect", "management", "network", "power", "raid", "rescue", "storage"}
	if got := keysOf(v); !slices.Equal(got, want) {
		t.Errorf("validate lists %v, want %v", got, want)
	}
	for k, x := range v {
		c, _ := x.(map[string]any)
		res, isBool := c["result"].(bool)
		_, hasReason := c["reason"]
		if !isBool || res == hasReason {
			t.Errorf("validate %s: %v; want result true without a reason or false with one", k, x)
		}
	}
	for _, k := range []string{"console"} {
		c, _ := v[k].(map[string]any)
		if c["result"] != false || c["reason"] != "Driver fake does not support "+k+" (disabled or not implemented)." {
			t.Errorf("validate %s: %v", k, c)
		}
	}
	for _, k := range []string{"storage", "raid"} {
		if c, _ := v[k].(map[string]any); c["result"] != true {
			t.Errorf("validate %s: %v", k, v[k])
		}
	}
}

// TestRescuePasswordMasked: while a node is rescued, instance_info shows
// rescue_password and hashed_rescue_password as "******" (Ironic's), the
// password itself is in no view (node, detail list, ?fields=, PATCH
// answer), and after unrescue both are gone.
func TestRescuePasswordMasked(t *testing.T) {
	r := newVersionRig(t)
	id := r.node("site1", "active")
	const secret = "s3cret-Rescue-pw"
	r.api.MustVerb(id, "rescue", map[string]any{"rescue_password": secret})
	if n := r.settle(id, ""); n.State != "rescue" {
		t.Fatalf("node in %q, want rescue", n.State)
	}
	base := r.api.Base
	for _, path := range []string{"/v1/nodes/" + id, "/v1/nodes/detail", "/v1/nodes/" + id + "?fields=instance_info", "/v1/nodes/" + id + "/states"} {
		a := vcurl(t, base, "1.82", "GET", path, "")
		if a.status != 200 || strings.Contains(a.body, secret) {
			t.Errorf("GET %s: %d, shows the password: %v", path, a.status, strings.Contains(a.body, secret))
		}
	}
	a := vcurl(t, base, "1.82", "PATCH", "/v1/nodes/"+id, `[{"op":"add","path":"/extra/x","value":"y"}]`)
	ii, _ := a.obj(t)["instance_info"].(map[string]any)
	if a.status != 200 || strings.Contains(a.body, secret) || ii["rescue_password"] != "******" || ii["hashed_rescue_password"] != "******" {
		t.Errorf("in rescue: %d, instance_info %v; want rescue_password and hashed_rescue_password ******", a.status, ii)
	}
	r.api.MustVerb(id, "unrescue", nil)
	if n := r.settle(id, ""); n.State != "active" {
		t.Fatalf("node in %q after unrescue", n.State)
	}
	ii, _ = vcurl(t, base, "1.82", "GET", "/v1/nodes/"+id, "").obj(t)["instance_info"].(map[string]any)
	if _, ok := ii["rescue_password"]; ok {
		t.Errorf("after unrescue instance_info still has rescue_password: %v", ii)
	}
}

// TestV1Document: GET /v1 in Ironic's shape: media_types an object (not
// a list), links self and describedby, and links to the resources Ironic
// lists at the request's version that this API serves (nodes, ports,
// drivers); a resource Ironic lists that has no route here is not linked
// and answers 404.
func TestV1Document(t *testing.T) {
	r := newVersionRig(t)
	base := r.api.Base
	d := vcurl(t, base, "1.82", "GET", "/v1", "").obj(t)
	mt, ok := d["media_types"].(map[string]any)
	if !ok || mt["base"] != "application/json" || mt["type"] != "application/vnd.openstack.ironic.v1+json" {
		t.Errorf("media_types: %#v, want Ironic's object", d["media_types"])
	}
	links, _ := d["links"].([]any)
	if len(links) != 2 || links[1].(map[string]any)["rel"] != "describedby" || links[0].(map[string]any)["href"] != base+"/v1/" {
		t.Errorf("links: %v", d["links"])
	}
	for _, res := range []string{"nodes", "ports", "drivers"} {
		l, _ := d[res].([]any)
		if len(l) != 2 || l[0].(map[string]any)["href"] != base+"/v1/"+res+"/" || l[1].(map[string]any)["href"] != base+"/"+res+"/" {
			t.Errorf("%s: %v", res, d[res])
		}
	}
	ironic := []string{"chassis", "lookup", "heartbeat", "portgroups", "volume", "conductors", "allocations", "events", "deploy_templates", "shards"}
	for _, res := range ironic {
		served := vcurl(t, base, "1.82", "GET", "/v1/"+res, "").status != 404
		if _, linked := d[res]; linked != served {
			t.Errorf("/v1/%s: linked %v, served %v; a link must lead to a resource", res, linked, served)
		}
	}
	if _, ok := d["version"].(map[string]any); !ok {
		t.Errorf("version: %v", d["version"])
	}
}

// TestVerbsAndResourcesByMicroversion: a provision verb below Ironic's
// version for it is 406 and changes nothing (manage before 1.4, clean
// before 1.15, rescue before 1.38); a node sub-resource below its version
// is 404 (history before 1.78), as Ironic's node controller answers.
func TestVerbsAndResourcesByMicroversion(t *testing.T) {
	r := newVersionRig(t)
	base := r.api.Base
	id := r.node("site1", "enroll")
	for _, c := range []struct {
		ver, target string
		want        int
	}{{"1.3", "manage", 406}, {"1.14", "clean", 406}, {"1.37", "rescue", 406}} {
		a := vcurl(t, base, c.ver, "PUT", "/v1/nodes/"+id+"/states/provision", `{"target":"`+c.target+`","clean_steps":[{"interface":"deploy","step":"erase_devices_metadata"}]}`)
		if a.status != c.want || !strings.Contains(faultstring(t, a.obj(t)), c.target) {
			t.Errorf("%s at %s: %d %.200s, want %d naming the verb", c.target, c.ver, a.status, a.body, c.want)
		}
	}
	if n := r.get(id); n.State != "enroll" {
		t.Fatalf("a refused verb moved the node to %q", n.State)
	}
	if a := vcurl(t, base, "1.4", "PUT", "/v1/nodes/"+id+"/states/provision", `{"target":"manage"}`); a.status != 202 {
		t.Errorf("manage at 1.4: %d %.200s", a.status, a.body)
	}
	r.settle(id, "manageable")
	for _, c := range []struct {
		ver  string
		want int
	}{{"1.77", 404}, {"1.78", 200}} {
		if a := vcurl(t, base, c.ver, "GET", "/v1/nodes/"+id+"/history", ""); a.status != c.want {
			t.Errorf("history at %s: %d, want %d", c.ver, a.status, c.want)
		}
	}
}

// TestCreateByMicroversion: creating a node with a field of a later
// version than the request's is 406 and makes no node (a name at 1.4,
// owner at 1.49); null passes, and at the field's version the node is
// made with only that version's fields in the answer. conductor_group,
// the node's site, is taken at every version.
func TestCreateByMicroversion(t *testing.T) {
	r := newVersionRig(t)
	base := r.api.Base
	for _, c := range []struct {
		ver, body string
		want      int
	}{
		{"1.4", `{"driver":"fake","name":"v1","conductor_group":"site1"}`, 406},
		{"1.49", `{"driver":"fake","name":"v2","conductor_group":"site1","owner":"me"}`, 406},
		{"1.4", `{"driver":"fake","name":null,"conductor_group":"site1"}`, 201},
		{"1.46", `{"driver":"fake","name":"v3","conductor_group":"site1"}`, 201},
	} {
		a := vcurl(t, base, c.ver, "POST", "/v1/nodes", c.body)
		if a.status != c.want {
			t.Errorf("create %s at %s: %d %.200s, want %d", c.body, c.ver, a.status, a.body, c.want)
			continue
		}
		if c.want == 201 {
			if got, want := keysOf(a.obj(t)), fieldsAt(mustMinor(t, c.ver)); !slices.Equal(got, want) {
				t.Errorf("create at %s answers fields %v, want %v", c.ver, got, want)
			}
		}
	}
	var list struct {
		Nodes []map[string]any `json:"nodes"`
	}
	if code := r.api.Do("GET", "/v1/nodes", nil, &list); code != 200 || len(list.Nodes) != 2 {
		t.Errorf("nodes after the creates: %d %v, want the two accepted", code, list.Nodes)
	}
}

func mustMinor(t *testing.T, ver string) int {
	n, err := strconv.Atoi(strings.TrimPrefix(ver, "1."))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestStatesByMicroversion: GET /v1/nodes/{node}/states has Ironic's keys
// at each version (node_states_convert): raid_config and
// target_raid_config from 1.12, boot_mode and secure_boot from 1.75.
func TestStatesByMicroversion(t *testing.T) {
	r := newVersionRig(t)
	id := r.node("site1", "manageable")
	base := []string{"console_enabled", "last_error", "power_state", "provision_state", "provision_updated_at", "target_power_state", "target_provision_state"}
	raid := []string{"raid_config", "target_raid_config"}
	boot := []string{"boot_mode", "secure_boot"}
	for _, c := range []struct {
		ver  string
		want []string
	}{{"1.11", base}, {"1.12", append(slices.Clone(base), raid...)}, {"1.74", append(slices.Clone(base), raid...)},
		{"1.75", append(append(slices.Clone(base), raid...), boot...)}} {
		sort.Strings(c.want)
		a := vcurl(t, r.api.Base, c.ver, "GET", "/v1/nodes/"+id+"/states", "")
		if got := keysOf(a.obj(t)); a.status != 200 || !slices.Equal(got, c.want) {
			t.Errorf("states at %s: %d %v, want %v", c.ver, a.status, got, c.want)
		}
	}
}
