package boot

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bmedge/bmedge/agent/netboot"
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
