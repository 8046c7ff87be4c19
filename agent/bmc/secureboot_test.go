package bmc

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/drivers/redfish"
	"github.com/bmedge/bmedge/drivers/redfish/vbmc"
	"github.com/bmedge/bmedge/protocol"
)

// directBooter changes the boot device and the power on the BMC itself.
type directBooter struct{}

func (directBooter) SetBootDevice(ctx context.Context, _ string, b drivers.BMC, d string) error {
	return b.SetBootDevice(ctx, d)
}
func (directBooter) SetPower(ctx context.Context, _ string, b drivers.BMC, s string) error {
	return b.SetPower(ctx, s)
}
func (directBooter) NoteArgs(string, map[string]any) {}

// TestInstanceSecureBoot: on a Redfish node (the redfish driver, the
// virtual BMC with an in-memory machine, its system in Legacy mode with
// Secure Boot off), a deploy's out-of-band steps whose
// prepare_instance_boot says secure_boot true start the instance from
// the disk in UEFI mode with Secure Boot on (Ironic's prepare_instance);
// the tear down's power-off that says secure_boot false leaves the BMC's
// SecureBootEnable off (Ironic's clean_up_instance). Steps that say
// nothing leave it as it is. A BMC without the SecureBoot resource fails
// the step that would turn it on, and tears down without it; a BMC that
// cannot set it at all (ipmi) is not asked.
func TestInstanceSecureBoot(t *testing.T) {
	ctx := context.Background()
	lab := func(noSecureBoot bool) (*vbmc.BMC, *vbmc.MemoryMachine, *Set) {
		t.Helper()
		m := vbmc.NewMemoryMachine(vbmc.MemoryOptions{})
		b, err := vbmc.New(vbmc.Config{Username: "admin", Password: "pw", Systems: []vbmc.SystemConfig{{Machine: m, BootMode: vbmc.ModeLegacy, NoSecureBoot: noSecureBoot}}})
		if err != nil {
			t.Fatal(err)
		}
		srv, err := vbmc.Serve(b, vbmc.ServeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		d, err := redfish.New(map[string]any{"redfish_address": srv.URL, "redfish_username": "admin", "redfish_password": "pw"},
			redfish.Options{PollInterval: 20 * time.Millisecond, PowerTimeout: 5 * time.Second, RetryBackoff: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close(); srv.Close(); b.Close() })
		s := New(Config{Site: "s1", Log: slog.New(slog.DiscardHandler)})
		s.Put("n1", "redfish", d)
		return b, m, s
	}
	deploy := func(s *Set, secure any) error {
		t.Helper()
		prep := protocol.Step{Interface: "deploy", Step: "prepare_instance_boot"}
		if secure != nil {
			prep.Args = map[string]any{protocol.ArgSecureBoot: secure}
		}
		m := &protocol.Message{Node: "n1", Driver: "redfish", Action: protocol.ActionOOBStep, Steps: []protocol.Step{prep,
			{Interface: "deploy", Step: "tear_down_agent"}, {Interface: "deploy", Step: "boot_instance"}}}
		return s.Exec(ctx, m, directBooter{})
	}
	tearDown := func(s *Set, secure any) error {
		t.Helper()
		args := protocol.PowerArgs{State: protocol.PowerOff}.Args()
		if secure != nil {
			args[protocol.ArgSecureBoot] = secure
		}
		return s.Exec(ctx, &protocol.Message{Node: "n1", Driver: "redfish", Action: protocol.ActionPower, Args: args}, directBooter{})
	}

	b, m, s := lab(false)
	sys := b.SystemIDs()[0]
	for i, c := range []struct {
		secure, off any
		want        vbmc.Boot
		after       bool // SecureBootEnable after the tear down
	}{
		{nil, nil, vbmc.Boot{Device: vbmc.BootHdd, Mode: vbmc.ModeLegacy}, false},
		{true, false, vbmc.Boot{Device: vbmc.BootHdd, Mode: vbmc.ModeUEFI, SecureBoot: true}, false},
		{true, nil, vbmc.Boot{Device: vbmc.BootHdd, Mode: vbmc.ModeUEFI, SecureBoot: true}, true},
		{nil, false, vbmc.Boot{Device: vbmc.BootHdd, Mode: vbmc.ModeUEFI, SecureBoot: true}, false},
	} {
		if err := deploy(s, c.secure); err != nil {
			t.Fatalf("deploy %d (secure_boot %v): %v", i, c.secure, err)
		}
		starts := m.Starts()
		if len(starts) != i+1 || starts[i] != c.want {
			t.Fatalf("deploy %d (secure_boot %v): starts %+v, want the last %+v", i, c.secure, starts, c.want)
		}
		if err := tearDown(s, c.off); err != nil {
			t.Fatalf("tear down %d (secure_boot %v): %v", i, c.off, err)
		}
		if st, _ := b.State(sys); st.PowerState != "Off" || st.SecureBoot != c.after {
			t.Fatalf("after tear down %d (secure_boot %v): power %s, SecureBootEnable %v; want Off, %v", i, c.off, st.PowerState, st.SecureBoot, c.after)
		}
	}

	_, m2, s2 := lab(true)
	if err := deploy(s2, true); err == nil || !strings.Contains(err.Error(), "no SecureBoot resource") || !strings.Contains(err.Error(), "prepare_instance_boot") {
		t.Fatalf("deploy with secure_boot on a BMC without the SecureBoot resource: %v; want prepare_instance_boot's failure naming it", err)
	}
	if len(m2.Starts()) != 0 {
		t.Fatalf("the instance started unsigned on hope: %+v", m2.Starts())
	}
	if err := tearDown(s2, false); err != nil {
		t.Fatalf("tear down on a BMC without the SecureBoot resource: %v; want nothing to turn off", err)
	}

	// A BMC that cannot set Secure Boot (stubBMC, as ipmi) is not asked.
	s3 := New(Config{Site: "s1", Log: slog.New(slog.DiscardHandler)})
	s3.Put("n1", "redfish", &stubBMC{})
	if err := deploy(s3, true); err != nil {
		t.Fatalf("deploy with secure_boot on a BMC that cannot set it: %v", err)
	}
	if err := tearDown(s3, false); err != nil {
		t.Fatalf("tear down with secure_boot false on a BMC that cannot set it: %v", err)
	}
}
