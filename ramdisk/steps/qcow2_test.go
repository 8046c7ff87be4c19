package steps

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/protocol"
	"github.com/bmedge/bmedge/ramdisk/disk"
)

// TestWriteImageQcow2: write_image takes a qcow2 image (made by qemu-img)
// and says so in its summary; image_disk_format is honoured; a qcow2 with
// a backing file fails the step with no result and its progress short of
// the end.
func TestWriteImageQcow2(t *testing.T) {
	qemuImg, err := exec.LookPath("qemu-img")
	if err != nil {
		if os.Getenv("BM_REQUIRE_ALL") == "1" {
			t.Fatalf("qemu-img is missing (Debian package qemu-utils): %v", err)
		}
		t.Skip("qemu-img is missing; install Debian's qemu-utils (scripts/install-test-deps.sh)")
	}
	dir := t.TempDir()
	raw := make([]byte, 1<<20)
	copy(raw[4096:], bytes.Repeat([]byte("bmedge qcow2 "), 20000))
	rawPath := filepath.Join(dir, "raw.img")
	os.WriteFile(rawPath, raw, 0o644)
	run := func(args ...string) {
		if out, err := exec.Command(qemuImg, args...).CombinedOutput(); err != nil {
			t.Fatalf("qemu-img %v: %v\n%s", args, err, out)
		}
	}
	run("convert", "-c", "-f", "raw", "-O", "qcow2", rawPath, filepath.Join(dir, "img.qcow2"))
	run("create", "-f", "qcow2", "-b", "img.qcow2", "-F", "qcow2", filepath.Join(dir, "overlay.qcow2"))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := os.ReadFile(filepath.Join(dir, filepath.Base(r.URL.Path)))
		if err != nil {
			http.NotFound(w, r)
			return
		}
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(b))
	}))
	t.Cleanup(srv.Close)
	digest := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		s := sha256.Sum256(b)
		return hex.EncodeToString(s[:])
	}

	target := junk(t, "vda", 2<<20)
	r := runner([]disk.Device{target}, nil)
	r.Erase.ProcRoot = t.TempDir() // no mounts
	write := func(name, format string) (map[string]any, error, float64) {
		var pl progressLog
		args := map[string]any{"image_source": srv.URL + "/" + name, "image_checksum": digest(name), "root_device": map[string]any{"name": "/dev/vda"}}
		if format != "" {
			args["image_disk_format"] = format
		}
		res, err := r.Run(t.Context(), protocol.Step{Interface: "deploy", Step: "write_image", Args: args}, pl.fn)
		return res, err, pl.last
	}

	res, err, _ := write("img.qcow2", "qcow2")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(target.Path)
	if !bytes.Equal(got[:len(raw)], raw) {
		t.Fatal("the disk does not hold the qcow2 image's contents")
	}
	if sum, _ := res["summary"].(string); !strings.Contains(sum, "1048576 bytes (qcow2, ") || !strings.Contains(sum, "sha256 verified") {
		t.Errorf("summary %q does not say a qcow2 image of 1 MiB was written and verified", sum)
	}

	res, err, _ = write("img.qcow2", "raw")
	if err == nil || res != nil || !strings.Contains(err.Error(), "image_disk_format says raw") {
		t.Errorf("qcow2 image with image_disk_format raw: %v, %v", res, err)
	}
	res, err, last := write("overlay.qcow2", "")
	if err == nil || res != nil || !strings.Contains(err.Error(), "backing file") {
		t.Errorf("qcow2 with a backing file: %v, %v", res, err)
	}
	if last >= 1 {
		t.Errorf("progress reached %.2f for a refused image", last)
	}
}
