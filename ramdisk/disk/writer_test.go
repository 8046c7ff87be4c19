package disk

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func randomBytes(n int, seed uint64) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, seed+1))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// writeAll writes data with w in pieces of piece bytes, each from an
// aligned buffer, and returns the file's content.
func writeAll(t *testing.T, w *Writer, path string, data []byte, piece int) []byte {
	t.Helper()
	buf := AlignedBuffer(piece)
	for off := 0; off < len(data); off += piece {
		n := copy(buf, data[off:])
		if err := w.WriteAt(buf[:n], uint64(off)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestWriter(t *testing.T) {
	for _, c := range []struct {
		name   string
		size   int
		piece  int
		direct bool
	}{
		{"aligned, direct", 1 << 20, 64 << 10, true},
		{"unaligned tail, direct", 1<<20 + 777, 64 << 10, true},
		{"smaller than a block", 100, 64 << 10, true},
		{"pieces not a multiple of the block size", 300<<10 + 5, 10000, true},
		{"buffered", 1<<20 + 777, 64 << 10, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := junkFile(t, c.size)
			data := randomBytes(c.size, 7)
			w, err := NewWriter(nil, p, c.direct)
			if err != nil {
				t.Fatal(err)
			}
			if !c.direct && w.Direct() {
				t.Fatal("Direct() with direct=false")
			}
			t.Logf("O_DIRECT in effect: %v", w.Direct())
			if got := writeAll(t, w, p, data, c.piece); !bytes.Equal(got, data) {
				t.Fatal("file content differs from what was written")
			}
		})
	}
}

// TestWriterUnalignedBuffer: a buffer not from AlignedBuffer is written
// correctly (buffered) instead of failing with EINVAL.
func TestWriterUnalignedBuffer(t *testing.T) {
	p := junkFile(t, 64<<10)
	data := randomBytes(64<<10, 9)
	w, err := NewWriter(nil, p, true)
	if err != nil {
		t.Fatal(err)
	}
	b := AlignedBuffer(len(data) + 1)[1:]
	copy(b, data)
	if err := w.WriteAt(b, 0); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if got, _ := os.ReadFile(p); !bytes.Equal(got, data) {
		t.Fatal("content differs")
	}
}

// einvalOnce refuses its first direct write with EINVAL, as filesystems
// that accept O_DIRECT at open and refuse it at the first write do.
type einvalTarget struct {
	Target
	refused *bool
}

func (e einvalTarget) WriteAt(p []byte, off int64) (int, error) {
	if !*e.refused {
		*e.refused = true
		return 0, unix.EINVAL
	}
	return e.Target.WriteAt(p, off)
}

func TestWriterFallsBackWhenTheFirstDirectWriteIsRefused(t *testing.T) {
	p := junkFile(t, 256<<10)
	data := randomBytes(256<<10, 11)
	refused := false
	var opens []bool
	open := func(path string, mode OpenMode) (Target, error) {
		opens = append(opens, mode.Direct)
		tg, err := OpenFile(path, mode)
		if err != nil || !mode.Direct {
			return tg, err
		}
		return einvalTarget{Target: tg, refused: &refused}, nil
	}
	w, err := NewWriter(open, p, true)
	if err != nil {
		t.Fatal(err)
	}
	if got := writeAll(t, w, p, data, 64<<10); !bytes.Equal(got, data) {
		t.Fatal("content differs after the fallback")
	}
	if !refused || w.Direct() || len(opens) != 2 || !opens[0] || opens[1] {
		t.Fatalf("refused=%v direct=%v opens=%v: want a direct open, a refused write, then a buffered open", refused, w.Direct(), opens)
	}
}

func TestWriterOpenFailure(t *testing.T) {
	_, err := NewWriter(nil, filepath.Join(t.TempDir(), "missing", "disk"), true)
	if err == nil || !strings.Contains(err.Error(), "cannot open") {
		t.Fatalf("err = %v, want cannot open", err)
	}
}

// WriteParallelAt: refused before the first direct write settles the
// handle and for unaligned pieces; then writes from several goroutines at
// once land at their offsets.
func TestWriterParallel(t *testing.T) {
	const piece = 64 << 10
	for _, direct := range []bool{true, false} {
		p := junkFile(t, 16*piece)
		data := randomBytes(16*piece, 13)
		w, err := NewWriter(nil, p, direct)
		if err != nil {
			t.Fatal(err)
		}
		bufs := make([][]byte, 16)
		for i := range bufs {
			bufs[i] = AlignedBuffer(piece)
			copy(bufs[i], data[i*piece:])
		}
		if w.Direct() {
			if w.CanWriteParallel() {
				t.Fatal("CanWriteParallel before any direct write")
			}
			if err := w.WriteParallelAt(bufs[1], piece); err == nil {
				t.Fatal("WriteParallelAt before the first direct write succeeded")
			}
		}
		if err := w.WriteAt(bufs[0], 0); err != nil {
			t.Fatal(err)
		}
		if !w.CanWriteParallel() {
			t.Fatalf("CanWriteParallel false after a write (direct %v)", w.Direct())
		}
		if w.Direct() {
			if err := w.WriteParallelAt(bufs[1][:piece-1], piece); err == nil || !strings.Contains(err.Error(), "not aligned") {
				t.Fatalf("unaligned length: err = %v", err)
			}
		}
		errs := make(chan error, 15)
		for i := 1; i < 16; i++ {
			go func() { errs <- w.WriteParallelAt(bufs[i], uint64(i*piece)) }()
		}
		for range 15 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Sync(); err != nil {
			t.Fatal(err)
		}
		w.Close()
		if got, _ := os.ReadFile(p); !bytes.Equal(got, data) {
			t.Fatalf("content differs (direct %v)", w.Direct())
		}
	}
}
