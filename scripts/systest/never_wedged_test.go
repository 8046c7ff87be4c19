package systest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/drivers/redfish/vbmc"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestNeverWedged: a failed virtual-media boot never leaves a node that
// the ordinary verbs cannot reach (issue 28, acceptances 2 and 6), through
// the coordinator and the edge agent as a real process in real mode,
// against virtual Redfish BMCs:
//   - a BMC that refuses InsertMedia: inspect fails in inspect failed with
//     a last_error naming the BMC's answer and address, no power action, the
//     media ejected, the recorded power state the BMC's; then power on,
//     reboot, power off, boot device disk and manage all succeed;
//   - a BMC whose media do not eject once a ramdisk boot inserted them:
//     after an abort, power off and boot device disk succeed with a WARNING
//     in the history (media recorded as still inserted), the power recorded
//     off as the BMC says; the agent is killed with SIGKILL and restarted:
//     the same verbs succeed, and once the BMC ejects again the next power
//     off ejects them;
//   - after that restart, power changes made behind the agent's back on
//     both nodes are seen within one power-sync interval (plus the time of
//     a reading), although no command ran on either BMC since the restart.
func TestNeverWedged(t *testing.T) {
	const interval = time.Second
	bin := buildAgent(t)
	dir := t.TempDir()

	type bmcOf struct {
		b   *vbmc.BMC
		srv *vbmc.Server
		m   *vbmc.MemoryMachine
		id  string
	}
	newBMC := func() bmcOf {
		m := vbmc.NewMemoryMachine(vbmc.MemoryOptions{})
		b, err := vbmc.New(vbmc.Config{Username: "root", Password: "calvin", Systems: []vbmc.SystemConfig{{Machine: m}}})
		if err != nil {
			t.Fatal(err)
		}
		srv, err := vbmc.Serve(b, vbmc.ServeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close(); b.Close() })
		return bmcOf{b: b, srv: srv, m: m, id: b.SystemIDs()[0]}
	}
	bmc1, bmc2 := newBMC(), newBMC()

	c := testrig.Coordinator(t, testrig.Options{})
	cl := testrig.NewClient(t, c)
	var creds agent.Credentials
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "rack1"}, &creds); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	credFile := filepath.Join(dir, "rack1.json")
	cb, _ := json.Marshal(creds)
	if err := os.WriteFile(credFile, cb, 0o600); err != nil {
		t.Fatal(err)
	}
	iso := filepath.Join(dir, "bmramdisk.iso")
	if err := os.WriteFile(iso, bytes.Repeat([]byte("not really an ISO "), 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	agentLog := filepath.Join(dir, "agent.log")
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(agentLog)
			if len(b) > 30000 {
				b = b[len(b)-30000:]
			}
			t.Logf("agent log:\n%s", b)
		}
	})
	startAgent := func() *proc {
		t.Helper()
		before, _ := os.ReadFile(agentLog)
		p := startAgentProcess(t, bin, agentLog, "--credentials-file", credFile, "--state-dir", filepath.Join(dir, "state"),
			"--resend-interval", "300ms", "--power-sync-interval", interval.String(),
			"--ramdisk-iso", iso, "--media-listen", "127.0.0.1:0", "--ramdisk-broker-url", "mqtt://10.0.2.2:1883")
		waitFor(t, 20*time.Second, "the agent connects", func() (bool, string) {
			b, _ := os.ReadFile(agentLog)
			return strings.Count(string(b), "edge agent connected") > strings.Count(string(before), "edge agent connected"), "no new 'edge agent connected' in its log"
		})
		return p
	}
	ag := startAgent()

	create := func(name string, b bmcOf) string {
		info := map[string]any{"redfish_address": b.srv.URL, "redfish_username": "root", "redfish_password": "calvin"}
		var n testrig.Node
		if code := cl.Do("POST", "/v1/nodes", map[string]any{"name": name, "driver": "redfish", "conductor_group": "rack1", "driver_info": info}, &n); code != 201 {
			t.Fatalf("create %s: %d", name, code)
		}
		return n.UUID
	}
	n1, n2 := create("rf1", bmc1), create("rf2", bmc2)
	bmcPower := func(b bmcOf) string {
		if b.m.PoweredOn() {
			return "power on"
		}
		return "power off"
	}
	media := func(b bmcOf) bool {
		st, err := b.b.State(b.id)
		if err != nil {
			t.Fatal(err)
		}
		return st.MediaInserted || st.USBInserted
	}
	// rest waits until the node rests in want and checks that its
	// recorded power state is the BMC's.
	rest := func(id, want string, b bmcOf) testrig.Node {
		t.Helper()
		n := cl.WaitRest(id, 60*time.Second)
		if n.State != want {
			t.Fatalf("node %s in %q (last_error %q); want %q", id, n.State, n.LastError, want)
		}
		if n.PowerState != bmcPower(b) {
			t.Fatalf("node %s recorded %q while its BMC is %q", id, n.PowerState, bmcPower(b))
		}
		return n
	}
	power := func(id, target string) {
		t.Helper()
		if code := cl.Do("PUT", "/v1/nodes/"+id+"/states/power", map[string]string{"target": target}, nil); code != 202 {
			t.Fatalf("%s: %d", target, code)
		}
	}
	bootDisk := func(id string) {
		t.Helper()
		if code := cl.Do("PUT", "/v1/nodes/"+id+"/management/boot_device", map[string]any{"boot_device": "disk"}, nil); code != 202 && code != 204 {
			t.Fatalf("boot device disk: %d", code)
		}
	}
	// ok runs an ordinary verb and checks it ended without last_error.
	ok := func(id, what string, state string, b bmcOf, do func()) {
		t.Helper()
		do()
		if n := rest(id, state, b); n.LastError != "" {
			t.Fatalf("%s on node %s: last_error %q", what, id, n.LastError)
		}
	}
	warnings := func(id, part string) int {
		n := 0
		for _, e := range historyOf(t, cl, id) {
			if e.Severity == "WARNING" && strings.Contains(e.Event, part) {
				n++
			}
		}
		return n
	}

	for _, id := range []string{n1, n2} {
		cl.MustVerb(id, "manage", nil)
	}
	for _, id := range []string{n1, n2} {
		if got := cl.WaitRest(id, 60*time.Second); got.State != "manageable" {
			t.Fatalf("manage %s: %q, last_error %q", id, got.State, got.LastError)
		}
	}
	ok(n2, "power off", "manageable", bmc2, func() { power(n2, "power off") })

	// A BMC that refuses InsertMedia.
	bmc1.b.SetFaults(vbmc.Faults{InsertMediaStatus: http.StatusBadRequest})
	ok(n1, "power on", "manageable", bmc1, func() { power(n1, "power on") })
	before := len(bmc1.b.RequestLog())
	cl.MustVerb(n1, "inspect", nil)
	n := rest(n1, "inspect failed", bmc1)
	for _, part := range []string{"virtual media", "ActionNotSupported", "not licensed", bmc1.srv.URL, "were ejected"} {
		if !strings.Contains(n.LastError, part) {
			t.Fatalf("last_error %q lacks %q", n.LastError, part)
		}
	}
	if got := countPrefix(bmc1.b.RequestLog()[before:], "POST /redfish/v1/Systems/"+bmc1.id+"/Actions/ComputerSystem.Reset"); got != 0 || !bmc1.m.PoweredOn() || media(bmc1) {
		t.Fatalf("the failed boot made %d power actions (on %v, media %v); want none and no media", got, bmc1.m.PoweredOn(), media(bmc1))
	}
	t.Logf("inspect failed: %s", n.LastError)
	ok(n1, "reboot", "inspect failed", bmc1, func() { power(n1, "rebooting") })
	ok(n1, "power off", "inspect failed", bmc1, func() { power(n1, "power off") })
	ok(n1, "boot device disk", "inspect failed", bmc1, func() { bootDisk(n1) })
	ok(n1, "power on", "inspect failed", bmc1, func() { power(n1, "power on") })
	ok(n1, "manage", "manageable", bmc1, func() { cl.MustVerb(n1, "manage", nil) })
	if media(bmc1) {
		t.Fatal("media inserted after the verbs")
	}

	// Media that do not eject: the ramdisk boot inserts them, then the
	// BMC refuses every eject.
	bmc1.b.SetFaults(vbmc.Faults{})
	cl.MustVerb(n1, "inspect", nil)
	cl.WaitState(n1, "inspect wait", 30*time.Second)
	if !media(bmc1) {
		t.Fatal("the ramdisk boot inserted no media")
	}
	bmc1.b.SetFaults(vbmc.Faults{EjectMediaStatus: http.StatusConflict})
	cl.MustVerb(n1, "abort", nil)
	rest(n1, "inspect failed", bmc1)
	const stuck = "did not eject"
	ok(n1, "power off", "inspect failed", bmc1, func() { power(n1, "power off") })
	if warnings(n1, stuck) != 1 || !media(bmc1) || bmc1.m.PoweredOn() {
		t.Fatalf("power off with stuck media: %d warnings, media %v, on %v; want one warning, the media in, the node off", warnings(n1, stuck), media(bmc1), bmc1.m.PoweredOn())
	}
	ok(n1, "boot device disk", "inspect failed", bmc1, func() { bootDisk(n1) })
	if warnings(n1, stuck) != 2 {
		t.Fatalf("boot device disk with stuck media: %d warnings; want a second one", warnings(n1, stuck))
	}
	if v := coordMetric(t, cl, "bmedge_bmc_warnings_total"); v < 2 {
		t.Fatalf("bmedge_bmc_warnings_total is %v; want at least 2", v)
	}

	// The agent dies and comes back.
	ag.kill()
	t.Log("edge agent killed with SIGKILL")
	ag = startAgent()
	_ = ag
	ok(n1, "reboot after the restart", "inspect failed", bmc1, func() { power(n1, "rebooting") })
	if !bmc1.m.PoweredOn() {
		t.Fatal("the reboot did not start the node")
	}
	ok(n1, "power off after the restart", "inspect failed", bmc1, func() { power(n1, "power off") })
	if warnings(n1, stuck) != 3 || !media(bmc1) {
		t.Fatalf("after the restart: %d warnings, media %v; want the eject still owed and tried", warnings(n1, stuck), media(bmc1))
	}
	ok(n1, "manage after the restart", "manageable", bmc1, func() { cl.MustVerb(n1, "manage", nil) })
	bmc1.b.SetFaults(vbmc.Faults{})
	ok(n1, "power off once the BMC ejects", "manageable", bmc1, func() { power(n1, "power off") })
	if media(bmc1) || warnings(n1, stuck) != 3 {
		t.Fatalf("once the BMC ejects: media %v, warnings %d", media(bmc1), warnings(n1, stuck))
	}

	// Behind the agent's back, on both nodes: no command ran on n2 since
	// the restart.
	ctx := context.Background()
	want := map[string]string{}
	for id, b := range map[string]bmcOf{n1: bmc1, n2: bmc2} {
		action := vbmc.ResetOn
		if b.m.PoweredOn() {
			action = vbmc.ResetForceOff
		}
		if err := b.m.Power(ctx, action); err != nil {
			t.Fatal(err)
		}
		want[id] = bmcPower(b)
	}
	changed := time.Now()
	bound := interval + 5*time.Second // one interval, and the time a reading and its report take
	for id, w := range want {
		waitFor(t, bound, "node "+id+" sees its BMC's "+w, func() (bool, string) {
			got := cl.Get(id)
			return got.PowerState == w, fmt.Sprintf("recorded %q", got.PowerState)
		})
	}
	t.Logf("both power changes seen %s after they were made (power-sync interval %s)", time.Since(changed).Round(10*time.Millisecond), interval)
}

// coordMetric sums the samples of a metric of the coordinator.
func coordMetric(t *testing.T, cl *testrig.Client, name string) float64 {
	t.Helper()
	resp, err := http.Get(cl.Base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	sum := 0.0
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(line, name+" ") || strings.HasPrefix(line, name+"{") {
			var v float64
			if _, err := fmt.Sscan(line[strings.LastIndex(line, " ")+1:], &v); err == nil {
				sum += v
			}
		}
	}
	return sum
}
