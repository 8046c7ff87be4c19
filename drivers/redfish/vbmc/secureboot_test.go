package vbmc_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bmedge/bmedge/drivers/redfish/vbmc"
)

// TestSecureBootEnable: the SecureBoot resource's SecureBootEnable is
// PATCHable (a boolean, nothing else); it applies at the machine's next
// start in UEFI mode (SecureBootCurrentBoot then Enabled), never to a
// Legacy start. A BMC made with NoSecureBoot has no such resource: the
// system links none and a PATCH of its path is 404.
func TestSecureBootEnable(t *testing.T) {
	l := newLab(t, vbmc.Config{})
	sys := "/redfish/v1/Systems/1"
	sb := sys + "/SecureBoot"
	if r := l.call(t, "GET", sys, "basic", nil); r.body["SecureBoot"] == nil {
		t.Fatalf("the system links no SecureBoot: %v", r.body)
	}
	for _, bad := range []map[string]any{{"SecureBootEnable": "yes"}, {"SecureBootMode": "SetupMode"}, {}} {
		if r := l.call(t, "PATCH", sb, "basic", bad); r.status != 400 {
			t.Errorf("PATCH %v: %d, want 400", bad, r.status)
		}
	}
	if r := l.call(t, "PATCH", sb, "basic", map[string]any{"SecureBootEnable": true}); r.status != 204 {
		t.Fatalf("PATCH SecureBootEnable true: %d %v", r.status, r.body)
	}
	r := l.call(t, "GET", sb, "basic", nil)
	if r.body["SecureBootEnable"] != true || r.body["SecureBootCurrentBoot"] != "Disabled" {
		t.Fatalf("after the PATCH, before a start: %v", r.body)
	}
	if st, _ := l.bmc.State("1"); !st.SecureBoot {
		t.Fatalf("State: %+v", st)
	}
	reset := func(rt string) {
		t.Helper()
		if r := l.call(t, "POST", sys+"/Actions/ComputerSystem.Reset", "basic", map[string]any{"ResetType": rt}); r.status != 204 {
			t.Fatalf("%s: %d %v", rt, r.status, r.body)
		}
	}
	reset("On")
	if r := l.call(t, "GET", sb, "basic", nil); r.body["SecureBootCurrentBoot"] != "Enabled" {
		t.Fatalf("after a UEFI start with Secure Boot: %v", r.body)
	}
	if r := l.call(t, "PATCH", sys, "basic", map[string]any{"Boot": map[string]any{"BootSourceOverrideMode": "Legacy"}}); r.status != 204 {
		t.Fatal(r.status)
	}
	reset("ForceRestart")
	if r := l.call(t, "PATCH", sys, "basic", map[string]any{"Boot": map[string]any{"BootSourceOverrideMode": "UEFI"}}); r.status != 204 {
		t.Fatal(r.status)
	}
	if r := l.call(t, "PATCH", sb, "basic", map[string]any{"SecureBootEnable": false}); r.status != 204 {
		t.Fatal(r.status)
	}
	reset("ForceRestart")
	starts := l.machine.Starts()
	want := []vbmc.Boot{{Device: "Hdd", Mode: "UEFI", SecureBoot: true}, {Device: "Hdd", Mode: "Legacy"}, {Device: "Hdd", Mode: "UEFI"}}
	if len(starts) != len(want) {
		t.Fatalf("starts = %+v, want %+v", starts, want)
	}
	for i := range want {
		if starts[i] != want[i] {
			t.Fatalf("starts = %+v, want %+v", starts, want)
		}
	}

	none := newLab(t, vbmc.Config{Systems: []vbmc.SystemConfig{{Machine: vbmc.NewMemoryMachine(vbmc.MemoryOptions{}), NoSecureBoot: true}}})
	if r := none.call(t, "GET", sys, "basic", nil); r.body["SecureBoot"] != nil {
		t.Fatalf("NoSecureBoot: the system links %v", r.body["SecureBoot"])
	}
	if r := none.call(t, "PATCH", sb, "basic", map[string]any{"SecureBootEnable": true}); r.status != 404 {
		t.Fatalf("NoSecureBoot: PATCH %d, want 404", r.status)
	}
}

// TestQEMUArgsSecureBoot: a UEFI start with Secure Boot runs OVMF's
// Secure Boot code read-only with the machine's copy of the variables,
// on q35 with SMM and the flash's secure property; without the firmware
// the start is refused naming it. A Legacy start ignores Secure Boot.
func TestQEMUArgsSecureBoot(t *testing.T) {
	dir := shortDir(t)
	code, vars := filepath.Join(dir, "code.fd"), filepath.Join(dir, "vars.fd")
	m, err := vbmc.NewQEMUMachine(vbmc.QEMUConfig{Dir: dir, OVMF: filepath.Join(dir, "plain.fd"), OVMFSecureCode: code, OVMFSecureVars: vars})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Args(vbmc.Boot{Device: vbmc.BootCd, Mode: vbmc.ModeUEFI, SecureBoot: true}, nil); err == nil || !strings.Contains(err.Error(), code) {
		t.Fatalf("Secure Boot without its firmware: %v", err)
	}
	os.WriteFile(code, []byte("code"), 0o644)
	os.WriteFile(vars, []byte("vars"), 0o644)
	args, err := m.Args(vbmc.Boot{Device: vbmc.BootCd, Mode: vbmc.ModeUEFI, SecureBoot: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	line := strings.Join(args, " ")
	for _, want := range []string{"-machine q35,smm=on", "-global driver=cfi.pflash01,property=secure,value=on",
		"-drive if=pflash,format=raw,unit=0,readonly=on,file=" + code, "-drive if=pflash,format=raw,unit=1,file=" + dir + "/"} {
		if !strings.Contains(line, want) {
			t.Errorf("command line lacks %q:\n%s", want, line)
		}
	}
	if strings.Contains(line, "-bios") || strings.Contains(line, "file="+vars) {
		t.Errorf("Secure Boot runs the plain firmware or writes the template: %s", line)
	}
	args, err = m.Args(vbmc.Boot{Device: vbmc.BootCd, Mode: vbmc.ModeLegacy, SecureBoot: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if line := strings.Join(args, " "); strings.Contains(line, "pflash") || strings.Contains(line, "-bios") {
		t.Errorf("a Legacy start with SecureBoot set: %s", line)
	}
}
