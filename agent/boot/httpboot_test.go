package boot

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent/outbox"
	"github.com/bmedge/bmedge/lib/clock"
	"github.com/bmedge/bmedge/protocol"
)

// TestHTTPBootISO: the ISO of a UEFI HTTP boot is the ramdisk ISO (here
// one grub-mkrescue makes, as the ramdisk build does) with the boot's
// parameters on every linux line of its GRUB menu, read back with
// xorriso; its El Torito boot images are those of the source; nothing
// written under TMPDIR while it was built holds the parameters (they
// carry the boot's credential); parameters a boot loader would read as
// syntax are refused.
func TestHTTPBootISO(t *testing.T) {
	needISOTools(t)
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	src := grubISO(t)
	const params = "bm.node=n1 bm.token=secret-0123456789abcdef"
	img, err := httpBootISO(context.Background(), src, params)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "boot.iso")
	if err := os.WriteFile(out, img, 0o600); err != nil {
		t.Fatal(err)
	}
	got := extract(t, out, "/boot/grub/grub.cfg")
	for _, want := range []string{"linux /boot/vmlinuz console=ttyS0 " + params, "linux /boot/vmlinuz quiet " + params, "initrd /boot/initramfs\n"} {
		if !strings.Contains(string(got), want) {
			t.Errorf("built ISO's grub.cfg lacks %q:\n%s", want, got)
		}
	}
	for _, f := range []string{"/boot/vmlinuz", "/boot/initramfs"} {
		a, b := extract(t, src, f), extract(t, out, f)
		if len(a) == 0 || !bytes.Equal(a, b) {
			t.Errorf("%s: %d bytes in the source, %d in the built ISO, or different", f, len(a), len(b))
		}
	}
	eltorito := func(iso string) string {
		b, err := exec.Command("xorriso", "-indev", iso, "-report_el_torito", "plain").Output()
		if err != nil {
			t.Fatalf("xorriso -report_el_torito %s: %v", iso, err)
		}
		var lines []string
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "El Torito boot img") {
				// Every field but the last (the image's block, which
				// moves with the new menu).
				f := strings.Fields(l)
				lines = append(lines, strings.Join(f[:len(f)-1], " "))
			}
		}
		return strings.Join(lines, "\n")
	}
	if a, b := eltorito(src), eltorito(out); a == "" || a != b {
		t.Errorf("boot images differ:\nsource:\n%s\nbuilt:\n%s", a, b)
	}
	_ = filepath.WalkDir(tmp, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte("secret-0123456789abcdef")) {
				t.Errorf("%s holds the boot's parameters", p)
			}
		}
		return nil
	})
	// The RAM filesystem's folder of the build is gone with it.
	if left, _ := filepath.Glob(filepath.Join(shmDir, "bmedge-httpboot-*")); len(left) != 0 {
		t.Errorf("the build left %v on the RAM filesystem", left)
	}
	if _, err := httpBootISO(context.Background(), src, "bm.x=$(reboot)"); err == nil {
		t.Error("parameters with shell syntax were taken")
	}
}

// extract reads one file of an ISO with xorriso (into a folder of the
// test: -extract replaces its target).
func extract(t *testing.T, iso, name string) []byte {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "x")
	if out, err := exec.Command("xorriso", "-osirrox", "on", "-indev", iso, "-extract", name, dst).CombinedOutput(); err != nil {
		t.Fatalf("xorriso -extract %s of %s: %v: %s", name, iso, err, out)
	}
	b, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func needISOTools(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"grub-mkrescue", "xorriso"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("BM_REQUIRE_ALL") == "1" {
				t.Fatalf("%s is missing; run scripts/install-test-deps.sh", tool)
			}
			t.Skipf("%s is missing (Debian's grub-pc-bin, grub-efi-amd64-bin, xorriso, mtools)", tool)
		}
	}
}

// grubISO is a bootable ISO made as the ramdisk build makes its ISO
// (grub-mkrescue), with a GRUB menu of two linux lines.
func grubISO(t *testing.T) string {
	t.Helper()
	tree := filepath.Join(t.TempDir(), "tree")
	if err := os.MkdirAll(filepath.Join(tree, "boot", "grub"), 0o755); err != nil {
		t.Fatal(err)
	}
	menu := "set timeout=0\nmenuentry bmedge {\n  linux /boot/vmlinuz console=ttyS0\n  initrd /boot/initramfs\n}\nmenuentry other {\n  linux /boot/vmlinuz quiet\n}\n"
	for name, b := range map[string]string{"boot/grub/grub.cfg": menu, "boot/vmlinuz": strings.Repeat("k", 5000), "boot/initramfs": strings.Repeat("i", 7000)} {
		if err := os.WriteFile(filepath.Join(tree, name), []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	src := filepath.Join(t.TempDir(), "ramdisk.iso")
	if out, err := exec.Command("grub-mkrescue", "-o", src, tree).CombinedOutput(); err != nil {
		t.Fatalf("grub-mkrescue: %v: %s", err, out)
	}
	return src
}

// fakeHTTPBMC is a BMC with virtual media and UEFI HTTP boot.
type fakeHTTPBMC struct {
	fakeMediaBMC
	url    string
	clears int
}

func (f *fakeHTTPBMC) BootFromHTTP(_ context.Context, url string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.url = url
	return nil
}

func (f *fakeHTTPBMC) ClearHTTPBoot(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.url = ""
	f.clears++
	return nil
}

// TestHTTPBootSurvivesRestart: a redfish-https node's ramdisk boot gives
// its BMC the URL of a per-boot ISO (no virtual media inserted) whose
// GRUB menu carries the boot's credential; the agent stops and a new boot
// part starts from the same state folder with a media server on another
// port: it serves the same ISO name again (made again from what the
// encrypted state folder kept), so a firmware that had not fetched it
// yet still boots; the node's power-off clears the BMC's HttpBootUri and
// the ISO is no longer served. The password is in no file of the state
// folder in the clear. Fake clock, no MQTT.
func TestHTTPBootSurvivesRestart(t *testing.T) {
	needISOTools(t)
	dir := t.TempDir()
	iso := grubISO(t)
	fk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	const node, pw = "n1", "secret-boot-password-77aa"
	ctx := context.Background()
	start := func() (*Boot, *outbox.Store, func()) {
		t.Helper()
		return keptBoot(t, dir, fk, Config{HTTPBoot: func(string) bool { return true }, Ramdisk: RamdiskOptions{ISO: iso}})
	}
	get := func(u string) (int, []byte) {
		t.Helper()
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	menuOf := func(img []byte) string {
		t.Helper()
		f := filepath.Join(t.TempDir(), "boot.iso")
		if err := os.WriteFile(f, img, 0o600); err != nil {
			t.Fatal(err)
		}
		return string(extract(t, f, "/boot/grub/grub.cfg"))
	}
	bmc := &fakeHTTPBMC{}

	p1, _, stop1 := start()
	p1.NoteArgs(node, map[string]any{protocol.ArgAgentUsername: "node:" + node, protocol.ArgAgentPassword: pw})
	if err := p1.setBootDevice(ctx, node, bmc, protocol.BootPXE); err != nil {
		t.Fatal(err)
	}
	if err := p1.setPower(ctx, node, bmc, protocol.PowerOn); err != nil {
		t.Fatal(err)
	}
	if cd, usb := bmc.media(); cd || usb || bmc.url == "" || bmc.power != protocol.PowerOn {
		t.Fatalf("booted: CD %v, USB %v, HttpBootUri %q, power %s; want only the HttpBootUri", cd, usb, bmc.url, bmc.power)
	}
	code, img := get(bmc.url)
	if code != http.StatusOK || !strings.Contains(menuOf(img), "bm.password="+pw) {
		t.Fatalf("the boot's ISO: %d, %d bytes, or its menu lacks the boot's credential", code, len(img))
	}
	path := bmc.url[strings.Index(bmc.url, "/boot/"):]
	stop1()
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if b, _ := os.ReadFile(path); bytes.Contains(b, []byte(pw)) {
			t.Errorf("%s holds the boot's password in the clear", path)
		}
		return nil
	})

	fk.Advance(time.Minute)
	p2, st2, _ := start()
	again := p2.media.base + path
	if again == bmc.url {
		t.Fatal("the second media server has the first one's address; the test wants another")
	}
	code, img2 := get(again)
	if code != http.StatusOK || !strings.Contains(menuOf(img2), "bm.password="+pw) {
		t.Fatalf("after the restart the boot's ISO is answered %d (%d bytes); want it served, with the credential, until the boot ends", code, len(img2))
	}
	if err := p2.setPower(ctx, node, bmc, protocol.PowerOff); err != nil {
		t.Fatal(err)
	}
	if bmc.url != "" || bmc.clears == 0 || bmc.power != protocol.PowerOff {
		t.Fatalf("the power-off left HttpBootUri %q (clears %d, power %s); want it cleared", bmc.url, bmc.clears, bmc.power)
	}
	if code, _ := get(again); code != http.StatusNotFound {
		t.Fatalf("after the power-off the boot's ISO is answered %d; want 404", code)
	}
	if kept, err := st2.LoadVMedia(); err != nil || kept[node] != nil {
		t.Fatalf("after the power-off the state folder keeps %q (%v); want nothing", kept[node], err)
	}
}
