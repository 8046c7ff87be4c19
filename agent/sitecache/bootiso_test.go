package sitecache

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBootISOURL: a kernel and a ramdisk from an origin are fetched into
// the cache and built into a bootable ISO served at BuiltPathPrefix: the
// ISO (read back with xorriso) holds both, byte for byte, and a GRUB
// configuration booting the kernel with the ramdisk and the parameters;
// the same inputs give the same ISO again; an unknown token is 404; a
// link-local origin is refused by the fetch rule; parameters a boot
// loader would read as syntax are refused.
func TestBootISOURL(t *testing.T) {
	for _, tool := range []string{"grub-mkrescue", "xorriso"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is missing (Debian's grub-pc-bin, grub-efi-amd64-bin, xorriso, mtools)", tool)
		}
	}
	kernel := []byte(strings.Repeat("kernel bytes ", 4000))
	initrd := []byte(strings.Repeat("initrd bytes ", 9000))
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/vmlinuz":
			_, _ = w.Write(kernel)
		case "/initrd":
			_, _ = w.Write(initrd)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(origin.Close)
	sc := New(Config{Site: "s1", Opts: Options{Dir: t.TempDir(), Listen: "127.0.0.1:0", MaxBytes: 1 << 30, FetchAllow: loopback}})
	stop, err := sc.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	ctx := context.Background()
	u, err := sc.BootISOURL(ctx, origin.URL+"/vmlinuz", origin.URL+"/initrd", "console=ttyS0 bm.marker=42")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(u, "http://"+sc.Addr()+BuiltPathPrefix) {
		t.Fatalf("built ISO URL %s", u)
	}
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	iso, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(iso) < 1<<20 {
		t.Fatalf("GET the built ISO: %d, %d bytes", resp.StatusCode, len(iso))
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "boot.iso")
	if err := os.WriteFile(path, iso, 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "x")
	if msg, err := exec.Command("xorriso", "-osirrox", "on", "-indev", path, "-extract", "/boot", out).CombinedOutput(); err != nil {
		t.Fatalf("xorriso: %v %s", err, msg)
	}
	for name, want := range map[string][]byte{"vmlinuz": kernel, "initrd": initrd} {
		got, err := os.ReadFile(filepath.Join(out, name))
		if err != nil || string(got) != string(want) {
			t.Fatalf("the ISO's %s: %v, %d bytes; want the origin's %d", name, err, len(got), len(want))
		}
	}
	cfg, err := os.ReadFile(filepath.Join(out, "grub", "grub.cfg"))
	if err != nil || !strings.Contains(string(cfg), "linux /boot/vmlinuz console=ttyS0 bm.marker=42\n") || !strings.Contains(string(cfg), "initrd /boot/initrd") {
		t.Fatalf("grub.cfg: %v\n%s", err, cfg)
	}
	if again, err := sc.BootISOURL(ctx, origin.URL+"/vmlinuz", origin.URL+"/initrd", "console=ttyS0 bm.marker=42"); err != nil || again != u {
		t.Fatalf("the same inputs again: %s %v; want %s", again, err, u)
	}
	if resp, err := http.Get("http://" + sc.Addr() + BuiltPathPrefix + "0123.iso"); err != nil || resp.StatusCode != 404 {
		t.Fatalf("unknown token: %v %v", resp, err)
	}
	if _, err := sc.BootISOURL(ctx, "http://169.254.169.254/vmlinuz", origin.URL+"/initrd", ""); err == nil || !strings.Contains(err.Error(), "link-local") {
		t.Fatalf("link-local kernel: %v; want the fetch rule's refusal", err)
	}
	if _, err := sc.BootISOURL(ctx, origin.URL+"/vmlinuz", origin.URL+"/initrd", "x; reboot"); err == nil || !strings.Contains(err.Error(), "';'") {
		t.Fatalf("params with ';': %v", err)
	}
}
