package disk

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// DirectAlign is the alignment of buffer addresses, lengths and offsets
// that O_DIRECT writes through a Writer need (4096 satisfies 512- and
// 4096-byte logical blocks).
const DirectAlign = directAlign

// AlignedBuffer returns a zeroed n-byte slice whose address is a multiple
// of DirectAlign, for Writer.WriteAt.
func AlignedBuffer(n int) []byte { return alignedBuffer(n) }

// Writer writes a device (or an image file) with O_DIRECT when the target
// accepts it, so that large sequential writes skip the page cache: no
// copy into it, no dirty-page throttling, write errors surface at the
// write. It falls back to buffered writes where O_DIRECT cannot be used:
// a target that refuses it (tmpfs at open, some filesystems at the first
// write), a buffer or offset that is not aligned, and the unaligned end
// of a write (the last piece of an image or of a file whose size is not a
// multiple of DirectAlign), which goes through a second, buffered handle.
// Sync flushes both. A Writer is not safe for concurrent use.
type Writer struct {
	open     Opener
	path     string
	t        Target // O_DIRECT when direct, else buffered
	buffered Target // the buffered handle for unaligned pieces, opened on demand
	direct   bool
	wrote    bool // a direct write has succeeded
	closed   bool
}

// NewWriter opens path for writing, with O_DIRECT when direct is set and
// the target accepts it. open nil means OpenFile.
func NewWriter(open Opener, path string, direct bool) (*Writer, error) {
	if open == nil {
		open = OpenFile
	}
	t, d, err := openTarget(open, path, true, direct)
	if err != nil {
		return nil, err
	}
	return &Writer{open: open, path: path, t: t, direct: d}, nil
}

// Direct reports whether writes currently use O_DIRECT.
func (w *Writer) Direct() bool { return w.direct }

// WriteAt writes all of p at off or returns an error naming the device
// and offset; a short write is an error.
func (w *Writer) WriteAt(p []byte, off uint64) error {
	if len(p) == 0 {
		return nil
	}
	if !w.direct {
		return writeFull(w.t, p, off, w.path)
	}
	if off%directAlign != 0 || uintptr(unsafe.Pointer(&p[0]))%directAlign != 0 {
		return w.writeBuffered(p, off)
	}
	head := len(p) &^ (directAlign - 1)
	if head > 0 {
		err := writeFull(w.t, p[:head], off, w.path)
		if err != nil && !w.wrote && errors.Is(err, unix.EINVAL) {
			// Accepted O_DIRECT at open, refused it at the first
			// write: carry on buffered.
			bt, _, oerr := openTarget(w.open, w.path, true, false)
			if oerr != nil {
				return oerr
			}
			w.t.Close()
			w.t, w.direct = bt, false
			return writeFull(w.t, p, off, w.path)
		}
		if err != nil {
			return err
		}
		w.wrote = true
	}
	if head < len(p) {
		return w.writeBuffered(p[head:], off+uint64(head))
	}
	return nil
}

// CanWriteParallel reports whether WriteParallelAt may be used: the
// handle is settled, that is buffered from the start or O_DIRECT with one
// direct write done, so that no fallback will change it any more.
func (w *Writer) CanWriteParallel() bool { return !w.direct || w.wrote }

// WriteParallelAt writes all of p at off through the main handle, with no
// fallback: with O_DIRECT, p's address and length and off must be
// multiples of DirectAlign, and CanWriteParallel must be true, or it fails
// without writing. Unlike WriteAt, several WriteParallelAt calls may run
// at once (a device with several writes in flight stays busy); none may
// overlap a WriteAt, Sync or Close. A short write is an error, as for
// WriteAt.
func (w *Writer) WriteParallelAt(p []byte, off uint64) error {
	if !w.CanWriteParallel() {
		return fmt.Errorf("parallel write to %s before an O_DIRECT write succeeded", w.path)
	}
	if len(p) == 0 {
		return nil
	}
	if w.direct && (off%directAlign != 0 || len(p)%directAlign != 0 || uintptr(unsafe.Pointer(&p[0]))%directAlign != 0) {
		return fmt.Errorf("parallel write to %s at offset %d of %d bytes is not aligned to %d bytes", w.path, off, len(p), directAlign)
	}
	return writeFull(w.t, p, off, w.path)
}

func (w *Writer) writeBuffered(p []byte, off uint64) error {
	if w.buffered == nil {
		t, _, err := openTarget(w.open, w.path, true, false)
		if err != nil {
			return err
		}
		w.buffered = t
	}
	return writeFull(w.buffered, p, off, w.path)
}

// Sync makes everything written durable: fsync of the buffered handle
// (if used) and of the main one.
func (w *Writer) Sync() error {
	if w.buffered != nil {
		if err := w.buffered.Sync(); err != nil {
			return fmt.Errorf("fsync of %s failed: %w", w.path, err)
		}
	}
	if err := w.t.Sync(); err != nil {
		return fmt.Errorf("fsync of %s failed: %w", w.path, err)
	}
	return nil
}

// Close closes both handles and returns the first error. Closing again
// does nothing.
func (w *Writer) Close() error {
	if w.closed {
		return nil
	}
	w.closed = true
	var err error
	if w.buffered != nil {
		err = w.buffered.Close()
		w.buffered = nil
	}
	if cerr := w.t.Close(); err == nil {
		err = cerr
	}
	return err
}

// writeParallel writes p, a whole number of DirectAlign blocks from
// AlignedBuffer, at every offset from start to end (a multiple of len(p)
// apart) with depth writes in flight, through the O_DIRECT handle. Only
// for a Writer whose first direct write succeeded: nothing here falls
// back. report gets the bytes done so far, serially and increasing. It
// returns the bytes done and the first error; ctx stops it between
// writes.
func (w *Writer) writeParallel(ctx context.Context, p []byte, start, end uint64, depth int, report func(uint64)) (uint64, error) {
	var (
		mu    sync.Mutex
		next  = start
		done  uint64
		first error
		wg    sync.WaitGroup
	)
	for range depth {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				if first == nil {
					first = ctx.Err()
				}
				if first != nil || next >= end {
					mu.Unlock()
					return
				}
				off := next
				next += uint64(len(p))
				mu.Unlock()
				err := writeFull(w.t, p, off, w.path)
				mu.Lock()
				if err != nil {
					if first == nil {
						first = err
					}
				} else {
					done += uint64(len(p))
					report(done)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return done, first
}
