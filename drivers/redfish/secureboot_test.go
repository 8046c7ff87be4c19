package redfish_test

import (
	"testing"

	"github.com/bmedge/bmedge/drivers/redfish"
	"github.com/bmedge/bmedge/drivers/redfish/vbmc"
	"github.com/bmedge/bmedge/protocol"
)

// TestSecureBoot: SetSecureBoot(true) on a system in Legacy mode sets the
// boot mode to UEFI and SecureBootEnable, and the machine's next start
// has Secure Boot; asking again changes nothing; false turns it off. A
// BMC without the SecureBoot resource refuses true, naming what it
// lacks and the capability that asked, and changes nothing; false there
// is nothing to do.
func TestSecureBoot(t *testing.T) {
	m := vbmc.NewMemoryMachine(vbmc.MemoryOptions{})
	r := newRig(t, rigOptions{vbmc: vbmc.Config{Systems: []vbmc.SystemConfig{{Machine: m, BootMode: vbmc.ModeLegacy}}}})
	d := r.driver(t, r.fastOptions())
	c := ctx(t)
	if err := d.SetSecureBoot(c, true); err != nil {
		t.Fatal(err)
	}
	if st, _ := r.bmc.State("1"); !st.SecureBoot || st.BootMode != vbmc.ModeUEFI {
		t.Fatalf("after SetSecureBoot(true): %+v", st)
	}
	if err := d.SetSecureBoot(c, true); err != nil {
		t.Fatal(err)
	}
	if err := d.SetPower(c, protocol.PowerOn); err != nil {
		t.Fatal(err)
	}
	if starts := m.Starts(); len(starts) != 1 || starts[0] != (vbmc.Boot{Device: vbmc.BootHdd, Mode: vbmc.ModeUEFI, SecureBoot: true}) {
		t.Fatalf("starts %+v, want one UEFI start with Secure Boot", starts)
	}
	if err := d.SetSecureBoot(c, false); err != nil {
		t.Fatal(err)
	}
	if st, _ := r.bmc.State("1"); st.SecureBoot || st.BootMode != vbmc.ModeUEFI {
		t.Fatalf("after SetSecureBoot(false): %+v", st)
	}

	none := newRig(t, rigOptions{vbmc: vbmc.Config{Systems: []vbmc.SystemConfig{{Machine: vbmc.NewMemoryMachine(vbmc.MemoryOptions{}), BootMode: vbmc.ModeLegacy, NoSecureBoot: true}}}})
	dn := none.driver(t, none.fastOptions())
	err := dn.SetSecureBoot(c, true)
	mustContain(t, err, none.url, "no SecureBoot resource", "secure_boot:true")
	if _, ok := err.(*redfish.NoSecureBootError); !ok {
		t.Fatalf("error %T, want *redfish.NoSecureBootError", err)
	}
	if st, _ := none.bmc.State("1"); st.BootMode != vbmc.ModeLegacy {
		t.Fatalf("a refused Secure Boot changed the boot mode: %+v", st)
	}
	if err := dn.SetSecureBoot(c, false); err != nil {
		t.Fatalf("SetSecureBoot(false) without the resource: %v", err)
	}
}
