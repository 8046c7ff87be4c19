package boot

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent/netboot"
	"github.com/bmedge/bmedge/drivers/redfish"
	"github.com/bmedge/bmedge/drivers/redfish/vbmc"
	"github.com/bmedge/bmedge/protocol"
)

// TestNetbootSecureBoot: a boot command with secure_boot true arms the
// node's network boot with the signed chain, which needs shim and GRUB
// beside the kernel: without them the power command fails naming them;
// with them it arms. A later boot without secure_boot arms without it
// (no binaries needed).
func TestNetbootSecureBoot(t *testing.T) {
	if _, err := os.Stat("/usr/lib/ipxe/undionly.kpxe"); err != nil && os.Getenv("BM_REQUIRE_ALL") != "1" {
		t.Skip("Debian's ipxe package is not installed")
	}
	dir := t.TempDir()
	kernel, initrd := filepath.Join(dir, "vmlinuz"), filepath.Join(dir, "initrd")
	os.WriteFile(kernel, []byte("k"), 0o600)
	os.WriteFile(initrd, []byte("i"), 0o600)
	a := New(Config{Site: "s1", Ramdisk: RamdiskOptions{BrokerURL: "mqtt://10.1.0.1:1883"},
		Netboot: NetbootOptions{Interface: "lo", Address: "127.0.0.1", Mode: "proxy", HTTPPort: -1, TFTPPort: -1, DHCPPort: -1, Kernel: kernel, Initrd: initrd}})
	stop, err := a.startNetboot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	srv := a.netbootState().srv
	boot := func(secure any) error {
		t.Helper()
		a.SetCreds("n1", "node:n1", "pw")
		args := map[string]any{protocol.ArgAgentUsername: "node:n1", protocol.ArgBootMACs: []any{"52:54:00:00:00:01"}}
		if secure != nil {
			args[protocol.ArgSecureBoot] = secure
		}
		a.netbootNoteArgs("n1", args)
		if err := a.netbootBootDevice("n1", protocol.BootPXE); err != nil {
			t.Fatal(err)
		}
		return a.netbootPower("n1", protocol.PowerReboot)
	}
	if err := boot(true); err == nil || !strings.Contains(err.Error(), "needs Debian's signed "+netboot.ShimBinary) || srv.Armed("n1") {
		t.Fatalf("secure boot without shim beside the kernel: %v, armed %v", err, srv.Armed("n1"))
	}
	for _, f := range []string{netboot.ShimBinary, netboot.GRUBBinary} {
		os.WriteFile(filepath.Join(dir, f), []byte(f), 0o644)
	}
	if err := boot(true); err != nil || !srv.Armed("n1") {
		t.Fatalf("secure boot with shim and GRUB: %v, armed %v", err, srv.Armed("n1"))
	}
	os.Remove(filepath.Join(dir, netboot.ShimBinary))
	if err := boot(nil); err != nil || !srv.Armed("n1") {
		t.Fatalf("a boot without secure_boot after one with it: %v, armed %v", err, srv.Armed("n1"))
	}
}

// TestMediaBootSecureBoot: a virtual-media boot of a Redfish node (the
// redfish driver, the virtual BMC with an in-memory machine) whose boot
// command says secure_boot true turns the SecureBoot resource on (and
// the boot mode UEFI) before the media go in: the machine starts from the
// CD with Secure Boot. A boot that says nothing leaves it as it is; one
// that says false turns it off. A BMC without the SecureBoot resource
// fails the boot naming what it lacks, before any media are inserted or
// the power changes: the node never boots unsigned.
func TestMediaBootSecureBoot(t *testing.T) {
	iso := filepath.Join(t.TempDir(), "ramdisk.iso")
	if err := os.WriteFile(iso, make([]byte, 64<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p := New(Config{Site: "s1", Log: slog.New(slog.DiscardHandler),
		Ramdisk: RamdiskOptions{ISO: iso, Listen: "127.0.0.1:0", BrokerURL: "mqtt://127.0.0.1:1883"}})
	stop, err := p.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	lab := func(noSecureBoot bool) (*vbmc.BMC, *vbmc.MemoryMachine, *redfish.BMC) {
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
		return b, m, d
	}
	boot := func(node string, d *redfish.BMC, secure any) error {
		t.Helper()
		args := map[string]any{protocol.ArgAgentUsername: "node:" + node, protocol.ArgAgentPassword: "pw"}
		if secure != nil {
			args[protocol.ArgSecureBoot] = secure
		}
		p.NoteArgs(node, args)
		if err := p.setBootDevice(ctx, node, d, protocol.BootPXE); err != nil {
			t.Fatal(err)
		}
		return p.setPower(ctx, node, d, protocol.PowerReboot)
	}
	off := func(node string, d *redfish.BMC) {
		t.Helper()
		if err := p.setPower(ctx, node, d, protocol.PowerOff); err != nil {
			t.Fatal(err)
		}
	}

	b, m, d := lab(false)
	for i, c := range []struct {
		secure any
		want   vbmc.Boot
	}{
		{true, vbmc.Boot{Device: vbmc.BootCd, Mode: vbmc.ModeUEFI, SecureBoot: true}},
		{nil, vbmc.Boot{Device: vbmc.BootCd, Mode: vbmc.ModeUEFI, SecureBoot: true}},
		{false, vbmc.Boot{Device: vbmc.BootCd, Mode: vbmc.ModeUEFI}},
	} {
		if err := boot("n1", d, c.secure); err != nil {
			t.Fatalf("boot %d (secure_boot %v): %v", i, c.secure, err)
		}
		starts := m.Starts()
		if len(starts) != i+1 || starts[i] != c.want {
			t.Fatalf("boot %d (secure_boot %v): starts %+v, want the last %+v", i, c.secure, starts, c.want)
		}
		off("n1", d)
	}
	if err := boot("n1", d, "yes"); err == nil || !strings.Contains(err.Error(), "not true or false") {
		t.Fatalf("secure_boot \"yes\": %v", err)
	}
	if st, _ := b.State("1"); st.SecureBoot || st.MediaInserted || st.PowerState != "Off" || len(m.Starts()) != 3 {
		t.Fatalf("a refused secure_boot value changed the BMC: %+v", st)
	}

	b, m, d = lab(true)
	err = boot("n2", d, true)
	if err == nil || !strings.Contains(err.Error(), "boot with UEFI Secure Boot") || !strings.Contains(err.Error(), "no SecureBoot resource") {
		t.Fatalf("Secure Boot on a BMC without the SecureBoot resource: %v", err)
	}
	if st, _ := b.State("1"); st.MediaInserted || st.USBInserted || st.PowerState != "Off" || len(m.Starts()) != 0 || st.BootMode != vbmc.ModeLegacy {
		t.Fatalf("after the refusal the BMC shows %+v, starts %v; want nothing changed", st, m.Starts())
	}
	if err := boot("n2", d, nil); err != nil || len(m.Starts()) != 1 {
		t.Fatalf("a boot without Secure Boot on the same BMC: %v, starts %v", err, m.Starts())
	}
}
