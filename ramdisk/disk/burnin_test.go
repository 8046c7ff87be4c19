package disk

import (
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
)

// readHook wraps a Target and rewrites or fails reads.
type readHook struct {
	Target
	fn func(p []byte, off int64) error
}

func (r readHook) ReadAt(p []byte, off int64) (int, error) {
	n, err := r.Target.ReadAt(p, off)
	if err != nil {
		return n, err
	}
	if err := r.fn(p[:n], off); err != nil {
		return 0, err
	}
	return n, nil
}

func hookedOpener(path string, fn func(p []byte, off int64) error) Opener {
	return func(p string, mode OpenMode) (Target, error) {
		t, err := OpenFile(p, mode)
		if err != nil || p != path {
			return t, err
		}
		return readHook{t, fn}, nil
	}
}

func TestBurnInWritesReadsAndVerifies(t *testing.T) {
	a := fileDevice(t, junkFile(t, 3<<20))
	var seen []float64
	res, err := BurnIn(t.Context(), []Device{a}, BurnInOptions{Loops: 2, ChunkBytes: 256 << 10, WindowBytes: 1 << 20,
		Progress: func(_ string, f float64) { seen = append(seen, f) }})
	if err != nil {
		t.Fatal(err)
	}
	r := res[0]
	if r.Passes != 2 || r.BytesWritten != 6<<20 || r.BytesVerified != 6<<20 || r.IOErrors+r.Mismatches != 0 || r.WriteMBps <= 0 || r.ReadMBps <= 0 {
		t.Fatalf("result %+v; want 2 passes of 3 MiB written and verified with rates", r)
	}
	if len(seen) == 0 || seen[len(seen)-1] != 1 {
		t.Fatalf("progress %v, want it to end at 1", seen)
	}
	// The device holds the last pass's blocks, each in its place.
	b, _ := os.ReadFile(a.Path)
	for _, off := range []int{0, 1 << 20, 3<<20 - burnBlock} {
		if why := checkBlock(b[off:off+burnBlock], uint64(off), 1); why != "" {
			t.Fatalf("block at %d: %s", off, why)
		}
	}
	if why := checkBlock(b[:burnBlock], 0, 0); why == "" {
		t.Fatal("a block of pass 1 passed as one of pass 0")
	}
}

// A device that returns an I/O error fails the burn-in naming it and the
// offset; the other device finishes its passes.
func TestBurnInFailsOnIOError(t *testing.T) {
	good, bad := fileDevice(t, junkFile(t, 2<<20)), fileDevice(t, junkFile(t, 2<<20))
	open := hookedOpener(bad.Path, func(p []byte, off int64) error {
		if off <= 1<<20+8192 && off+int64(len(p)) > 1<<20+8192 {
			return syscall.EIO
		}
		return nil
	})
	res, err := BurnIn(t.Context(), []Device{good, bad}, BurnInOptions{Open: open, Loops: 1, ChunkBytes: 64 << 10, WindowBytes: 256 << 10})
	if err == nil || !strings.Contains(err.Error(), bad.Path+": read of 65536 bytes at offset 1048576 failed: input/output error") {
		t.Fatalf("err = %v; want the bad device and offset named", err)
	}
	if strings.Contains(err.Error(), good.Path+":") {
		t.Fatalf("err names the good device: %v", err)
	}
	if res[0].Error != "" || res[0].Passes != 1 || res[1].IOErrors != 1 {
		t.Fatalf("results %+v", res)
	}
}

// Data that comes back changed is a mismatch, not an I/O error.
func TestBurnInDetectsCorruption(t *testing.T) {
	d := fileDevice(t, junkFile(t, 1<<20))
	open := hookedOpener(d.Path, func(p []byte, off int64) error {
		if off == 512<<10 {
			p[100] ^= 0x10
		}
		return nil
	})
	res, err := BurnIn(t.Context(), []Device{d}, BurnInOptions{Open: open, Loops: 1, ChunkBytes: 64 << 10})
	if err == nil || !strings.Contains(err.Error(), "offset 524288 differs from what was written: checksum mismatch") || res[0].Mismatches != 1 {
		t.Fatalf("err = %v, result %+v", err, res[0])
	}
}

func TestBurnInCancelled(t *testing.T) {
	d := fileDevice(t, junkFile(t, 1<<20))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := BurnIn(ctx, []Device{d}, BurnInOptions{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
}
