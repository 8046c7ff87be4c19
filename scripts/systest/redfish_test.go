package systest

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/coordinator/cli"
	"github.com/bmedge/bmedge/drivers/redfish/vbmc"
	"github.com/bmedge/bmedge/lib/bootmedia"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestRedfishNodeThroughTheEdgeAgent: a node of driver redfish behind the
// virtual Redfish BMC over TLS (redfish_verify_ca = the lab CA), driven
// by the edge agent in real mode: a wrong password goes back to enroll
// with the BMC's refusal; the right one manages; power reaches the BMC;
// a manual clean with bios.apply_configuration stages the settings, which
// the BMC applies at the next reset; the same list without settings fails
// naming the step and the argument, and runs nothing.
func TestRedfishNodeThroughTheEdgeAgent(t *testing.T) {
	cert, key, caFile := testrig.LabCerts(t, "127.0.0.1")
	m := vbmc.NewMemoryMachine(vbmc.MemoryOptions{})
	b, err := vbmc.New(vbmc.Config{Username: "root", Password: "calvin", Systems: []vbmc.SystemConfig{{Machine: m}}})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := vbmc.Serve(b, vbmc.ServeOptions{CertFile: cert, KeyFile: key})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(); b.Close() })
	sysID := b.SystemIDs()[0]

	c := testrig.Coordinator(t, testrig.Options{})
	cl := testrig.NewClient(t, c)
	testrig.Site(t, c, "rack1", agent.SimOptions{}) // real mode: no simulated nodes

	info := map[string]any{"redfish_address": srv.URL, "redfish_username": "root", "redfish_password": "wrong", "redfish_verify_ca": caFile}
	var n testrig.Node
	if code := cl.Do("POST", "/v1/nodes", map[string]any{"name": "srv1", "driver": "redfish", "conductor_group": "rack1", "driver_info": info}, &n); code != 201 {
		t.Fatalf("create: %d", code)
	}
	// As an operator does it: the CLI's manage --wait exits 1 and prints
	// the BMC's refusal.
	for _, k := range []string{"OS_USERNAME", "OS_PASSWORD", "OS_CACERT", "COORDINATOR_URL"} {
		t.Setenv(k, "")
	}
	var out, errOut bytes.Buffer
	code := cli.Main([]string{"--url", c.APIURL, "node", "manage", "srv1", "--wait", "60"}, strings.NewReader(""), &out, &errOut)
	if code != 1 || !strings.Contains(out.String()+errOut.String(), "401") {
		t.Fatalf("node manage --wait with a wrong BMC password: exit %d, output %q %q; want 1 with the BMC's 401", code, out.String(), errOut.String())
	}
	got := cl.WaitRest(n.UUID, 60*time.Second)
	if got.State != "enroll" || !strings.Contains(got.LastError, "401") {
		t.Fatalf("manage with a wrong password: %q, last_error %q; want enroll with the BMC's 401", got.State, got.LastError)
	}
	patch := []map[string]any{{"op": "replace", "path": "/driver_info/redfish_password", "value": "calvin"}}
	if code := cl.Do("PATCH", "/v1/nodes/"+n.UUID, patch, nil); code != 200 {
		t.Fatalf("patch: %d", code)
	}
	cl.MustVerb(n.UUID, "manage", nil)
	if got := cl.WaitRest(n.UUID, 60*time.Second); got.State != "manageable" {
		t.Fatalf("manage with the right password: %q, last_error %q", got.State, got.LastError)
	}

	power := func(target, want string) {
		t.Helper()
		if code := cl.Do("PUT", "/v1/nodes/"+n.UUID+"/states/power", map[string]string{"target": target}, nil); code != 202 {
			t.Fatalf("%s: %d", target, code)
		}
		if got := cl.WaitRest(n.UUID, 60*time.Second); got.LastError != "" {
			t.Fatalf("%s: last_error %q", target, got.LastError)
		}
		st, err := b.State(sysID)
		if err != nil {
			t.Fatal(err)
		}
		if st.PowerState != want {
			t.Fatalf("after %s the BMC says %s", target, st.PowerState)
		}
	}
	power("power on", "On")
	power("power off", "Off")

	// A list without the required settings: clean failed, nothing staged.
	bad := []map[string]any{{"interface": "bios", "step": "apply_configuration"}}
	cl.MustVerb(n.UUID, "clean", map[string]any{"clean_steps": bad})
	got = cl.WaitRest(n.UUID, 30*time.Second)
	if got.State != "clean failed" || !strings.Contains(got.LastError, "apply_configuration") || !strings.Contains(got.LastError, "settings") {
		t.Fatalf("clean without settings: %q, last_error %q", got.State, got.LastError)
	}
	if st, _ := b.State(sysID); len(st.PendingBios) != 0 {
		t.Fatalf("a refused clean staged BIOS settings: %v", st.PendingBios)
	}
	cl.MustVerb(n.UUID, "manage", nil)
	cl.WaitState(n.UUID, "manageable", 10*time.Second)

	good := []map[string]any{{"interface": "bios", "step": "apply_configuration",
		"args": map[string]any{"settings": []map[string]any{{"name": "ProcVirtualization", "value": "Disabled"}, {"name": "NumLock", "value": "Off"}}}}}
	cl.MustVerb(n.UUID, "clean", map[string]any{"clean_steps": good})
	if got := cl.WaitRest(n.UUID, 60*time.Second); got.State != "manageable" {
		t.Fatalf("clean with bios.apply_configuration: %q, last_error %q", got.State, got.LastError)
	}
	st, _ := b.State(sysID)
	if st.PendingBios["ProcVirtualization"] != "Disabled" || st.Bios["ProcVirtualization"] != "Enabled" {
		t.Fatalf("after the clean step: pending %v, current %v; want the settings pending", st.PendingBios, st.Bios)
	}
	power("power on", "On")
	power("rebooted", "On")
	st, _ = b.State(sysID)
	if st.Bios["ProcVirtualization"] != "Disabled" || st.Bios["NumLock"] != "Off" {
		t.Fatalf("after a reset the BIOS holds %v; want the staged settings applied", st.Bios)
	}
}

// TestRedfishVirtualMediaBoot: the edge agent boots a redfish node into
// the ramdisk from virtual media, without network boot: the vBMC fetches
// the shared ISO into its virtual CD and this boot's parameters image
// into its virtual USB stick from the agent's media server, boots once
// from the CD and powers on. The parameters carry the node, the broker,
// the boot's own credential (the coordinator's) and the site's and
// node's extra parameters; they are served only during the boot and the
// media are ejected when it ends. An agent without an ISO fails the
// boot with what to start it with.
func TestRedfishVirtualMediaBoot(t *testing.T) {
	dir := t.TempDir()
	iso := filepath.Join(dir, "bmramdisk.iso")
	isoBytes := bytes.Repeat([]byte("ramdisk ISO "), 8192)
	if err := os.WriteFile(iso, isoBytes, 0o644); err != nil {
		t.Fatal(err)
	}
	m := vbmc.NewMemoryMachine(vbmc.MemoryOptions{FetchMedia: true})
	b, err := vbmc.New(vbmc.Config{Username: "root", Password: "calvin", Systems: []vbmc.SystemConfig{{Machine: m}}})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := vbmc.Serve(b, vbmc.ServeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(); b.Close() })
	sysID := b.SystemIDs()[0]

	c := testrig.Coordinator(t, testrig.Options{})
	cl := testrig.NewClient(t, c)
	var creds agent.Credentials
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "rack1"}, &creds); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	testrig.StartAgentConfig(t, creds, agent.Config{Ramdisk: agent.RamdiskOptions{ISO: iso, Listen: "127.0.0.1:0",
		BrokerURL: "mqtt://10.0.2.2:1883", Params: "bm.gw=10.0.2.2"}})

	info := map[string]any{"redfish_address": srv.URL, "redfish_username": "root", "redfish_password": "calvin",
		"kernel_append_params": "bm.ip=10.0.2.15/24"}
	id := cl.CreateNode("vm1", "rack1", nil)
	patch := []map[string]any{{"op": "replace", "path": "/driver", "value": "redfish"}, {"op": "add", "path": "/driver_info", "value": info}}
	if code := cl.Do("PATCH", "/v1/nodes/"+id, patch, nil); code != 200 {
		t.Fatalf("patch: %d", code)
	}
	cl.MustVerb(id, "manage", nil)
	if got := cl.WaitRest(id, 30*time.Second); got.State != "manageable" {
		t.Fatalf("manage: %q, last_error %q", got.State, got.LastError)
	}
	cl.MustVerb(id, "inspect", nil)
	cl.WaitState(id, "inspect wait", 30*time.Second)
	deadline := time.Now().Add(30 * time.Second)
	for !m.PoweredOn() {
		if time.Now().After(deadline) {
			t.Fatal("the node was not powered on for its ramdisk boot")
		}
		time.Sleep(20 * time.Millisecond)
	}
	st, _ := b.State(sysID)
	starts := m.Starts()
	if !st.MediaInserted || !strings.HasSuffix(st.MediaImage, "/ramdisk.iso") || !st.USBInserted || !strings.Contains(st.USBImage, "/boot/") ||
		len(starts) == 0 || starts[len(starts)-1].Device != vbmc.BootCd {
		t.Fatalf("ramdisk boot: BMC state %+v, starts %+v; want the ISO on the CD, the parameters on the USB stick, a start from the CD", st, starts)
	}
	if st.BootEnabled == vbmc.OverrideContinuous {
		t.Errorf("the CD is the boot device for every boot (%s); want this boot only", st.BootEnabled)
	}
	if u, size, sum := m.Media(); u != st.MediaImage || size != int64(len(isoBytes)) || sum != fmt.Sprintf("%x", sha256.Sum256(isoBytes)) {
		t.Fatalf("the BMC fetched %s: %d bytes, sha256 %s; want the ISO", u, size, sum)
	}
	// The parameters image, read as the ramdisk reads it.
	get := func(u string) (int, []byte) {
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, body
	}
	code, img := get(st.USBImage)
	if code != 200 {
		t.Fatalf("parameters image: HTTP %d", code)
	}
	params, err := bootmedia.ReadParams(bytes.NewReader(img), int64(len(img)))
	if err != nil {
		t.Fatal(err)
	}
	user, pass, ok := c.Engine.NodeCredentials(id)
	if !ok {
		t.Fatal("no boot credential while the node waits for its ramdisk")
	}
	for _, want := range []string{"bm.node=" + id, "bm.site=rack1", "bm.broker=mqtt://10.0.2.2:1883", "bm.user=" + user, "bm.password=" + pass,
		"bm.gw=10.0.2.2", "bm.ip=10.0.2.15/24"} {
		if !strings.Contains(" "+params+" ", " "+want+" ") {
			t.Errorf("boot parameters lack %q: %s", want, params)
		}
	}
	// Unknown names and other methods get nothing.
	base := st.MediaImage[:strings.LastIndex(st.MediaImage, "/")]
	if code, _ := get(base + "/boot/00000000000000000000000000000000/params.img"); code != 404 {
		t.Errorf("a guessed parameters name: HTTP %d", code)
	}
	if resp, err := http.Post(st.MediaImage, "application/octet-stream", strings.NewReader("x")); err != nil || resp.StatusCode != 405 {
		t.Errorf("POST to the media server: %v %v", resp, err)
	}

	// The boot ends: the parameters are no longer served, the media are ejected.
	cl.MustVerb(id, "abort", nil)
	cl.WaitState(id, "inspect failed", 30*time.Second)
	if code := cl.Do("PUT", "/v1/nodes/"+id+"/states/power", map[string]string{"target": "power off"}, nil); code != 202 {
		t.Fatalf("power off: %d", code)
	}
	if got := cl.WaitRest(id, 30*time.Second); got.PowerState != "power off" {
		t.Fatalf("power off: %+v", got)
	}
	if code, _ := get(st.USBImage); code != 404 {
		t.Errorf("the ended boot's parameters are still served: HTTP %d", code)
	}
	if st, _ := b.State(sysID); st.MediaInserted || st.USBInserted || st.PowerState != "Off" {
		t.Errorf("after the boot: %+v; want both media ejected, power off", st)
	}
}

// TestRedfishRamdiskBootNeedsTheISO: an edge agent that serves no ramdisk
// ISO fails a redfish node's inspection at once, saying what to start it
// with; the node is not left waiting.
func TestRedfishRamdiskBootNeedsTheISO(t *testing.T) {
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
	c := testrig.Coordinator(t, testrig.Options{})
	cl := testrig.NewClient(t, c)
	testrig.Site(t, c, "rack1", agent.SimOptions{})
	var n testrig.Node
	info := map[string]any{"redfish_address": srv.URL, "redfish_username": "root", "redfish_password": "calvin"}
	if code := cl.Do("POST", "/v1/nodes", map[string]any{"name": "srv1", "driver": "redfish", "conductor_group": "rack1", "driver_info": info}, &n); code != 201 {
		t.Fatalf("create: %d", code)
	}
	cl.MustVerb(n.UUID, "manage", nil)
	cl.WaitState(n.UUID, "manageable", 30*time.Second)
	cl.MustVerb(n.UUID, "inspect", nil)
	got := cl.WaitRest(n.UUID, 30*time.Second)
	if got.State != "inspect failed" || !strings.Contains(got.LastError, "--ramdisk-iso") {
		t.Fatalf("inspect without an ISO: %q, last_error %q", got.State, got.LastError)
	}
	if m.PoweredOn() {
		t.Error("the node was powered on although it could not boot the ramdisk")
	}
}
