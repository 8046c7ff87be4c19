package systest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/drivers/redfish/vbmc"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestRedfishRamdiskDeployLiveISO: a redfish node of the ramdisk deploy
// interface behind the virtual Redfish BMC (state only; its machine
// downloads what is inserted, as a BMC would), driven by a real edge
// agent with an image cache. Its deploy with instance_info boot_iso on a
// loopback image server (allowed with --fetch-allow) ends active with the
// ISO on the virtual CD, fetched over the WAN once and served to the BMC
// by the site cache (the BMC never sees the origin), the node powered on
// and no ramdisk booted; GET boot_device says cdrom, persistent, and an
// operator's reboot starts the machine from the ISO again. Undeploy
// powers it off and ejects the ISO (automated_clean off: no cleaning).
// A deploy without boot_iso is a 400 naming it, an ipmi node cannot
// take the interface at all, and an ISO on a host the fetch rule refuses
// fails the deploy naming --fetch-allow, the BMC untouched.
func TestRedfishRamdiskDeployLiveISO(t *testing.T) {
	iso := bytes.Repeat([]byte("live ISO "), 40000)
	o := &fwOrigin{gets: map[string]int{}, files: map[string][]byte{"/live.iso": iso}}
	origin := httptest.NewServer(o)
	t.Cleanup(origin.Close)
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

	c := testrig.Coordinator(t, testrig.Options{})
	cl := testrig.NewClient(t, c)
	var creds agent.Credentials
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "rack1"}, &creds); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	ag := testrig.StartAgentConfig(t, creds, agent.Config{Cache: agent.ImageCacheOptions{Dir: t.TempDir(), Listen: "127.0.0.1:0", MaxBytes: 1 << 30,
		FetchAllow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}})

	var ipmi map[string]any
	if code := cl.Do("POST", "/v1/nodes", map[string]any{"name": "bmc-ipmi", "driver": "ipmi", "conductor_group": "rack1", "deploy_interface": "ramdisk",
		"driver_info": map[string]any{"ipmi_address": "127.0.0.1"}}, &ipmi); code != 400 || !strings.Contains(ipmi["error_message"].(string), "needs a Redfish BMC") {
		t.Fatalf("ipmi node with deploy_interface ramdisk: %d %v; want 400 saying it needs a Redfish BMC", code, ipmi)
	}

	var n testrig.Node
	info := map[string]any{"redfish_address": srv.URL, "redfish_username": "root", "redfish_password": "calvin"}
	if code := cl.Do("POST", "/v1/nodes", map[string]any{"name": "live1", "driver": "redfish", "conductor_group": "rack1",
		"deploy_interface": "ramdisk", "automated_clean": false, "driver_info": info}, &n); code != 201 {
		t.Fatalf("create: %d", code)
	}
	cl.MustVerb(n.UUID, "manage", nil)
	if got := cl.WaitRest(n.UUID, 60*time.Second); got.State != "manageable" {
		t.Fatalf("manage: %q, last_error %q", got.State, got.LastError)
	}
	cl.MustVerb(n.UUID, "provide", nil)
	if got := cl.WaitRest(n.UUID, 60*time.Second); got.State != "available" {
		t.Fatalf("provide: %q, last_error %q", got.State, got.LastError)
	}
	if code, msg := cl.Verb(n.UUID, "active", nil); code != 400 || !strings.Contains(msg, "boots instance_info/boot_iso, or an ISO the site's edge agent builds of instance_info/kernel and instance_info/ramdisk") {
		t.Fatalf("deploy without boot_iso: %d %s; want 400 naming instance_info/boot_iso", code, msg)
	}
	patch := []map[string]any{{"op": "add", "path": "/instance_info/boot_iso", "value": origin.URL + "/live.iso"}}
	if code := cl.Do("PATCH", "/v1/nodes/"+n.UUID, patch, nil); code != 200 {
		t.Fatalf("PATCH boot_iso: %d", code)
	}
	cl.MustVerb(n.UUID, "active", nil)
	if got := cl.WaitRest(n.UUID, 60*time.Second); got.State != "active" || got.LastError != "" {
		t.Fatalf("deploy: %q, last_error %q", got.State, got.LastError)
	}
	url, size, sum := m.MediaIn(vbmc.SlotCD)
	want := sha256.Sum256(iso)
	if !strings.HasPrefix(url, "http://"+ag.ImageCacheAddr()+"/images/") || size != int64(len(iso)) || sum != hex.EncodeToString(want[:]) {
		t.Fatalf("virtual CD after the deploy: %q, %d bytes, sha256 %s; want the ISO (%d bytes) from the site cache at %s", url, size, sum, len(iso), ag.ImageCacheAddr())
	}
	if usb, _, _ := m.MediaIn(vbmc.SlotUSB); usb != "" || !m.PoweredOn() {
		t.Fatalf("after the deploy: USB %q (no ramdisk boot parameters expected), powered on %v", usb, m.PoweredOn())
	}
	starts := m.Starts()
	if len(starts) == 0 || starts[len(starts)-1].Device != vbmc.BootCd {
		t.Fatalf("the machine's starts %+v; want the last from the CD", starts)
	}
	if got := o.count("/live.iso"); got != 1 {
		t.Fatalf("the origin served the ISO %d times; want once (to the site cache)", got)
	}
	var bd map[string]any
	if code := cl.Do("GET", "/v1/nodes/"+n.UUID+"/management/boot_device", nil, &bd); code != 200 || bd["boot_device"] != "cdrom" || bd["persistent"] != true {
		t.Fatalf("boot_device: %d %v; want cdrom, persistent", code, bd)
	}

	// An operator's reboot boots the ISO again: it stays inserted, and
	// the CD stays the boot device.
	if code := cl.Do("PUT", "/v1/nodes/"+n.UUID+"/states/power", map[string]any{"target": "rebooted"}, nil); code != 202 {
		t.Fatalf("reboot: %d", code)
	}
	for deadline := time.Now().Add(60 * time.Second); len(m.Starts()) == len(starts); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the reboot did not start the machine")
		}
	}
	if st := m.Starts(); st[len(st)-1].Device != vbmc.BootCd {
		t.Fatalf("after the reboot the machine started from %q; want the CD", st[len(st)-1].Device)
	}
	if u, _, _ := m.MediaIn(vbmc.SlotCD); u != url {
		t.Fatalf("after the reboot the CD holds %q; want the ISO %q", u, url)
	}
	if got := cl.WaitRest(n.UUID, 60*time.Second); got.State != "active" || got.PowerState != "power on" || got.LastError != "" {
		t.Fatalf("after the reboot: %q, power %q, last_error %q", got.State, got.PowerState, got.LastError)
	}

	cl.MustVerb(n.UUID, "deleted", nil)
	if got := cl.WaitRest(n.UUID, 60*time.Second); got.State != "available" || got.LastError != "" {
		t.Fatalf("undeploy: %q, last_error %q", got.State, got.LastError)
	}
	if url, _, _ := m.MediaIn(vbmc.SlotCD); url != "" || m.PoweredOn() {
		t.Fatalf("after undeploy: CD %q, powered on %v; want ejected and off", url, m.PoweredOn())
	}

	// An ISO on a host the fetch rule refuses (loopback 127.0.0.2, not
	// allowed) fails the deploy naming the flag; the BMC gets nothing.
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("no 127.0.0.2 here: %v", err)
	}
	o2 := &fwOrigin{gets: map[string]int{}, files: map[string][]byte{"/live.iso": iso}}
	refused := httptest.NewUnstartedServer(o2)
	refused.Listener.Close()
	refused.Listener = ln
	refused.Start()
	t.Cleanup(refused.Close)
	patch = []map[string]any{{"op": "add", "path": "/instance_info/boot_iso", "value": refused.URL + "/live.iso"}}
	if code := cl.Do("PATCH", "/v1/nodes/"+n.UUID, patch, nil); code != 200 {
		t.Fatalf("PATCH boot_iso: %d", code)
	}
	cl.MustVerb(n.UUID, "active", nil)
	if got := cl.WaitRest(n.UUID, 60*time.Second); got.State != "deploy failed" || !strings.Contains(got.LastError, "--fetch-allow") {
		t.Fatalf("deploy of a refused ISO: %q, last_error %q; want deploy failed naming --fetch-allow", got.State, got.LastError)
	}
	if u, _, _ := m.MediaIn(vbmc.SlotCD); u != "" || o2.count("/live.iso") != 0 {
		t.Fatalf("refused ISO: CD %q, origin asked %d times; want nothing", u, o2.count("/live.iso"))
	}
}
