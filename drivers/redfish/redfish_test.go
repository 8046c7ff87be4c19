package redfish_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bmedge/bmedge/coordinator/certs"
	"github.com/bmedge/bmedge/drivers/redfish"
	"github.com/bmedge/bmedge/drivers/redfish/vbmc"
	"github.com/bmedge/bmedge/lib/waitfor"
	"github.com/bmedge/bmedge/protocol"
)

const password = "pa55-Wörd!"

// syncBuffer collects log output from several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type rig struct {
	bmc     *vbmc.BMC
	machine *vbmc.MemoryMachine
	url     string
	logs    *syncBuffer
}

type rigOptions struct {
	vbmc   vbmc.Config
	serve  vbmc.ServeOptions
	memory vbmc.MemoryOptions
}

// newRig starts a vBMC with an in-memory machine on 127.0.0.1; every
// test's log is checked for the password at the end.
func newRig(t *testing.T, o rigOptions) *rig {
	t.Helper()
	m := vbmc.NewMemoryMachine(o.memory)
	cfg := o.vbmc
	cfg.Username, cfg.Password = "admin", password
	if len(cfg.Systems) == 0 {
		cfg.Systems = []vbmc.SystemConfig{{Machine: m}}
	}
	b, err := vbmc.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := vbmc.Serve(b, o.serve)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{bmc: b, machine: m, url: srv.URL, logs: &syncBuffer{}}
	t.Cleanup(func() {
		srv.Close()
		b.Close()
		if strings.Contains(r.logs.String(), password) {
			t.Errorf("the password is in the driver's log:\n%s", r.logs.String())
		}
	})
	return r
}

// fastOptions keep tests short: quick polls and backoffs.
func (r *rig) fastOptions() redfish.Options {
	return redfish.Options{
		Logger:         slog.New(slog.NewTextHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		RequestTimeout: 5 * time.Second, PowerTimeout: 5 * time.Second, PollInterval: 20 * time.Millisecond,
		Attempts: 3, RetryBackoff: 10 * time.Millisecond, BMCResetSettle: 10 * time.Millisecond, BMCResetTimeout: 5 * time.Second,
	}
}

func (r *rig) info(extra ...string) map[string]any {
	info := map[string]any{"redfish_address": r.url, "redfish_username": "admin", "redfish_password": password}
	for i := 0; i+1 < len(extra); i += 2 {
		info[extra[i]] = extra[i+1]
	}
	return info
}

func (r *rig) driver(t *testing.T, opts redfish.Options, extra ...string) *redfish.BMC {
	t.Helper()
	d, err := redfish.New(r.info(extra...), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func mustContain(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error; want one containing %q", parts)
	}
	t.Logf("error (as expected): %v", err)
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Fatalf("error %q lacks %q", err, p)
		}
	}
	if strings.Contains(err.Error(), password) {
		t.Fatalf("error carries the password: %v", err)
	}
}

func count(log []string, prefix string) int {
	n := 0
	for _, l := range log {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

func TestNewValidatesDriverInfo(t *testing.T) {
	good := map[string]any{"redfish_address": "https://10.0.0.5", "redfish_username": "u", "redfish_password": password}
	with := func(k string, v any) map[string]any {
		m := map[string]any{}
		for a, b := range good {
			m[a] = b
		}
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	for _, c := range []struct {
		info map[string]any
		want string
	}{
		{with("redfish_address", nil), "redfish_address is required"},
		{with("redfish_address", "ftp://10.0.0.5"), "redfish_address"},
		{with("redfish_address", "https://u:p@10.0.0.5"), "must not carry credentials"},
		{with("redfish_address", "https://10.0.0.5/redfish/v1"), "scheme and host only"},
		{with("redfish_address", 5.0), "redfish_address must be a string"},
		{with("redfish_system_id", "/redfish/v1/Chassis/1"), "redfish_system_id"},
		{with("redfish_verify_ca", "/no/such/ca.pem"), "redfish_verify_ca"},
		{with("redfish_verify_ca", 1.0), "redfish_verify_ca"},
		{with("redfish_auth_type", "kerberos"), "redfish_auth_type"},
		{with("redfish_username", nil), "redfish_password but no redfish_username"},
		{with("redfish_password", 1234.0), "redfish_password must be a string"},
	} {
		_, err := redfish.New(c.info, redfish.Options{})
		mustContain(t, err, c.want)
	}
	for _, info := range []map[string]any{
		good,
		with("redfish_address", "10.0.0.5:8443"),
		with("redfish_system_id", "/redfish/v1/Systems/1"),
		with("redfish_system_id", "System.Embedded.1"),
		with("redfish_verify_ca", false),
		with("redfish_verify_ca", "False"),
		with("redfish_auth_type", "basic"),
	} {
		if _, err := redfish.New(info, redfish.Options{}); err != nil {
			t.Errorf("%v: %v", info, err)
		}
	}
	d, _ := redfish.New(with("redfish_address", "10.0.0.5:8443"), redfish.Options{})
	if d.Endpoint() != "https://10.0.0.5:8443" {
		t.Errorf("a bare host is %s, want https://10.0.0.5:8443", d.Endpoint())
	}
}

func TestValidateAndPassword(t *testing.T) {
	r := newRig(t, rigOptions{})
	d := r.driver(t, r.fastOptions())
	if err := d.Validate(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if n := r.bmc.Sessions(); n != 1 {
		t.Fatalf("sessions after Validate = %d, want 1", n)
	}
	if err := d.Validate(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if n := count(r.bmc.RequestLog(), "POST /redfish/v1/SessionService/Sessions"); n != 2 {
		t.Fatalf("%d logins for two validations; each must log in anew", n)
	}
	if n := r.bmc.Sessions(); n != 1 {
		t.Fatalf("sessions after two validations = %d; the first must be closed", n)
	}
	// Other calls reuse the session.
	for i := 0; i < 3; i++ {
		if _, err := d.PowerState(ctx(t)); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(r.bmc.RequestLog(), "POST /redfish/v1/SessionService/Sessions"); n != 2 {
		t.Fatalf("%d logins after three power state reads; the session must be reused", n)
	}
	d.Close()
	if n := r.bmc.Sessions(); n != 0 {
		t.Fatalf("sessions after Close = %d, want 0", n)
	}

	for _, auth := range []string{"session", "basic", "auto"} {
		info := r.info("redfish_auth_type", auth)
		info["redfish_password"] = "wrong-" + password
		bad, err := redfish.New(info, r.fastOptions())
		if err != nil {
			t.Fatal(err)
		}
		before := len(r.bmc.RequestLog())
		err = bad.Validate(ctx(t))
		// The BMC's own refusal is quoted, and what to check is named.
		mustContain(t, err, "refused the credentials of user \"admin\"", "HTTP 401", "redfish_password")
		if strings.Contains(err.Error(), "wrong-") {
			t.Fatalf("error carries the wrong password: %v", err)
		}
		// 401 is never retried: BMCs lock accounts that keep failing.
		if n := len(r.bmc.RequestLog()) - before; n > 5 {
			t.Fatalf("auth %s: %d requests for a refused login", auth, n)
		}
	}
}

func TestSameInfo(t *testing.T) {
	r := newRig(t, rigOptions{})
	d := r.driver(t, r.fastOptions())
	if !d.SameInfo(r.info()) {
		t.Fatal("the same driver_info is not the same")
	}
	for _, change := range [][]string{
		{"redfish_password", "other"}, {"redfish_username", "root"}, {"redfish_system_id", "2"},
		{"redfish_verify_ca", "false"}, {"redfish_auth_type", "basic"}, {"redfish_address", "http://127.0.0.1:1"},
	} {
		if d.SameInfo(r.info(change...)) {
			t.Errorf("driver_info with %s changed is the same", change[0])
		}
	}
	if d.SameInfo(map[string]any{}) {
		t.Error("an invalid driver_info is the same")
	}
}

func TestSystemSelection(t *testing.T) {
	var systems []vbmc.SystemConfig
	for i := 0; i < 3; i++ {
		systems = append(systems, vbmc.SystemConfig{Machine: vbmc.NewMemoryMachine(vbmc.MemoryOptions{})})
	}
	r := newRig(t, rigOptions{vbmc: vbmc.Config{Systems: systems}})
	err := r.driver(t, r.fastOptions()).Validate(ctx(t))
	mustContain(t, err, "3 systems", "/redfish/v1/Systems/system-1, /redfish/v1/Systems/system-2, /redfish/v1/Systems/system-3", "set redfish_system_id")
	err = r.driver(t, r.fastOptions(), "redfish_system_id", "/redfish/v1/Systems/nine").Validate(ctx(t))
	mustContain(t, err, "redfish_system_id /redfish/v1/Systems/nine is not a system", "/redfish/v1/Systems/system-2")
	d := r.driver(t, r.fastOptions(), "redfish_system_id", "system-2")
	if err := d.SetPower(ctx(t), protocol.PowerOn); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"Off", "On", "Off"} {
		st, _ := r.bmc.State(fmt.Sprintf("system-%d", i+1))
		if st.PowerState != want {
			t.Fatalf("system-%d is %s, want %s", i+1, st.PowerState, want)
		}
	}
}

func TestPower(t *testing.T) {
	r := newRig(t, rigOptions{})
	d := r.driver(t, r.fastOptions())
	c := ctx(t)
	state := func() string {
		t.Helper()
		s, err := d.PowerState(c)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if s := state(); s != protocol.PowerOff {
		t.Fatalf("initial power %q", s)
	}
	for _, step := range []struct{ set, want string }{
		{protocol.PowerOn, protocol.PowerOn},
		{protocol.PowerOn, protocol.PowerOn}, // idempotent: no second start
		{protocol.PowerReboot, protocol.PowerOn},
		{protocol.PowerOff, protocol.PowerOff},
		{protocol.PowerReboot, protocol.PowerOn}, // a reboot of an off node powers it on
	} {
		if err := d.SetPower(c, step.set); err != nil {
			t.Fatalf("%s: %v", step.set, err)
		}
		if s := state(); s != step.want {
			t.Fatalf("after %s: %s", step.set, s)
		}
	}
	calls := r.machine.PowerCalls()
	want := []vbmc.ResetType{vbmc.ResetOn, vbmc.ResetForceRestart, vbmc.ResetForceOff, vbmc.ResetOn}
	if len(calls) != len(want) {
		t.Fatalf("resets %v, want %v", calls, want)
	}
	for i := range want {
		if calls[i] != want[i] {
			t.Fatalf("resets %v, want %v", calls, want)
		}
	}
	mustContain(t, d.SetPower(c, "sideways"), "unknown power state")

	// Soft power off: the OS shuts down.
	if err := d.SoftPowerOff(c, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if s := state(); s != protocol.PowerOff {
		t.Fatalf("after soft power off: %s", s)
	}
	if got := r.machine.PowerCalls(); got[len(got)-1] != vbmc.ResetGracefulShutdown {
		t.Fatalf("soft power off used %v", got[len(got)-1])
	}
}

func TestSoftPowerOffForcesAfterTimeout(t *testing.T) {
	r := newRig(t, rigOptions{memory: vbmc.MemoryOptions{IgnoreGraceful: true}})
	d := r.driver(t, r.fastOptions())
	c := ctx(t)
	if err := d.SetPower(c, protocol.PowerOn); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := d.SoftPowerOff(c, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if time.Since(start) < 300*time.Millisecond {
		t.Fatal("forced off before the soft power off timeout")
	}
	calls := r.machine.PowerCalls()
	if n := len(calls); n < 2 || calls[n-2] != vbmc.ResetGracefulShutdown || calls[n-1] != vbmc.ResetForceOff {
		t.Fatalf("resets %v; want GracefulShutdown then ForceOff", calls)
	}
	if r.machine.PoweredOn() {
		t.Fatal("machine still on")
	}
}

func TestPowerWaitsForASlowBMC(t *testing.T) {
	r := newRig(t, rigOptions{})
	r.bmc.SetFaults(vbmc.Faults{PowerDelay: 700 * time.Millisecond})
	d := r.driver(t, r.fastOptions())
	start := time.Now()
	if err := d.SetPower(ctx(t), protocol.PowerOn); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 700*time.Millisecond {
		t.Fatalf("SetPower returned after %v, before the BMC showed the change", took)
	}
	if !r.machine.PoweredOn() {
		t.Fatal("machine off after SetPower on")
	}

	opts := r.fastOptions()
	opts.PowerTimeout = 200 * time.Millisecond
	r.bmc.SetFaults(vbmc.Faults{PowerDelay: 3 * time.Second})
	d2 := r.driver(t, opts)
	err := d2.SetPower(ctx(t), protocol.PowerOff)
	mustContain(t, err, "did not report power Off within 200ms after ForceOff", `last reported "On"`)
}

func TestOneOperationAtATime(t *testing.T) {
	r := newRig(t, rigOptions{})
	r.bmc.SetFaults(vbmc.Faults{PowerDelay: 500 * time.Millisecond})
	d := r.driver(t, r.fastOptions())
	done := make(chan error, 1)
	go func() { done <- d.SetPower(context.Background(), protocol.PowerOn) }()
	// The reset is in: the driver now waits for the delayed power.
	if !waitfor.Until(5*time.Second, func() bool {
		return slices.ContainsFunc(r.bmc.RequestLog(), func(l string) bool {
			return strings.HasPrefix(l, "POST ") && strings.Contains(l, "ComputerSystem.Reset")
		})
	}) {
		t.Fatalf("the power on's reset never reached the BMC: %v", r.bmc.RequestLog())
	}
	c, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := d.PowerState(c)
	mustContain(t, err, "busy with another operation")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if s, err := d.PowerState(ctx(t)); err != nil || s != protocol.PowerOn {
		t.Fatalf("after the power on: %s %v", s, err)
	}
}

func TestBootDevice(t *testing.T) {
	r := newRig(t, rigOptions{})
	d := r.driver(t, r.fastOptions())
	c := ctx(t)
	check := func(target, enabled, mode string) {
		t.Helper()
		st, _ := r.bmc.State("1")
		if st.BootTarget != target || st.BootEnabled != enabled || (mode != "" && st.BootMode != mode) {
			t.Fatalf("vBMC boot %s/%s/%s, want %s/%s/%s", st.BootTarget, st.BootEnabled, st.BootMode, target, enabled, mode)
		}
	}
	if err := d.SetBootDevice(c, protocol.BootPXE); err != nil {
		t.Fatal(err)
	}
	check("Pxe", "Continuous", "")
	if err := d.SetBootDevice(c, protocol.BootDisk); err != nil {
		t.Fatal(err)
	}
	check("Hdd", "Continuous", "")
	mustContain(t, d.SetBootDevice(c, "cdrom"), "unknown boot device")

	if err := d.SetBoot(c, redfish.BootCDROM, false); err != nil {
		t.Fatal(err)
	}
	check("Cd", "Once", "")
	bs, err := d.BootSettings(c)
	if err != nil || bs.Device != redfish.BootCDROM || bs.Persistent {
		t.Fatalf("boot settings %+v %v", bs, err)
	}
	if err := d.SetBootMode(c, redfish.ModeBIOS); err != nil {
		t.Fatal(err)
	}
	check("Cd", "Once", "Legacy")
	// A Once override is used by the next start, then gone.
	if err := d.SetPower(c, protocol.PowerOn); err != nil {
		t.Fatal(err)
	}
	if starts := r.machine.Starts(); len(starts) != 1 || starts[0] != (vbmc.Boot{Device: "Cd", Mode: "Legacy"}) {
		t.Fatalf("starts %+v", starts)
	}
	bs, _ = d.BootSettings(c)
	if bs.Device != "" || bs.Mode != redfish.ModeBIOS {
		t.Fatalf("after the start that used the Once override: %+v", bs)
	}
	if err := d.SetBoot(c, redfish.BootBIOS, true); err != nil {
		t.Fatal(err)
	}
	check("BiosSetup", "Continuous", "Legacy")
	if err := d.SetBootMode(c, redfish.ModeUEFI); err != nil {
		t.Fatal(err)
	}
	check("BiosSetup", "Continuous", "UEFI")
	mustContain(t, d.SetBootMode(c, "coreboot"), "unknown boot mode")
}

func TestVirtualMedia(t *testing.T) {
	iso := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/missing.iso" {
			http.NotFound(w, req)
			return
		}
		w.Write([]byte("image " + req.URL.Path))
	}))
	t.Cleanup(iso.Close)
	r := newRig(t, rigOptions{memory: vbmc.MemoryOptions{FetchMedia: true}})
	d := r.driver(t, r.fastOptions())
	c := ctx(t)
	a, b := iso.URL+"/a.iso", iso.URL+"/b.iso"
	if err := d.InsertVirtualMedia(c, a); err != nil {
		t.Fatal(err)
	}
	if u, size, _ := r.machine.Media(); u != a || size != int64(len("image /a.iso")) {
		t.Fatalf("machine media %q (%d bytes)", u, size)
	}
	if err := d.InsertVirtualMedia(c, a); err != nil {
		t.Fatal(err)
	}
	if n := count(r.bmc.RequestLog(), "POST /redfish/v1/Managers/BMC/VirtualMedia/CD/Actions/VirtualMedia.EjectMedia"); n != 0 {
		t.Fatalf("the same image was ejected %d times", n)
	}
	// Another image replaces it: the BMC wants an eject first.
	if err := d.InsertVirtualMedia(c, b); err != nil {
		t.Fatal(err)
	}
	if got, err := d.VirtualMedia(c); err != nil || got != b {
		t.Fatalf("virtual media %q %v", got, err)
	}
	if err := d.EjectVirtualMedia(c); err != nil {
		t.Fatal(err)
	}
	if err := d.EjectVirtualMedia(c); err != nil {
		t.Fatal(err)
	}
	if u, _, _ := r.machine.Media(); u != "" {
		t.Fatalf("machine media after eject %q", u)
	}
	mustContain(t, d.InsertVirtualMedia(c, "nfs://host/x.iso"), "http or https")
	// An image the BMC cannot fetch: the BMC's refusal is quoted.
	mustContain(t, d.InsertVirtualMedia(c, iso.URL+"/missing.iso"), "cannot insert virtual media", "HTTP 400", "404 Not Found")
}

func TestBIOSSteps(t *testing.T) {
	r := newRig(t, rigOptions{})
	d := r.driver(t, r.fastOptions())
	c := ctx(t)
	settings := []any{
		map[string]any{"name": "ProcVirtualization", "value": "Disabled"},
		map[string]any{"name": "BootDelaySeconds", "value": 3.0},
	}
	if err := d.RunStep(c, "bios", "apply_configuration", map[string]any{"settings": settings}); err != nil {
		t.Fatal(err)
	}
	st, _ := r.bmc.State("1")
	if st.PendingBios["ProcVirtualization"] != "Disabled" || st.Bios["ProcVirtualization"] != "Enabled" {
		t.Fatalf("after apply_configuration: current %v pending %v", st.Bios, st.PendingBios)
	}
	cur, pend, err := d.BIOSAttributes(c)
	if err != nil || pend["BootDelaySeconds"] != 3.0 || cur["BootDelaySeconds"] != 0.0 {
		t.Fatalf("BIOSAttributes: %v %v %v", cur, pend, err)
	}
	if err := d.SetPower(c, protocol.PowerReboot); err != nil {
		t.Fatal(err)
	}
	st, _ = r.bmc.State("1")
	if st.Bios["ProcVirtualization"] != "Disabled" || st.Bios["BootDelaySeconds"] != 3.0 || len(st.PendingBios) != 0 {
		t.Fatalf("after the reboot: current %v pending %v", st.Bios, st.PendingBios)
	}

	for _, c2 := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{}, "argument settings is required"},
		{map[string]any{"settings": "ProcVirtualization=Disabled"}, "must be a list"},
		{map[string]any{"settings": []any{}}, "settings is empty"},
		{map[string]any{"settings": []any{map[string]any{"value": "x"}}}, "settings[0] has no name"},
		{map[string]any{"settings": []any{map[string]any{"name": "A"}}}, "settings[0] (A) has no value"},
		{map[string]any{"settings": []any{map[string]any{"name": "A", "value": []any{}}}}, "want a string, number or boolean"},
		{map[string]any{"settings": []any{map[string]any{"name": "NumLock", "value": "Off"}, map[string]any{"name": "NumLock", "value": "On"}}}, "given twice"},
		{map[string]any{"settings": []any{map[string]any{"name": "HyperDrive", "value": "On"}}}, "the BIOS has no attribute HyperDrive (it has BootDelaySeconds,"},
		// A value of the wrong type: the BMC's refusal is quoted.
		{map[string]any{"settings": []any{map[string]any{"name": "BootDelaySeconds", "value": "soon"}}}, "PropertyValueTypeError"},
	} {
		mustContain(t, d.RunStep(c, "bios", "apply_configuration", c2.args), c2.want)
	}

	if err := d.RunStep(c, "bios", "factory_reset", nil); err != nil {
		t.Fatal(err)
	}
	if st, _ := r.bmc.State("1"); !st.BiosResetPending {
		t.Fatal("factory reset not pending")
	}
	if err := d.SetPower(c, protocol.PowerReboot); err != nil {
		t.Fatal(err)
	}
	if st, _ := r.bmc.State("1"); st.Bios["ProcVirtualization"] != "Enabled" || st.BiosResetPending {
		t.Fatalf("after factory reset and reboot: %+v", st)
	}
	mustContain(t, d.RunStep(c, "raid", "frobnicate", nil), "no step raid.frobnicate")
}

func TestResetBMC(t *testing.T) {
	r := newRig(t, rigOptions{vbmc: vbmc.Config{ResetDowntime: 400 * time.Millisecond}})
	d := r.driver(t, r.fastOptions())
	c := ctx(t)
	if err := d.Validate(c); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := d.RunStep(c, "management", "reset_bmc", nil); err != nil {
		t.Fatal(err)
	}
	if time.Since(start) < 400*time.Millisecond {
		t.Fatal("reset_bmc returned while the BMC was still away")
	}
	if r.bmc.ManagerResets() != 1 {
		t.Fatalf("manager resets %d", r.bmc.ManagerResets())
	}
	if _, err := d.PowerState(c); err != nil {
		t.Fatal(err)
	}
	if n := r.bmc.Sessions(); n != 1 {
		t.Fatalf("sessions after the BMC's reset: %d, want 1 (a new login)", n)
	}
}

func TestTLS(t *testing.T) {
	dir := t.TempDir()
	ca, err := certs.MakeCA("vbmc test CA")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := certs.MakeServerCert(ca, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := certs.WriteFiles(dir, ca, srv, false); err != nil {
		t.Fatal(err)
	}
	other, _ := certs.MakeCA("another CA")
	otherSrv, _ := certs.MakeServerCert(other, []string{"127.0.0.1"})
	otherDir := t.TempDir()
	if err := certs.WriteFiles(otherDir, other, otherSrv, false); err != nil {
		t.Fatal(err)
	}
	files := certs.Files(dir)
	r := newRig(t, rigOptions{serve: vbmc.ServeOptions{CertFile: files[2], KeyFile: files[3]}})
	if !strings.HasPrefix(r.url, "https://") {
		t.Fatalf("vBMC URL %s", r.url)
	}

	d := r.driver(t, r.fastOptions(), "redfish_verify_ca", files[0])
	if err := d.Validate(ctx(t)); err != nil {
		t.Fatal(err)
	}

	wrongCA := filepath.Join(otherDir, certs.CAFile)
	before := len(r.bmc.RequestLog())
	err = r.driver(t, r.fastOptions(), "redfish_verify_ca", wrongCA).Validate(ctx(t))
	mustContain(t, err, "TLS verification failed", "not signed by a trusted CA", "redfish_verify_ca="+wrongCA+" is not the CA that signed it")
	if n := len(r.bmc.RequestLog()) - before; n != 0 {
		t.Fatalf("%d requests reached the BMC through an untrusted TLS connection", n)
	}

	err = r.driver(t, r.fastOptions()).Validate(ctx(t))
	mustContain(t, err, "TLS verification failed", "set redfish_verify_ca to the file of the CA")

	if err := r.driver(t, r.fastOptions(), "redfish_verify_ca", "false").Validate(ctx(t)); err != nil {
		t.Fatalf("redfish_verify_ca=false: %v", err)
	}

	plain, _ := redfish.New(map[string]any{"redfish_address": strings.Replace(r.url, "https://", "http://", 1),
		"redfish_username": "admin", "redfish_password": password}, r.fastOptions())
	t.Cleanup(func() { plain.Close() })
	if err := plain.Validate(ctx(t)); err == nil {
		t.Fatal("plain http to an https BMC worked")
	}
}

func TestSessionLimit(t *testing.T) {
	r := newRig(t, rigOptions{vbmc: vbmc.Config{SessionLimit: 1}})
	other := r.driver(t, r.fastOptions(), "redfish_auth_type", "session")
	if err := other.Validate(ctx(t)); err != nil {
		t.Fatal(err)
	}
	before := len(r.bmc.RequestLog())
	err := r.driver(t, r.fastOptions(), "redfish_auth_type", "session").Validate(ctx(t))
	mustContain(t, err, "no free session", "SessionLimitExceeded", "set redfish_auth_type to basic")
	if n := count(r.bmc.RequestLog()[before:], "POST /redfish/v1/SessionService/Sessions"); n != 1 {
		t.Fatalf("%d session requests; a session limit must not be retried", n)
	}
	// auto falls back to Basic, as sushy does.
	auto := r.driver(t, r.fastOptions())
	if err := auto.SetPower(ctx(t), protocol.PowerOn); err != nil {
		t.Fatalf("auto with no free session: %v", err)
	}
	if !strings.Contains(r.logs.String(), "using Basic authentication") {
		t.Fatal("the fallback to Basic was not logged")
	}
}

func TestSlowBMC(t *testing.T) {
	r := newRig(t, rigOptions{})
	r.bmc.SetFaults(vbmc.Faults{Latency: 600 * time.Millisecond})
	opts := r.fastOptions()
	opts.RequestTimeout = 150 * time.Millisecond
	opts.Attempts = 2
	err := r.driver(t, opts).Validate(ctx(t))
	mustContain(t, err, "did not answer within 150ms (2 attempts)")
}

// TestOperationDeadline: a BMC slower than the caller's deadline (and
// faster than the per-request timeout) ends the operation with how long
// the BMC had and which attempt it was, not the per-request timeout; a
// power change slower than the deadline says what the BMC last showed.
// The driver is usable again at once.
func TestOperationDeadline(t *testing.T) {
	r := newRig(t, rigOptions{})
	opts := r.fastOptions()
	opts.RequestTimeout, opts.PowerTimeout = time.Minute, time.Minute
	d := r.driver(t, opts)
	if err := d.Validate(ctx(t)); err != nil {
		t.Fatal(err)
	}
	short := func() context.Context {
		c, cancel := context.WithTimeout(context.Background(), time.Second)
		t.Cleanup(cancel)
		return c
	}

	r.bmc.SetFaults(vbmc.Faults{Latency: time.Minute})
	_, err := d.PowerState(short())
	mustContain(t, err, "cannot read the power state: the BMC did not answer within", "the time left for this operation (attempt 1 of 3)", "overloaded or unreachable")
	if strings.Contains(err.Error(), "1m0s") || strings.Contains(err.Error(), "deadline exceeded") {
		t.Fatalf("error %q names the per-request timeout or only the context's error", err)
	}

	r.bmc.SetFaults(vbmc.Faults{PowerDelay: time.Minute})
	err = d.SetPower(short(), protocol.PowerOn)
	mustContain(t, err, "did not report power On within", "after On, the time left for this operation", `last reported "Off"`)

	r.bmc.SetFaults(vbmc.Faults{})
	if _, err := d.PowerState(ctx(t)); err != nil {
		t.Fatalf("after the faults: %v", err)
	}
}

func Test5xxRetried(t *testing.T) {
	r := newRig(t, rigOptions{})
	d := r.driver(t, r.fastOptions())
	c := ctx(t)
	if err := d.Validate(c); err != nil {
		t.Fatal(err)
	}
	r.bmc.SetFaults(vbmc.Faults{FailStatus: 503, FailCount: 2})
	if err := d.SetPower(c, protocol.PowerOn); err != nil {
		t.Fatalf("two 503s with three attempts: %v", err)
	}
	if n := count(r.bmc.RequestLog(), "GET /redfish/v1/Systems/1 503"); n != 2 {
		t.Fatalf("%d 503 answers seen, want 2", n)
	}
	r.bmc.SetFaults(vbmc.Faults{FailStatus: 500, FailCount: -1})
	before := len(r.bmc.RequestLog())
	_, err := d.PowerState(c)
	mustContain(t, err, "HTTP 500", "Injected fault", "after 3 attempts")
	if n := len(r.bmc.RequestLog()) - before; n != 3 {
		t.Fatalf("%d requests for 3 attempts", n)
	}
}

func TestReloginAfter401(t *testing.T) {
	r := newRig(t, rigOptions{})
	d := r.driver(t, r.fastOptions())
	c := ctx(t)
	if err := d.Validate(c); err != nil {
		t.Fatal(err)
	}
	// The BMC forgets every session (a timeout, a reboot).
	r.bmc.DropSessions()
	if s, err := d.PowerState(c); err != nil || s != protocol.PowerOff {
		t.Fatalf("power state after the session was dropped: %q %v", s, err)
	}
	log := r.bmc.RequestLog()
	if n := count(log, "POST /redfish/v1/SessionService/Sessions 201"); n != 2 {
		t.Fatalf("%d logins, want 2 (one re-login)", n)
	}
	if n := count(log, "GET /redfish/v1/Systems/1 401"); n != 1 {
		t.Fatalf("%d 401 answers, want 1", n)
	}
	if r.bmc.Sessions() != 1 {
		t.Fatalf("%d sessions open", r.bmc.Sessions())
	}
}

// TestReloginOnlyOnce: a BMC that refuses every session token at once
// gets one new login, then a clear error, not a loop of logins.
func TestReloginOnlyOnce(t *testing.T) {
	r := newRig(t, rigOptions{})
	forgetful := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Header.Get("X-Auth-Token") != "" {
			r.bmc.DropSessions()
		}
		r.bmc.ServeHTTP(w, req)
	})
	srv, err := vbmc.Serve(forgetful, vbmc.ServeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	d, err := redfish.New(map[string]any{"redfish_address": srv.URL, "redfish_username": "admin", "redfish_password": password,
		"redfish_auth_type": "session"}, r.fastOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	_, err = d.PowerState(ctx(t))
	mustContain(t, err, "refused the session even after a new login", "HTTP 401")
	if n := count(r.bmc.RequestLog(), "POST /redfish/v1/SessionService/Sessions 201"); n != 2 {
		t.Fatalf("%d logins, want 2", n)
	}
}

// TestManyBMCsInOneProcess is the benchmark's shape: 200 vBMCs, each on
// its own 127.0.0.1 listener, each driven by its own driver.
func TestManyBMCsInOneProcess(t *testing.T) {
	const n = 200
	rigs := make([]*rig, n)
	for i := range rigs {
		rigs[i] = newRig(t, rigOptions{})
	}
	sem := make(chan struct{}, 20)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for _, r := range rigs {
		wg.Add(1)
		go func(r *rig) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			d, err := redfish.New(r.info(), r.fastOptions())
			if err != nil {
				errs <- err
				return
			}
			defer d.Close()
			if err := d.Validate(context.Background()); err != nil {
				errs <- err
				return
			}
			errs <- d.SetPower(context.Background(), protocol.PowerOn)
		}(r)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for i, r := range rigs {
		if !r.machine.PoweredOn() || r.bmc.Sessions() != 0 {
			t.Fatalf("BMC %d: on=%v sessions=%d", i, r.machine.PoweredOn(), r.bmc.Sessions())
		}
	}
}
