package vbmc_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/drivers/redfish/vbmc"
	"github.com/bmedge/bmedge/lib/waitfor"
)

// lab is one BMC on its own listener, stopped by t.Cleanup.
type lab struct {
	bmc     *vbmc.BMC
	machine *vbmc.MemoryMachine
	url     string
}

func newLab(t *testing.T, cfg vbmc.Config) *lab {
	t.Helper()
	m := vbmc.NewMemoryMachine(vbmc.MemoryOptions{})
	if cfg.Username == "" {
		cfg.Username, cfg.Password = "admin", "s3cret"
	}
	if len(cfg.Systems) == 0 {
		cfg.Systems = []vbmc.SystemConfig{{Machine: m}}
	}
	b, err := vbmc.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := vbmc.Serve(b, vbmc.ServeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(); b.Close() })
	return &lab{bmc: b, machine: m, url: srv.URL}
}

type reply struct {
	status int
	header http.Header
	body   map[string]any
}

// call sends a request with Basic auth unless auth is "none" or a token.
func (l *lab) call(t *testing.T, method, path, auth string, body any) reply {
	t.Helper()
	var rd io.Reader
	if body != nil {
		data, _ := json.Marshal(body)
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, l.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case auth == "basic":
		req.SetBasicAuth("admin", "s3cret")
	case auth == "none":
	case strings.HasPrefix(auth, "basic:"):
		req.SetBasicAuth("admin", strings.TrimPrefix(auth, "basic:"))
	default:
		req.Header.Set("X-Auth-Token", auth)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := reply{status: resp.StatusCode, header: resp.Header, body: map[string]any{}}
	data, _ := io.ReadAll(resp.Body)
	if len(data) > 0 {
		if err := json.Unmarshal(data, &r.body); err != nil {
			t.Fatalf("%s %s: answer is not JSON: %q", method, path, data)
		}
	}
	return r
}

func errorID(r reply) string {
	e, _ := r.body["error"].(map[string]any)
	infos, _ := e["@Message.ExtendedInfo"].([]any)
	if len(infos) == 0 {
		return ""
	}
	info, _ := infos[0].(map[string]any)
	id, _ := info["MessageId"].(string)
	return id
}

func TestServiceRootIsPublicAndTheRestIsNot(t *testing.T) {
	l := newLab(t, vbmc.Config{})
	for _, p := range []string{"/redfish/v1", "/redfish/v1/"} {
		r := l.call(t, "GET", p, "none", nil)
		if r.status != 200 || r.body["RedfishVersion"] == nil || r.body["UUID"] == nil {
			t.Fatalf("GET %s: %d %v", p, r.status, r.body)
		}
		links, _ := r.body["Links"].(map[string]any)
		if _, ok := links["Sessions"]; !ok {
			t.Fatalf("service root has no Links.Sessions: %v", r.body)
		}
	}
	for _, p := range []string{"/redfish/v1/Systems", "/redfish/v1/Systems/1", "/redfish/v1/Managers", "/redfish/v1/SessionService"} {
		if r := l.call(t, "GET", p, "none", nil); r.status != 401 || errorID(r) == "" {
			t.Fatalf("GET %s without credentials: %d %v, want 401 with a Redfish error", p, r.status, r.body)
		}
		if r := l.call(t, "GET", p, "basic:wrong", nil); r.status != 401 {
			t.Fatalf("GET %s with a wrong password: %d, want 401", p, r.status)
		}
		if r := l.call(t, "GET", p, "basic", nil); r.status != 200 {
			t.Fatalf("GET %s: %d %v", p, r.status, r.body)
		}
	}
	r := l.call(t, "GET", "/redfish/v1/Systems", "basic", nil)
	if r.body["Members@odata.count"] != float64(1) {
		t.Fatalf("systems collection: %v", r.body)
	}
	if r := l.call(t, "GET", "/redfish/v1/Nothing", "basic", nil); r.status != 404 || !strings.HasSuffix(errorID(r), "ResourceMissingAtURI") {
		t.Fatalf("unknown resource: %d %v", r.status, r.body)
	}
}

func TestSessionsAndTheirLimit(t *testing.T) {
	l := newLab(t, vbmc.Config{SessionLimit: 2})
	login := func(pw string) reply {
		return l.call(t, "POST", "/redfish/v1/SessionService/Sessions", "none", map[string]any{"UserName": "admin", "Password": pw})
	}
	if r := login("wrong"); r.status != 401 {
		t.Fatalf("login with a wrong password: %d", r.status)
	}
	a := login("s3cret")
	if a.status != 201 || a.header.Get("X-Auth-Token") == "" || !strings.HasPrefix(a.header.Get("Location"), "/redfish/v1/SessionService/Sessions/") {
		t.Fatalf("login: %d %v %v", a.status, a.header, a.body)
	}
	tok := a.header.Get("X-Auth-Token")
	if r := l.call(t, "GET", "/redfish/v1/Systems/1", tok, nil); r.status != 200 {
		t.Fatalf("GET with a token: %d", r.status)
	}
	if r := l.call(t, "GET", "/redfish/v1/Systems/1", "not-a-token", nil); r.status != 401 {
		t.Fatalf("GET with a bad token: %d", r.status)
	}
	if r := login("s3cret"); r.status != 201 {
		t.Fatalf("second login: %d", r.status)
	}
	r := login("s3cret")
	if r.status != 503 || !strings.HasSuffix(errorID(r), "SessionLimitExceeded") {
		t.Fatalf("third login over a limit of 2: %d %v", r.status, r.body)
	}
	if r := l.call(t, "DELETE", a.header.Get("Location"), tok, nil); r.status != 204 {
		t.Fatalf("logout: %d", r.status)
	}
	if r := l.call(t, "GET", "/redfish/v1/Systems/1", tok, nil); r.status != 401 {
		t.Fatalf("token after logout: %d", r.status)
	}
	if r := login("s3cret"); r.status != 201 {
		t.Fatalf("login after a logout freed a slot: %d", r.status)
	}
	l.bmc.DropSessions()
	if l.bmc.Sessions() != 0 {
		t.Fatal("sessions left after DropSessions")
	}
}

func TestPowerBootOverrideAndOnce(t *testing.T) {
	l := newLab(t, vbmc.Config{})
	sys := "/redfish/v1/Systems/1"
	reset := func(rt string) reply {
		return l.call(t, "POST", sys+"/Actions/ComputerSystem.Reset", "basic", map[string]any{"ResetType": rt})
	}
	if r := reset("Sideways"); r.status != 400 {
		t.Fatalf("unknown reset type: %d", r.status)
	}
	if r := l.call(t, "PATCH", sys, "basic", map[string]any{"Boot": map[string]any{"BootSourceOverrideTarget": "Floppy"}}); r.status != 400 || !strings.HasSuffix(errorID(r), "PropertyValueNotInList") {
		t.Fatalf("bad boot target: %d %v", r.status, r.body)
	}
	if r := l.call(t, "PATCH", sys, "basic", map[string]any{"AssetTag": "x"}); r.status != 400 {
		t.Fatalf("PATCH of something other than Boot: %d", r.status)
	}
	if r := l.call(t, "PATCH", sys, "basic", map[string]any{"Boot": map[string]any{"BootSourceOverrideTarget": "Pxe", "BootSourceOverrideEnabled": "Once", "BootSourceOverrideMode": "Legacy"}}); r.status != 204 {
		t.Fatalf("boot override: %d %v", r.status, r.body)
	}
	if r := reset("On"); r.status != 204 {
		t.Fatalf("power on: %d %v", r.status, r.body)
	}
	if r := l.call(t, "GET", sys, "basic", nil); r.body["PowerState"] != "On" {
		t.Fatalf("power state after On: %v", r.body["PowerState"])
	}
	st, _ := l.bmc.State("1")
	if st.BootEnabled != "Disabled" || st.BootTarget != "Pxe" {
		t.Fatalf("a Once override is not consumed by a start: %+v", st)
	}
	if r := reset("ForceRestart"); r.status != 204 {
		t.Fatalf("restart: %d", r.status)
	}
	starts := l.machine.Starts()
	want := []vbmc.Boot{{Device: "Pxe", Mode: "Legacy"}, {Device: "Hdd", Mode: "Legacy"}}
	if len(starts) != 2 || starts[0] != want[0] || starts[1] != want[1] {
		t.Fatalf("starts = %+v, want %+v", starts, want)
	}
	if r := reset("ForceOff"); r.status != 204 || l.machine.PoweredOn() {
		t.Fatalf("force off: %d, on=%v", r.status, l.machine.PoweredOn())
	}
}

func TestBiosPendingUntilReset(t *testing.T) {
	l := newLab(t, vbmc.Config{})
	settings := "/redfish/v1/Systems/1/Bios/Settings"
	if r := l.call(t, "PATCH", settings, "basic", map[string]any{"Attributes": map[string]any{"NoSuchThing": "x"}}); r.status != 400 {
		t.Fatalf("unknown attribute: %d", r.status)
	}
	if r := l.call(t, "PATCH", settings, "basic", map[string]any{"Attributes": map[string]any{"BootDelaySeconds": "five"}}); r.status != 400 {
		t.Fatalf("attribute of the wrong type: %d", r.status)
	}
	if r := l.call(t, "PATCH", settings, "basic", map[string]any{"Attributes": map[string]any{"ProcVirtualization": "Disabled", "BootDelaySeconds": 5}}); r.status != 204 {
		t.Fatalf("bios settings: %d %v", r.status, r.body)
	}
	bios := l.call(t, "GET", "/redfish/v1/Systems/1/Bios", "basic", nil)
	if a := bios.body["Attributes"].(map[string]any); a["ProcVirtualization"] != "Enabled" {
		t.Fatalf("pending settings applied before a reset: %v", a)
	}
	if p := l.call(t, "GET", settings, "basic", nil); p.body["Attributes"].(map[string]any)["ProcVirtualization"] != "Disabled" {
		t.Fatalf("pending settings: %v", p.body)
	}
	l.call(t, "POST", "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset", "basic", map[string]any{"ResetType": "On"})
	bios = l.call(t, "GET", "/redfish/v1/Systems/1/Bios", "basic", nil)
	a := bios.body["Attributes"].(map[string]any)
	if a["ProcVirtualization"] != "Disabled" || a["BootDelaySeconds"] != float64(5) {
		t.Fatalf("settings not applied at the start: %v", a)
	}
	if r := l.call(t, "POST", "/redfish/v1/Systems/1/Bios/Actions/Bios.ResetBios", "basic", map[string]any{}); r.status != 204 {
		t.Fatalf("ResetBios: %d", r.status)
	}
	l.call(t, "POST", "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset", "basic", map[string]any{"ResetType": "ForceRestart"})
	st, _ := l.bmc.State("1")
	if st.Bios["ProcVirtualization"] != "Enabled" || st.BiosResetPending {
		t.Fatalf("factory defaults not back after a restart: %+v", st)
	}
}

func TestVirtualMedia(t *testing.T) {
	l := newLab(t, vbmc.Config{})
	cd := "/redfish/v1/Managers/BMC/VirtualMedia/CD"
	insert := func(img string) reply {
		return l.call(t, "POST", cd+"/Actions/VirtualMedia.InsertMedia", "basic", map[string]any{"Image": img, "Inserted": true, "WriteProtected": true})
	}
	if r := insert("nfs://host/x.iso"); r.status != 400 {
		t.Fatalf("nfs image: %d", r.status)
	}
	if r := insert("http://10.0.2.2:8080/boot.iso"); r.status != 204 {
		t.Fatalf("insert: %d %v", r.status, r.body)
	}
	if r := insert("http://10.0.2.2:8080/other.iso"); r.status != 409 {
		t.Fatalf("insert over an inserted image: %d, want 409", r.status)
	}
	if u, _, _ := l.machine.Media(); u != "http://10.0.2.2:8080/boot.iso" {
		t.Fatalf("machine media = %q", u)
	}
	if r := l.call(t, "GET", cd, "basic", nil); r.body["Inserted"] != true || r.body["Image"] != "http://10.0.2.2:8080/boot.iso" {
		t.Fatalf("CD: %v", r.body)
	}
	if r := l.call(t, "POST", cd+"/Actions/VirtualMedia.EjectMedia", "basic", map[string]any{}); r.status != 204 {
		t.Fatalf("eject: %d", r.status)
	}
	if u, _, _ := l.machine.Media(); u != "" {
		t.Fatalf("machine media after eject = %q", u)
	}

	// The USB stick is a slot of its own: it holds an image while the
	// CD holds another, and each ejects alone.
	usb := "/redfish/v1/Managers/BMC/VirtualMedia/USB"
	if r := l.call(t, "GET", "/redfish/v1/Managers/BMC/VirtualMedia", "basic", nil); fmt.Sprint(r.body["Members"]) != "[map[@odata.id:/redfish/v1/Managers/BMC/VirtualMedia/CD] map[@odata.id:/redfish/v1/Managers/BMC/VirtualMedia/USB]]" {
		t.Fatalf("virtual media collection: %v", r.body["Members"])
	}
	if r := l.call(t, "GET", usb, "basic", nil); fmt.Sprint(r.body["MediaTypes"]) != "[USBStick]" || r.body["Inserted"] != false {
		t.Fatalf("USB stick: %v", r.body)
	}
	if r := insert("http://10.0.2.2:8080/boot.iso"); r.status != 204 {
		t.Fatalf("insert: %d %v", r.status, r.body)
	}
	if r := l.call(t, "POST", usb+"/Actions/VirtualMedia.InsertMedia", "basic", map[string]any{"Image": "http://10.0.2.2:8080/params.img"}); r.status != 204 {
		t.Fatalf("USB insert: %d %v", r.status, r.body)
	}
	if u, _, _ := l.machine.MediaIn(vbmc.SlotUSB); u != "http://10.0.2.2:8080/params.img" {
		t.Fatalf("machine USB media = %q", u)
	}
	if st, _ := l.bmc.State("1"); !st.USBInserted || st.USBImage != "http://10.0.2.2:8080/params.img" || !st.MediaInserted {
		t.Fatalf("state: %+v", st)
	}
	if r := l.call(t, "POST", usb+"/Actions/VirtualMedia.EjectMedia", "basic", map[string]any{}); r.status != 204 {
		t.Fatalf("USB eject: %d", r.status)
	}
	if u, _, _ := l.machine.MediaIn(vbmc.SlotUSB); u != "" {
		t.Fatalf("machine USB media after eject = %q", u)
	}
	if u, _, _ := l.machine.Media(); u != "http://10.0.2.2:8080/boot.iso" {
		t.Fatalf("the CD lost its image when the USB stick was ejected: %q", u)
	}
	if r := l.call(t, "GET", "/redfish/v1/Managers/BMC/VirtualMedia/Floppy", "basic", nil); r.status != 404 {
		t.Fatalf("a slot that does not exist: %d", r.status)
	}
}

func TestFaults(t *testing.T) {
	l := newLab(t, vbmc.Config{ResetDowntime: time.Second})
	l.bmc.SetFaults(vbmc.Faults{FailStatus: 500, FailCount: 2})
	for i := 0; i < 2; i++ {
		if r := l.call(t, "GET", "/redfish/v1/Systems/1", "basic", nil); r.status != 500 || errorID(r) == "" {
			t.Fatalf("request %d under a fault: %d %v", i, r.status, r.body)
		}
	}
	if r := l.call(t, "GET", "/redfish/v1/Systems/1", "basic", nil); r.status != 200 {
		t.Fatalf("after the faults ran out: %d", r.status)
	}

	l.bmc.SetFaults(vbmc.Faults{PowerDelay: 300 * time.Millisecond})
	start := time.Now()
	l.call(t, "POST", "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset", "basic", map[string]any{"ResetType": "On"})
	if r := l.call(t, "GET", "/redfish/v1/Systems/1", "basic", nil); r.body["PowerState"] != "Off" {
		t.Fatalf("power state right after a delayed On: %v", r.body["PowerState"])
	}
	if !waitfor.Until(5*time.Second, l.machine.PoweredOn) {
		t.Fatal("delayed power on never happened")
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Fatalf("power on showed after %v, before its delay", d)
	}

	l.bmc.SetFaults(vbmc.Faults{Latency: 200 * time.Millisecond})
	start = time.Now()
	l.call(t, "GET", "/redfish/v1", "none", nil)
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Fatalf("answer after %v despite 200ms latency", d)
	}
	l.bmc.SetFaults(vbmc.Faults{})

	if r := l.call(t, "POST", "/redfish/v1/Managers/BMC/Actions/Manager.Reset", "basic", map[string]any{"ResetType": "GracefulRestart"}); r.status != 204 {
		t.Fatalf("manager reset: %d", r.status)
	}
	if r := l.call(t, "GET", "/redfish/v1", "none", nil); r.status != 503 {
		t.Fatalf("during the BMC's reboot: %d, want 503", r.status)
	}
	if r := l.call(t, "GET", "/redfish/v1/Systems", "basic", nil); r.status != 503 {
		t.Fatalf("during the BMC's reboot: %d, want 503", r.status)
	}
	if !waitfor.Until(5*time.Second, func() bool { return l.call(t, "GET", "/redfish/v1", "none", nil).status == 200 }) {
		t.Fatal("the BMC did not come back after its reboot")
	}
}

func TestManySystemsOnOneBMC(t *testing.T) {
	var systems []vbmc.SystemConfig
	for i := 0; i < 3; i++ {
		systems = append(systems, vbmc.SystemConfig{Machine: vbmc.NewMemoryMachine(vbmc.MemoryOptions{})})
	}
	l := newLab(t, vbmc.Config{Systems: systems})
	r := l.call(t, "GET", "/redfish/v1/Systems", "basic", nil)
	if r.body["Members@odata.count"] != float64(3) {
		t.Fatalf("systems: %v", r.body)
	}
	s := l.call(t, "GET", "/redfish/v1/Systems/system-2", "basic", nil)
	links := s.body["Links"].(map[string]any)["ManagedBy"].([]any)
	mgr := links[0].(map[string]any)["@odata.id"].(string)
	if mgr != "/redfish/v1/Managers/BMC-system-2" {
		t.Fatalf("system-2 is managed by %s", mgr)
	}
	if r := l.call(t, "GET", mgr+"/VirtualMedia/CD", "basic", nil); r.status != 200 {
		t.Fatalf("system-2's CD: %d", r.status)
	}
}
