package image

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"hash"
	"io"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bmedge/bmedge/lib/waitfor"
	"github.com/bmedge/bmedge/ramdisk/disk"
)

// pipelineGoroutines counts the goroutines of copyToDevice and of the
// asynchronous hash that are still running. One that has delivered its
// last result may take a moment to return: a leaked one stays, so it
// looks again for up to two seconds.
func pipelineGoroutines() int {
	buf := make([]byte, 1<<20)
	var n int
	waitfor.Until(2*time.Second, func() bool {
		s := string(buf[:runtime.Stack(buf, true)])
		n = strings.Count(s, "image.copyToDevice.func") + strings.Count(s, "image.newAsyncHash.func")
		return n == 0
	})
	return n
}

// slowHash delays every Write, as a hash slower than the device would.
type slowHash struct {
	hash.Hash
	delay time.Duration
	bytes atomic.Int64
}

func (s *slowHash) Write(p []byte) (int, error) {
	time.Sleep(s.delay)
	s.bytes.Add(int64(len(p)))
	return s.Hash.Write(p)
}

// slowTarget delays every write, as a device slower than the hash would.
type slowTarget struct {
	disk.Target
	delay time.Duration
}

func (s slowTarget) WriteAt(p []byte, off int64) (int, error) {
	time.Sleep(s.delay)
	return s.Target.WriteAt(p, off)
}

func slowOpener(delay time.Duration, inner disk.Opener) disk.Opener {
	return func(path string, mode disk.OpenMode) (disk.Target, error) {
		t, err := inner(path, mode)
		if err != nil {
			return nil, err
		}
		return slowTarget{Target: t, delay: delay}, nil
	}
}

// runPipeline runs copyToDevice of stream onto a fresh 8 MiB file with
// 64 KiB buffers, as Write would (O_DIRECT where the file system takes it:
// the first write alone, then up to two in flight). Two buffers with two
// writes in flight once hung: the writer held both.
func runPipeline(t *testing.T, stream io.Reader, h hash.Hash, open disk.Opener, buffers int) (uint64, error, disk.Device) {
	t.Helper()
	dev := targetFile(t, 8<<20)
	if open == nil {
		open = disk.OpenFile
	}
	w, err := disk.NewWriter(open, dev.Path, true)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ctx, cancel := context.WithCancelCause(t.Context())
	defer cancel(nil)
	cr := &countingReader{r: stream, onRead: func() {}}
	var last uint64
	opts := Options{BufferBytes: 64 << 10, Buffers: buffers, WriteDepth: 2, Progress: func(p Progress) {
		if p.Written <= last {
			t.Errorf("progress went from %d to %d bytes written", last, p.Written)
		}
		last = p.Written
	}}
	n, err := copyToDevice(ctx, cancel, cr, w, h, dev, Source{URL: "http://test/img"}, opts, cr, 0)
	if g := pipelineGoroutines(); g != 0 {
		t.Errorf("%d pipeline goroutines still running after copyToDevice returned", g)
	}
	return n, err, dev
}

// The device write and the hash run side by side on the same buffers:
// whichever is slower, every byte reaches the device at its offset and the
// hash in order, and success is reported only once the hash has taken the
// last byte.
func TestPipelineHashAndWriteInParallel(t *testing.T) {
	img := testImage(3<<20 + 4097)
	want := sha256.Sum256(img)
	for _, c := range []struct {
		name      string
		hashDelay time.Duration
		devDelay  time.Duration
		buffers   int
	}{
		{"hash slower than the device", 2 * time.Millisecond, 0, 4},
		{"device slower than the hash", 0, 2 * time.Millisecond, 4},
		{"both slow, two buffers", time.Millisecond, time.Millisecond, 2},
		{"both fast, many buffers", 0, 0, 16},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := &slowHash{Hash: sha256.New(), delay: c.hashDelay}
			n, err, dev := runPipeline(t, bytes.NewReader(img), h, slowOpener(c.devDelay, disk.OpenFile), c.buffers)
			if err != nil {
				t.Fatal(err)
			}
			if n != uint64(len(img)) {
				t.Fatalf("wrote %d bytes, want %d", n, len(img))
			}
			// Taken right after the return: the hasher must be done.
			if got := h.Sum(nil); !bytes.Equal(got, want[:]) {
				t.Fatalf("digest %x after %d bytes hashed, want %x", got, h.bytes.Load(), want)
			}
			got := readFile(t, dev.Path)
			if !bytes.Equal(got[:len(img)], img) {
				t.Fatal("device content differs from the image")
			}
		})
	}
}

// A device that fails mid-stream stops the reader and the hasher (even a
// slow one with buffers queued) promptly, and its error is the one
// reported; nothing keeps running.
func TestPipelineDeviceErrorStopsAll(t *testing.T) {
	img := testImage(6 << 20)
	h := &slowHash{Hash: sha256.New(), delay: 5 * time.Millisecond}
	start := time.Now()
	n, err, _ := runPipeline(t, bytes.NewReader(img), h, slowOpener(0, failAfter(1<<20)), 8)
	if err == nil || !errors.Is(err, syscall.EIO) {
		t.Fatalf("err = %v, want the device's EIO", err)
	}
	if n != 1<<20 {
		t.Errorf("reported %d bytes written, want 1 MiB (the writes before the failure)", n)
	}
	// 96 buffers of 64 KiB at 5 ms each would take about 0.5 s.
	if hashed := h.bytes.Load(); hashed >= int64(len(img)) {
		t.Errorf("the hasher went on to the end (%d bytes) after the device failed", hashed)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %s to stop", d)
	}
}

// When the download fails and the device fails too, the first failure in
// stream order is reported: the device's if it comes before the cut, the
// download's otherwise; the bytes before the cut are written either way.
func TestPipelineFirstErrorInStreamOrder(t *testing.T) {
	img := testImage(4 << 20)
	cut := func(at int) io.Reader {
		return io.MultiReader(bytes.NewReader(img[:at]), iotestErrReader{io.ErrUnexpectedEOF})
	}
	// Device fails at 1 MiB, stream cut at 3 MiB: the device's error.
	n, err, _ := runPipeline(t, cut(3<<20), sha256.New(), failAfter(1<<20), 4)
	if !errors.Is(err, syscall.EIO) || n != 1<<20 {
		t.Errorf("device first: n = %d, err = %v; want 1 MiB and EIO", n, err)
	}
	// Stream cut at 1 MiB + 100, device fails at 3 MiB: the download's.
	n, err, dev := runPipeline(t, cut(1<<20+100), sha256.New(), failAfter(3<<20), 4)
	if !errors.Is(err, io.ErrUnexpectedEOF) || !strings.Contains(err.Error(), "reading image") {
		t.Errorf("download first: err = %v; want the read error", err)
	}
	if n != 1<<20+100 {
		t.Errorf("download first: %d bytes written, want %d (everything before the cut)", n, 1<<20+100)
	}
	if got := readFile(t, dev.Path); !bytes.Equal(got[:n], img[:n]) {
		t.Error("the bytes before the cut are not on the device")
	}
}

// A raw image whose checksum does not match is written, fsynced and then
// refused, naming the checksum given but not the digest received, with no
// pipeline goroutine left behind.
func TestWriteRawChecksumMismatch(t *testing.T) {
	img := testImage(5<<20 + 11)
	srv := imageServer(t, map[string][]byte{"img.raw": img})
	dev := targetFile(t, 8<<20)
	wrong := sha256hex(append([]byte{1}, img...))
	res, err := Write(t.Context(), Source{URL: srv.URL + "/ok/img.raw"}, dev, Options{Checksum: wrong, BufferBytes: 1 << 20, Buffers: 3})
	if err == nil || !strings.Contains(err.Error(), "checksum mismatch") || !strings.Contains(err.Error(), "its sha256 is not the "+wrong+" given") || strings.Contains(err.Error(), sha256hex(img)) {
		t.Fatalf("err = %v, want a checksum mismatch naming the checksum given and not the digest received", err)
	}
	if res.Duration != 0 {
		t.Errorf("result = %+v: a refused image reports a duration", res)
	}
	if g := pipelineGoroutines(); g != 0 {
		t.Errorf("%d pipeline goroutines still running", g)
	}
}

// Failed writes of every kind leave no goroutine of the pipeline (or of
// the asynchronous hash of a compressed image) running.
func TestWriteLeavesNoGoroutines(t *testing.T) {
	img := testImage(4 << 20)
	gz, zs := gzipped(img), zstded(img)
	srv := imageServer(t, map[string][]byte{"img.raw": img, "img.gz": gz, "img.zst": zs})
	for _, c := range []struct {
		name, url, sum string
		open           disk.Opener
	}{
		{"ok raw", srv.URL + "/ok/img.raw", sha256hex(img), nil},
		{"ok zstd", srv.URL + "/ok/img.zst", sha256hex(zs), nil},
		{"device fails, raw", srv.URL + "/ok/img.raw", sha256hex(img), failAfter(1 << 20)},
		{"device fails, gzip", srv.URL + "/ok/img.gz", sha256hex(gz), failAfter(1 << 20)},
		{"device fails, zstd", srv.URL + "/ok/img.zst", sha256hex(zs), failAfter(1 << 20)},
		{"cut raw", srv.URL + "/cut/img.raw", sha256hex(img), nil},
		{"cut zstd", srv.URL + "/cut/img.zst", sha256hex(zs), nil},
		{"wrong checksum zstd", srv.URL + "/ok/img.zst", sha256hex(img), nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			dev := targetFile(t, 8<<20)
			_, _ = Write(t.Context(), Source{URL: c.url}, dev, Options{Checksum: c.sum, Open: c.open, BufferBytes: 256 << 10})
			if g := pipelineGoroutines(); g != 0 {
				t.Errorf("%d pipeline goroutines still running", g)
			}
		})
	}
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
