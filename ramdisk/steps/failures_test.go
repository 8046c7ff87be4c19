package steps

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/bmedge/bmedge/protocol"
	"github.com/bmedge/bmedge/ramdisk/disk"
)

type unreadable struct{ disk.Target }

func (unreadable) ReadAt([]byte, int64) (int, error) { return 0, syscall.EIO }

// TestEraseDevicesFailsWhenUnreadable: the overwrite succeeds but the
// read-back fails; the step fails and returns no result to report.
func TestEraseDevicesFailsWhenUnreadable(t *testing.T) {
	d := junk(t, "vda", 1<<20)
	r := runner([]disk.Device{d}, nil)
	r.Erase.Open = func(path string, mode disk.OpenMode) (disk.Target, error) {
		tg, err := disk.OpenFile(path, mode)
		if err != nil || mode.Write {
			return tg, err
		}
		return unreadable{tg}, nil
	}
	res, err := r.Run(t.Context(), protocol.Step{Interface: "deploy", Step: "erase_devices"}, func(float64, string) {})
	if err == nil || !strings.Contains(err.Error(), "verification of "+d.Path) || res != nil {
		t.Fatalf("Run = %v, %v; want no result and a verification error naming %s", res, err, d.Path)
	}
}

// TestWriteImageFailsWhenCut: the image server cuts the connection
// halfway; the step fails, returns no result and its progress never
// reaches the end.
func TestWriteImageFailsWhenCut(t *testing.T) {
	img := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	sum := sha256.Sum256(img)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(img)))
		_, _ = w.Write(img[:len(img)/2])
		w.(http.Flusher).Flush()
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			conn.Close()
		}
	}))
	defer srv.Close()
	r := runner([]disk.Device{junk(t, "vda", 2<<20)}, nil)
	r.Erase.ProcRoot = t.TempDir() // no mounts
	var pl progressLog
	res, err := r.Run(t.Context(), protocol.Step{Interface: "deploy", Step: "write_image", Args: map[string]any{
		"image_source": srv.URL + "/img.raw", "image_checksum": hex.EncodeToString(sum[:]),
		"root_device": map[string]any{"name": "/dev/vda"}}}, pl.fn)
	if err == nil || !strings.Contains(err.Error(), "unexpected EOF") || res != nil {
		t.Fatalf("Run = %v, %v; want no result and an unexpected EOF error", res, err)
	}
	if pl.last >= 1 {
		t.Fatalf("progress reached %.2f although the download was cut", pl.last)
	}
}
