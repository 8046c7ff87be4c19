package systest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/drivers/redfish/vbmc"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// fwOrigin serves firmware images over HTTP and counts each path's GETs:
// what crossed the WAN.
type fwOrigin struct {
	files map[string][]byte
	mu    sync.Mutex
	gets  map[string]int
}

func (o *fwOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	data, ok := o.files[r.URL.Path]
	if !ok {
		http.NotFound(w, r)
		return
	}
	o.mu.Lock()
	o.gets[r.URL.Path]++
	o.mu.Unlock()
	_, _ = w.Write(data)
}

func (o *fwOrigin) count(path string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.gets[path]
}

func sha256Of(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// TestFirmwareUpdateThroughTheSiteCache: two redfish nodes of one site,
// each behind its own virtual Redfish BMC, driven by a real edge agent
// with an image cache. Managing them reads their firmware and BIOS
// (GET …/firmware, GET …/bios, the Debian baremetal CLI's `node bios
// setting list`, compared with what python3-sushy reads from the BMC).
// A manual clean with firmware.update on both moves the BMC image over
// the WAN once (counted at the origin), the BMCs fetch it from the cache
// (never the origin), and their reported version changes (read back with
// sushy); GET …/firmware shows initial, current and last flashed. A BMC
// task that fails and a checksum that does not match each end in clean
// failed with a clear last_error; the mismatched image never reaches the
// BMC (no task started).
func TestFirmwareUpdateThroughTheSiteCache(t *testing.T) {
	py := sushyPython(t)
	bmc2 := vbmc.FirmwareImage(vbmc.ComponentBMC, "2.0")
	bad := vbmc.FirmwareImage(vbmc.ComponentBIOS, "9.9", "fail=flash write error at block 7")
	o := &fwOrigin{gets: map[string]int{}, files: map[string][]byte{"/bmc-2.0.bin": bmc2, "/bios-bad.bin": bad}}
	origin := httptest.NewServer(o)
	t.Cleanup(origin.Close)

	type lab struct {
		bmc *vbmc.BMC
		url string
		id  string
	}
	var labs []lab
	for range 2 {
		b, err := vbmc.New(vbmc.Config{Username: "root", Password: "calvin", UpdateDelay: 20 * time.Millisecond,
			Systems: []vbmc.SystemConfig{{Machine: vbmc.NewMemoryMachine(vbmc.MemoryOptions{})}}})
		if err != nil {
			t.Fatal(err)
		}
		srv, err := vbmc.Serve(b, vbmc.ServeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close(); b.Close() })
		labs = append(labs, lab{bmc: b, url: srv.URL})
	}

	// The BMC reset that activates an update waits the driver's 15 s
	// settle (drivers/redfish BMCResetSettle) before it looks again: the
	// rig's 20 s command timeout left 5 s for the update itself, which a
	// busy machine (load 13-16) overran.
	c := testrig.Coordinator(t, testrig.Options{Machine: fsm.Config{CommandTimeout: 90 * time.Second}})
	cl := testrig.NewClient(t, c)
	var creds agent.Credentials
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "rack1"}, &creds); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	testrig.StartAgentConfig(t, creds, agent.Config{Cache: agent.ImageCacheOptions{Dir: t.TempDir(), Listen: "127.0.0.1:0", MaxBytes: 1 << 30,
		FetchAllow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}})
	for i := range labs {
		info := map[string]any{"redfish_address": labs[i].url, "redfish_username": "root", "redfish_password": "calvin"}
		var n testrig.Node
		if code := cl.Do("POST", "/v1/nodes", map[string]any{"name": fmt.Sprintf("fw%d", i), "driver": "redfish", "conductor_group": "rack1", "driver_info": info}, &n); code != 201 {
			t.Fatalf("create: %d", code)
		}
		labs[i].id = n.UUID
		cl.MustVerb(n.UUID, "manage", nil)
	}
	for _, l := range labs {
		if got := cl.WaitRest(l.id, 60*time.Second); got.State != "manageable" {
			t.Fatalf("manage: %q, last_error %q", got.State, got.LastError)
		}
	}

	type component struct {
		Component          string  `json:"component"`
		InitialVersion     string  `json:"initial_version"`
		CurrentVersion     string  `json:"current_version"`
		LastVersionFlashed *string `json:"last_version_flashed"`
	}
	firmware := func(id string) map[string]component {
		t.Helper()
		var out struct {
			Firmware []component `json:"firmware"`
		}
		if code := cl.Do("GET", "/v1/nodes/"+id+"/firmware", nil, &out); code != 200 {
			t.Fatalf("GET firmware: %d", code)
		}
		m := map[string]component{}
		for _, c := range out.Firmware {
			m[c.Component] = c
		}
		return m
	}
	fw := firmware(labs[0].id)
	if b := fw["bmc"]; b.InitialVersion != "1.0" || b.CurrentVersion != "1.0" || b.LastVersionFlashed != nil || fw["bios"].CurrentVersion != "1.0.0" {
		t.Fatalf("firmware after manage: %+v; want bmc 1.0 and bios 1.0.0, nothing flashed", fw)
	}

	// The BIOS settings the API shows are the ones sushy reads from the BMC.
	before := sushyReadback(t, py, labs[0].url)
	var bios struct {
		Bios []struct {
			Name            string   `json:"name"`
			Value           *string  `json:"value"`
			AttributeType   *string  `json:"attribute_type"`
			AllowableValues []string `json:"allowable_values"`
			ReadOnly        *bool    `json:"read_only"`
		} `json:"bios"`
	}
	if code := cl.Do("GET", "/v1/nodes/"+labs[0].id+"/bios?detail=True", nil, &bios); code != 200 || len(bios.Bios) == 0 || len(bios.Bios) != len(before.BIOS) {
		t.Fatalf("GET bios: %d, %d settings; sushy reads %d", code, len(bios.Bios), len(before.BIOS))
	}
	for _, s := range bios.Bios {
		want, ok := before.BIOS[s.Name]
		str := fmt.Sprint(want)
		if b, isBool := want.(bool); isBool {
			str = map[bool]string{true: "True", false: "False"}[b] // Ironic keeps values as Python's str()
		}
		if !ok || s.Value == nil || *s.Value != str {
			t.Errorf("BIOS setting %s: API %v, sushy %v", s.Name, deref(s.Value), want)
		}
		if r, ok := before.Registry[s.Name]; ok && (s.AttributeType == nil || *s.AttributeType != r.Type || s.ReadOnly == nil || *s.ReadOnly != r.ReadOnly) {
			t.Errorf("BIOS setting %s: registry fields %v %v; sushy reads %+v", s.Name, s.AttributeType, s.ReadOnly, r)
		}
	}
	if out := baremetalCLI(t, c.APIAddr, "node", "bios", "setting", "list", "fw0", "-f", "json"); !strings.Contains(out, `"ProcVirtualization"`) {
		t.Fatalf("baremetal node bios setting list: %s", out)
	}
	if out := baremetalCLI(t, c.APIAddr, "node", "bios", "setting", "show", "fw0", "ProcVirtualization", "-f", "json"); !strings.Contains(out, `"value": "`+fmt.Sprint(before.BIOS["ProcVirtualization"])+`"`) {
		t.Fatalf("baremetal node bios setting show: %s; sushy reads %v", out, before.BIOS["ProcVirtualization"])
	}

	// firmware.update on both nodes at once: the image crosses the WAN once.
	clean := func(id, path, checksum string) {
		t.Helper()
		steps := []map[string]any{{"interface": "firmware", "step": "update",
			"args": map[string]any{"settings": []map[string]any{{"component": strings.Split(strings.TrimPrefix(path, "/"), "-")[0], "url": origin.URL + path, "checksum": checksum}}}}}
		cl.MustVerb(id, "clean", map[string]any{"clean_steps": steps})
	}
	for _, l := range labs {
		clean(l.id, "/bmc-2.0.bin", sha256Of(bmc2))
	}
	for _, l := range labs {
		if got := cl.WaitRest(l.id, 90*time.Second); got.State != "manageable" {
			t.Fatalf("clean with firmware.update: %q, last_error %q", got.State, got.LastError)
		}
		fw := firmware(l.id)
		if b := fw["bmc"]; b.InitialVersion != "1.0" || b.CurrentVersion != "2.0" || b.LastVersionFlashed == nil || *b.LastVersionFlashed != "2.0" {
			t.Fatalf("firmware after the update: %+v; want bmc initial 1.0, current and last flashed 2.0", b)
		}
		if got := sushyReadback(t, py, l.url); got.BMCVersion != "2.0" {
			t.Fatalf("sushy reads the BMC's version %q after the update; want 2.0", got.BMCVersion)
		}
	}
	if n := o.count("/bmc-2.0.bin"); n != 1 {
		t.Fatalf("the origin served the BMC image %d times for two nodes of one site; want 1", n)
	}

	// A BMC task that fails, and a checksum that does not match.
	tasks := len(labs[1].bmc.Tasks())
	clean(labs[0].id, "/bios-bad.bin", sha256Of(bad))
	clean(labs[1].id, "/bios-bad.bin", sha256Of(bmc2))
	got := cl.WaitRest(labs[0].id, 90*time.Second)
	if got.State != "clean failed" || !strings.Contains(got.LastError, "firmware.update") || !strings.Contains(got.LastError, "flash write error at block 7") {
		t.Fatalf("failing BMC task: %q, last_error %q; want clean failed with the task's message", got.State, got.LastError)
	}
	got = cl.WaitRest(labs[1].id, 90*time.Second)
	if got.State != "clean failed" || !strings.Contains(got.LastError, "checksum mismatch") || !strings.Contains(got.LastError, "was not given to the BMC") ||
		strings.Contains(got.LastError, "/images/") {
		t.Fatalf("checksum mismatch: %q, last_error %q; want clean failed saying the image was not given to the BMC", got.State, got.LastError)
	}
	if n := len(labs[1].bmc.Tasks()); n != tasks {
		t.Fatalf("the BMC got an image whose checksum did not match (%d tasks, was %d)", n, tasks)
	}
}

func deref(s *string) any {
	if s == nil {
		return nil
	}
	return *s
}

// sushyPython is Debian's python3 when it can import sushy (see
// drivers/redfish/vbmc's requireSushy).
func sushyPython(t *testing.T) string {
	t.Helper()
	const py = "/usr/bin/python3"
	err := exec.Command(py, "-c", "import sushy").Run()
	if err == nil {
		return py
	}
	if os.Getenv("BM_REQUIRE_ALL") == "1" {
		t.Fatalf("python3-sushy is not usable with %s (%v); run scripts/install-test-deps.sh", py, err)
	}
	t.Skipf("python3-sushy is not usable with %s (%v); run scripts/install-test-deps.sh (make test does)", py, err)
	return ""
}

type sushyView struct {
	BMCVersion string         `json:"bmc_version"`
	BIOS       map[string]any `json:"bios"`
	Registry   map[string]struct {
		Type     string `json:"type"`
		ReadOnly bool   `json:"read_only"`
	} `json:"registry"`
}

// sushyReadback reads the BMC's firmware and BIOS with python3-sushy
// (drivers/redfish/testdata/sushy_readback.py).
func sushyReadback(t *testing.T, py, url string) sushyView {
	t.Helper()
	script, err := filepath.Abs("../../drivers/redfish/testdata/sushy_readback.py")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, script, url, "root", "calvin")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("sushy: %v\n%s", err, stderr.String())
	}
	var v sushyView
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("sushy's output %q: %v", out, err)
	}
	return v
}

// baremetalCLI runs Debian's baremetal client against the coordinator
// and returns its standard output.
func baremetalCLI(t *testing.T, apiAddr string, args ...string) string {
	t.Helper()
	const bm = "/usr/bin/baremetal"
	if _, err := os.Stat(bm); err != nil {
		if os.Getenv("BM_REQUIRE_ALL") == "1" {
			t.Fatalf("%s is missing (package python3-ironicclient); run scripts/install-test-deps.sh", bm)
		}
		t.Skipf("%s is missing: install Debian's python3-ironicclient (scripts/install-test-deps.sh)", bm)
	}
	home := t.TempDir()
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "OS_") || k == "HOME" || strings.HasPrefix(k, "XDG_") || strings.EqualFold(k, "no_proxy") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "OS_AUTH_TYPE=none", "OS_ENDPOINT=http://"+apiAddr, "HOME="+home, "NO_PROXY=127.0.0.1", "no_proxy=127.0.0.1", "PYTHONDONTWRITEBYTECODE=1")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bm, args...)
	cmd.Env, cmd.Dir, cmd.WaitDelay = env, home, 5*time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("baremetal %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}
