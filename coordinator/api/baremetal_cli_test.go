package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// baremetalPath is the Debian python3-ironicclient CLI; make test installs
// it with scripts/install-test-deps.sh.
const baremetalPath = "/usr/bin/baremetal"

// bmCLI runs Ironic's own `baremetal` command against a coordinator.
type bmCLI struct {
	t   *testing.T
	ctx context.Context
	env []string
}

type cliResult struct {
	args   []string
	stdout string
	stderr string
	code   int
	err    error
	took   time.Duration
}

func (r cliResult) String() string {
	return "baremetal " + strings.Join(r.args, " ")
}

func newBMCLI(t *testing.T, endpoint string) *bmCLI {
	t.Helper()
	home := t.TempDir()
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "OS_"), k == "HOME", k == "XDG_CACHE_HOME", k == "XDG_CONFIG_HOME",
			strings.EqualFold(k, "no_proxy"):
			continue // nothing of the caller's cloud config, caches or proxies
		}
		env = append(env, kv)
	}
	env = append(env, "OS_AUTH_TYPE=none", "OS_ENDPOINT="+endpoint,
		"HOME="+home, "XDG_CACHE_HOME="+filepath.Join(home, ".cache"), "XDG_CONFIG_HOME="+filepath.Join(home, ".config"),
		"NO_PROXY=127.0.0.1,localhost", "no_proxy=127.0.0.1,localhost", "PYTHONDONTWRITEBYTECODE=1")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return &bmCLI{t: t, ctx: ctx, env: env}
}

// run executes /usr/bin/baremetal; the process is killed when it outlives
// its timeout or the test.
func (b *bmCLI) run(args ...string) cliResult {
	ctx, cancel := context.WithTimeout(b.ctx, 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, baremetalPath, args...)
	cmd.Env = b.env
	cmd.Dir = os.TempDir()
	cmd.WaitDelay = 5 * time.Second
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	start := time.Now()
	err := cmd.Run()
	r := cliResult{args: args, stdout: out.String(), stderr: errOut.String(), err: err, took: time.Since(start)}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		r.code = -1
	}
	b.t.Logf("%s (%.1fs) exit %d\n%s%s", r, r.took.Seconds(), r.code, indent(r.stdout), indent(r.stderr))
	return r
}

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return ""
	}
	return "    | " + strings.ReplaceAll(s, "\n", "\n    | ") + "\n"
}

// ok runs the command and reports an error unless it exits 0. It is safe
// in goroutines; it returns false on failure.
func (b *bmCLI) ok(args ...string) (cliResult, bool) {
	r := b.run(args...)
	if r.err != nil || r.code != 0 {
		b.t.Errorf("%s: exit %d (%v)\nstdout:\n%s\nstderr:\n%s", r, r.code, r.err, r.stdout, r.stderr)
		return r, false
	}
	return r, true
}

// json runs the command and decodes its -f json output into v.
func (b *bmCLI) json(v any, args ...string) bool {
	r, ok := b.ok(args...)
	if !ok {
		return false
	}
	if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
		b.t.Errorf("%s: output is not JSON: %v\n%s", r, err, r.stdout)
		return false
	}
	return true
}

// state reads the provision state with `baremetal node show -f value`.
func (b *bmCLI) state(node string) string {
	r, ok := b.ok("node", "show", node, "-f", "value", "-c", "provision_state")
	if !ok {
		return ""
	}
	return strings.TrimSpace(r.stdout)
}

// parallel runs fns at once: the `--wait` commands poll every 10 s, so
// other commands run while they wait. fns must report with t.Errorf.
func parallel(t *testing.T, fns ...func()) {
	t.Helper()
	var wg sync.WaitGroup
	for _, fn := range fns {
		wg.Add(1)
		go func() { defer wg.Done(); fn() }()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
}

// TestBaremetalCLI drives a coordinator with the Debian `baremetal` CLI
// (python3-ironicclient, no auth, OS_ENDPOINT) through a node's life:
// create, list, show, manage, provide, set instance_info, deploy, a
// refused verb, reboot, power off and on, boot device set and show,
// maintenance set and unset, undeploy; retirement set and unset (the node
// then leaves node list --retired); and ports. States are read back through the
// API and through the CLI after every step.
func TestBaremetalCLI(t *testing.T) {
	if _, err := os.Stat(baremetalPath); err != nil {
		if os.Getenv("BM_REQUIRE_ALL") == "1" {
			t.Fatalf("%s is missing (package python3-ironicclient); run scripts/install-test-deps.sh", baremetalPath)
		}
		t.Skipf("%s is missing: install Debian's python3-ironicclient (scripts/install-test-deps.sh, which make test runs)", baremetalPath)
	}
	if testing.Short() {
		t.Skip("runs the baremetal CLI through a whole deploy cycle (~45 s); not in -short")
	}
	c := testrig.Coordinator(t, testrig.Options{})
	testrig.Site(t, c, "site1", agent.SimOptions{Nodes: 8, StepDuration: 100 * time.Millisecond})
	api := testrig.NewClient(t, c)
	bm := newBMCLI(t, "http://"+c.APIAddr)
	start := time.Now()

	// A second node, created through the API, that stays in enroll.
	other := api.CreateNode("bm2", "site1", nil)

	// Create: the alias fake-hardware is the fake driver, and the node
	// keeps the name; with one site registered, the node goes there. Its
	// boot and deploy are the simulated machine's (fake-hardware's
	// defaults are Ironic's fake ones, which deploy nothing).
	var created map[string]any
	if !bm.json(&created, "node", "create", "--driver", "fake-hardware", "--deploy-interface", "direct", "--boot-interface", "pxe", "--name", "bm1", "-f", "json") {
		t.FailNow()
	}
	id, _ := created["uuid"].(string)
	if id == "" || created["name"] != "bm1" || created["driver"] != "fake-hardware" || created["deploy_interface"] != "direct" || created["conductor_group"] != "site1" ||
		created["provision_state"] != "enroll" {
		t.Fatalf("node create printed %v", created)
	}
	if n := api.Get("bm1"); n.UUID != id || n.State != "enroll" || n.ConductorGroup != "site1" {
		t.Fatalf("API shows the created node as %+v", n)
	}

	// List and show.
	parallel(t, func() {
		var list []map[string]any
		if !bm.json(&list, "node", "list", "-f", "json") {
			return
		}
		got := map[string]map[string]any{}
		for _, row := range list {
			name, _ := row["Name"].(string)
			got[name] = row
		}
		if len(list) != 2 || got["bm1"]["UUID"] != id || got["bm1"]["Provisioning State"] != "enroll" ||
			got["bm1"]["Maintenance"] != false || got["bm2"]["UUID"] != other {
			t.Errorf("node list printed %v", list)
		}
		for _, col := range []string{"UUID", "Name", "Instance UUID", "Power State", "Provisioning State", "Maintenance"} {
			if _, ok := got["bm1"][col]; !ok {
				t.Errorf("node list has no column %q: %v", col, got["bm1"])
			}
		}
	}, func() {
		var show map[string]any
		if !bm.json(&show, "node", "show", "bm1", "-f", "json") {
			return
		}
		want := map[string]any{"uuid": id, "name": "bm1", "driver": "fake-hardware", "conductor_group": "site1",
			"provision_state": "enroll", "target_provision_state": nil, "maintenance": false, "last_error": nil,
			"reservation": nil, "retired": false}
		for k, v := range want {
			if show[k] != v {
				t.Errorf("node show: %s = %#v, want %#v", k, show[k], v)
			}
		}
		for _, k := range []string{"driver_info", "properties", "instance_info", "extra", "driver_internal_info"} {
			if _, ok := show[k].(map[string]any); !ok {
				t.Errorf("node show: %s = %#v, want an object", k, show[k])
			}
		}
		if s, _ := show["created_at"].(string); s == "" {
			t.Errorf("node show: no created_at: %v", show)
		}
	})

	// expect checks bm1's state through the API (main goroutine only).
	expect := func(state string) {
		t.Helper()
		n := api.WaitRest(id, 5*time.Second)
		if n.State != state || n.Target != "" || n.LastError != "" {
			t.Fatalf("API: bm1 is %q → %q (last_error %q), want %q at rest", n.State, n.Target, n.LastError, state)
		}
	}
	// cliState checks it through `baremetal node show -f value`.
	cliState := func(state string) {
		if got := bm.state("bm1"); got != state {
			t.Errorf("baremetal node show bm1 -f value -c provision_state: %q, want %q", got, state)
		}
	}

	// manage: enroll → verifying → manageable.
	if _, ok := bm.ok("node", "manage", "bm1", "--wait", "60"); !ok {
		t.FailNow()
	}
	// While the state is read back, set the image: a PATCH of instance_info.
	expect("manageable")
	parallel(t, func() { cliState("manageable") }, func() {
		bm.ok("node", "set", "bm1", "--instance-info", "image_source=http://127.0.0.1:1/img",
			"--instance-info", "image_checksum=0123456789abcdef0123456789abcdef")
	})
	if ii := api.Get(id).InstanceInfo; ii["image_source"] != "http://127.0.0.1:1/img" || ii["image_checksum"] != "0123456789abcdef0123456789abcdef" {
		t.Fatalf("instance_info after node set: %v", ii)
	}

	// provide: cleaning → available. While the CLI waits, ports.
	mac := "52:54:00:12:34:56"
	parallel(t, func() {
		bm.ok("node", "provide", "bm1", "--wait", "60")
	}, func() {
		var port map[string]any
		if !bm.json(&port, "port", "create", mac, "--node", id, "-f", "json") {
			return
		}
		if port["address"] != mac || port["node_uuid"] != id || port["pxe_enabled"] != true {
			t.Errorf("port create printed %v", port)
		}
		var ports []map[string]any
		if bm.json(&ports, "port", "list", "--node", "bm1", "-f", "json") &&
			(len(ports) != 1 || ports[0]["Address"] != mac || ports[0]["UUID"] != port["uuid"]) {
			t.Errorf("port list --node bm1 printed %v", ports)
		}
	})
	var all struct {
		Ports []map[string]any `json:"ports"`
	}
	if code := api.Do("GET", "/v1/ports?node="+id, nil, &all); code != 200 || len(all.Ports) != 1 || all.Ports[0]["address"] != mac {
		t.Errorf("API ports of bm1: %d %v", code, all.Ports)
	}
	expect("available")
	cliState("available")

	// deploy: deploying → wait call-back → active. While the CLI waits, a
	// filtered list (ironicclient asks /v1/nodes/?provision_state=...)
	// and the instance_info set above.
	// An md5 checksum (a bare digest of 32 hex digits, as older Ironic
	// examples give) is refused before anything boots, naming the
	// option that allows it (Ironic's [agent]allow_md5_checksum).
	if r := bm.run("node", "deploy", "bm1"); r.code == 0 || !strings.Contains(r.stderr, "image checksum is md5") || !strings.Contains(r.stderr, "sha256:HEX") ||
		!strings.Contains(r.stderr, "--allow-md5-checksum") {
		t.Errorf("deploy with an md5 checksum: exit %d, stderr %q; want a refusal naming md5, the option --allow-md5-checksum and what to give", r.code, r.stderr)
	}
	if st := api.Get(id).State; st != "available" {
		t.Fatalf("after the refused deploy the node is %q, want available", st)
	}
	sha := strings.Repeat("0123456789abcdef", 4)
	bm.ok("node", "set", "bm1", "--instance-info", "image_checksum=sha256:"+sha)
	parallel(t, func() {
		bm.ok("node", "deploy", "bm1", "--wait", "60")
	}, func() {
		if r, ok := bm.ok("node", "list", "--provision-state", "enroll", "-f", "value", "-c", "Name"); ok && strings.TrimSpace(r.stdout) != "bm2" {
			t.Errorf("node list --provision-state enroll printed %q, want bm2", r.stdout)
		}
		var show map[string]any
		if bm.json(&show, "node", "show", "bm1", "-f", "json", "-c", "instance_info") {
			ii, _ := show["instance_info"].(map[string]any)
			if ii["image_source"] != "http://127.0.0.1:1/img" {
				t.Errorf("node show -c instance_info printed %v", show)
			}
		}
	})
	expect("active")

	// A verb the state machine refuses: the CLI prints the coordinator's
	// message and exits non-zero; nothing changes.
	var r cliResult
	parallel(t, func() { cliState("active") }, func() { r = bm.run("node", "provide", "bm1") })
	var raw struct {
		ErrorMessage string `json:"error_message"`
	}
	code := api.Do("PUT", "/v1/nodes/"+id+"/states/provision", map[string]any{"target": "provide"}, &raw)
	body := raw.ErrorMessage
	// Ironic's error body: error_message holds a JSON document whose
	// faultstring is what clients print.
	var fault struct {
		Faultstring string `json:"faultstring"`
	}
	if err := json.Unmarshal([]byte(body), &fault); err != nil {
		t.Fatalf("API provide on active: error_message %q is not Ironic's JSON fault: %v", body, err)
	}
	msg := fault.Faultstring
	if code != 400 || !strings.Contains(msg, "provide") || !strings.Contains(msg, "active") {
		t.Fatalf("API provide on active: %d %q", code, msg)
	}
	if r.code == 0 || !strings.Contains(r.stderr, msg) || !strings.Contains(r.stderr, "HTTP 400") {
		t.Fatalf("%s on an active node: exit %d, stderr %q; want non-zero and %q (HTTP 400)", r, r.code, r.stderr, msg)
	}
	if strings.Contains(r.stderr, "faultstring") || strings.Contains(r.stderr, "Traceback") {
		t.Fatalf("%s: the CLI did not unwrap the error body: %q", r, r.stderr)
	}
	if n := api.Get(id); n.State != "active" || n.LastError != "" || n.Target != "" {
		t.Fatalf("a refused verb changed the node: %+v", n)
	}

	// Power, boot device and maintenance on the active node; retirement
	// on bm2 (enroll) at the same time.
	parallel(t, func() {
		powerIs := func(want string) {
			deadline := time.Now().Add(10 * time.Second)
			for {
				var n struct {
					Power  string  `json:"power_state"`
					Target *string `json:"target_power_state"`
				}
				api.Do("GET", "/v1/nodes/"+id, nil, &n)
				if n.Power == want && n.Target == nil {
					return
				}
				if time.Now().After(deadline) {
					t.Errorf("bm1 power %q → %v, want %q at rest", n.Power, n.Target, want)
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		if _, ok := bm.ok("node", "reboot", "bm1"); ok {
			powerIs("power on")
		}
		if _, ok := bm.ok("node", "power", "off", "bm1"); ok {
			powerIs("power off")
		}
		if _, ok := bm.ok("node", "power", "on", "bm1"); ok {
			powerIs("power on")
		}
		if _, ok := bm.ok("node", "boot", "device", "set", "bm1", "pxe"); ok {
			var dev map[string]any
			deadline := time.Now().Add(10 * time.Second)
			for bm.json(&dev, "node", "boot", "device", "show", "bm1", "-f", "json") && dev["boot_device"] != "pxe" && time.Now().Before(deadline) {
				time.Sleep(100 * time.Millisecond)
			}
			if dev["boot_device"] != "pxe" || dev["persistent"] != false {
				t.Errorf("node boot device show bm1 printed %v, want pxe, not persistent", dev)
			}
		}
		var sup map[string]any
		if bm.json(&sup, "node", "boot", "device", "show", "bm1", "--supported", "-f", "json") {
			if l := fmt.Sprint(sup["supported_boot_devices"]); !strings.Contains(l, "pxe") || !strings.Contains(l, "disk") {
				t.Errorf("node boot device show --supported printed %v", sup)
			}
		}
		if _, ok := bm.ok("node", "maintenance", "set", "bm1", "--reason", "fan"); ok {
			if n := api.Get(id); !n.Maintenance || n.State != "active" {
				t.Errorf("after maintenance set: %+v", n)
			}
		}
		if _, ok := bm.ok("node", "maintenance", "unset", "bm1"); ok && api.Get(id).Maintenance {
			t.Error("maintenance unset left maintenance on")
		}
	}, func() {
		listed := func(args ...string) bool {
			r, ok := bm.ok(append([]string{"node", "list", "-f", "value", "-c", "Name"}, args...)...)
			return ok && slices.Contains(strings.Fields(r.stdout), "bm2")
		}
		if _, ok := bm.ok("node", "set", "bm2", "--retired", "--retired-reason", "old"); !ok {
			return
		}
		if !listed("--retired") {
			t.Error("node list --retired does not list the retired bm2")
		}
		if _, ok := bm.ok("node", "unset", "bm2", "--retired"); !ok {
			return
		}
		var show map[string]any
		if bm.json(&show, "node", "show", "bm2", "-f", "json") && (show["retired"] != nil || show["retired_reason"] != nil) {
			t.Errorf("after node unset --retired: retired %v, reason %v; want both null (as Ironic)", show["retired"], show["retired_reason"])
		}
		if listed("--retired") || listed("--no-retired") {
			t.Error("bm2 with retired unset (null) is listed by node list --retired or --no-retired; Ironic lists it in neither")
		}
		if !listed() {
			t.Error("bm2 missing from node list")
		}
	})
	expect("active")

	// undeploy: deleting → cleaning → available.
	if _, ok := bm.ok("node", "undeploy", "bm1", "--wait", "60"); !ok {
		t.FailNow()
	}
	expect("available")
	parallel(t, func() { cliState("available") }, func() {
		var list []map[string]any
		if bm.json(&list, "node", "list", "-f", "json") {
			states := map[any]any{}
			for _, row := range list {
				states[row["Name"]] = row["Provisioning State"]
			}
			if states["bm1"] != "available" || states["bm2"] != "enroll" {
				t.Errorf("node list at the end printed %v", list)
			}
		}
	})
	t.Logf("the CLI cycle took %s", time.Since(start).Round(100*time.Millisecond))
}
