package boot

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bmedge/bmedge/protocol"
)

// TestNetbootHooks: a node's network boot is armed only by a power-on
// that carries a new boot credential (and boot_macs) while its boot
// device is pxe, and disarmed by a power-off, boot device disk, or a
// power-on without a new boot; an agent without network boot fails boot
// device pxe naming the flags.
func TestNetbootHooks(t *testing.T) {
	if _, err := os.Stat("/usr/lib/ipxe/undionly.kpxe"); err != nil && os.Getenv("BM_REQUIRE_ALL") != "1" {
		t.Skip("Debian's ipxe package is not installed")
	}
	off := New(Config{Site: "s1"})
	if err := off.netbootBootDevice("n1", protocol.BootPXE); err == nil || !strings.Contains(err.Error(), "--netboot-interface") {
		t.Fatalf("boot device pxe without network boot: %v, want an error naming --netboot-interface", err)
	}
	if err := off.netbootBootDevice("n1", protocol.BootDisk); err != nil {
		t.Fatalf("boot device disk without network boot: %v", err)
	}

	if _, err := New(Config{Netboot: NetbootOptions{Kernel: "vmlinuz"}}).startNetboot(context.Background()); err == nil || !strings.Contains(err.Error(), "go with --netboot-interface") {
		t.Fatalf("network boot flags without the interface: %v", err)
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
	boot := func(macs ...any) {
		t.Helper()
		a.SetCreds("n1", "node:n1", "pw")
		a.netbootNoteArgs("n1", map[string]any{protocol.ArgAgentUsername: "node:n1", protocol.ArgBootMACs: macs})
	}
	if err := a.netbootBootDevice("n1", protocol.BootPXE); err != nil {
		t.Fatal(err)
	}
	// A power-on without a new boot credential (say the power verb of the
	// API) boots nothing.
	if err := a.netbootPower("n1", protocol.PowerOn); err != nil || srv.Armed("n1") {
		t.Fatalf("power on without a boot: %v, armed %v", err, srv.Armed("n1"))
	}
	boot("52:54:00:00:00:01")
	if err := a.netbootPower("n1", protocol.PowerReboot); err != nil || !srv.Armed("n1") {
		t.Fatalf("reboot with a boot: %v, armed %v", err, srv.Armed("n1"))
	}
	if err := a.netbootPower("n1", protocol.PowerOff); err != nil || srv.Armed("n1") {
		t.Fatalf("power off: %v, armed %v", err, srv.Armed("n1"))
	}
	boot("52:54:00:00:00:01")
	a.netbootPower("n1", protocol.PowerOn)
	if err := a.netbootBootDevice("n1", protocol.BootDisk); err != nil || srv.Armed("n1") {
		t.Fatalf("boot device disk: %v, armed %v", err, srv.Armed("n1"))
	}
	// Boot device disk: a new boot's power-on arms nothing.
	boot("52:54:00:00:00:01")
	if a.netbootPower("n1", protocol.PowerOn); srv.Armed("n1") {
		t.Fatal("armed with boot device disk")
	}
	// A node without PXE-enabled ports cannot boot: the command fails.
	a.netbootBootDevice("n1", protocol.BootPXE)
	boot()
	if err := a.netbootPower("n1", protocol.PowerReboot); err == nil || !strings.Contains(err.Error(), "port create") {
		t.Fatalf("a boot without MACs: %v, want an error naming port create", err)
	}
}

// devMediaBMC is fakeMediaBMC that records the boot devices set.
type devMediaBMC struct {
	fakeMediaBMC
	devices []string
}

func (f *devMediaBMC) SetBootDevice(_ context.Context, d string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.devices = append(f.devices, d)
	return nil
}

// TestNetbootOnVirtualMediaBMC: a node whose BMC has virtual media but
// whose boot interface is network boot (Config.NetworkBoot: ipxe or pxe
// on redfish) boots the ramdisk as an ipmi node does: boot device pxe is
// set on the BMC itself (Redfish's override Pxe), the power-on with a new
// boot arms the network boot for its MACs and inserts no media, boot
// device disk disarms it; the same node with virtual media boot gets its
// media and no BMC boot device pxe.
func TestNetbootOnVirtualMediaBMC(t *testing.T) {
	if _, err := os.Stat("/usr/lib/ipxe/undionly.kpxe"); err != nil && os.Getenv("BM_REQUIRE_ALL") != "1" {
		t.Skip("Debian's ipxe package is not installed")
	}
	dir := t.TempDir()
	kernel, initrd, iso := filepath.Join(dir, "vmlinuz"), filepath.Join(dir, "initrd"), filepath.Join(dir, "ramdisk.iso")
	os.WriteFile(kernel, []byte("k"), 0o600)
	os.WriteFile(initrd, []byte("i"), 0o600)
	os.WriteFile(iso, make([]byte, 64<<10), 0o600)
	netboot := true
	a := New(Config{Site: "s1", Ramdisk: RamdiskOptions{ISO: iso, Listen: "127.0.0.1:0", BrokerURL: "mqtt://10.1.0.1:1883"},
		Netboot:     NetbootOptions{Interface: "lo", Address: "127.0.0.1", Mode: "proxy", HTTPPort: -1, TFTPPort: -1, DHCPPort: -1, Kernel: kernel, Initrd: initrd},
		NetworkBoot: func(string) bool { return netboot }})
	stop, err := a.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	srv := a.netbootState().srv
	ctx := context.Background()
	b := &devMediaBMC{}
	a.NoteArgs("n1", map[string]any{protocol.ArgAgentUsername: "node:n1", protocol.ArgAgentPassword: "pw", protocol.ArgBootMACs: []any{"52:54:00:00:00:01"}})
	if err := a.setBootDevice(ctx, "n1", b, protocol.BootPXE); err != nil {
		t.Fatal(err)
	}
	if err := a.setPower(ctx, "n1", b, protocol.PowerOn); err != nil {
		t.Fatal(err)
	}
	if cd, _ := b.media(); cd || !srv.Armed("n1") || strings.Join(b.devices, " ") != "pxe" || b.power != protocol.PowerOn {
		t.Fatalf("network boot on a virtual media BMC: CD %v, armed %v, boot devices %v, power %q; want no CD, armed, pxe, on", cd, srv.Armed("n1"), b.devices, b.power)
	}
	if err := a.setBootDevice(ctx, "n1", b, protocol.BootDisk); err != nil || srv.Armed("n1") {
		t.Fatalf("boot device disk: %v, armed %v", err, srv.Armed("n1"))
	}
	// The same BMC with virtual media boot: the media, no BMC pxe.
	netboot = false
	b2 := &devMediaBMC{}
	a.NoteArgs("n2", map[string]any{protocol.ArgAgentUsername: "node:n2", protocol.ArgAgentPassword: "pw2", protocol.ArgBootMACs: []any{"52:54:00:00:00:02"}})
	if err := a.setBootDevice(ctx, "n2", b2, protocol.BootPXE); err != nil {
		t.Fatal(err)
	}
	if err := a.setPower(ctx, "n2", b2, protocol.PowerOn); err != nil {
		t.Fatal(err)
	}
	if cd, _ := b2.media(); !cd || srv.Armed("n2") || len(b2.devices) != 0 {
		t.Fatalf("virtual media boot: CD %v, armed %v, boot devices %v; want the CD, not armed, none", cd, srv.Armed("n2"), b2.devices)
	}
}
