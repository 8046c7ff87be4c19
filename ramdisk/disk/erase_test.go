package disk

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// junkFile creates a file of size bytes filled with non-zero data.
func junkFile(t testing.TB, size int) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "disk.img")
	b := make([]byte, size)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range b {
		b[i] = byte(r.IntN(255) + 1)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func fileDevice(t testing.TB, path string) Device {
	t.Helper()
	d, err := FromPath(path, "")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func assertAllZero(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if i := bytes.IndexFunc(b, func(r rune) bool { return r != 0 }); i >= 0 {
		t.Fatalf("%s: non-zero byte near offset %d after erase", path, i)
	}
}

// faultyTarget simulates a misbehaving device.
type faultyTarget struct {
	Target
	plant    int64 // offset of a byte the device "forgets" to zero; -1 for none
	shortBy  int   // bytes to under-report on every write
	writeErr error // error to return from every write
}

func (f *faultyTarget) WriteAt(p []byte, off int64) (int, error) {
	if f.writeErr != nil {
		return 0, f.writeErr
	}
	n, err := f.Target.WriteAt(p, off)
	if f.plant >= off && f.plant < off+int64(n) {
		if _, err := f.Target.WriteAt([]byte{0x41}, f.plant); err != nil {
			return 0, err
		}
	}
	if f.shortBy > 0 && n > f.shortBy {
		return n - f.shortBy, nil // violates io.WriterAt, as broken drivers do
	}
	return n, err
}

func faultyOpener(tmpl faultyTarget) Opener {
	return func(path string, mode OpenMode) (Target, error) {
		// Buffered on purpose: the planted 1-byte write would be refused
		// under O_DIRECT.
		t, err := OpenFile(path, OpenMode{Write: mode.Write})
		if err != nil {
			return nil, err
		}
		ft := tmpl
		ft.Target = t
		return &ft, nil
	}
}

func TestEraseOverwriteFile(t *testing.T) {
	cases := []struct {
		name string
		size int
		opts EraseOptions
	}{
		{"aligned, O_DIRECT when possible", 3 << 20, EraseOptions{}},
		{"unaligned tail", 3<<20 + 123, EraseOptions{}},
		{"buffered, small chunks", 1<<20 + 4096, EraseOptions{NoDirect: true, ChunkBytes: 64 << 10}},
		{"smaller than one block", 100, EraseOptions{}},
		{"full verification", 256 << 10, EraseOptions{VerifySamples: -1}},
		{"four writes in flight, small chunks, unaligned tail", 2<<20 + 3*4096 + 100, EraseOptions{ChunkBytes: 64 << 10, QueueDepth: 4}},
		{"one write at a time", 2<<20 + 4096, EraseOptions{ChunkBytes: 256 << 10, QueueDepth: 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := junkFile(t, c.size)
			var mu sync.Mutex
			var last Progress
			c.opts.Progress = func(p Progress) { mu.Lock(); last = p; mu.Unlock() }
			res, err := Erase(t.Context(), fileDevice(t, p), c.opts)
			if err != nil {
				t.Fatal(err)
			}
			assertAllZero(t, p)
			if res.Method != MethodOverwrite {
				t.Errorf("method = %s, want %s (files cannot offload)", res.Method, MethodOverwrite)
			}
			if res.Bytes != uint64(c.size) || res.VerifiedSamples == 0 || res.Duration <= 0 {
				t.Errorf("result = %+v", res)
			}
			if last.Done != uint64(c.size) || last.Total != uint64(c.size) {
				t.Errorf("last progress = %+v, want done = total = %d", last, c.size)
			}
		})
	}
}

func TestEraseFailures(t *testing.T) {
	const size = 2<<20 + 8192
	cases := []struct {
		name    string
		opts    EraseOptions
		path    string // default: a junk file
		ctx     func() context.Context
		wantErr string
	}{
		{
			name:    "verification finds byte the device kept (last block, always sampled)",
			opts:    EraseOptions{Open: faultyOpener(faultyTarget{plant: size - 10})},
			wantErr: "byte at offset 2105334 is 0x41, not zero",
		},
		{
			name:    "verification finds byte in the middle (full read-back)",
			opts:    EraseOptions{Open: faultyOpener(faultyTarget{plant: 1<<20 + 77}), VerifySamples: -1},
			wantErr: "byte at offset 1048653 is 0x41",
		},
		{
			name:    "short write",
			opts:    EraseOptions{Open: faultyOpener(faultyTarget{plant: -1, shortBy: 1})},
			wantErr: "short write",
		},
		{
			name:    "write error",
			opts:    EraseOptions{Open: faultyOpener(faultyTarget{plant: -1, writeErr: syscall.EIO})},
			wantErr: "input/output error",
		},
		{
			name:    "unopenable device path",
			path:    "/nonexistent/disk",
			wantErr: "cannot open /nonexistent/disk",
		},
		{
			name: "context cancelled before start",
			ctx: func() context.Context {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				return ctx
			},
			wantErr: "cancelled",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dev := Device{Name: "disk", Path: c.path, SizeBytes: size, LogicalBlockSize: 512, Regular: true}
			if c.path == "" {
				dev = fileDevice(t, junkFile(t, size))
			}
			ctx := t.Context()
			if c.ctx != nil {
				ctx = c.ctx()
			}
			_, err := Erase(ctx, dev, c.opts)
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("err = %v, want containing %q", err, c.wantErr)
			}
			if !strings.Contains(err.Error(), dev.Path) {
				t.Errorf("error %q does not name the device %s", err, dev.Path)
			}
		})
	}
}

// readFaultTarget fails every read, as a device that can no longer be
// read does.
type readFaultTarget struct{ Target }

func (readFaultTarget) ReadAt([]byte, int64) (int, error) { return 0, syscall.EIO }

// TestEraseVerificationFailures: the overwrite succeeds but the device
// cannot be read back (read errors, or it cannot even be opened for
// reading). The erase must fail naming the device, never pass as verified.
func TestEraseVerificationFailures(t *testing.T) {
	cases := []struct {
		name    string
		open    Opener
		wantErr string
	}{
		{
			name: "read error during verification",
			open: func(path string, mode OpenMode) (Target, error) {
				tg, err := OpenFile(path, mode)
				if err != nil || mode.Write {
					return tg, err
				}
				return readFaultTarget{tg}, nil
			},
			wantErr: "input/output error",
		},
		{
			name: "cannot open for reading",
			open: func(path string, mode OpenMode) (Target, error) {
				if !mode.Write {
					return nil, syscall.EACCES
				}
				return OpenFile(path, mode)
			},
			wantErr: "cannot verify erase",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dev := fileDevice(t, junkFile(t, 1<<20))
			res, err := Erase(t.Context(), dev, EraseOptions{Open: c.open})
			if err == nil || !strings.Contains(err.Error(), c.wantErr) || !strings.Contains(err.Error(), dev.Path) {
				t.Fatalf("err = %v, want one naming %s and containing %q", err, dev.Path, c.wantErr)
			}
			if res.VerifiedSamples != 0 {
				t.Errorf("result = %+v: no block was read back, yet samples are counted as verified", res)
			}
			// EraseAll, which the erase_devices step calls, fails too.
			if _, err := EraseAll(t.Context(), []Device{dev}, EraseOptions{Open: c.open}); err == nil {
				t.Fatal("EraseAll succeeded although the device cannot be read back")
			}
		})
	}
}

// offsetFaultTarget fails writes at or after failAt (and may shorten
// them), keeping O_DIRECT: the failure happens among the writes in flight
// together, after the first one succeeded.
type offsetFaultTarget struct {
	Target
	failAt int64
	short  bool
}

func (f offsetFaultTarget) WriteAt(p []byte, off int64) (int, error) {
	if off >= f.failAt {
		if f.short {
			n, err := f.Target.WriteAt(p[:len(p)/2], off)
			return n, err
		}
		return 0, syscall.EIO
	}
	return f.Target.WriteAt(p, off)
}

func TestEraseFailsAmongParallelWrites(t *testing.T) {
	for _, short := range []bool{false, true} {
		dev := fileDevice(t, junkFile(t, 4<<20))
		open := func(path string, mode OpenMode) (Target, error) {
			tg, err := OpenFile(path, mode)
			if err != nil {
				return nil, err
			}
			return offsetFaultTarget{Target: tg, failAt: 2 << 20, short: short}, nil
		}
		want := "input/output error"
		if short {
			want = "short write"
		}
		_, err := Erase(t.Context(), dev, EraseOptions{Open: open, ChunkBytes: 256 << 10, QueueDepth: 3})
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), dev.Path) {
			t.Fatalf("short=%v: err = %v, want one naming %s and containing %q", short, err, dev.Path, want)
		}
	}
}

func TestEraseCancelledMidway(t *testing.T) {
	p := junkFile(t, 8<<20)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	opts := EraseOptions{ChunkBytes: 1 << 20, Progress: func(p Progress) {
		if p.Done >= 2<<20 {
			cancel()
		}
	}}
	_, err := Erase(ctx, fileDevice(t, p), opts)
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "partly erased") {
		t.Fatalf("err = %v, want context.Canceled saying the device is partly erased", err)
	}
}

func TestEraseSkips(t *testing.T) {
	for _, d := range []Device{
		{Name: "sr0", Path: "/dev/sr0", SizeBytes: 1 << 20, VirtualMedia: true},
		{Name: "sdz", Path: "/dev/sdz", SizeBytes: 1 << 20, ReadOnly: true},
	} {
		res, err := Erase(t.Context(), d, EraseOptions{})
		if err != nil || !res.Skipped || res.SkipReason == "" || res.Method != "" {
			t.Errorf("Erase(%s) = %+v, %v; want skipped with a reason and no method", d.Name, res, err)
		}
		mres, err := EraseMetadata(t.Context(), d, EraseOptions{})
		if err != nil || len(mres) != 1 || !mres[0].Skipped {
			t.Errorf("EraseMetadata(%s) = %+v, %v; want skipped", d.Name, mres, err)
		}
	}
}

func TestEraseAll(t *testing.T) {
	var devs []Device
	for range 3 {
		devs = append(devs, fileDevice(t, junkFile(t, 1<<20)))
	}
	devs = append(devs, Device{Name: "sr0", Path: "/dev/sr0", VirtualMedia: true})
	res, err := EraseAll(t.Context(), devs, EraseOptions{Parallelism: 2})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if i < 3 {
			assertAllZero(t, devs[i].Path)
			if r.Method != MethodOverwrite || r.Device != devs[i].Path {
				t.Errorf("result %d = %+v", i, r)
			}
		} else if !r.Skipped {
			t.Errorf("virtual media not skipped: %+v", r)
		}
	}
	// One failing device fails the batch with an error naming it.
	devs[1] = Device{Name: "gone", Path: "/nonexistent/gone", SizeBytes: 4096, Regular: true}
	if _, err := EraseAll(t.Context(), devs, EraseOptions{}); err == nil || !strings.Contains(err.Error(), "/nonexistent/gone") {
		t.Fatalf("EraseAll with a missing device: err = %v", err)
	}
}

func TestEraseMetadataFile(t *testing.T) {
	cases := []struct {
		name    string
		size    int
		regions []Region
	}{
		{"large", 8 << 20, []Region{{0, 1 << 20}, {7 << 20, 1 << 20}}},
		// The tail starts on a 4 KiB boundary, so it is a little longer.
		{"unaligned", 5<<20 + 1000, []Region{{0, 1 << 20}, {4 << 20, 1<<20 + 1000}}},
		{"smaller than two regions", 1<<20 + 5, []Region{{0, 1<<20 + 5}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := junkFile(t, c.size)
			orig, _ := os.ReadFile(p)
			res, err := EraseMetadata(t.Context(), fileDevice(t, p), EraseOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(res) != 1 || res[0].Reread != "not a block device" {
				t.Fatalf("result = %+v", res)
			}
			if got := res[0].Regions; len(got) != len(c.regions) || got[0] != c.regions[0] || got[len(got)-1] != c.regions[len(c.regions)-1] {
				t.Fatalf("regions = %v, want %v", got, c.regions)
			}
			after, _ := os.ReadFile(p)
			zeroed := make([]bool, len(after))
			for _, r := range c.regions {
				for i := r.Offset; i < r.Offset+r.Length; i++ {
					zeroed[i] = true
				}
			}
			for i := range after {
				if zeroed[i] && after[i] != 0 {
					t.Fatalf("byte %d not zeroed", i)
				}
				if !zeroed[i] && after[i] != orig[i] {
					t.Fatalf("byte %d outside the metadata regions was changed", i)
				}
			}
		})
	}
}

func TestEraseMetadataPartitionsFirst(t *testing.T) {
	diskPath := junkFile(t, 4<<20)
	p1, p2 := junkFile(t, 3<<20), junkFile(t, 2<<20)
	dev := fileDevice(t, diskPath)
	dev.Partitions = []Partition{{Name: "p1", Path: p1, SizeBytes: 3 << 20}, {Name: "p2", Path: p2, SizeBytes: 2 << 20}}
	var order []string
	open := func(path string, mode OpenMode) (Target, error) {
		order = append(order, path)
		return OpenFile(path, mode)
	}
	res, err := EraseMetadata(t.Context(), dev, EraseOptions{Open: open})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(order, ",") != strings.Join([]string{p1, p2, diskPath}, ",") {
		t.Fatalf("open order = %v, want partitions before the disk", order)
	}
	if len(res) != 3 || res[2].Path != diskPath {
		t.Fatalf("results = %+v", res)
	}
	for _, p := range []string{p1, p2} {
		b, _ := os.ReadFile(p)
		if b[0] != 0 || b[len(b)-1] != 0 {
			t.Errorf("partition %s ends not zeroed", p)
		}
	}
	// Failures surface as errors.
	dev.Partitions[1].Path = "/nonexistent/p2"
	if _, err := EraseMetadata(t.Context(), dev, EraseOptions{}); err == nil || !strings.Contains(err.Error(), "/nonexistent/p2") {
		t.Fatalf("missing partition node: err = %v", err)
	}
	dev.Partitions = nil
	if _, err := EraseMetadata(t.Context(), dev, EraseOptions{Open: faultyOpener(faultyTarget{plant: -1, shortBy: 3})}); err == nil || !strings.Contains(err.Error(), "short write") {
		t.Fatalf("short write: err = %v", err)
	}
}

// TestLoopDevice exercises the block-device paths (sysfs attributes,
// BLKZEROOUT offload, O_DIRECT, BLKRRPART) on a real loop device.
func TestLoopDevice(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("loop devices need root")
	}
	backing := junkFile(t, 16<<20)
	out, err := exec.Command("losetup", "--find", "--show", backing).CombinedOutput()
	if err != nil {
		t.Skipf("losetup does not work in this sandbox: %v: %s", err, out)
	}
	loop := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "-d", loop).CombinedOutput(); err != nil {
			t.Errorf("losetup -d %s: %v: %s", loop, err, out)
		}
	})
	dev, err := FromPath(loop, "")
	if err != nil {
		t.Fatal(err)
	}
	if dev.Regular || !dev.Loop || dev.SizeBytes != 16<<20 || dev.DevNo == "" {
		t.Fatalf("FromPath(%s) = %+v", loop, dev)
	}

	mres, err := EraseMetadata(t.Context(), dev, EraseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r := mres[len(mres)-1]; r.Reread != "ok" && !strings.HasPrefix(r.Reread, "failed") {
		t.Errorf("reread = %q", r.Reread)
	}

	for _, opts := range []EraseOptions{{}, {NoOffload: true}} {
		res, err := Erase(t.Context(), dev, opts)
		if err != nil {
			t.Fatal(err)
		}
		want := MethodOverwrite
		if !opts.NoOffload && dev.Queue.WriteZeroesMaxBytes > 0 {
			want = MethodZeroOut
		}
		t.Logf("%s: method %s, %d bytes, %d samples verified, notes %v", loop, res.Method, res.Bytes, res.VerifiedSamples, res.Notes)
		if res.Method != want {
			t.Errorf("NoOffload=%v: method = %s, want %s (notes %v)", opts.NoOffload, res.Method, want, res.Notes)
		}
		assertAllZero(t, backing)
		// Refill so the next method has something to erase.
		if err := os.WriteFile(backing, bytes.Repeat([]byte{0xEE}, 16<<20), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// BenchmarkOverwrite measures the zero-overwrite path (O_DIRECT when the
// temp filesystem allows it) on a 64 MiB temp file.
func BenchmarkOverwrite(b *testing.B) {
	const size = 64 << 20
	p := filepath.Join(b.TempDir(), "bench.img")
	if err := os.WriteFile(p, make([]byte, size), 0o644); err != nil {
		b.Fatal(err)
	}
	dev := fileDevice(b, p)
	b.SetBytes(size)
	for b.Loop() {
		if err := Overwrite(b.Context(), dev, EraseOptions{}, nil); err != nil {
			b.Fatal(err)
		}
	}
}
