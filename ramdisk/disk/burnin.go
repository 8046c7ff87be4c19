package disk

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"time"

	"golang.org/x/sync/errgroup"
)

// BurnInOptions tunes BurnIn. The zero value runs DefaultBurnInLoops
// full passes.
type BurnInOptions struct {
	// Open opens devices; nil means OpenFile. Tests inject faults here.
	Open Opener
	// ProcRoot is where /proc is mounted, for the mounted-device check.
	ProcRoot string
	// Runtime, if positive, bounds the burn-in: passes repeat until it
	// is over (a pass may stop part-way). Zero runs Loops full passes.
	Runtime time.Duration
	// Loops is the number of full passes when Runtime is zero; 0 means
	// DefaultBurnInLoops.
	Loops int
	// ChunkBytes is the size of one write and read (default 1 MiB).
	ChunkBytes int
	// WindowBytes is how much is written before it is read back (default
	// 64 MiB): large enough that the reads come from the device rather
	// than from a drive cache, small enough that an error shows early.
	WindowBytes uint64
	// NoDirect disables O_DIRECT.
	NoDirect bool
	// Progress, if set, is called after each window with the device and
	// the fraction done (of the runtime or of the passes); it is called
	// from several goroutines at once.
	Progress func(dev string, fraction float64)
}

// DefaultBurnInLoops is IPA's default number of fio loops.
const DefaultBurnInLoops = 4

// BurnInResult is what BurnIn measured on one device.
type BurnInResult struct {
	Device         string  `json:"device"`
	Passes         float64 `json:"passes"`
	BytesWritten   uint64  `json:"bytes_written"`
	BytesVerified  uint64  `json:"bytes_verified"`
	WriteMBps      float64 `json:"write_mb_per_s"`
	ReadMBps       float64 `json:"read_mb_per_s"`
	Direct         bool    `json:"o_direct"`
	IOErrors       int     `json:"io_errors"`
	Mismatches     int     `json:"mismatches"`
	Seconds        float64 `json:"seconds"`
	Error          string  `json:"error,omitempty"`
	SkipReason     string  `json:"skip_reason,omitempty"`
	writeDur, read time.Duration
}

// BurnIn writes a pattern over each device, reads it back and verifies
// it, all devices at once, window by window (WindowBytes written, then
// read back with the page cache bypassed), for Runtime or Loops passes.
// Every 4 KiB block carries its device offset, the pass number and a
// CRC-32C of its contents, so that a block read from the wrong place, a
// stale block and a corrupted one are all told apart from a good one. A
// device that returns an I/O error or a mismatch stops there; the others
// go on. The error names every failed device with its first fault.
// Destructive: the devices' contents are lost.
func BurnIn(ctx context.Context, devs []Device, opts BurnInOptions) ([]BurnInResult, error) {
	results := make([]BurnInResult, len(devs))
	var g errgroup.Group
	for i := range devs {
		g.Go(func() error {
			results[i] = burnInOne(ctx, devs[i], opts)
			return nil
		})
	}
	_ = g.Wait()
	var failed []string
	for _, r := range results {
		if r.Error != "" {
			failed = append(failed, r.Error)
		}
	}
	if err := ctx.Err(); err != nil {
		return results, fmt.Errorf("disk burn-in cancelled: %w", err)
	}
	if len(failed) > 0 {
		msg := failed[0]
		for _, f := range failed[1:] {
			msg += "; " + f
		}
		return results, errors.New("disk burn-in failed: " + msg)
	}
	return results, nil
}

const burnBlock = 4096

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// fillBlock writes block b of pass p: header (offset, pass), a pattern
// derived from both, and the CRC-32C of everything before it at the end.
func fillBlock(buf []byte, off uint64, pass uint32) {
	binary.LittleEndian.PutUint64(buf[0:], off)
	binary.LittleEndian.PutUint32(buf[8:], pass)
	x := off*0x9e3779b97f4a7c15 ^ uint64(pass)<<32 ^ 0xa5a5a5a5
	for i := 16; i+8 <= burnBlock-4; i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(buf[i:], x)
	}
	binary.LittleEndian.PutUint32(buf[burnBlock-4:], crc32.Checksum(buf[:burnBlock-4], castagnoli))
}

// checkBlock says what is wrong with a block read back, or "".
func checkBlock(buf []byte, off uint64, pass uint32) string {
	if crc32.Checksum(buf[:burnBlock-4], castagnoli) != binary.LittleEndian.Uint32(buf[burnBlock-4:]) {
		return "checksum mismatch (the data changed on the way or on the medium)"
	}
	if got := binary.LittleEndian.Uint64(buf[0:]); got != off {
		return fmt.Sprintf("block written for offset %d read at offset %d (misdirected write or read)", got, off)
	}
	if got := binary.LittleEndian.Uint32(buf[8:]); got != pass {
		return fmt.Sprintf("block of pass %d read in pass %d (a write was lost)", got, pass)
	}
	return ""
}

func burnInOne(ctx context.Context, dev Device, opts BurnInOptions) (res BurnInResult) {
	res.Device = dev.Path
	start := time.Now()
	// phase is the write or read time being measured, so that a burn-in
	// that fails part-way still reports the rate it reached.
	var phase *time.Duration
	var phaseStart time.Time
	begin := func(p *time.Duration) { phase, phaseStart = p, time.Now() }
	stop := func() {
		if phase != nil {
			*phase += time.Since(phaseStart)
			phase = nil
		}
	}
	defer func() {
		stop()
		res.Seconds = time.Since(start).Seconds()
		if s := res.writeDur.Seconds(); s > 0 {
			res.WriteMBps = float64(res.BytesWritten) / 1e6 / s
		}
		if s := res.read.Seconds(); s > 0 {
			res.ReadMBps = float64(res.BytesVerified) / 1e6 / s
		}
	}()
	fail := func(format string, a ...any) BurnInResult {
		res.Error = dev.Path + ": " + fmt.Sprintf(format, a...)
		return res
	}
	chunk := opts.ChunkBytes
	if chunk <= 0 {
		chunk = 1 << 20
	}
	chunk = (chunk + burnBlock - 1) / burnBlock * burnBlock
	window := opts.WindowBytes
	if window == 0 {
		window = 64 << 20
	}
	window = max(window/uint64(chunk), 1) * uint64(chunk)
	loops := opts.Loops
	if loops <= 0 {
		loops = DefaultBurnInLoops
	}
	size := dev.SizeBytes / burnBlock * burnBlock
	if size == 0 {
		return fail("size %d bytes is too small to burn in; is the medium present?", dev.SizeBytes)
	}
	if err := CheckNotInUse(dev, opts.ProcRoot); err != nil {
		return fail("%v", err)
	}
	w, direct, err := openTarget(opts.Open, dev.Path, true, !opts.NoDirect)
	if err != nil {
		return fail("%v", err)
	}
	defer w.Close()
	res.Direct = direct
	buf := alignedBuffer(chunk)
	var deadline time.Time
	if opts.Runtime > 0 {
		deadline = start.Add(opts.Runtime)
	}
	progress := func(pass int, off uint64) {
		if opts.Progress == nil {
			return
		}
		if opts.Runtime > 0 {
			opts.Progress(dev.Path, min(1, float64(time.Since(start))/float64(opts.Runtime)))
			return
		}
		opts.Progress(dev.Path, (float64(pass)+float64(off)/float64(size))/float64(loops))
	}
	timeUp := func() bool { return !deadline.IsZero() && !time.Now().Before(deadline) }
	for pass := 0; opts.Runtime > 0 || pass < loops; pass++ {
		for off := uint64(0); off < size; {
			if ctx.Err() != nil {
				return res
			}
			if timeUp() {
				res.Passes = float64(pass) + float64(off)/float64(size)
				return res
			}
			end := min(off+window, size)
			// Write the window.
			begin(&res.writeDur)
			for o := off; o < end; o += uint64(chunk) {
				n := min(uint64(chunk), end-o)
				for b := uint64(0); b < n; b += burnBlock {
					fillBlock(buf[b:b+burnBlock], o+b, uint32(pass))
				}
				if _, err := w.WriteAt(buf[:n], int64(o)); err != nil {
					res.IOErrors++
					return fail("write of %d bytes at offset %d failed: %v; the device is failing", n, o, err)
				}
				res.BytesWritten += n
			}
			if !direct {
				if err := w.Sync(); err != nil {
					res.IOErrors++
					return fail("flush after writing offsets %d-%d failed: %v; the device is failing", off, end, err)
				}
				dropCache(w)
			}
			stop()
			// Read it back and verify.
			begin(&res.read)
			for o := off; o < end; o += uint64(chunk) {
				n := min(uint64(chunk), end-o)
				got, err := w.ReadAt(buf[:n], int64(o))
				if uint64(got) < n {
					if err == nil || errors.Is(err, io.EOF) {
						err = io.ErrUnexpectedEOF
					}
					res.IOErrors++
					return fail("read of %d bytes at offset %d failed: %v; the device is failing", n, o, err)
				}
				for b := uint64(0); b < n; b += burnBlock {
					if why := checkBlock(buf[b:b+burnBlock], o+b, uint32(pass)); why != "" {
						res.Mismatches++
						return fail("data read back at offset %d differs from what was written: %s", o+b, why)
					}
				}
				res.BytesVerified += n
			}
			stop()
			off = end
			progress(pass, off)
		}
		res.Passes = float64(pass + 1)
	}
	return res
}
