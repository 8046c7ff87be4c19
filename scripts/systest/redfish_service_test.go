package systest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/drivers/redfish/vbmc"
	"github.com/bmedge/bmedge/lib/bootmedia"
	"github.com/bmedge/bmedge/lib/mqttlink"
	"github.com/bmedge/bmedge/lib/session"
	"github.com/bmedge/bmedge/protocol"
	rdboot "github.com/bmedge/bmedge/ramdisk/boot"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// mediaRamdiskMachine is a vBMC machine (in memory) whose start from the
// virtual CD runs a stand-in for the ramdisk ISO: it reads its
// parameters from the virtual USB stick as the ramdisk does
// (lib/bootmedia), connects to the broker they name with the boot's
// credential and speaks the real protocol (lib/session); its in-band
// steps succeed at once (inspection reports nothing). A power-off or a
// start from the disk ends it. Every start is recorded.
type mediaRamdiskMachine struct {
	*vbmc.MemoryMachine
	t *testing.T

	mu     sync.Mutex
	stop   func()
	boots  int // starts from the CD
	nstart int
	// inventory, when set, is what the stand-in's inspect_hardware
	// reports (nil: it reports nothing).
	inventory map[string]any
	// liveISO: a start from the CD with no parameters medium on the USB
	// stick is a live ISO's boot (a ramdisk deploy), counted in
	// liveBoots, not a failed ramdisk boot.
	liveISO   bool
	liveBoots int
	// httpBoots: starts by UEFI HTTP boot (the image of the Boot
	// object's HttpBootUri), which run the stand-in with the parameters
	// of the fetched ISO's GRUB menu.
	httpBoots int
}

func (m *mediaRamdiskMachine) Power(ctx context.Context, action vbmc.ResetType) error {
	if err := m.MemoryMachine.Power(ctx, action); err != nil {
		return err
	}
	starts := m.Starts()
	m.mu.Lock()
	defer m.mu.Unlock()
	started := len(starts) > m.nstart
	m.nstart = len(starts)
	if (started || !m.PoweredOn()) && m.stop != nil {
		m.stop()
		m.stop = nil
	}
	if started && starts[len(starts)-1].Device == vbmc.BootUefiHttp {
		m.httpBoots++
		rctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		m.stop = func() { cancel(); <-done }
		uri := starts[len(starts)-1].HTTPBootURI
		go func() { defer close(done); m.runRamdiskHTTP(rctx, uri) }()
		return nil
	}
	if started && starts[len(starts)-1].Device == vbmc.BootCd {
		usb, _, _ := m.MediaIn(vbmc.SlotUSB)
		if cd, _, _ := m.MediaIn(vbmc.SlotCD); usb == "" && cd != "" && m.liveISO {
			m.liveBoots++
			return nil
		}
		m.boots++
		rctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		m.stop = func() { cancel(); <-done }
		go func() { defer close(done); m.runRamdisk(rctx, usb) }()
	}
	return nil
}

func (m *mediaRamdiskMachine) cdBoots() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.boots
}

func (m *mediaRamdiskMachine) httpBootStarts() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.httpBoots
}

func (m *mediaRamdiskMachine) liveISOBoots() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.liveBoots
}

func (m *mediaRamdiskMachine) close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stop != nil {
		m.stop()
		m.stop = nil
	}
}

// runRamdisk is the stand-in ramdisk's boot: parameters, broker, session.
func (m *mediaRamdiskMachine) runRamdisk(ctx context.Context, usbURL string) {
	if usbURL == "" {
		m.t.Errorf("the machine started from the CD without a parameters medium on the USB stick")
		return
	}
	req, _ := http.NewRequestWithContext(ctx, "GET", usbURL, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		m.t.Logf("stand-in ramdisk: parameters medium: %v", err)
		return
	}
	img, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	text, err := bootmedia.ReadParams(bytes.NewReader(img), int64(len(img)))
	if err != nil {
		m.t.Errorf("stand-in ramdisk: parameters medium (HTTP %d): %v", resp.StatusCode, err)
		return
	}
	p, err := rdboot.ParseCmdline(text)
	if err != nil {
		m.t.Errorf("stand-in ramdisk: parameters %q: %v", text, err)
		return
	}
	if err := standinSession(ctx, p, m.inventory, testrig.Logger(m.t)); err != nil {
		m.t.Logf("stand-in ramdisk: %v", err)
	}
}

// runRamdiskHTTP is the stand-in ramdisk's UEFI HTTP boot: the ISO of
// the boot's URI (read with xorriso), the kernel command line of its GRUB
// menu's linux line, then the session.
func (m *mediaRamdiskMachine) runRamdiskHTTP(ctx context.Context, uri string) {
	req, _ := http.NewRequestWithContext(ctx, "GET", uri, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		m.t.Logf("stand-in ramdisk: UEFI HTTP boot image: %v", err)
		return
	}
	img, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		m.t.Errorf("stand-in ramdisk: UEFI HTTP boot image %s: HTTP %d", uri, resp.StatusCode)
		return
	}
	dir := m.t.TempDir()
	iso, cfg := filepath.Join(dir, "boot.iso"), filepath.Join(dir, "grub.cfg")
	if err := os.WriteFile(iso, img, 0o600); err != nil {
		m.t.Error(err)
		return
	}
	if out, err := exec.Command("xorriso", "-osirrox", "on", "-indev", iso, "-extract", "/boot/grub/grub.cfg", cfg).CombinedOutput(); err != nil {
		m.t.Errorf("stand-in ramdisk: the UEFI HTTP boot image has no GRUB menu: %v: %s", err, out)
		return
	}
	menu, _ := os.ReadFile(cfg)
	var text string
	for _, l := range strings.Split(string(menu), "\n") {
		if f := strings.Fields(l); len(f) > 2 && f[0] == "linux" {
			text = strings.Join(f[2:], " ")
			break
		}
	}
	p, err := rdboot.ParseCmdline(text)
	if err != nil {
		m.t.Errorf("stand-in ramdisk: the GRUB menu's parameters %q: %v", text, err)
		return
	}
	if err := standinSession(ctx, p, m.inventory, testrig.Logger(m.t)); err != nil {
		m.t.Logf("stand-in ramdisk: %v", err)
	}
}

// standinSession is the stand-in ramdisk's run once its kernel command
// line is read: the broker it names, with the boot's credential, and the
// real protocol (lib/session) until ctx ends; the steps are
// standinRunner's (inv is what its inspection reports).
func standinSession(ctx context.Context, p rdboot.Params, inv map[string]any, log *slog.Logger) error {
	broker := p.Broker
	if !strings.Contains(broker, "://") {
		broker = "mqtt://" + broker
	}
	lt := &standinTransport{}
	s := session.New(session.Config{Site: p.Site, Node: p.Node, Heartbeat: 500 * time.Millisecond, ResendInterval: 500 * time.Millisecond,
		Runner: standinRunner{inventory: inv}, Transport: lt, Log: log})
	link, err := mqttlink.Dial(ctx, mqttlink.Config{URL: broker, ClientID: "ramdisk-" + p.Node, Username: p.User, Password: p.Password,
		CleanStart: true, Subscriptions: []string{protocol.NodeCmdTopic(p.Site, p.Node)},
		Handler: func(topic string, payload []byte) {
			if msg, err := protocol.Decode(payload); err == nil {
				s.Deliver(msg)
			}
		}, KeepAlive: 10, Logger: log})
	if err != nil {
		return fmt.Errorf("broker %s: %w", p.Broker, err)
	}
	defer link.Close()
	lt.l = link
	if err := link.AwaitUp(ctx); err != nil {
		return nil
	}
	s.Run(ctx)
	return nil
}

type standinTransport struct{ l *mqttlink.Link }

func (t *standinTransport) Publish(ctx context.Context, topic string, payload []byte) error {
	return t.l.Publish(ctx, topic, payload, false)
}

// standinRunner is the stand-in ramdisk's hardware: the standard in-band
// steps, each done at once.
type standinRunner struct{ inventory map[string]any }

func (standinRunner) Steps() (clean, deploy []protocol.Step) {
	wire := func(steps []drivers.Step) []protocol.Step {
		var out []protocol.Step
		for _, s := range steps {
			out = append(out, protocol.Step{Interface: s.Interface, Step: s.Step, Priority: s.Priority, Abortable: s.Abortable})
		}
		return out
	}
	return wire(drivers.InbandCleanSteps()), wire(drivers.InbandDeploySteps())
}

func (r standinRunner) Run(ctx context.Context, step protocol.Step, progress func(float64, string)) (map[string]any, error) {
	progress(1, "")
	if step.Step == "inspect_hardware" && r.inventory != nil {
		return r.inventory, nil
	}
	return nil, nil
}

// TestRedfishServiceBIOSOnActiveNode: an active node of driver redfish
// behind the virtual Redfish BMC, at a site whose edge agent runs in real
// mode, is serviced through curl at API version 1.87 with
// bios.apply_configuration: the node returns to active without a
// ramdisk boot (the step is out-of-band) and without a restart of the
// instance, its boot device still the disk and its instance_info
// unchanged; the BMC's Redfish Bios settings
// resource, read with curl, holds the new values, which the BIOS shows
// after the next reset. The node is deployed first with a stand-in for
// the ramdisk ISO (mediaRamdiskMachine), booted from the virtual CD.
func TestRedfishServiceBIOSOnActiveNode(t *testing.T) {
	curlPath, err := exec.LookPath("curl")
	if err != nil {
		if os.Getenv("BM_REQUIRE_ALL") == "1" {
			t.Fatal("curl is missing (Debian package curl)")
		}
		t.Skip("curl is missing (Debian package curl)")
	}
	r := newRedfishRig(t)
	m, b, srv, sysID, c, cl, id := r.m, r.b, r.srv, r.sysID, r.c, r.cl, r.id
	for _, v := range []struct{ verb, want string }{{"manage", "manageable"}, {"provide", "available"}, {"active", "active"}} {
		cl.MustVerb(id, v.verb, nil)
		if got := cl.WaitRest(id, 90*time.Second); got.State != v.want || got.LastError != "" {
			t.Fatalf("%s: %q, last_error %q; want %s", v.verb, got.State, got.LastError, v.want)
		}
	}
	if m.cdBoots() < 2 {
		t.Fatalf("cleaning and deploy booted the ramdisk from the CD %d times; want 2", m.cdBoots())
	}
	st, _ := b.State(sysID)
	if st.PowerState != "On" || st.BootTarget != vbmc.BootHdd || st.MediaInserted || st.USBInserted {
		t.Fatalf("after deploy the BMC shows %+v; want on, booting the disk, no media", st)
	}

	// curl is the operator's client for the API and the BMC alike.
	type answer struct {
		code int
		body []byte
	}
	curl := func(args ...string) answer {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out := filepath.Join(t.TempDir(), "body")
		cmd := exec.CommandContext(ctx, curlPath, append([]string{"-sS", "--noproxy", "*", "-o", out, "-w", "%{http_code}"}, args...)...)
		code, err := cmd.Output()
		if err != nil {
			t.Fatalf("curl %v: %v", args, err)
		}
		body, _ := os.ReadFile(out)
		a := answer{body: body}
		if _, err := fmt.Sscan(string(code), &a.code); err != nil {
			t.Fatalf("curl %v: status %q", args, code)
		}
		return a
	}
	api := func(method, path, body string) answer {
		args := []string{"-X", method, "-H", "X-OpenStack-Ironic-API-Version: 1.87"}
		if body != "" {
			args = append(args, "-H", "Content-Type: application/json", "--data-binary", body)
		}
		return curl(append(args, c.APIURL+path)...)
	}
	bios := func(path string) map[string]any {
		t.Helper()
		a := curl("-u", "root:calvin", srv.URL+"/redfish/v1/Systems/"+sysID+path)
		var doc struct {
			Attributes map[string]any `json:"Attributes"`
		}
		if a.code != 200 || json.Unmarshal(a.body, &doc) != nil {
			t.Fatalf("GET Bios%s from the BMC: %d %.300s", path, a.code, a.body)
		}
		return doc.Attributes
	}
	nodeDoc := func() map[string]any {
		t.Helper()
		a := api("GET", "/v1/nodes/"+id, "")
		var doc map[string]any
		if a.code != 200 || json.Unmarshal(a.body, &doc) != nil {
			t.Fatalf("GET node: %d %.300s", a.code, a.body)
		}
		return doc
	}
	before := nodeDoc()
	if bios("/Bios")["ProcVirtualization"] != "Enabled" {
		t.Fatalf("the BIOS starts with ProcVirtualization %v; want Enabled", bios("/Bios")["ProcVirtualization"])
	}
	boots, starts := m.cdBoots(), len(m.Starts())

	svc := `{"target": "service", "service_steps": [{"interface": "bios", "step": "apply_configuration",
		"args": {"settings": [{"name": "ProcVirtualization", "value": "Disabled"}, {"name": "NumLock", "value": "Off"}]}}]}`
	if a := api("PUT", "/v1/nodes/"+id+"/states/provision", svc); a.code != 202 {
		t.Fatalf("service at 1.87: %d %.300s", a.code, a.body)
	}
	got := cl.WaitRest(id, 60*time.Second)
	after := nodeDoc()
	if got.State != "active" || got.LastError != "" || after["maintenance"] != false {
		t.Fatalf("after service: %q, last_error %q, maintenance %v; want active", got.State, got.LastError, after["maintenance"])
	}
	if !reflect.DeepEqual(before["instance_info"], after["instance_info"]) {
		t.Fatalf("service changed instance_info: %v -> %v", before["instance_info"], after["instance_info"])
	}
	if m.cdBoots() != boots {
		t.Fatalf("service booted the ramdisk (%d CD boots, %d before) for an out-of-band step", m.cdBoots(), boots)
	}
	// Nor is the instance restarted: the settings wait for its
	// operator's reboot (docs/ironic-compat.md).
	if s := m.Starts()[starts:]; len(s) != 0 || !m.PoweredOn() {
		t.Fatalf("during service the machine started %d times (%v), powered on %v; want the instance left running", len(s), s, m.PoweredOn())
	}
	if st, _ := b.State(sysID); st.BootTarget != vbmc.BootHdd || st.MediaInserted || st.USBInserted {
		t.Fatalf("after service the BMC shows %+v; want the disk as boot device, no media", st)
	}
	hist := string(api("GET", "/v1/nodes/"+id+"/history?detail=True", "").body)
	if i := strings.LastIndex(hist, "bios.apply_configuration"); i < 0 || strings.Contains(hist[i:], "write_image") || strings.Contains(hist[i:], "erase_devices") {
		t.Fatalf("the history lacks the service step, or service wrote or erased the disk: %.1000s", hist)
	}

	// The BMC holds the settings: staged (or already applied, if the
	// node was reset), and in the BIOS after the next reset.
	if pend, cur := bios("/Bios/Settings"), bios("/Bios"); pend["ProcVirtualization"] != "Disabled" && cur["ProcVirtualization"] != "Disabled" {
		t.Fatalf("after service the BMC has pending %v, current %v; want ProcVirtualization Disabled", pend, cur)
	}
	if a := api("PUT", "/v1/nodes/"+id+"/states/power", `{"target": "rebooting"}`); a.code != 202 {
		t.Fatalf("reboot: %d %.300s", a.code, a.body)
	}
	if got := cl.WaitRest(id, 60*time.Second); got.State != "active" || got.LastError != "" || got.PowerState != "power on" {
		t.Fatalf("after reboot: %+v", got)
	}
	if cur := bios("/Bios"); cur["ProcVirtualization"] != "Disabled" || cur["NumLock"] != "Off" {
		t.Fatalf("after a reset the BIOS holds %v; want ProcVirtualization Disabled and NumLock Off", cur)
	}
}
