package image

import (
	"bufio"
	"bytes"
	"compress/flate"
	"container/heap"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/klauspost/compress/zstd"

	"github.com/bmedge/bmedge/lib/fetchwords"
	"github.com/bmedge/bmedge/ramdisk/disk"
)

// Writing a qcow2 image without staging it: the file is read once from
// start to end (the checksum covers every byte as served), and each data
// cluster is written to its place on the disk as it streams by. That needs
// the cluster map (the L1 and L2 tables) before the data it maps. Where
// the server answers HTTP Range requests, the tables are read ahead with
// Range requests, wherever they lie in the file, and the stream then
// checks that its bytes of each table are the ones read ahead (so that
// the verified checksum also covers the map the writes followed). Where
// it does not (a plain server, the site cache while it is still fetching
// the image, a Reader), the tables are read from the stream itself, which
// works when each table comes before what it maps: qemu-img's output is
// laid out so. A table found after its data fails with a clear error. At
// the end, whatever the image does not map (unallocated and zero
// clusters) is zeroed, so the disk reads as the image does.

// qcowMaxBuffered bounds the bytes held at once for tables and compressed
// clusters being collected from the stream.
const qcowMaxBuffered = 64 << 20

// ranger reads byte ranges of the image file.
type ranger interface {
	// readRange fills p with the file's bytes at off, or fails;
	// errNoRange means the server ignored or refused it.
	readRange(ctx context.Context, p []byte, off uint64) error
}

// errNoRange: the server ignored or refused a Range request; the tables
// are then read from the stream.
var errNoRange = errors.New("the server does not answer Range requests")

// httpRanger reads ranges with HTTP Range requests.
type httpRanger struct {
	url    string
	client *http.Client
	onRead func()
}

func (r *httpRanger) readRange(ctx context.Context, p []byte, off uint64) error {
	if len(p) == 0 {
		return nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.url, nil)
	if err != nil {
		return err
	}
	end := off + uint64(len(p)) - 1
	req.Header.Set("Range", "bytes="+strconv.FormatUint(off, 10)+"-"+strconv.FormatUint(end, 10))
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := r.client.Do(req)
	if err != nil {
		// In words: the error's text names the addresses dialled.
		return errors.New(fetchwords.Cause(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusPartialContent {
		// 200 (Range ignored), or a refusal (416 for a range past the
		// end, a proxy's 403): read the tables from the stream, which
		// says what is wrong with the file if anything is.
		return errNoRange
	}
	cr := strings.TrimPrefix(resp.Header.Get("Content-Range"), "bytes ")
	span, _, _ := strings.Cut(cr, "/")
	first, last, _ := strings.Cut(span, "-")
	if a, err := strconv.ParseUint(first, 10, 64); err != nil || a != off {
		// The header's text is the server's, not repeated.
		return fmt.Errorf("a Range request for bytes %d-%d was answered with other bytes", off, end)
	}
	b, err := strconv.ParseUint(last, 10, 64)
	if err != nil {
		return fmt.Errorf("a Range request for bytes %d-%d was answered with other bytes", off, end)
	}
	if b != end {
		return fmt.Errorf("bytes %d-%d lie past the end of the file (the server has up to %d): %w", off, end, b, io.ErrUnexpectedEOF)
	}
	rd := &readNotify{r: resp.Body, f: r.onRead}
	if _, err := io.ReadFull(rd, p); err != nil {
		return fmt.Errorf("reading bytes %d-%d: %w", off, end, err)
	}
	return nil
}

type readNotify struct {
	r io.Reader
	f func()
}

func (r *readNotify) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if n > 0 && r.f != nil {
		r.f()
	}
	return n, err
}

// readerAtRanger serves ranges from memory (tests, fuzzing).
type readerAtRanger struct{ r io.ReaderAt }

func (r readerAtRanger) readRange(_ context.Context, p []byte, off uint64) error {
	if off > 1<<62 {
		return io.ErrUnexpectedEOF
	}
	n, err := r.r.ReadAt(p, int64(off))
	if n == len(p) {
		return nil
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// deviceWriter is what qcowWriter writes to (a *disk.Writer).
type deviceWriter interface {
	WriteAt(p []byte, off uint64) error
}

// qcowWriter writes one qcow2 image as its bytes stream by.
type qcowWriter struct {
	h    qcowHeader
	dev  deviceWriter
	exts []extent
	// pending holds the indices of the extents not reached yet, by host
	// offset; active those the stream is in.
	pending extHeap
	active  []*activeExtent
	// pos is the file offset of the next streamed byte; the stream's
	// bytes from lo are still at hand.
	pos, lo  uint64
	sums     [][32]byte
	buffered int
	cluster  []byte
	inflater io.ReadCloser
	zstdDec  *zstd.Decoder
	// written counts the disk bytes written (data, inflated clusters).
	written uint64
}

type activeExtent struct {
	i   int
	at  uint64 // next host offset it needs
	buf []byte // collected bytes (tables, compressed clusters)
	h   interface {
		Write([]byte) (int, error)
		Sum([]byte) []byte
	}
}

type extHeap struct {
	idx  []int
	exts *[]extent
}

func (h extHeap) Len() int           { return len(h.idx) }
func (h extHeap) Less(i, j int) bool { return (*h.exts)[h.idx[i]].host < (*h.exts)[h.idx[j]].host }
func (h extHeap) Swap(i, j int)      { h.idx[i], h.idx[j] = h.idx[j], h.idx[i] }
func (h *extHeap) Push(x any)        { h.idx = append(h.idx, x.(int)) }
func (h *extHeap) Pop() any {
	x := h.idx[len(h.idx)-1]
	h.idx = h.idx[:len(h.idx)-1]
	return x
}

func newQcowWriter(h qcowHeader, dev deviceWriter) *qcowWriter {
	q := &qcowWriter{h: h, dev: dev}
	q.pending.exts = &q.exts
	return q
}

// add queues an extent; in stream mode it must not lie behind the stream.
func (q *qcowWriter) add(e extent) error {
	if e.host < q.lo {
		what := "data"
		switch e.kind {
		case extL1:
			what = "L1 table"
		case extL2:
			what = "an L2 table"
		}
		return refuse("the qcow2 image keeps %s at offset %d, more than %d bytes before the table that points to it (read up to offset %d), and the server did not answer Range requests, so it cannot be read in one pass; serve it from a server that answers Range requests (the site cache does once it holds the whole image: deploy again), or rewrite it with 'qemu-img convert -O qcow2'", what, e.host, q.pos-q.lo, q.pos)
	}
	q.exts = append(q.exts, e)
	heap.Push(&q.pending, len(q.exts)-1)
	return nil
}

// readAhead reads the L1 and L2 tables with Range requests and queues
// every extent, the tables as ones to check against the stream. It
// returns errNoRange when the server ignores Range.
func (q *qcowWriter) readAhead(ctx context.Context, r ranger) error {
	l1 := make([]byte, q.h.l1Bytes())
	if err := r.readRange(ctx, l1, q.h.l1Offset); err != nil {
		return q.tableErr(err, "L1 table", q.h.l1Offset)
	}
	l2s, err := q.h.parseQcowL1(l1)
	if err != nil {
		return err
	}
	q.exts = append(q.exts, extent{host: q.h.l1Offset, n: uint32(len(l1)), kind: extL1, sum: 0})
	q.sums = append(q.sums, sha256.Sum256(l1))
	// Read the tables in file order, neighbours in one request.
	type table struct{ off, l1 uint64 }
	var tabs []table
	for i, off := range l2s {
		if off != 0 {
			tabs = append(tabs, table{off, uint64(i)})
		}
	}
	slices.SortFunc(tabs, func(a, b table) int {
		if a.off != b.off {
			if a.off < b.off {
				return -1
			}
			return 1
		}
		return 0
	})
	const maxSpan = 4 << 20
	cs := q.h.clusterSize
	var buf []byte
	for i := 0; i < len(tabs); {
		j := i + 1
		for j < len(tabs) && tabs[j].off+cs-tabs[i].off <= max(maxSpan, cs) {
			j++
		}
		span := tabs[j-1].off + cs - tabs[i].off
		if uint64(cap(buf)) < span {
			buf = make([]byte, span)
		}
		b := buf[:span]
		if err := r.readRange(ctx, b, tabs[i].off); err != nil {
			return q.tableErr(err, "L2 table", tabs[i].off)
		}
		for _, t := range tabs[i:j] {
			tb := b[t.off-tabs[i].off:][:cs]
			if q.exts, err = q.h.parseQcowL2(tb, t.l1, q.exts); err != nil {
				return err
			}
			if len(q.exts) >= qcowMaxExtents {
				return errTooManyExtents()
			}
			q.exts = append(q.exts, extent{host: t.off, guest: t.l1, n: uint32(cs), kind: extL2, sum: int32(len(q.sums))})
			q.sums = append(q.sums, sha256.Sum256(tb))
		}
		i = j
	}
	q.pending.idx = make([]int, len(q.exts))
	for i := range q.pending.idx {
		q.pending.idx[i] = i
	}
	heap.Init(&q.pending)
	return nil
}

func (q *qcowWriter) tableErr(err error, what string, off uint64) error {
	if errors.Is(err, errNoRange) {
		return err
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return refuse("the qcow2 image's %s at offset %d lies past the end of the file (%v): the file is truncated; upload the image again", what, off, err)
	}
	return fmt.Errorf("reading the qcow2 image's %s at offset %d: %w", what, off, err)
}

// fromStart prepares reading the tables from the stream itself.
func (q *qcowWriter) fromStart() error {
	return q.add(extent{host: q.h.l1Offset, n: uint32(q.h.l1Bytes()), kind: extL1, sum: -1})
}

// feed takes the next streamed bytes of the file: window holds the file's
// bytes from lo, the last len(window)-(pos-lo) of them new. The bytes
// before pos stay at hand for extents found late (a table after some of
// the data it maps, as qemu writes compressed images with small clusters).
func (q *qcowWriter) feed(window []byte, lo uint64) error {
	q.lo = lo
	chunk := window
	end := lo + uint64(len(window))
	for {
		progress := false
		for q.pending.Len() > 0 && q.exts[q.pending.idx[0]].host < end {
			i := heap.Pop(&q.pending).(int)
			e := q.exts[i]
			a := &activeExtent{i: i, at: e.host}
			switch {
			case e.sum >= 0:
				a.h = sha256.New()
			case e.kind != extData:
				if q.buffered+int(e.n) > qcowMaxBuffered {
					return refuse("the qcow2 image's tables and compressed clusters overlap so that reading them needs over %d MiB at once; the image is corrupt or hostile", qcowMaxBuffered>>20)
				}
				q.buffered += int(e.n)
				a.buf = make([]byte, 0, e.n)
			}
			q.active = append(q.active, a)
		}
		kept := q.active[:0]
		var done []*activeExtent
		for _, a := range q.active {
			e := &q.exts[a.i]
			stop := min(e.host+uint64(e.n), end)
			if a.at < stop {
				progress = true
				p := chunk[a.at-lo : stop-lo]
				switch {
				case a.h != nil:
					a.h.Write(p)
				case e.kind == extData:
					if err := q.writeData(p, e.guest+(a.at-e.host)); err != nil {
						return err
					}
				default:
					a.buf = append(a.buf, p...)
				}
				a.at = stop
			}
			if a.at == e.host+uint64(e.n) {
				done = append(done, a)
			} else {
				kept = append(kept, a)
			}
		}
		q.active = kept
		for _, a := range done {
			if err := q.finish(a); err != nil {
				return err
			}
		}
		if !progress && len(done) == 0 {
			break
		}
	}
	q.pos = end
	return nil
}

// finish acts on an extent whose bytes have all streamed by.
func (q *qcowWriter) finish(a *activeExtent) error {
	e := q.exts[a.i]
	if a.buf != nil {
		q.buffered -= cap(a.buf)
	}
	if a.h != nil {
		if !bytes.Equal(a.h.Sum(nil), q.sums[e.sum][:]) {
			return fmt.Errorf("the qcow2 image's table at offset %d differs between the Range request and the full download: the server served different bytes for the same file; check the image server", e.host)
		}
		return nil
	}
	switch e.kind {
	case extCompressed:
		return q.inflate(a.buf, e)
	case extL1:
		l2s, err := q.h.parseQcowL1(a.buf)
		if err != nil {
			return err
		}
		for i, off := range l2s {
			if off != 0 {
				if err := q.add(extent{host: off, guest: uint64(i), n: uint32(q.h.clusterSize), kind: extL2, sum: -1}); err != nil {
					return err
				}
			}
		}
	case extL2:
		// Extents are added after the table's other entries are parsed:
		// the bound on their number holds across tables.
		exts, err := q.h.parseQcowL2(a.buf, e.guest, nil)
		if err != nil {
			return err
		}
		if len(q.exts)+len(exts) > qcowMaxExtents {
			return errTooManyExtents()
		}
		for _, x := range exts {
			if err := q.add(x); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeData writes p at guest, clipped to the virtual size.
func (q *qcowWriter) writeData(p []byte, guest uint64) error {
	if guest >= q.h.size {
		return nil
	}
	if uint64(len(p)) > q.h.size-guest {
		p = p[:q.h.size-guest]
	}
	if err := q.dev.WriteAt(p, guest); err != nil {
		return err
	}
	q.written += uint64(len(p))
	return nil
}

// inflate decompresses a compressed cluster and writes it.
func (q *qcowWriter) inflate(in []byte, e extent) error {
	if q.cluster == nil {
		q.cluster = disk.AlignedBuffer(int(q.h.clusterSize))
	}
	out := q.cluster
	var err error
	switch q.h.compression {
	case qcowZstd:
		if q.zstdDec == nil {
			q.zstdDec, err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
				zstd.WithDecoderMaxWindow(max(uint64(1<<20), q.h.clusterSize)))
			if err != nil {
				return err
			}
		}
		if err = q.zstdDec.Reset(bytes.NewReader(in)); err == nil {
			_, err = io.ReadFull(q.zstdDec, out)
		}
	default:
		if q.inflater == nil {
			q.inflater = flate.NewReader(bytes.NewReader(in))
		} else {
			err = q.inflater.(flate.Resetter).Reset(bytes.NewReader(in), nil)
		}
		if err == nil {
			_, err = io.ReadFull(q.inflater, out)
		}
	}
	if err != nil {
		return refuse("the qcow2 image's compressed cluster for disk offset %d (at file offset %d) does not decompress (%s): %v; the image is corrupt or truncated", e.guest, e.host, q.h.compression, err)
	}
	return q.writeData(out, e.guest)
}

// atEOF ends the stream: compressed clusters that reach past the end of
// the file (qemu rounds their length up to whole sectors) are inflated
// from what there is; any other extent not reached means the file was cut.
func (q *qcowWriter) atEOF() error {
	for _, a := range q.active {
		e := q.exts[a.i]
		if e.kind == extCompressed {
			if err := q.inflate(a.buf, e); err != nil {
				return q.truncated(e)
			}
			continue
		}
		return q.truncated(e)
	}
	q.active = nil
	if q.pending.Len() > 0 {
		return q.truncated(q.exts[heap.Pop(&q.pending).(int)])
	}
	return nil
}

func (q *qcowWriter) truncated(e extent) error {
	what := map[uint8]string{extData: "data", extCompressed: "a compressed cluster", extL1: "its L1 table", extL2: "an L2 table"}[e.kind]
	return refuse("the qcow2 image ends at byte %d, but %s lies at bytes %d-%d: the file is truncated; upload the image again", q.pos, what, e.host, e.host+uint64(e.n))
}

// holes returns the disk ranges within the virtual size that no data
// extent covers, in order: they must read as zeros.
func (q *qcowWriter) holes() [][2]uint64 {
	type span struct{ a, b uint64 }
	var spans []span
	for _, e := range q.exts {
		switch e.kind {
		case extData:
			spans = append(spans, span{e.guest, e.guest + uint64(e.n)})
		case extCompressed:
			spans = append(spans, span{e.guest, e.guest + q.h.clusterSize})
		}
	}
	slices.SortFunc(spans, func(x, y span) int {
		switch {
		case x.a < y.a:
			return -1
		case x.a > y.a:
			return 1
		}
		return 0
	})
	var out [][2]uint64
	at := uint64(0)
	for _, s := range spans {
		if s.a > at {
			out = append(out, [2]uint64{at, min(s.a, q.h.size)})
		}
		at = max(at, s.b)
		if at >= q.h.size {
			break
		}
	}
	if at < q.h.size {
		out = append(out, [2]uint64{at, q.h.size})
	}
	return out
}

// close releases the decompressors.
func (q *qcowWriter) close() {
	if q.zstdDec != nil {
		q.zstdDec.Close()
	}
	if q.inflater != nil {
		q.inflater.Close()
	}
}

// writeQcow2 writes the qcow2 file streaming from br (nothing consumed
// yet; cr under it counts and hashes the bytes) onto w. r reads ranges of
// the same file (nil: none). It returns the disk bytes written: the whole
// virtual size once it succeeds. The caller fsyncs and compares the
// checksum.
func writeQcow2(ctx context.Context, br *bufio.Reader, r ranger, w deviceWriter, dev disk.Device, src Source, opts Options, cr *countingReader, total uint64) (uint64, error) {
	head, _ := br.Peek(4096)
	h, err := parseQcowHeader(head)
	if errors.Is(err, errQcowShortHeader) {
		return 0, fmt.Errorf("image %s starts like qcow2 but its header is cut short (%d bytes): the file is truncated; upload the image again", src, len(head))
	}
	if err != nil {
		return 0, fmt.Errorf("image %s cannot be written: %w", src, err)
	}
	if h.size > dev.SizeBytes {
		return 0, fmt.Errorf("image %s is qcow2 with a virtual size of %d bytes, larger than %s (%d bytes); choose a larger root device or a smaller image", src, h.size, dev.Path, dev.SizeBytes)
	}
	q := newQcowWriter(h, w)
	defer q.close()
	if r != nil {
		err = q.readAhead(ctx, r)
		if errors.Is(err, errNoRange) {
			q = newQcowWriter(h, w)
			defer q.close()
			err = q.fromStart()
		}
	} else {
		err = q.fromStart()
	}
	if err != nil {
		return 0, qcowErr(ctx, src, 0, err)
	}
	size := opts.BufferBytes
	if size <= 0 {
		size = DefaultBufferBytes
	}
	size = (size + disk.DirectAlign - 1) &^ (disk.DirectAlign - 1)
	// The window holds the previous chunk, then the new one.
	win := disk.AlignedBuffer(2 * size)
	report := func() {
		if opts.Progress != nil {
			opts.Progress(Progress{Downloaded: cr.count(), DownloadTotal: total, Written: q.written})
		}
	}
	kept := 0 // bytes of the previous chunk at win[size-kept:size]
	for {
		n, rerr := fill(br, win[size:])
		if n > 0 {
			if err := q.feed(win[size-kept:size+n], q.pos-uint64(kept)); err != nil {
				return q.written, qcowErr(ctx, src, q.written, err)
			}
			report()
			kept = n
			copy(win[size-n:size], win[size:size+n])
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return q.written, fmt.Errorf("reading image %s failed after %d bytes were written: %w; the device holds a partial image, write again", src, q.written, readErr(ctx, rerr))
		}
	}
	if err := q.atEOF(); err != nil {
		return q.written, qcowErr(ctx, src, q.written, err)
	}
	if err := zeroRanges(ctx, w, dev, opts, q.holes(), func(n uint64) { q.written += n; report() }); err != nil {
		return q.written, fmt.Errorf("zeroing the parts of %s that image %s leaves unallocated: %w; the device holds a partial image, write again", dev.Path, src, err)
	}
	return q.written, nil
}

// qcowErr words a failure of the qcow2 writer for last_error.
func qcowErr(ctx context.Context, src Source, written uint64, err error) error {
	if ctx.Err() != nil {
		err = readErr(ctx, err)
	}
	partial := ""
	if written > 0 {
		partial = "; the device holds a partial image"
	}
	var r *qcowRefused
	if errors.As(err, &r) {
		return fmt.Errorf("image %s cannot be written: %w%s", src, err, partial)
	}
	return fmt.Errorf("writing qcow2 image %s failed: %w%s", src, err, partial)
}

// zeroRanges makes the given disk ranges read as zeros: BLKZEROOUT on a
// block device (the device or the kernel writes the zeros, no buffer
// passes through the ramdisk), else writes of a zero buffer. done gets
// each range's length as it is done.
func zeroRanges(ctx context.Context, w deviceWriter, dev disk.Device, opts Options, ranges [][2]uint64, done func(uint64)) error {
	if len(ranges) == 0 {
		return nil
	}
	var fd *os.File
	if !dev.Regular && opts.Open == nil {
		if f, err := os.OpenFile(dev.Path, os.O_RDWR|unix.O_CLOEXEC, 0); err == nil {
			fd = f
		}
	}
	defer func() {
		if fd != nil {
			fd.Close()
		}
	}()
	bs := max(dev.LogicalBlockSize, 512)
	var zeros []byte
	write := func(a, b uint64) error {
		if zeros == nil {
			zeros = disk.AlignedBuffer(1 << 20)
		}
		for a < b {
			if err := ctx.Err(); err != nil {
				return err
			}
			n := min(b-a, uint64(len(zeros)))
			if err := w.WriteAt(zeros[:n], a); err != nil {
				return err
			}
			a += n
		}
		return nil
	}
	for _, r := range ranges {
		a, b := r[0], r[1]
		if fd != nil {
			ia, ib := (a+bs-1)/bs*bs, b/bs*bs
			if ia < ib {
				rng := [2]uint64{ia, ib - ia}
				_, _, errno := unix.Syscall(unix.SYS_IOCTL, fd.Fd(), uintptr(unix.BLKZEROOUT), uintptr(unsafe.Pointer(&rng)))
				if errno == 0 {
					if err := write(a, ia); err != nil {
						return err
					}
					if err := write(ib, b); err != nil {
						return err
					}
					done(b - a)
					continue
				}
				// Not supported here: write the zeros from now on.
				fd.Close()
				fd = nil
			}
		}
		if err := write(a, b); err != nil {
			return err
		}
		done(b - a)
	}
	return nil
}
