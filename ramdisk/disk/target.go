package disk

import (
	"errors"
	"fmt"
	"io"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Target is an open device or file that erasure writes to and reads back.
// *os.File satisfies it; tests substitute faulty implementations.
type Target interface {
	io.ReaderAt
	io.WriterAt
	Sync() error
	Close() error
}

// fder is implemented by targets backed by a file descriptor (*os.File);
// ioctl-based methods (BLKZEROOUT, BLKDISCARD, BLKRRPART) need it and are
// skipped for targets without one.
type fder interface {
	Fd() uintptr
}

// OpenMode says how a Target is opened.
type OpenMode struct {
	// Write opens read-write; otherwise read-only.
	Write bool
	// Direct asks for O_DIRECT, bypassing the page cache so that writes
	// and verification reads really reach the device. An Opener that
	// cannot honour it returns an error wrapping unix.EINVAL and the
	// caller retries without.
	Direct bool
}

// Opener opens a Target. The default is OpenFile.
type Opener func(path string, mode OpenMode) (Target, error)

// OpenFile is the default Opener: os.OpenFile with O_DIRECT when asked.
// Opening a file on tmpfs with O_DIRECT fails with EINVAL, which callers
// handle by retrying without it.
func OpenFile(path string, mode OpenMode) (Target, error) {
	flags := os.O_RDONLY
	if mode.Write {
		flags = os.O_RDWR
	}
	if mode.Direct {
		flags |= unix.O_DIRECT
	}
	f, err := os.OpenFile(path, flags|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// openTarget opens path, preferring O_DIRECT when direct is set, and
// reports whether O_DIRECT is in effect.
func openTarget(open Opener, path string, write, direct bool) (Target, bool, error) {
	if open == nil {
		open = OpenFile
	}
	if direct {
		t, err := open(path, OpenMode{Write: write, Direct: true})
		if err == nil {
			return t, true, nil
		}
		if !errors.Is(err, unix.EINVAL) {
			return nil, false, openError(path, write, err)
		}
	}
	t, err := open(path, OpenMode{Write: write})
	if err != nil {
		return nil, false, openError(path, write, err)
	}
	return t, false, nil
}

func openError(path string, write bool, err error) error {
	what := "reading"
	if write {
		what = "writing"
	}
	return fmt.Errorf("cannot open %s for %s: %w; check that the device exists and is not held exclusively by another process", path, what, err)
}

// directAlign is the buffer address and length alignment used for O_DIRECT
// I/O: 4096 satisfies both 512- and 4096-byte logical block sizes.
const directAlign = 4096

// alignedBuffer returns a zeroed slice of n bytes whose address is a
// multiple of directAlign, as O_DIRECT requires. Go's heap does not move
// objects, so the alignment holds for the slice's lifetime.
func alignedBuffer(n int) []byte {
	b := make([]byte, n+directAlign)
	off := int(uintptr(unsafe.Pointer(&b[0])) & (directAlign - 1))
	if off != 0 {
		off = directAlign - off
	}
	return b[off : off+n : off+n]
}

// dropCache asks the kernel to forget cached pages of t so that reads come
// from the device, not from the page cache the writes just filled.
// Best-effort: not every target has a descriptor.
func dropCache(t Target) {
	if f, ok := t.(fder); ok {
		_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	}
}
