package disk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"time"
	"unsafe"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"
)

// Method names an erase method. Only the method that actually ran and
// succeeded is ever reported.
type Method string

// Erase methods, in the order Erase prefers them.
const (
	MethodNVMeCryptoFormat   Method = "nvme-format-crypto-erase"
	MethodNVMeUserDataFormat Method = "nvme-format-user-data-erase"
	MethodSecureDiscard      Method = "blksecdiscard"
	MethodDiscard            Method = "blkdiscard"
	MethodZeroOut            Method = "blkzeroout"
	MethodOverwrite          Method = "overwrite-zeros"
)

// Default tuning for Erase.
const (
	// DefaultChunkBytes is the write size for overwriting: large enough
	// that per-syscall cost vanishes, small enough for timely progress and
	// cancellation.
	DefaultChunkBytes = 4 << 20
	// DefaultQueueDepth is how many overwrite writes are in flight: with
	// two, the device starts the next write while the kernel completes
	// the previous one (measured +10% over one at a time on a loop
	// device; SSDs and NVMe gain more from a queue).
	DefaultQueueDepth = 2
	// DefaultVerifySamples is how many random blocks are read back.
	DefaultVerifySamples = 64
	// verifyBlockBytes is the size of one verification sample.
	verifyBlockBytes = 4096
	// ioctlChunkBytes bounds one BLKZEROOUT/BLKDISCARD call so that
	// progress is reported and cancellation is noticed between calls.
	ioctlChunkBytes = 1 << 30
)

// Progress reports how far an erase of one device has got.
type Progress struct {
	Device string `json:"device"`
	Done   uint64 `json:"done_bytes"`
	Total  uint64 `json:"total_bytes"`
}

// HardwareEraser is a device-specific erase (NVMe format, ATA secure
// erase) that runs inside the drive's firmware. Detect must only return
// true when it has proven, by asking the device, that the method is
// supported and leaves the device reading as zeros (so that the read-back
// verification is meaningful); otherwise it returns the reason.
type HardwareEraser interface {
	Detect(ctx context.Context, dev Device) (m Method, ok bool, reason string)
	Run(ctx context.Context, dev Device, m Method) error
}

// EraseOptions tunes Erase, EraseAll and EraseMetadata. The zero value is
// the production setting.
type EraseOptions struct {
	// Open opens devices; nil means OpenFile. Tests inject faults here.
	Open Opener
	// ProcRoot is where /proc is mounted, for the mounted-device check.
	ProcRoot string
	// Hardware lists hardware erasers to try first; nil means
	// DefaultHardwareErasers(). Use an empty non-nil slice for none.
	Hardware []HardwareEraser
	// NoOffload disables the kernel offloads (discard, write-zeroes) and
	// forces the full overwrite.
	NoOffload bool
	// NoDirect disables O_DIRECT.
	NoDirect bool
	// ChunkBytes is the overwrite write size (default DefaultChunkBytes).
	ChunkBytes int
	// QueueDepth is how many overwrite writes are in flight at once with
	// O_DIRECT; 0 means DefaultQueueDepth, 1 writes one chunk at a time.
	QueueDepth int
	// VerifySamples is the number of random blocks read back besides the
	// first and last; 0 means DefaultVerifySamples, a negative value or a
	// count at least the number of blocks means read back everything.
	VerifySamples int
	// Parallelism bounds how many devices EraseAll erases at once; 0
	// means all of them.
	Parallelism int
	// ContinueIfHardwareFails makes a hardware erase that fails fall back
	// to the next method (IPA's agent_continue_if_secure_erase_failed)
	// instead of failing the erase; the failure is kept in the notes.
	ContinueIfHardwareFails bool
	// Progress, if set, is called after each chunk; EraseAll calls it
	// from several goroutines at once, so it must be safe for that.
	Progress func(Progress)
}

// EraseResult reports what Erase did to one device.
type EraseResult struct {
	Device          string        `json:"device"`
	Method          Method        `json:"method,omitempty"`
	Bytes           uint64        `json:"bytes"`
	Duration        time.Duration `json:"duration_ns"`
	VerifiedSamples int           `json:"verified_samples"`
	Skipped         bool          `json:"skipped,omitempty"`
	SkipReason      string        `json:"skip_reason,omitempty"`
	// Notes explains method choices, e.g. why a faster method was not used.
	Notes []string `json:"notes,omitempty"`
}

// EraseAll erases devs in parallel (see Erase). The first failure cancels
// the others; results are returned in the order of devs, with zero values
// for devices that did not finish, together with that first error.
func EraseAll(ctx context.Context, devs []Device, opts EraseOptions) ([]EraseResult, error) {
	results := make([]EraseResult, len(devs))
	g, gctx := errgroup.WithContext(ctx)
	if opts.Parallelism > 0 {
		g.SetLimit(opts.Parallelism)
	}
	for i := range devs {
		g.Go(func() error {
			r, err := Erase(gctx, devs[i], opts)
			results[i] = r
			return err
		})
	}
	return results, g.Wait()
}

// Erase destroys all data on dev and verifies it reads back as zeros. It
// chooses, in order: a hardware eraser whose Detect proved support; secure
// discard or discard when the device guarantees zeros after discard;
// BLKZEROOUT when the device offloads write-zeroes; otherwise a full
// overwrite with zeros. Regular files always get the overwrite. Protected
// devices (Device.Protected: read-only, virtual media, removable, the boot
// parameters medium) are skipped (Skipped set, no error). Note that
// discard and write-zeroes on SSDs deallocate blocks rather than scrub the
// flash; use NoOffload or a hardware eraser when that matters.
func Erase(ctx context.Context, dev Device, opts EraseOptions) (EraseResult, error) {
	start := time.Now()
	res := EraseResult{Device: dev.Path}
	if reason := skipReason(dev); reason != "" {
		res.Skipped, res.SkipReason = true, reason
		return res, nil
	}
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("erase of %s cancelled before it started: %w", dev.Path, err)
	}
	if dev.SizeBytes == 0 {
		return res, fmt.Errorf("cannot erase %s: its size is 0; is the medium present?", dev.Path)
	}
	if err := CheckNotInUse(dev, opts.ProcRoot); err != nil {
		return res, err
	}
	report := func(done uint64) {
		if opts.Progress != nil {
			opts.Progress(Progress{Device: dev.Path, Done: done, Total: dev.SizeBytes})
		}
	}

	method, notes, err := eraseWithBestMethod(ctx, dev, opts, report)
	res.Notes = notes
	if err != nil {
		return res, err
	}
	res.Method = method
	res.Bytes = dev.SizeBytes

	n, err := Verify(ctx, dev, opts)
	res.VerifiedSamples = n
	res.Duration = time.Since(start)
	if err != nil {
		return res, fmt.Errorf("%w (erased by %s)", err, method)
	}
	return res, nil
}

// eraseWithBestMethod runs the first method that applies and returns its
// name, with notes on the methods passed over.
func eraseWithBestMethod(ctx context.Context, dev Device, opts EraseOptions, report func(uint64)) (Method, []string, error) {
	var notes []string
	hw := opts.Hardware
	if hw == nil {
		hw = DefaultHardwareErasers()
	}
	if !dev.Regular {
		for _, h := range hw {
			m, ok, reason := h.Detect(ctx, dev)
			if !ok {
				if reason != "" {
					notes = append(notes, reason)
				}
				continue
			}
			if err := h.Run(ctx, dev, m); err != nil {
				if opts.ContinueIfHardwareFails && ctx.Err() == nil {
					notes = append(notes, fmt.Sprintf("%s failed (%v); fell back as agent_continue_if_secure_erase_failed asks", m, err))
					break
				}
				return "", notes, fmt.Errorf("erase of %s by %s failed: %w; retry, or set agent_continue_if_secure_erase_failed=true to fall back to overwriting", dev.Path, m, err)
			}
			report(dev.SizeBytes)
			return m, notes, nil
		}
	}

	if !dev.Regular && !opts.NoOffload {
		var tried []Method
		if dev.Queue.DiscardZeroesData && dev.Queue.DiscardMaxBytes > 0 {
			tried = append(tried, MethodSecureDiscard, MethodDiscard)
		}
		if dev.Queue.WriteZeroesMaxBytes > 0 {
			tried = append(tried, MethodZeroOut)
		}
		for _, m := range tried {
			done, err := ioctlRange(ctx, dev, opts.Open, m, report)
			if err == nil {
				return m, notes, nil
			}
			if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.ENOTTY) {
				return "", notes, err
			}
			if done > 0 {
				// A method that started and then refused would leave a
				// half-erased device; the overwrite below covers all.
				notes = append(notes, fmt.Sprintf("%s stopped being supported after %d bytes", m, done))
			} else {
				notes = append(notes, fmt.Sprintf("%s not supported by the device", m))
			}
		}
	}

	if err := Overwrite(ctx, dev, opts, report); err != nil {
		return "", notes, err
	}
	return MethodOverwrite, notes, nil
}

// ioctlRange runs BLKSECDISCARD, BLKDISCARD or BLKZEROOUT over the whole
// device in chunks, reporting progress and checking ctx between chunks.
// It returns how many bytes were done. An EOPNOTSUPP error means the
// method is not available and the caller should try the next one.
func ioctlRange(ctx context.Context, dev Device, open Opener, m Method, report func(uint64)) (uint64, error) {
	req := map[Method]uint{
		MethodSecureDiscard: unix.BLKSECDISCARD,
		MethodDiscard:       unix.BLKDISCARD,
		MethodZeroOut:       unix.BLKZEROOUT,
	}[m]
	t, _, err := openTarget(open, dev.Path, true, false)
	if err != nil {
		return 0, err
	}
	defer t.Close()
	f, ok := t.(fder)
	if !ok {
		return 0, fmt.Errorf("%s needs a file descriptor: %w", m, unix.ENOTTY)
	}
	// Chunks must be multiples of the logical block size.
	chunk := uint64(ioctlChunkBytes) / dev.LogicalBlockSize * dev.LogicalBlockSize
	var done uint64
	for done < dev.SizeBytes {
		if err := ctx.Err(); err != nil {
			return done, fmt.Errorf("erase of %s by %s cancelled after %d of %d bytes: %w; the device is only partly erased, run the erase again", dev.Path, m, done, dev.SizeBytes, err)
		}
		n := min(chunk, dev.SizeBytes-done)
		rng := [2]uint64{done, n}
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), uintptr(req), uintptr(unsafe.Pointer(&rng)))
		if errno != 0 {
			if errno == unix.EOPNOTSUPP || errno == unix.ENOTTY {
				return done, errno
			}
			return done, fmt.Errorf("erase of %s by %s failed at offset %d: %w; the device may be failing", dev.Path, m, done, errno)
		}
		done += n
		report(done)
	}
	if err := t.Sync(); err != nil {
		return done, fmt.Errorf("erase of %s by %s: fsync failed: %w", dev.Path, m, err)
	}
	return done, nil
}

// Overwrite writes zeros over the whole of dev with large aligned writes,
// using O_DIRECT when the target accepts it (so the page cache neither
// fills up nor hides write errors), QueueDepth writes at a time, and
// buffered writes one at a time otherwise (see Writer). It ends with
// fsync. Exported so the agent can force it and for benchmarks.
func Overwrite(ctx context.Context, dev Device, opts EraseOptions, report func(uint64)) error {
	if report == nil {
		report = func(uint64) {}
	}
	chunk := opts.ChunkBytes
	if chunk <= 0 {
		chunk = DefaultChunkBytes
	}
	chunk = (chunk + directAlign - 1) &^ (directAlign - 1)
	depth := opts.QueueDepth
	if depth <= 0 {
		depth = DefaultQueueDepth
	}
	w, err := NewWriter(opts.Open, dev.Path, !opts.NoDirect)
	if err != nil {
		return err
	}
	defer w.Close()
	size := dev.SizeBytes
	buf := alignedBuffer(chunk)
	cancelled := func(done uint64, err error) error {
		return fmt.Errorf("erase of %s cancelled after %d of %d bytes: %w; the device is only partly erased, run the erase again", dev.Path, done, size, err)
	}
	var off uint64
	for off < size {
		if err := ctx.Err(); err != nil {
			return cancelled(off, err)
		}
		n := min(uint64(chunk), size-off)
		if err := w.WriteAt(buf[:n], off); err != nil {
			return fmt.Errorf("erase by overwrite: %w", err)
		}
		off += n
		report(off)
		// The first write settled whether O_DIRECT works; the whole
		// chunks after it can be written several at a time.
		if w.Direct() && depth > 1 && off < size {
			end := off + (size-off)/uint64(chunk)*uint64(chunk)
			done, err := w.writeParallel(ctx, buf, off, end, depth, func(done uint64) { report(off + done) })
			if err != nil {
				if ctx.Err() != nil {
					return cancelled(off+done, ctx.Err())
				}
				return fmt.Errorf("erase by overwrite: %w", err)
			}
			off = end
		}
	}
	if err := w.Sync(); err != nil {
		return fmt.Errorf("erase of %s: %w; the zeros may not be on the device, retry", dev.Path, err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("erase of %s: close failed: %w", dev.Path, err)
	}
	return nil
}

// Verify reads back the first and last block of dev and VerifySamples
// random 4 KiB-aligned blocks (all blocks when VerifySamples is negative or
// covers them) and fails, naming the device and offset, at the first
// non-zero byte. It reads with O_DIRECT when possible, and otherwise drops
// the page cache first, so it sees the device rather than cached zeros.
// It returns the number of blocks read.
func Verify(ctx context.Context, dev Device, opts EraseOptions) (int, error) {
	t, direct, err := openTarget(opts.Open, dev.Path, false, !opts.NoDirect)
	if err != nil {
		return 0, fmt.Errorf("cannot verify erase: %w", err)
	}
	defer t.Close()
	if !direct {
		dropCache(t)
	}
	size := dev.SizeBytes
	blocks := (size + verifyBlockBytes - 1) / verifyBlockBytes
	samples := opts.VerifySamples
	if samples == 0 {
		samples = DefaultVerifySamples
	}
	var offsets []uint64
	if samples < 0 || uint64(samples)+2 >= blocks {
		for b := uint64(0); b < blocks; b++ {
			offsets = append(offsets, b*verifyBlockBytes)
		}
	} else {
		offsets = append(offsets, 0, (blocks-1)*verifyBlockBytes)
		for range samples {
			offsets = append(offsets, rand.Uint64N(blocks)*verifyBlockBytes)
		}
	}
	buf := alignedBuffer(verifyBlockBytes)
	for i, off := range offsets {
		if err := ctx.Err(); err != nil {
			return i, fmt.Errorf("verification of %s cancelled after %d blocks: %w", dev.Path, i, err)
		}
		want := min(uint64(verifyBlockBytes), size-off)
		n, err := t.ReadAt(buf[:verifyBlockBytes], int64(off))
		if uint64(n) < want {
			if err == nil || errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return i, fmt.Errorf("verification of %s: read at offset %d returned %d of %d bytes: %w; the device may be failing or smaller than reported", dev.Path, off, n, want, err)
		}
		for j, b := range buf[:want] {
			if b != 0 {
				return i + 1, fmt.Errorf("verification of %s failed: byte at offset %d is 0x%02x, not zero; the device is NOT erased, do not reuse it before a successful erase", dev.Path, off+uint64(j), b)
			}
		}
	}
	return len(offsets), nil
}
