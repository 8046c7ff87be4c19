// Package image streams a disk image from HTTP(S) (or any reader) onto a
// block device, decompressing and checksumming on the fly, and chooses the
// root device from Ironic-style root device hints; it must never stage the
// image in a temporary file or memory, and never report success for an
// image that was truncated or whose checksum does not match.
package image

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/bmedge/bmedge/lib/fetchwords"
	"github.com/bmedge/bmedge/lib/imagechecksum"
	"github.com/bmedge/bmedge/ramdisk/disk"
)

// Defaults for Options.
const (
	DefaultBufferBytes  = 4 << 20
	DefaultBuffers      = 4
	DefaultWriteDepth   = 1
	DefaultStallTimeout = 60 * time.Second
)

// Disk formats Write takes (Ironic's disk_format names): raw, which may
// come gzip- or zstd-compressed, and qcow2.
const (
	FormatRaw   = "raw"
	FormatQcow2 = "qcow2"
)

// Compression formats Write recognises by their magic bytes.
const (
	CompressionNone = "none"
	CompressionGzip = "gzip"
	CompressionZstd = "zstd"
)

// maxZstdWindow is the largest zstd window Write accepts. A frame header
// chooses its window, and the decoder allocates it up front: the library's
// default limit (512 MiB) let a 25-byte image take 512 MiB of the
// ramdisk's RAM. 128 MiB is what the zstd command line decompresses
// without --memory, enough for images made with --long or --ultra -22.
const maxZstdWindow = 1 << 27

// Magic bytes of the compressed formats Write decompresses.
var (
	gzipMagic = []byte{0x1f, 0x8b}
	zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}
)

// Source is where the image comes from: URL, or Reader when it is set.
type Source struct {
	// URL is an http:// or https:// address of the image file.
	URL string
	// Reader supplies the image bytes directly (e.g. from a local cache);
	// it takes precedence over URL.
	Reader io.Reader
	// Size is the length of Reader's stream if known, else 0.
	Size int64
}

// String names the source for messages. The query string is elided: it
// often carries a signature (Swift temp URLs) that must not reach logs.
func (s Source) String() string {
	if s.Reader != nil {
		return "image stream"
	}
	if base, _, ok := strings.Cut(s.URL, "?"); ok {
		return base + "?…"
	}
	return s.URL
}

// Progress reports how far a Write has got.
type Progress struct {
	// Downloaded counts image-file bytes received (compressed, if it is).
	Downloaded uint64 `json:"downloaded_bytes"`
	// DownloadTotal is the image file's length if the server said, else 0.
	DownloadTotal uint64 `json:"download_total_bytes"`
	// Written counts bytes written to the device (decompressed).
	Written uint64 `json:"written_bytes"`
}

// Options tunes Write. Checksum is required unless InsecureSkipChecksum.
type Options struct {
	// Checksum is the expected hex digest of the image file exactly as
	// downloaded, i.e. of the compressed bytes for a .gz or .zst file.
	// That is what Ironic's image_checksum / os_hash_value refer to (the
	// digest of the file in the image store). "sha256:HEX" and
	// "sha512:HEX" forms are accepted.
	Checksum string
	// ChecksumAlgo is "sha256" or "sha512"; empty means infer it from the
	// digest length (64 or 128 hex digits).
	ChecksumAlgo string
	// DiskFormat is the format the image must have (Ironic's
	// instance_info image_disk_format): "raw" (also gzip- or
	// zstd-compressed) or "qcow2"; empty means take what the magic bytes
	// say. Any other value, or an image of another format, is refused
	// before anything is written.
	DiskFormat string
	// InsecureSkipChecksum allows writing without a checksum.
	InsecureSkipChecksum bool
	// AllowMD5Checksum takes an md5 or sha1 Checksum too (the
	// coordinator's --allow-md5-checksum, Ironic's
	// [agent]allow_md5_checksum); without it they are refused.
	AllowMD5Checksum bool
	// HTTPClient fetches URLs; nil means a client with connect, TLS and
	// response-header timeouts but no overall timeout (images are large).
	HTTPClient *http.Client
	// StallTimeout aborts a download that delivers no byte for this long;
	// 0 means DefaultStallTimeout.
	StallTimeout time.Duration
	// BufferBytes is the write size; 0 means DefaultBufferBytes. It is
	// rounded up to a multiple of disk.DirectAlign.
	BufferBytes int
	// Buffers is how many buffers of BufferBytes the pipeline uses (the
	// download fills one while the checksum and the device writes work on
	// others); 0 means DefaultBuffers, fewer than 2 means 2.
	Buffers int
	// WriteDepth is how many device writes may be in flight at once (after
	// the first, which settles O_DIRECT); 0 means DefaultWriteDepth (1:
	// one buffer at a time). On the benchmark's loop device two in flight
	// cost the writer more CPU than they saved (docs/benchmarks-ramdisk.md);
	// a device that needs a queue to reach its speed may gain from more.
	WriteDepth int
	// NoDirect disables O_DIRECT on the target.
	NoDirect bool
	// Open opens the target device; nil means disk.OpenFile.
	Open disk.Opener
	// ProcRoot is where /proc is, for the mounted-device check.
	ProcRoot string
	// Progress, if set, is called after every buffer written.
	Progress func(Progress)
}

// Result reports a successful Write.
type Result struct {
	Device     string `json:"device"`
	Source     string `json:"source"`
	Written    uint64 `json:"written_bytes"`
	Downloaded uint64 `json:"downloaded_bytes"`
	// Format is the disk format written: raw or qcow2.
	Format       string        `json:"disk_format"`
	Compression  string        `json:"compression"`
	ChecksumAlgo string        `json:"checksum_algo,omitempty"`
	Checksum     string        `json:"checksum,omitempty"`
	Duration     time.Duration `json:"duration_ns"`
	// Reread is the outcome of asking the kernel to re-read the new
	// partition table: "ok", "not a block device" or "failed: …".
	Reread string `json:"reread_partitions"`
}

// Write streams the image at src onto dev. gzip and zstd images are
// detected by their magic bytes and decompressed on the fly; the checksum
// is computed over the bytes as downloaded while they stream. Nothing is
// staged on disk or in memory beyond Buffers buffers. The work runs as a
// pipeline so that the network, the checksum and the device overlap: one
// goroutine downloads (and decompresses) into a buffer, and while the
// caller's goroutine writes it with O_DIRECT (disk.Writer) another one
// hashes it (raw images; a compressed image is hashed as it downloads). After the stream ends
// the device is fsynced and only then is the digest compared; on
// mismatch the device holds the unverified image and the error says so.
// A qcow2 image (by its magic bytes) is written by writeQcow2: streamed
// once, its tables read ahead by Range requests, its unallocated parts
// zeroed (qcow2_write.go). xz, and qcow2 inside gzip or zstd, are refused
// with a message saying what to do.
func Write(ctx context.Context, src Source, dev disk.Device, opts Options) (Result, error) {
	start := time.Now()
	res := Result{Device: dev.Path, Source: src.String()}
	h, algo, want, err := checksumSetup(opts)
	if err != nil {
		return res, err
	}
	res.ChecksumAlgo = algo
	wantFormat := strings.ToLower(strings.TrimSpace(opts.DiskFormat))
	switch wantFormat {
	case "", FormatRaw, FormatQcow2:
	default:
		return res, fmt.Errorf("image_disk_format %q is not supported: the ramdisk writes raw (optionally gzip- or zstd-compressed) and qcow2 images; convert the image with 'qemu-img convert -O qcow2' or '-O raw' and set image_disk_format to match (or leave it unset)", opts.DiskFormat)
	}
	if why := dev.Protected(); why != "" {
		return res, fmt.Errorf("cannot write image to %s: the device is %s; choose another root device", dev.Path, why)
	}
	if err := disk.CheckNotInUse(dev, opts.ProcRoot); err != nil {
		return res, err
	}

	// The stall watchdog cancels the download when no byte arrives for
	// StallTimeout, which an HTTP client timeout cannot express for
	// multi-gigabyte bodies.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	body, total, err := open(ctx, src, opts)
	if err != nil {
		return res, err
	}
	defer body.Close()
	stall := opts.StallTimeout
	if stall <= 0 {
		stall = DefaultStallTimeout
	}
	timer := time.AfterFunc(stall, func() {
		cancel(fmt.Errorf("no data received for %s", stall))
	})
	defer timer.Stop()
	// The hash is set on cr (compressed images) or given to the pipeline
	// (raw images) once the format is known.
	cr := &countingReader{r: body, onRead: func() { timer.Reset(stall) }}

	br := bufio.NewReaderSize(cr, 64<<10)
	magic, err := br.Peek(4)
	if len(magic) == 0 {
		return res, fmt.Errorf("image %s is empty or unreadable: %w; check the image URL", src, readErr(ctx, err))
	}
	// A raw image is written exactly as downloaded, so the pipeline hashes
	// the buffers on a goroutine of its own. A compressed image is hashed
	// as it downloads, starting with what bufio has already read ahead
	// (all of it still buffered: nothing has been consumed yet), before a
	// decoder reads any further.
	var bufHash hash.Hash
	isQcow := bytes.HasPrefix(magic, qcowMagic)
	res.Format = FormatRaw
	if isQcow {
		res.Format = FormatQcow2
	}
	if wantFormat != "" && wantFormat != res.Format {
		return res, fmt.Errorf("image %s is %s but instance_info image_disk_format says %s; fix image_disk_format or the image_source", src, res.Format, wantFormat)
	}
	if h != nil {
		if isQcow || bytes.HasPrefix(magic, gzipMagic) || bytes.HasPrefix(magic, zstdMagic) {
			ahead, _ := br.Peek(br.Buffered())
			h.Write(ahead)
			// Hash on a goroutine of its own, so that the decoder's input
			// path only copies; Close before h.Sum.
			ah := newAsyncHash(h)
			defer ah.Close()
			cr.h, cr.hashDone = ah, ah.Close
		} else {
			bufHash = h
		}
	}
	var stream io.Reader = br
	res.Compression = CompressionNone
	switch {
	case bytes.HasPrefix(magic, gzipMagic):
		zr, err := gzip.NewReader(br)
		if err != nil {
			return res, fmt.Errorf("image %s looks gzip-compressed but its header is invalid: %w", src, readErr(ctx, err))
		}
		defer zr.Close()
		stream, res.Compression = zr, CompressionGzip
	case bytes.HasPrefix(magic, zstdMagic):
		zr, err := zstd.NewReader(br, zstd.WithDecoderMaxWindow(maxZstdWindow))
		if err != nil {
			return res, fmt.Errorf("cannot start zstd decoder for %s: %w", src, err)
		}
		defer zr.Close()
		stream, res.Compression = zr, CompressionZstd
	case isQcow:
		// Streamed by writeQcow2 below, the tables read ahead with Range
		// requests where the server answers them.
	case otherFormat(br) != "":
		return res, fmt.Errorf("image %s is %s, which the ramdisk does not write; convert it with 'qemu-img convert -O qcow2' (or -O raw)", src, otherFormat(br))
	case bytes.HasPrefix(magic, []byte{0xfd, '7', 'z', 'X'}):
		return res, fmt.Errorf("image %s is xz-compressed, which is not supported; recompress it with gzip or zstd", src)
	default:
		if total > 0 && uint64(total) > dev.SizeBytes {
			return res, fmt.Errorf("image %s (%d bytes) is larger than %s (%d bytes); choose a larger root device or a smaller image", src, total, dev.Path, dev.SizeBytes)
		}
	}

	w, err := openTarget(opts.Open, dev.Path, !opts.NoDirect)
	if err != nil {
		return res, err
	}
	var written uint64
	var werr error
	if isQcow {
		var r ranger
		if src.Reader == nil {
			client := opts.HTTPClient
			if client == nil {
				client = defaultClient()
				defer client.CloseIdleConnections()
			}
			r = &httpRanger{url: src.URL, client: client, onRead: func() { timer.Reset(stall) }}
		}
		written, werr = writeQcow2(ctx, br, r, w, dev, src, opts, cr, uint64(max(total, 0)))
	} else {
		written, werr = copyToDevice(ctx, cancel, stream, w, bufHash, dev, src, opts, cr, uint64(max(total, 0)))
	}
	res.Written = written
	if werr == nil && res.Compression != CompressionNone {
		// The checksum covers the whole file: read whatever follows the
		// compressed stream (padding, a second archive member the decoder
		// did not need) so the digest sees every downloaded byte.
		if _, err := io.Copy(io.Discard, br); err != nil {
			werr = fmt.Errorf("download of %s failed after the image data: %w", src, readErr(ctx, err))
		}
	}
	if werr == nil && total > 0 && cr.count() != uint64(total) {
		werr = fmt.Errorf("download of %s ended after %d of %d bytes; the connection was cut, retry", src, cr.count(), total)
	}
	if werr != nil {
		w.Close()
		return res, werr
	}
	if opts.Progress != nil {
		// Final report, now that trailing compressed bytes are counted.
		opts.Progress(Progress{Downloaded: cr.count(), DownloadTotal: uint64(max(total, 0)), Written: written})
	}
	if err := w.Sync(); err != nil {
		w.Close()
		return res, fmt.Errorf("writing the image to %s: %w; the device may be failing", dev.Path, err)
	}
	if err := w.Close(); err != nil {
		return res, fmt.Errorf("close of %s after writing the image failed: %w", dev.Path, err)
	}
	res.Downloaded = cr.count()
	if cr.hashDone != nil {
		cr.hashDone()
	}
	if h != nil {
		// The digest of what came back is not told: a digest of an
		// answer tells about its content, and an image URL may name
		// any server the node reaches (docs/security.md).
		if got := hex.EncodeToString(h.Sum(nil)); got != want {
			return res, fmt.Errorf("checksum mismatch for image %s: its %s is not the %s given; %s now holds an unverified image, do not boot it: fix the image at its origin or the checksum in instance_info and write again",
				src, algo, want, dev.Path)
		}
		res.Checksum = want
	}
	switch {
	case dev.Regular:
		res.Reread = "not a block device"
	default:
		if err := disk.RereadPartitions(dev.Path); err != nil {
			res.Reread = "failed: " + err.Error()
		} else {
			res.Reread = "ok"
		}
	}
	res.Duration = time.Since(start)
	return res, nil
}

// slot is one of the pipeline's buffers. refs counts the stages (device
// write, and hash for a raw image) still using the bytes of its current
// chunk; the last one to finish hands the buffer back to the reader.
type slot struct {
	buf  []byte
	refs atomic.Int32
}

// chunk is one buffer on its way through the pipeline: n bytes of the
// decompressed stream, then err (io.EOF after the last bytes).
type chunk struct {
	s   *slot
	n   int
	err error
}

// copyToDevice writes the decompressed stream to w in BufferBytes pieces.
// A reader goroutine fills buffers from stream and hands each one both to
// this goroutine, which writes them to the device in order, and, if
// bufHash is set, to a hasher goroutine, which hashes them in order: the
// device write and the checksum of a buffer run at the same time, so that
// the slower of the two (not their sum) sets the pace. A buffer goes back
// to the reader once both are done with it; neither changes it. Only after
// the last byte is written and hashed does copyToDevice return success;
// the digest is compared by the caller after the fsync, as before (writing
// a buffer before its hash is known changes nothing: the verdict is on the
// whole image, at the end). On any failure it cancels the download
// (cancel) and waits for both goroutines, so no buffer or reader is in use
// when it returns, and it reports the first failure: the device's, or the
// download's as the writer reaches it in stream order.
func copyToDevice(ctx context.Context, cancel context.CancelCauseFunc, stream io.Reader, w *disk.Writer, bufHash hash.Hash, dev disk.Device, src Source, opts Options, cr *countingReader, total uint64) (written uint64, err error) {
	size := opts.BufferBytes
	if size <= 0 {
		size = DefaultBufferBytes
	}
	size = (size + disk.DirectAlign - 1) &^ (disk.DirectAlign - 1)
	nbuf := opts.Buffers
	if nbuf == 0 {
		nbuf = DefaultBuffers
	}
	nbuf = max(nbuf, 2)

	// Every channel holds up to nbuf chunks, one per buffer: sends on
	// them never wait for long, only the reader's wait for a free buffer
	// paces the pipeline.
	free := make(chan *slot, nbuf)
	bufs, unmap := pipelineBuffers(nbuf, size)
	// Registered first, so it runs last: after the goroutines and the
	// writes in flight are done with the buffers.
	defer unmap()
	for _, b := range bufs {
		free <- &slot{buf: b}
	}
	release := func(s *slot) {
		if s.refs.Add(-1) == 0 {
			free <- s
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() {
		close(stop)
		if err != nil {
			// Unblock a reader waiting on the network.
			cancel(fmt.Errorf("image write stopped: %w", err))
		}
		wg.Wait()
	}()

	toWrite := make(chan chunk, nbuf)
	var toHash chan chunk
	hashed := make(chan struct{})
	if bufHash != nil {
		toHash = make(chan chunk, nbuf)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(hashed)
			// The hash is the pipeline's bound: give it an OS thread of
			// its own. Otherwise the reader's send can wake the hasher
			// onto the reader's own P (Go runs a goroutine readied by a
			// channel send next on the sender's P), so that receive and
			// hash take turns on one CPU instead of running side by
			// side. With the thread locked, 1 GiB from the page cache
			// took 0.58-0.65 s instead of 0.65-0.72 s on 2 vCPUs, and
			// over HTTP about 10 % less too (docs/benchmarks-ramdisk.md).
			// Locking asyncHash's goroutine (compressed images) measured
			// no gain.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			for c := range toHash {
				select {
				case <-stop:
					// The write failed: the digest no longer matters.
					return
				default:
				}
				bufHash.Write(c.s.buf[:c.n])
				release(c.s)
			}
		}()
	} else {
		close(hashed)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(toWrite)
		if toHash != nil {
			defer close(toHash)
		}
		for {
			var s *slot
			select {
			case s = <-free:
			case <-stop:
				return
			}
			n, rerr := fill(stream, s.buf)
			c := chunk{s: s, n: n, err: rerr}
			if toHash != nil {
				s.refs.Store(2)
				select {
				case toHash <- c:
				case <-stop:
					return
				}
			} else {
				s.refs.Store(1)
			}
			select {
			case toWrite <- c:
			case <-stop:
				return
			}
			if rerr != nil {
				return
			}
		}
	}()

	// Device writes: up to depth in flight once the Writer is settled
	// (disk.Writer.CanWriteParallel), each on a goroutine of its own, in
	// stream order; they complete (progress, buffer release, errors) in
	// that order too. next is where the next buffer goes; written counts
	// the bytes written so far, all before next.
	depth := opts.WriteDepth
	if depth <= 0 {
		depth = DefaultWriteDepth
	}
	type pendingWrite struct {
		s    *slot
		n    int
		done chan error
	}
	var inflight []pendingWrite
	defer func() {
		// A failed write returns at once: wait for the others, whose
		// buffers must not be reused or freed under them.
		for _, p := range inflight {
			<-p.done
		}
	}()
	var next uint64
	wrote := func(s *slot, n int) {
		written += uint64(n)
		if opts.Progress != nil {
			opts.Progress(Progress{Downloaded: cr.count(), DownloadTotal: total, Written: written})
		}
		release(s)
	}
	// finishOldest takes the result of the oldest write in flight.
	finishOldest := func(err error) error {
		p := inflight[0]
		inflight = inflight[1:]
		if err != nil {
			return err
		}
		wrote(p.s, p.n)
		return nil
	}
	completeOldest := func() error { return finishOldest(<-inflight[0].done) }
	drain := func() error {
		for len(inflight) > 0 {
			if err := completeOldest(); err != nil {
				return err
			}
		}
		return nil
	}
	stopped := func(cause error) error {
		return fmt.Errorf("writing %s to %s stopped after %d bytes: %w; the device holds a partial image, write again", src, dev.Path, written, readErr(ctx, cause))
	}

	for {
		if err := ctx.Err(); err != nil {
			return written, stopped(err)
		}
		// Writes are completed as they finish, not only when the next
		// buffer arrives: the reader may be waiting for their buffers.
		var oldest chan error
		if len(inflight) > 0 {
			oldest = inflight[0].done
		}
		var c chunk
		var ok bool
		select {
		case c, ok = <-toWrite:
		case err := <-oldest:
			if err := finishOldest(err); err != nil {
				return written, err
			}
			continue
		case <-ctx.Done():
		}
		if !ok {
			// Only a cancelled context ends the pipeline early.
			return written, stopped(context.Cause(ctx))
		}
		if c.n > 0 {
			b := c.s.buf[:c.n]
			if next == 0 && bytes.HasPrefix(b, []byte("QFI\xfb")) {
				return written, fmt.Errorf("image %s is a gzip- or zstd-compressed qcow2 file, which is not supported; serve the .qcow2 file itself (qemu-img convert -O qcow2 -c compresses inside it) or convert it with 'qemu-img convert -O raw' (then optionally gzip or zstd it)", src)
			}
			if next+uint64(c.n) > dev.SizeBytes {
				if err := drain(); err != nil {
					return written, err
				}
				return written, fmt.Errorf("image %s is larger than %s (%d bytes): it needs at least %d bytes; choose a larger root device or a smaller image", src, dev.Path, dev.SizeBytes, next+uint64(c.n))
			}
			if depth > 1 && w.CanWriteParallel() && next%disk.DirectAlign == 0 && c.n%disk.DirectAlign == 0 {
				if len(inflight) == depth {
					if err := completeOldest(); err != nil {
						return written, err
					}
				}
				done := make(chan error, 1)
				go func(at uint64) { done <- w.WriteParallelAt(b, at) }(next)
				inflight = append(inflight, pendingWrite{s: c.s, n: c.n, done: done})
			} else {
				// The first write (it settles O_DIRECT), an unaligned
				// tail, or a single write in flight: in order, alone.
				if err := drain(); err != nil {
					return written, err
				}
				if err := w.WriteAt(b, next); err != nil {
					return written, err
				}
				wrote(c.s, c.n)
			}
			next += uint64(c.n)
		} else {
			release(c.s)
		}
		if c.err == io.EOF {
			if err := drain(); err != nil {
				return written, err
			}
			if written == 0 {
				return 0, fmt.Errorf("image %s is empty; check the image", src)
			}
			// Success only once the hasher has taken every byte.
			select {
			case <-hashed:
			case <-ctx.Done():
				return written, stopped(context.Cause(ctx))
			}
			return written, nil
		}
		if c.err != nil {
			// The writes before the failed read come first: a device
			// error among them is the first error.
			if err := drain(); err != nil {
				return written, err
			}
			return written, fmt.Errorf("reading image %s failed after %d bytes were written: %w; the device holds a partial image, write again", src, written, readErr(ctx, c.err))
		}
	}
}

// otherFormat names the virtual disk formats other than qcow2 that start
// with a magic of their own (qemu's probes), which written as they are
// would leave a disk that boots nothing; "" for any other image.
func otherFormat(br *bufio.Reader) string {
	head, _ := br.Peek(68)
	switch {
	case bytes.HasPrefix(head, []byte("KDMV")), bytes.HasPrefix(head, []byte("# Disk DescriptorFile")):
		return "VMDK"
	case bytes.HasPrefix(head, []byte("vhdxfile")):
		return "VHDX"
	case len(head) >= 68 && binary.LittleEndian.Uint32(head[64:]) == 0xbeda107f:
		return "VDI"
	case bytes.HasPrefix(head, []byte("QED\x00")):
		return "QED"
	}
	return ""
}

// fill reads into buf until it is full, the stream ends (io.EOF, a clean
// end) or fails. Unlike io.ReadFull it keeps a real io.ErrUnexpectedEOF
// (a truncated body or compressed stream) distinct from a short last read.
func fill(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// readErr prefers the cancellation cause (e.g. the stall watchdog's
// message) over the bare "context canceled" the reader saw.
func readErr(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) {
		return fmt.Errorf("%w (%v)", err, cause)
	}
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// countingReader counts the downloaded bytes and, when h is set, hashes
// them. It is read by the pipeline's reader goroutine while the writer
// reports progress, hence the atomic count.
type countingReader struct {
	r io.Reader
	h io.Writer
	// hashDone waits until h has taken every byte (asynchronous hashing).
	hashDone func()
	n        atomic.Uint64
	onRead   func()
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 {
		c.n.Add(uint64(n))
		if c.h != nil {
			c.h.Write(p[:n])
		}
		c.onRead()
	}
	return n, err
}

func (c *countingReader) count() uint64 { return c.n.Load() }

// open returns the image byte stream and its length (-1 if unknown).
func open(ctx context.Context, src Source, opts Options) (io.ReadCloser, int64, error) {
	if src.Reader != nil {
		size := src.Size
		if size == 0 {
			size = -1
		}
		return io.NopCloser(src.Reader), size, nil
	}
	if !strings.HasPrefix(src.URL, "http://") && !strings.HasPrefix(src.URL, "https://") {
		return nil, 0, fmt.Errorf("image URL %q is not http:// or https://; give an HTTP(S) URL", src)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, src.URL, nil)
	if err != nil {
		return nil, 0, fmt.Errorf("invalid image URL %q: %w", src, err)
	}
	// The checksum is over the file's bytes: forbid transparent
	// Content-Encoding decompression by the HTTP client.
	req.Header.Set("Accept-Encoding", "identity")
	client := opts.HTTPClient
	if client == nil {
		client = defaultClient()
	}
	resp, err := client.Do(req)
	if err != nil {
		// In words: the error's text names the addresses dialled.
		return nil, 0, fmt.Errorf("cannot fetch image %s from its origin %s: %s; check the image URL and that its server is reachable from the node's network", src, fetchwords.Host(src.URL), fetchwords.Cause(err))
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, fetchwords.MaxReasonBytes))
		return nil, 0, fmt.Errorf("%s; check instance_info image_source and the origin", fetchwords.Answer(resp.StatusCode, b, "image", src.String()))
	}
	return resp.Body, resp.ContentLength, nil
}

func defaultClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   30 * time.Second,
		ResponseHeaderTimeout: 60 * time.Second,
		DisableCompression:    true,
		ForceAttemptHTTP2:     true,
	}}
}

// openTarget opens the device for writing, with O_DIRECT when direct is
// set and the device takes it: at a few GB/s, copying every byte into the
// page cache and the dirty-page throttling that follows cost more CPU
// than the checksum. The final fsync makes the writes durable either way.
func openTarget(open disk.Opener, path string, direct bool) (*disk.Writer, error) {
	w, err := disk.NewWriter(open, path, direct)
	if err != nil {
		return nil, fmt.Errorf("cannot open %s to write the image: %w; check the root device", path, err)
	}
	return w, nil
}

// checksumSetup validates the checksum options and returns the hash to
// feed, its name and the expected lower-case hex digest.
func checksumSetup(opts Options) (hash.Hash, string, string, error) {
	digest := strings.TrimSpace(opts.Checksum)
	if _, d, ok := strings.Cut(digest, ":"); ok {
		digest = strings.TrimSpace(d)
	}
	if digest == "" {
		if opts.InsecureSkipChecksum {
			return nil, "", "", nil
		}
		return nil, "", "", errors.New("no image checksum given; pass the image's sha256 or sha512 (Ironic image_checksum / os_hash_value), or set InsecureSkipChecksum")
	}
	// Ironic's format, read as the site cache reads it; the policy is
	// the ramdisk's own: sha256, sha384 or sha512 (Glance's os_hash_algo
	// values), md5 and sha1 only when the operator allows them.
	c, err := imagechecksum.ParseDigest(opts.Checksum, opts.ChecksumAlgo)
	if err != nil {
		return nil, "", "", err
	}
	switch c.Algo {
	case imagechecksum.SHA256:
		return sha256.New(), c.Algo, c.Hex, nil
	case imagechecksum.SHA512:
		return sha512.New(), c.Algo, c.Hex, nil
	case imagechecksum.SHA384:
		return sha512.New384(), c.Algo, c.Hex, nil
	case imagechecksum.MD5, imagechecksum.SHA1:
		if opts.AllowMD5Checksum {
			return imagechecksum.NewHash(c.Algo), c.Algo, c.Hex, nil
		}
		return nil, "", "", fmt.Errorf("image checksum %q is %s, which is taken only when the operator allows it (coordinator serve --allow-md5-checksum, Ironic's [agent]allow_md5_checksum); give a sha256 or sha512 digest", opts.Checksum, c.Algo)
	}
	return nil, "", "", fmt.Errorf("checksum algorithm %q is not supported; use sha256, sha384 or sha512", c.Algo)
}

// asyncHash feeds a hash from a goroutine of its own: Write copies the
// bytes into one of a few reusable buffers and returns, so hashing
// overlaps with the caller's work (decompression). Close waits until every
// byte is hashed; it may be called more than once.
type asyncHash struct {
	h    hash.Hash
	ch   chan []byte
	free chan []byte
	done chan struct{}
	once sync.Once
}

const asyncHashBuf = 256 << 10

func newAsyncHash(h hash.Hash) *asyncHash {
	a := &asyncHash{h: h, ch: make(chan []byte, 8), free: make(chan []byte, 8), done: make(chan struct{})}
	for range cap(a.free) {
		a.free <- make([]byte, asyncHashBuf)
	}
	go func() {
		defer close(a.done)
		for b := range a.ch {
			a.h.Write(b)
			if cap(b) == asyncHashBuf {
				a.free <- b[:asyncHashBuf]
			}
		}
	}()
	return a
}

func (a *asyncHash) Write(p []byte) (int, error) {
	total := len(p)
	for len(p) > 0 {
		b := <-a.free
		n := copy(b, p)
		a.ch <- b[:n]
		p = p[n:]
	}
	return total, nil
}

func (a *asyncHash) Close() {
	a.once.Do(func() { close(a.ch) })
	<-a.done
}
